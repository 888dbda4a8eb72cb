"""The effective policy as plain, frozen data (standard library only).

pydantic validates files on the slow path (``policy/load.py``); what it
produces is this dataclass, which is cached as JSON so that ``safebox exec``
never imports pydantic when the policy files have not changed.
"""

from __future__ import annotations

from safebox._record import Frozen

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

_PROXY_ENV = ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy")


class NetKeys(Frozen):
    """srt 0.0.83's network keys, as the proxy applies them (``proxy/netkeys.py``;
    ``ProxyConfig.keys``). Here, beside the policy it is read from, so that
    :meth:`EffectivePolicy.net_keys` needs nothing above the policy."""

    #: ``deniedResolvedAddresses``, canonical networks.
    denied_resolved: tuple[str, ...] = ()
    #: ``deniedDomainReasons``: (canonical deniedDomains entry, reason).
    reasons: tuple[tuple[str, str], ...] = ()
    require_host_match: bool = False
    refuse_opaque_tunnels: bool = False
    #: ``strictAllowlist``: a host no entry allows is refused without asking (runtime/decisions.py).
    strict_allowlist: bool = False
    strip_response_headers: tuple[str, ...] = ()

    def folded_strip(self) -> set[str]:
        """``strip_response_headers`` folded as srt matches them."""
        from safebox.policy.srtnet import fold_header

        return {fold_header(h) for h in self.strip_response_headers}


class EffectivePolicy(Frozen):
    """The merged policy. Paths are absolute (``~`` and relative ones expanded)."""

    allowed_domains: tuple[str, ...] = ()
    denied_domains: tuple[str, ...] = ()
    allow_unix_sockets: tuple[str, ...] = ()
    allow_all_unix_sockets: bool = False
    allow_local_binding: bool = False
    allow_local_destinations: bool = False
    allowed_addresses: tuple[str, ...] = ()  # network.allowedAddresses (proxy/addresses.py)
    # Literal paths (allowRead's identical entries already taken out of
    # deny_read: policy/load.py) and, apart, glob patterns, absolute and
    # normalised, expanded against the host at every run (builder/globs.py).
    deny_read: tuple[str, ...] = ()
    allow_read: tuple[str, ...] = ()
    allow_write: tuple[str, ...] = ()
    deny_write: tuple[str, ...] = ()
    deny_read_globs: tuple[str, ...] = ()
    allow_read_globs: tuple[str, ...] = ()
    deny_write_globs: tuple[str, ...] = ()
    allow_write_path_dirs: bool = False
    allow_git_config: bool = False
    env_deny: tuple[str, ...] = ()
    env_allow: tuple[str, ...] = ()
    # ci.passEnv / ci.passPath: what a CI step may pass on (python/safebox/ci_job/).
    ci_pass_env: tuple[str, ...] = ()
    ci_pass_path: tuple[str, ...] = ()
    # devices.gpu (builder/devices.py): False, True (every GPU), or the indices.
    devices_gpu: bool | tuple[int, ...] = False
    search_depth: int = 6
    strict: bool = False
    # srt's network.tlsTerminate (docs/network.md, "TLS termination").
    tls_terminate: bool = False
    tls_ca_cert_path: str | None = None
    tls_ca_key_path: str | None = None
    tls_exclude_domains: tuple[str, ...] = ()
    tls_extra_ca_cert_paths: tuple[str, ...] = ()
    # srt's network.parentProxy; None: not set (the environment decides).
    parent_proxy_http: str | None = None
    parent_proxy_https: str | None = None
    parent_proxy_no_proxy: str | None = None
    # srt's credentials: (variable name or expanded path, "deny"|"mask",
    # injectHosts or None for network.allowedDomains).
    credential_env_vars: tuple[tuple[str, str, tuple[str, ...] | None], ...] = ()
    credential_files: tuple[tuple[str, str, tuple[str, ...] | None], ...] = ()
    allow_plaintext_inject: bool = False
    # srt 0.0.83's network keys (policy/srtnet.py): canonical ranges, header
    # names, (canonical deniedDomains entry, reason) pairs.
    denied_resolved_addresses: tuple[str, ...] = ()
    denied_domain_reasons: tuple[tuple[str, str], ...] = ()
    strict_allowlist: bool = False
    require_host_match: bool = False
    refuse_opaque_tunnels: bool = False
    strip_response_headers: tuple[str, ...] = ()
    allow_plaintext_header_set: bool = False
    # Where each entry came from, for `safebox policy show`: (key as files
    # spell it, value, layer: "defaults", a file's path or "command line"),
    # in layer order; for a scalar only the layer whose value won.
    sources: tuple[tuple[str, Any, str], ...] | None = None
    # Toolchain presets named by any layer (their domains are already in
    # allowed_domains; their caches are set up per run: policy/presets.py).
    presets: tuple[str, ...] = ()
    # The presets whose caches a run sets up: those named, and those whose
    # registry is allowed by hand (presets.active). Decided when the layers
    # are merged, so that a run without presets never imports the table.
    cache_presets: tuple[str, ...] = ()
    # `limits` (safebox/policy/limit_values.py): None = the built-in default, 0 =
    # unlimited; bytes, seconds or a count otherwise.
    limit_processes: int | None = None
    limit_memory: int | None = None
    limit_tmp_size: int | None = None
    limit_wall_time: float | None = None

    def entry(self, key: str, value: str) -> str:
        """List entry ``value`` of ``key`` (``filesystem.allowWrite``) named as
        the user would find and change it: ``--allow-write /x`` for a flag,
        ``FILE: filesystem.allowWrite entry /x`` for a policy file."""
        flag = {"filesystem.allowWrite": "--allow-write", "filesystem.denyRead": "--deny-read",
                "filesystem.denyWrite": "--deny-write"}.get(key)
        for k, item, layer in self.sources or ():  # lists after a round trip through the cache
            if k == key and item == value:
                if layer == "command line" and flag:
                    return f"{flag} {value}"
                if layer == "defaults":
                    return f"the built-in {key} entry {value}"
                return f"{layer}: {key} entry {value}"
        return f"{key} entry {value}"

    def needs_netplan(self, environ: Mapping[str, str]) -> bool:
        """Whether the run needs ``safebox/run/netsetup.py`` (srt's tlsTerminate,
        parentProxy or credentials keys, or a proxy named by the
        environment, which srt's parentProxy falls back to). Cheap, so a run
        without them imports none of that code."""
        return bool(self.tls_terminate or self.credential_env_vars or self.credential_files
                    or self.parent_proxy_http is not None or self.parent_proxy_https is not None
                    or (self.allowed_domains and any(environ.get(k) for k in _PROXY_ENV)))

    def net_keys(self) -> Any:
        """The proxy's options from srt 0.0.83's network keys
        (:class:`NetKeys`, as light as ProxyConfig), or None
        when none is set."""
        if not (self.denied_resolved_addresses or self.denied_domain_reasons or self.require_host_match
                or self.refuse_opaque_tunnels or self.strip_response_headers or self.strict_allowlist):
            return None
        return NetKeys(denied_resolved=self.denied_resolved_addresses, reasons=self.denied_domain_reasons,
                       require_host_match=self.require_host_match,
                       refuse_opaque_tunnels=self.refuse_opaque_tunnels,
                       strip_response_headers=self.strip_response_headers,
                       strict_allowlist=self.strict_allowlist)

    def to_json_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (tuples become lists)."""
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.asdict().items()}

    @classmethod
    def from_json_dict(cls, data: dict[str, Any]) -> EffectivePolicy:
        """Inverse of ``to_json_dict``; unknown keys are an error (a stale cache is rebuilt)."""
        unknown = set(data) - set(cls.__fields__)
        if unknown:
            raise ValueError(f"unknown keys {sorted(unknown)}")
        # JSON values: their types are checked by the cache's version, not here.
        fields: dict[str, Any] = {k: (tuple(v) if isinstance(v, list) else v) for k, v in data.items()}
        return cls(**fields)

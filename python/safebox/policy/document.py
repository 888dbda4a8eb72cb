"""An ``EffectivePolicy`` written back as a policy document (``safebox
policy show --json``): saved to a file, ``safebox policy check`` accepts it."""

from __future__ import annotations

from safebox.policy.effective import EffectivePolicy
from safebox.policy.keys import GLOB_CHARS, GLOB_FIELDS, LIST_KEYS, SCALAR_KEYS

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def policy_document(eff: EffectivePolicy) -> dict[str, Any]:
    """The effective policy as a policy file spells it
    (``{"network": {"allowedDomains": [...]}, ...}``, the ``policy`` member
    of ``safebox policy show --json``): saved to a file, ``safebox policy
    check`` accepts it."""
    out: dict[str, Any] = {}
    fields = {**{k: v[0] for k, v in LIST_KEYS.items()}, **SCALAR_KEYS}
    for key, field in fields.items():
        value = getattr(eff, field)
        node = out
        for part in key[:-1]:
            node = node.setdefault(part, {})
        if field in GLOB_FIELDS:
            # A literal path that holds a glob character keeps srt's literal
            # form; the patterns follow the literal entries.
            value = [{"path": v, "literal": True} if not GLOB_CHARS.isdisjoint(v) else v for v in value]
            value += list(getattr(eff, GLOB_FIELDS[field]))
        node[key[-1]] = list(value) if isinstance(value, tuple) else value
    from safebox.policy import srtnet

    out["network"].update(srtnet.document(eff))
    if eff.tls_terminate:
        tls: dict[str, Any] = {"excludeDomains": list(eff.tls_exclude_domains),
                               "extraCaCertPaths": list(eff.tls_extra_ca_cert_paths)}
        if eff.tls_ca_cert_path is not None:
            tls["caCertPath"] = eff.tls_ca_cert_path
        if eff.tls_ca_key_path is not None:
            tls["caKeyPath"] = eff.tls_ca_key_path
        out["network"]["tlsTerminate"] = tls
    parent = {k: v for k, v in (("http", eff.parent_proxy_http), ("https", eff.parent_proxy_https),
                                ("noProxy", eff.parent_proxy_no_proxy)) if v is not None}
    if parent:
        out["network"]["parentProxy"] = parent
    if eff.credential_env_vars or eff.credential_files or eff.allow_plaintext_inject:
        def entry(key: str, ident: str, mode: str, hosts: tuple[str, ...] | None) -> dict[str, Any]:
            e: dict[str, Any] = {key: ident, "mode": mode}
            if hosts is not None:
                e["injectHosts"] = list(hosts)
            return e

        out["credentials"] = {
            "envVars": [entry("name", *e) for e in eff.credential_env_vars],
            "files": [entry("path", *e) for e in eff.credential_files],
            "allowPlaintextInject": eff.allow_plaintext_inject,
        }
    from safebox.policy.limit_values import KEYS, policy_value

    for limit_key, (_, field) in KEYS.items():
        value = getattr(eff, field)
        if value is not None:  # None: the built-in default, which a document leaves out
            out.setdefault("limits", {})[limit_key] = policy_value(limit_key, value)
    return out

"""The run's part of srt's network and credential keys: what ``runner.run``
needs from ``network.parentProxy``, ``network.tlsTerminate`` and
``credentials``, prepared in one place so the runner only hooks it in.

Nothing here is imported, and nothing costs anything, when a policy uses
none of these keys (and the environment names no proxy):
``EffectivePolicy.needs_netplan`` is a few lookups, and the modules that do the work (``proxy/parent.py``,
``proxy/tls.py`` with ``cryptography``, ``proxy/inject.py``,
``credentials.py``) are imported only by :func:`prepare` for the keys that
are set (``tests/unit/test_tls_imports.py``).
"""

from __future__ import annotations

from safebox._record import Frozen

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from safebox.policy.effective import EffectivePolicy

class NetPlan(Frozen):
    """What the srt keys add to one run."""

    #: proxy/parent.py ParentProxy, or None (connect directly).
    parent: Any = None
    #: proxy/tls.py Mitm (the run's CA and contexts), or None (CONNECT stays a tunnel).
    mitm: Any = None
    #: proxy/inject.py Injector (sentinel → real value per host), or None.
    injector: Any = None
    #: Variables set in the command's environment (sentinels, the trust bundle), in order.
    env_set: tuple[tuple[str, str], ...] = ()
    #: Variables removed from it (credentials.envVars with mode "deny").
    env_unset: tuple[str, ...] = ()
    #: Paths added to filesystem.denyRead (mode "deny" files, the CA key).
    deny_read: tuple[str, ...] = ()
    #: (real path, path of its masked copy in the run dir), bound over the real one.
    masked_files: tuple[tuple[str, str], ...] = ()
    #: Lines for `-v`.
    notes: tuple[str, ...] = ()
    #: Lines said on every run: what the user must know (a masked file
    #: denied instead, masking without TLS termination).
    warnings: tuple[str, ...] = ()


def prepare(policy: EffectivePolicy, *, environ: Mapping[str, str], networked: bool, run_dir: str | None,
            can_bind: bool) -> NetPlan:
    """The plan for one run. ``run_dir`` receives the trust bundle and the
    masked file copies (None: a dry run, nothing is written); ``can_bind``:
    bubblewrap runs (a masked file can be shown). Raises PolicyError naming
    the key for a value that cannot be used."""
    from safebox.errors import PolicyError

    notes: list[str] = []
    warnings: list[str] = []
    deny_read: list[str] = []
    env_set: list[tuple[str, str]] = []
    env_unset: list[str] = []
    masked_files: list[tuple[str, str]] = []
    parent = mitm = injector = None
    if networked:
        from safebox.proxy.parent import resolve_parent

        try:
            parent, more = resolve_parent(http=policy.parent_proxy_http, https=policy.parent_proxy_https,
                                          no_proxy=policy.parent_proxy_no_proxy, environ=dict(environ))
        except ValueError as exc:
            raise PolicyError(str(exc)) from None
        notes += more
        if parent is not None:
            for key, origin in parent.origin:
                url = parent.https if key == "https" else parent.http
                notes.append(f"forwarding {'tunnels' if key == 'https' else 'plain http://'} through the "
                             f"parent proxy {url.shown if url else '?'} (from {origin})")
    if policy.tls_ca_key_path is not None:
        # The CA's key signs certificates every sandboxed client trusts: it
        # never becomes readable inside, wherever the user keeps it.
        deny_read.append(policy.tls_ca_key_path)
    if policy.tls_terminate and networked:
        mitm = _mitm(policy)
        notes += mitm.notes
        bundle = "<run dir>/tls-bundle.pem"
        if run_dir is not None:
            import os

            bundle = os.path.join(run_dir, "tls-bundle.pem")
            fd = os.open(bundle, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o444)
            try:
                os.write(fd, mitm.bundle_pem)
            finally:
                os.close(fd)
        from safebox.proxy.tls import TRUST_VARIABLES

        env_set += [(var, bundle) for var in TRUST_VARIABLES]
    if policy.credential_env_vars or policy.credential_files:
        from safebox.credentials import plan_credentials

        cp = plan_credentials(policy, environ=environ, run_dir=run_dir, can_bind=can_bind)
        notes += cp.notes
        warnings += cp.warnings
        deny_read += cp.deny_read
        env_set += cp.env_set
        env_unset += cp.env_unset
        masked_files += cp.masked_files
        if cp.credentials and networked:
            from safebox.proxy.inject import Injector

            try:
                injector = Injector(cp.credentials, allow_plaintext=policy.allow_plaintext_inject)
            except ValueError as exc:
                raise PolicyError(f"credentials: {exc}") from None
            if mitm is None and not policy.allow_plaintext_inject:
                warnings.append("credentials are masked, but network.tlsTerminate is not set: requests carry the "
                             "sentinel, never the real value (set network.tlsTerminate for HTTPS)")
    return NetPlan(parent=parent, mitm=mitm, injector=injector, env_set=tuple(env_set), env_unset=tuple(env_unset),
                   deny_read=tuple(deny_read), masked_files=tuple(masked_files), notes=tuple(notes),
                   warnings=tuple(warnings))


def _mitm(policy: EffectivePolicy) -> Any:
    """The run's TLS termination (proxy/tls.py), or PolicyError naming the key."""
    from safebox.errors import PolicyError

    try:
        import ssl  # noqa: F401  (before the proxy package hides it from asyncio)

        from safebox.proxy.tls import Mitm, TlsSetupError
    except ImportError as exc:  # pragma: no cover - ssl missing from the interpreter
        raise PolicyError(f"network.tlsTerminate: {exc}") from None
    try:
        return Mitm(ca_cert_path=policy.tls_ca_cert_path, ca_key_path=policy.tls_ca_key_path,
                    extra_ca_cert_paths=policy.tls_extra_ca_cert_paths, exclude_domains=policy.tls_exclude_domains)
    except TlsSetupError as exc:
        raise PolicyError(f"{exc.key}: {exc}") from None

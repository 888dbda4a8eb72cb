"""The run's set-up of srt's network and credential keys: what ``run.main.run``
needs from ``network.parentProxy``, ``network.tlsTerminate`` and
``credentials``, prepared in one place so the runner only hooks it in.

Called ``netplan`` before it moved into run/: beside run/plan.py (the
pure step from resolved facts to bwrap argv) that name read as a second
plan; this one reads the environment and writes into the run dir, so it is
set-up, and named so.

Nothing here is imported, and nothing costs anything, when a policy uses
none of these keys (and the environment names no proxy):
``EffectivePolicy.needs_netplan`` is a few lookups, and the modules that do the work (``proxy/parent.py``,
``proxy/tls.py`` with ``cryptography``, ``proxy/inject.py``,
``run/credentials.py``) are imported only by :func:`prepare` for the keys that
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
    notes: list[str] = []
    parent = _parent(policy, environ, notes) if networked else None
    # The CA's key signs certificates every sandboxed client trusts: it
    # never becomes readable inside, wherever the user keeps it.
    deny_read = (policy.tls_ca_key_path,) if policy.tls_ca_key_path is not None else ()
    mitm = None
    env_set: tuple[tuple[str, str], ...] = ()
    if policy.tls_terminate and networked:
        mitm = _mitm(policy)
        notes += mitm.notes
        env_set = _trust_bundle(mitm, run_dir)
    plan = NetPlan(parent=parent, mitm=mitm, env_set=env_set, deny_read=deny_read, notes=tuple(notes))
    if policy.credential_env_vars or policy.credential_files:
        plan = _with_credentials(plan, policy, environ=environ, networked=networked, run_dir=run_dir,
                                 can_bind=can_bind)
    return plan


def _parent(policy: EffectivePolicy, environ: Mapping[str, str], notes: list[str]) -> Any:
    """``network.parentProxy`` (or the environment's proxy): proxy/parent.py
    ParentProxy, or None; what it decided goes to ``notes``."""
    from safebox.errors import PolicyError
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
    return parent


def _trust_bundle(mitm: Any, run_dir: str | None) -> tuple[tuple[str, str], ...]:
    """The trust bundle written into the run dir (read-only, never over an
    existing file), and the variables that point every client at it."""
    from safebox.proxy.tls import TRUST_VARIABLES

    bundle = "<run dir>/tls-bundle.pem"
    if run_dir is not None:
        import os

        bundle = os.path.join(run_dir, "tls-bundle.pem")
        fd = os.open(bundle, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o444)
        try:
            os.write(fd, mitm.bundle_pem)
        finally:
            os.close(fd)
    return tuple((var, bundle) for var in TRUST_VARIABLES)


def _with_credentials(plan: NetPlan, policy: EffectivePolicy, *, environ: Mapping[str, str], networked: bool,
                      run_dir: str | None, can_bind: bool) -> NetPlan:
    """``plan`` with what the ``credentials`` keys add (run/credentials.py),
    and the proxy's injector for the masked values when the run is networked."""
    from safebox.errors import PolicyError
    from safebox.run.credentials import plan_credentials

    cp = plan_credentials(policy, environ=environ, run_dir=run_dir, can_bind=can_bind)
    warnings = list(cp.warnings)
    injector = None
    if cp.credentials and networked:
        from safebox.proxy.inject import Injector

        try:
            injector = Injector(cp.credentials, allow_plaintext=policy.allow_plaintext_inject)
        except ValueError as exc:
            raise PolicyError(f"credentials: {exc}") from None
        if plan.mitm is None and not policy.allow_plaintext_inject:
            warnings.append("credentials are masked, but network.tlsTerminate is not set: requests carry the "
                            "sentinel, never the real value (set network.tlsTerminate for HTTPS)")
    return plan.replace(injector=injector, notes=plan.notes + tuple(cp.notes), warnings=tuple(warnings),
                        deny_read=plan.deny_read + tuple(cp.deny_read), env_set=plan.env_set + tuple(cp.env_set),
                        env_unset=tuple(cp.env_unset), masked_files=tuple(cp.masked_files))


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

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
    #: Lines for `-v` (and, for what the user must know, always).
    notes: tuple[str, ...] = ()


def prepare(policy: EffectivePolicy, *, environ: Mapping[str, str], networked: bool) -> NetPlan:
    """The plan for one run. Raises PolicyError naming the key for a value
    that cannot be used (a bad parent proxy URL)."""
    from safebox.errors import PolicyError

    notes: list[str] = []
    parent = None
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
    return NetPlan(parent=parent, notes=tuple(notes))

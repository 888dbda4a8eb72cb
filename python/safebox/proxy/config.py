"""The proxy's configuration, importable without asyncio: ``safebox exec``
builds it on the start-up path, where the proxy itself is not loaded until a
client connects (``proxy/deferred.py``)."""

from __future__ import annotations

from safebox._record import Frozen

TYPE_CHECKING = False
if TYPE_CHECKING:
    import os
    from collections.abc import Callable
    from typing import Any

    from safebox.policy.effective import NetKeys
    from safebox.proxy.inject import Injector
    from safebox.proxy.live import LiveLists
    from safebox.proxy.parent import ParentProxy
    from safebox.proxy.tls import Mitm
    from safebox.runtime.decisions import Asker

__all__ = ["ProxyConfig"]


class ProxyConfig(Frozen):
    """The network part of a policy, as the proxy needs it.

    A :class:`~safebox._record.Frozen` record, not a dataclass: ``dataclasses``
    (with ``inspect``) costs about 4 ms of import on every networked start.
    ``allowed_domains`` and ``denied_domains`` may be given by position."""

    allowed_domains: tuple[str, ...]
    denied_domains: tuple[str, ...] = ()
    allow_local_destinations: bool = False
    #: ``network.allowedAddresses`` (proxy/addresses.py).
    allowed_addresses: tuple[str, ...] = ()
    audit_log: str | os.PathLike[str] | None = None
    #: Print one ``safebox:`` line on stderr per refused host and port
    #: (proxy/explain.py); ``safebox exec`` turns it off with --quiet.
    explain: bool = False
    #: ``network.parentProxy`` resolved (``proxy/parent.py: resolve_parent``); None: connect directly.
    parent: ParentProxy | None = None
    #: ``network.tlsTerminate`` (``proxy/tls.py: Mitm``); None: CONNECT stays a byte tunnel.
    mitm: Mitm | None = None
    #: Masked credentials (``proxy/inject.py: Injector``); None: nothing is substituted.
    injector: Injector | None = None
    #: ``safebox exec --learn``: any public destination passes (rules.py).
    learn: bool = False
    #: Written into every audit event as ``run`` (docs/audit-log.md), so a
    #: log shared by several runs keeps each run's decisions apart.
    run_id: str | None = None
    #: Called with (host, port, protocol, decision) for every refusal, from
    #: the proxy's thread: the violations feed's network events.
    denied: Callable[..., None] | None = None
    #: Where the proxy's one-off lines (a TLS failure) go instead of stderr:
    #: the API's ``message`` events. None: stderr, unless ``explain`` is off.
    say: Callable[[str], None] | None = None
    #: srt 0.0.83's network keys (``proxy/netkeys.py``); None: none set.
    keys: NetKeys | None = None
    #: Lists that change while the sandbox runs (proxy/live.py); they replace
    #: the domain lists above, which then only say what the lists began as.
    live: LiveLists | None = None
    #: Asks about a host no entry allows (runtime/decisions.py): ``on_request``, ``--ask``.
    ask: Asker | None = None

    def __init__(self, allowed_domains: tuple[str, ...] = (), denied_domains: tuple[str, ...] = (),
                 **kw: Any) -> None:
        super().__init__(allowed_domains=allowed_domains, denied_domains=denied_domains, **kw)

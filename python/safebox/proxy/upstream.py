"""Shared by the HTTP, SOCKS5 and capture front ends: the gate (decide,
resolve, check every address, connect to a checked address, audit). The byte
relay the gate hands a checked connection to is :mod:`safebox.proxy.relay`.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from safebox.policy.domains import IPAddress
from safebox.proxy._asyncio import asyncio
from safebox.proxy.relay import Relay, adopt_stream
from safebox.proxy.rules import Decision, HostError, NetworkRules, normalize_host, parse_ip_literal
from safebox.proxy.verdict import check_name, may_ask, rules_now

TYPE_CHECKING = False
if TYPE_CHECKING:
    from safebox.policy.effective import NetKeys
    from safebox.proxy.inject import Injector
    from safebox.proxy.live import LiveLists
    from safebox.proxy.parent import ParentProxy, ProxyURL
    from safebox.proxy.tls import Mitm
    from safebox.runtime.decisions import Asker

__all__ = ["Gate", "Refused", "UpstreamError"]

class Refused(Exception):
    """The policy refused the destination; ``decision`` says why and which key to change."""

    def __init__(self, decision: Decision) -> None:
        super().__init__(decision.reason)
        self.decision = decision


class UpstreamError(Exception):
    """Resolving or connecting to an allowed destination failed.

    ``kind`` is one of ``resolve``, ``refused``, ``unreachable``, ``timeout``,
    ``error``; the front ends map it to HTTP 502/504 or a SOCKS5 reply code.
    """

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _connected_now(sock: socket.socket, address: tuple[str, int]) -> bool:
    """Start a non-blocking connect; True when it is complete already (on
    loopback the handshake is done before connect() returns EINPROGRESS:
    the loop need not wait a turn for it). Raises the connect's error."""
    try:
        sock.connect(address)
        return True
    except BlockingIOError:
        pass
    try:
        sock.connect(address)  # again: EISCONN once complete, EALREADY while not, else its error
    except BlockingIOError:
        return False
    except OSError as exc:
        if exc.errno != errno.EISCONN:
            raise
    return True


def _connect_error(exc: OSError, ip: IPAddress, port: int) -> UpstreamError:
    """What a failed connect to ``ip`` tells the client (the kinds map to
    502/504 and SOCKS5 replies), for the stream and the raw path alike."""
    if isinstance(exc, TimeoutError):
        return UpstreamError("timeout", f"connecting to {ip.compressed} port {port} timed out")
    if isinstance(exc, ConnectionRefusedError):
        return UpstreamError("refused", f"{ip.compressed} port {port} refused the connection")
    kind = "unreachable" if exc.errno in _UNREACHABLE else "error"
    return UpstreamError(kind, f"connecting to {ip.compressed} port {port}: {exc.strerror or exc}")


#: How long a name's addresses are kept (seconds), and for how many names.
RESOLVE_TTL = 5.0
RESOLVE_ENTRIES = 1024
_UNREACHABLE = {errno.ENETUNREACH, errno.EHOSTUNREACH, errno.EHOSTDOWN, errno.ENETDOWN}
#: A parent proxy's answer to CONNECT may not exceed this (srt: 16 KiB).
MAX_PARENT_HEAD = 16 * 1024


@dataclass
class Gate:
    """Decides, resolves, checks every address, connects, and audits.

    ``parent`` (``network.parentProxy``, ``proxy/parent.py``) is consulted
    after the policy: a connection it does not bypass goes through the
    parent proxy instead of to the host directly.
    """

    rules: NetworkRules
    audit: Callable[..., None] | None = None
    #: Called with (host, port, protocol, decision) on every refusal: the
    #: ``safebox:`` line on stderr (proxy/explain.py).
    explain: Callable[[str, int, str, Decision], None] | None = None
    #: Called with (host, port, protocol, decision) for every refusal (the violations feed).
    denied: Callable[..., None] | None = None
    resolve_timeout: float = 30.0
    connect_timeout: float = 30.0
    parent: ParentProxy | None = None
    #: network.tlsTerminate (proxy/tls.py Mitm), masked credentials
    #: (proxy/inject.py Injector): None unless configured.
    mitm: Mitm | None = None
    injector: Injector | None = None
    #: Says one line on safebox's stderr (a TLS failure the user must see).
    report: Callable[[str], None] | None = None
    #: The lists of a sandbox that can change them while it runs
    #: (proxy/live.py); read at every request instead of ``rules``.
    live: LiveLists | None = None
    #: Puts a destination no entry allows to whoever runs the sandbox (runtime/decisions.py).
    ask: Asker | None = None
    #: srt 0.0.83's network keys (proxy/netkeys.py); None: none set.
    keys: NetKeys | None = None
    _loop: asyncio.AbstractEventLoop | None = field(default=None, repr=False)
    #: Per destination and verdict: (host, port, verdict) -> [connections,
    #: bytes out, bytes in, rule, reason]. Read by the run's report and by
    #: --learn (:meth:`destinations`); one dict update per connection.
    stats: dict[tuple[str, int, str], list[Any]] = field(default_factory=dict, repr=False)
    #: name -> (loop time it expires, addresses): :meth:`_resolve`'s answers.
    _answers: dict[str, tuple[float, tuple[IPAddress, ...]]] = field(default_factory=dict, repr=False)

    def record(self, host: str, port: int, protocol: str, decision: Decision, **extra: object) -> None:
        """One audit line per decision."""
        verdict = "allow" if decision.allowed else "deny"
        try:
            shown = normalize_host(host)
        except HostError:
            shown = host[:300]
        entry = self.stats.get((shown, port, verdict))
        if entry is None:
            self.stats[(shown, port, verdict)] = [1, 0, 0, decision.rule, decision.reason]
        else:
            entry[0] += 1
        if self.audit is not None:
            self.audit(
                "network",
                host=host,
                port=port,
                protocol=protocol,
                verdict="allow" if decision.allowed else "deny",
                rule=decision.rule,
                reason=decision.reason,
                **extra,
            )
        if self.denied is not None and not decision.allowed:
            self.denied(host, port, protocol, decision)

    async def _resolve(self, name: str, port: int) -> list[IPAddress]:
        """Every address ``name`` resolves to (an IP literal: itself).

        An answer is kept for :data:`RESOLVE_TTL` seconds (at most
        :data:`RESOLVE_ENTRIES` names): the lookup runs in a thread of the
        executor, and that hop is most of a new connection's added latency
        (docs/benchmarks.md). A cached answer is checked again at every use
        like a fresh one; failures are not kept."""
        literal = parse_ip_literal(name)
        if literal is not None:
            return [literal]
        loop = asyncio.get_running_loop()
        now = loop.time()
        hit = self._answers.get(name)
        if hit is not None and hit[0] > now:
            return list(hit[1])
        try:
            async with asyncio.timeout(self.resolve_timeout):
                infos = await loop.getaddrinfo(name, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
        except (socket.gaierror, UnicodeError) as exc:
            raise UpstreamError("resolve", f"cannot resolve {name}: {exc}") from None
        except TimeoutError:
            raise UpstreamError("timeout", f"resolving {name} timed out") from None
        addresses: list[IPAddress] = []
        for info in infos:
            ip = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
            if ip not in addresses:
                addresses.append(ip)
        if len(self._answers) >= RESOLVE_ENTRIES:
            self._answers.pop(next(iter(self._answers)))  # the oldest answer
        self._answers.pop(name, None)
        self._answers[name] = (now + RESOLVE_TTL, tuple(addresses))
        return addresses

    def _flowed(self, host: str, port: int, relay: Relay) -> None:
        entry = self.stats.get((host, port, "allow"))
        if entry is not None:
            entry[1] += relay.bytes_up
            entry[2] += relay.bytes_down

    def destinations(self) -> list[dict[str, Any]]:
        """What the run reached or was refused, one entry per host, port and
        verdict (the ``hosts`` of the audit log's ``stop`` event). Called
        from another thread once the proxy has stopped."""
        return [{"host": h, "port": p, "verdict": v, "count": e[0], "bytes_out": e[1], "bytes_in": e[2],
                 "rule": e[3], "reason": e[4]} for (h, p, v), e in list(self.stats.items())]

    async def check(self, host: str, port: int, protocol: str, *, tunnel: bool = True
                    ) -> tuple[str, list[IPAddress], ProxyURL | None]:
        """The policy's verdict on ``host:port``: ``(canonical name, checked
        addresses, parent proxy or None)``, audited once.

        Raises :class:`Refused` or :class:`UpstreamError`. Through a parent
        proxy the addresses are those the local resolver gave (checked like
        any others); when it gives none the parent resolves the name
        (docs/network.md, "Parent proxy"), and the list is empty.
        """
        decision = check_name(self, host, port)
        if self.ask is not None and may_ask(self, decision):  # proxy/verdict.py, shared with capture
            asked = normalize_host(host)
            refused = rules_now(self).literal_refusal(asked, port)  # an address no answer may open is never asked about
            decision = refused if refused is not None else await self.ask.decide(asked, port, protocol, audit=self.audit)
        rules = rules_now(self)
        if not decision.allowed:
            self.record(host, port, protocol, decision)
            if self.explain is not None:
                self.explain(host, port, protocol, decision)
            raise Refused(decision)
        name = normalize_host(host)
        via = self.parent.select(name, tunnel=tunnel) if self.parent is not None else None
        if via is None:
            addresses = await self._resolve(name, port)
        else:
            try:
                addresses = await self._resolve(name, port)
            except UpstreamError:
                # Behind a parent proxy the local resolver often cannot see
                # public names: the parent resolves it (and is trusted to).
                addresses = []
        if addresses or via is None:
            decision = rules.check_addresses(addresses, host=name, port=port)
        if via is None:
            self.record(host, port, protocol, decision)
        else:
            self.record(host, port, protocol, decision, via=via.shown)
        if not decision.allowed:
            if self.explain is not None:
                self.explain(name, port, protocol, decision)
            raise Refused(decision)
        return name, addresses, via

    async def _connect(self, addresses: list[IPAddress], port: int,
                       factory: Callable[[], asyncio.BaseProtocol]) -> asyncio.Transport:
        """Connect to the first of ``addresses`` that answers."""
        loop = asyncio.get_running_loop()
        last: UpstreamError | None = None
        for ip in addresses:
            try:
                # asyncio.timeout, not wait_for: no second task per connect.
                async with asyncio.timeout(self.connect_timeout):
                    transport, _ = await loop.create_connection(factory, host=ip.compressed, port=port)
                assert isinstance(transport, asyncio.Transport)
                return transport
            except OSError as exc:  # TimeoutError and ConnectionRefusedError among them
                last = _connect_error(exc, ip, port)
        assert last is not None
        raise last

    async def dial(self, addresses: list[IPAddress], port: int) -> socket.socket:
        """A raw non-blocking socket connected to the first of ``addresses``
        (checked by :meth:`check`) that answers; :meth:`_connect`'s errors."""
        loop = asyncio.get_running_loop()
        last: UpstreamError | None = None
        for ip in addresses:
            sock: socket.socket | None = None
            try:
                # In the try: a socket the host cannot make (EMFILE, or
                # EAFNOSUPPORT with IPv6 off) fails this address, as in
                # _connect; the next one is tried and the client told.
                sock = socket.socket(socket.AF_INET6 if ip.version == 6 else socket.AF_INET,
                                     socket.SOCK_STREAM | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if not _connected_now(sock, (ip.compressed, port)):
                    async with asyncio.timeout(self.connect_timeout):
                        await loop.sock_connect(sock, (ip.compressed, port))  # EALREADY: waits for it
                return sock
            except OSError as exc:  # TimeoutError and ConnectionRefusedError among them
                last = _connect_error(exc, ip, port)
            except BaseException:
                if sock is not None:
                    sock.close()
                raise
            if sock is not None:
                sock.close()
        assert last is not None
        raise last

    async def open_socket(self, host: str, port: int, protocol: str, relay: Relay) -> socket.socket:
        """:meth:`open` for a raw client (proxy/rawconn.py): the same checks,
        then a raw socket to a checked address. Only without a parent proxy
        (the server gives streams to every client when there is one)."""
        name, addresses, via = await self.check(host, port, protocol, tunnel=protocol != "http")
        assert via is None, "a parent proxy needs the stream path"
        relay.done.add_done_callback(lambda _f: self._flowed(name, port, relay))
        return await self.dial(addresses, port)

    async def open_stream(self, name: str, addresses: list[IPAddress], port: int, via: ProxyURL | None
                          ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A stream to a destination :meth:`check` allowed: directly to a
        checked address, or a CONNECT tunnel through the parent proxy."""
        if via is not None:
            return await self._parent_tunnel(via, name, port)
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=MAX_PARENT_HEAD * 4, loop=loop)
        transport = await self._connect(addresses, port, lambda: asyncio.StreamReaderProtocol(reader, loop=loop))
        protocol = transport.get_protocol()
        assert isinstance(protocol, asyncio.StreamReaderProtocol)
        return reader, asyncio.StreamWriter(transport, protocol, reader, loop)

    async def dial_parent(self, via: ProxyURL) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A stream to the parent proxy itself. Its address is not checked
        against the policy: the user named it, and it is usually private."""
        ssl_ctx = None
        if via.scheme == "https":
            from safebox.proxy.tlsbase import client_context

            ssl_ctx = client_context(())
        try:
            return await asyncio.wait_for(
                asyncio.open_connection(via.host, via.port, ssl=ssl_ctx, limit=MAX_PARENT_HEAD * 4,
                                        server_hostname=via.host if ssl_ctx else None),
                self.connect_timeout)
        except TimeoutError:
            raise UpstreamError("timeout", f"connecting to the parent proxy {via.shown} timed out") from None
        except ConnectionRefusedError:
            raise UpstreamError("refused", f"the parent proxy {via.shown} refused the connection") from None
        except OSError as exc:
            kind = "unreachable" if exc.errno in _UNREACHABLE else "error"
            raise UpstreamError(kind, f"connecting to the parent proxy {via.shown}: {exc.strerror or exc}") from None

    async def _parent_tunnel(self, via: ProxyURL, name: str, port: int
                             ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """``CONNECT name:port`` through the parent proxy; the stream after its 2xx answer."""
        reader, writer = await self.dial_parent(via)
        authority = f"[{name}]:{port}" if ":" in name else f"{name}:{port}"
        # `name` is canonical (normalize_host): letters, digits, '-', '_',
        # '.', or an IP literal; it cannot carry CR/LF into this head.
        head = f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n"
        if via.auth:
            head += f"Proxy-Authorization: {via.auth}\r\n"
        writer.write((head + "\r\n").encode("ascii"))
        try:
            answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.connect_timeout)
        except TimeoutError:
            writer.transport.abort()
            raise UpstreamError("timeout", f"the parent proxy {via.shown} did not answer CONNECT") from None
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
            writer.transport.abort()
            raise UpstreamError("error", f"the parent proxy {via.shown} closed the connection during CONNECT") from None
        status = answer.split(b"\r\n", 1)[0].decode("latin-1")
        parts = status.split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].startswith("2") or len(parts[1]) != 3:
            writer.transport.abort()
            shown = "".join(c if c.isprintable() else "?" for c in status[:200])
            raise UpstreamError("error", f"the parent proxy {via.shown} refused CONNECT {authority}: {shown}")
        return reader, writer

    async def open(self, host: str, port: int, protocol: str, relay: Relay) -> asyncio.Transport:
        """Check ``host:port`` and connect ``relay.upstream`` to a checked address
        (or through the parent proxy: then ``relay.via`` names it).

        Raises :class:`Refused` (policy) or :class:`UpstreamError` (network).
        Never resolves twice: the connection goes to an address that was checked.
        """
        tunnel = protocol != "http"
        name, addresses, via = await self.check(host, port, protocol, tunnel=tunnel)
        return await self.attach(relay, name, addresses, port, via, tunnel=tunnel)

    async def attach(self, relay: Relay, name: str, addresses: list[IPAddress], port: int, via: ProxyURL | None,
                     *, tunnel: bool = True) -> asyncio.Transport:
        """Connect ``relay.upstream`` to a destination :meth:`check` allowed."""
        # The bytes relayed join this destination's totals when the relay
        # ends (the audit log's stop event, safebox report, --learn).
        relay.done.add_done_callback(lambda _f: self._flowed(name, port, relay))
        if via is None:
            return await self._connect(addresses, port, lambda: relay.upstream)
        if tunnel:
            reader, writer = await self._parent_tunnel(via, name, port)
        else:
            # Plain http:// goes to the parent as a proxy request (absolute
            # form, http.py writes it); no tunnel.
            reader, writer = await self.dial_parent(via)
        relay.via = via
        transport = writer.transport
        leftover, eof = adopt_stream(reader)
        transport.set_protocol(relay.upstream)
        relay.upstream.connection_made(transport)
        relay.upstream.early += leftover
        relay.upstream.eof = eof
        assert isinstance(transport, asyncio.Transport)
        return transport

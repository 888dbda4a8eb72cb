"""Shared by the HTTP and SOCKS5 front ends: the gate (decide, resolve, check
every address, connect to a checked address, audit) and the byte relay.

The relay is two :class:`asyncio.Protocol` halves wired to each other's
transports: bytes received on one side are handed straight to the other
transport (no intermediate ``StreamReader`` copy), and write-buffer pressure
on one side pauses reading on the other, so memory per connection stays
bounded by the write-buffer high-water mark.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import socket
from collections.abc import Callable
from dataclasses import dataclass, field

from safebox.proxy.rules import Decision, NetworkRules, normalize_host, parse_ip_literal

__all__ = ["Gate", "Refused", "Relay", "UpstreamError", "adopt_stream"]

#: Reads are as large as asyncio does them (256 KiB); writes pause the peer's
#: reading above this many buffered bytes and resume below a quarter of it.
WRITE_HIGH_WATER = 1024 * 1024
WRITE_LOW_WATER = 256 * 1024
#: Socket buffers: large enough that a 256 KiB read is usually one syscall.
SOCKET_BUFFER = 1024 * 1024


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


def _tune(sock: socket.socket | None) -> None:
    """Enlarge kernel socket buffers; best effort (the kernel may clamp)."""
    if sock is None:
        return
    for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        try:
            sock.setsockopt(socket.SOL_SOCKET, opt, SOCKET_BUFFER)
        except OSError:
            pass


class _Half(asyncio.Protocol):
    """One side of a relay: forwards what it receives to its peer's transport."""

    def __init__(self, relay: Relay) -> None:
        self.relay = relay
        self.transport: asyncio.Transport | None = None
        self.peer: _Half | None = None
        self.eof = False
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        # Hold the upstream side still until the client side is wired up.
        if not self.relay.started:
            transport.pause_reading()

    def data_received(self, data: bytes) -> None:
        assert self.peer is not None and self.peer.transport is not None
        self.peer.transport.write(data)

    def eof_received(self) -> bool:
        self.relay.on_eof(self)
        return True  # keep our write side open: half-close, as TCP allows

    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None and not self.peer.eof:
            self.peer.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.relay.on_lost(self, exc)


class Relay:
    """Relays bytes both ways between a client transport and an upstream one.

    Create it, open the upstream with :attr:`upstream` as the protocol, then
    :meth:`start` with the client transport; await :attr:`done`.
    """

    def __init__(self) -> None:
        self.started = False
        self.client = _Half(self)
        self.upstream = _Half(self)
        self.client.peer = self.upstream
        self.upstream.peer = self.client
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.bytes_up = 0

    def start(self, client: asyncio.Transport, *, leftover: bytes = b"",
              client_eof: bool = False, head: bytes = b"") -> None:
        """Take over ``client`` (whose previous protocol is dropped), send
        ``head`` then ``leftover`` upstream, and start relaying."""
        assert self.upstream.transport is not None
        self.started = True
        up = self.upstream.transport
        for t in (client, up):
            t.set_write_buffer_limits(high=WRITE_HIGH_WATER, low=WRITE_LOW_WATER)
            _tune(t.get_extra_info("socket"))
        client.set_protocol(self.client)
        self.client.transport = client
        if head:
            up.write(head)
        if leftover:
            up.write(leftover)
        if client_eof:
            self.on_eof(self.client)
        else:
            client.resume_reading()
        if not up.is_closing():
            up.resume_reading()

    def on_eof(self, half: _Half) -> None:
        """``half`` read EOF: pass it on; close both once both directions ended."""
        half.eof = True
        peer = half.peer
        assert peer is not None and peer.transport is not None
        if peer.eof:
            self.close()
        elif peer.transport.can_write_eof() and not peer.transport.is_closing():
            peer.transport.write_eof()  # sent once the buffered bytes are flushed
        else:
            peer.transport.close()

    def on_lost(self, half: _Half, exc: Exception | None) -> None:
        """``half``'s connection is gone: close the other side (flushing it), or
        abort it if the loss was an error."""
        peer = half.peer
        assert peer is not None
        if peer.transport is not None and not peer.lost:
            if exc is None:
                peer.transport.close()
            else:
                peer.transport.abort()
        if (half.lost and peer.lost) or peer.transport is None:
            if not self.done.done():
                self.done.set_result(None)

    def close(self) -> None:
        """Close both sides after flushing what is buffered."""
        for h in (self.client, self.upstream):
            if h.transport is not None:
                h.transport.close()

    def abort(self) -> None:
        """Drop both sides now."""
        for h in (self.client, self.upstream):
            if h.transport is not None:
                h.transport.abort()
        if not self.done.done():
            self.done.set_result(None)


def adopt_stream(reader: asyncio.StreamReader) -> tuple[bytes, bool]:
    """Take what a ``StreamReader`` has buffered but not yet consumed, and
    whether it has seen EOF, so its transport can be handed to a :class:`Relay`.

    Uses ``StreamReader._buffer``/``_eof``: private, but unchanged since
    Python 3.4 and the only way to switch protocols without losing bytes the
    client sent right after its request (TLS ClientHello pipelined behind a
    CONNECT, a POST body).
    """
    buffer: bytearray = reader._buffer  # type: ignore[attr-defined]
    leftover = bytes(buffer)
    buffer.clear()
    return leftover, bool(reader._eof)  # type: ignore[attr-defined]


_UNREACHABLE = {errno.ENETUNREACH, errno.EHOSTUNREACH, errno.EHOSTDOWN, errno.ENETDOWN}


@dataclass
class Gate:
    """Decides, resolves, checks every address, connects, and audits."""

    rules: NetworkRules
    audit: Callable[..., None] | None = None
    resolve_timeout: float = 30.0
    connect_timeout: float = 30.0
    _loop: asyncio.AbstractEventLoop | None = field(default=None, repr=False)

    def record(self, host: str, port: int, protocol: str, decision: Decision) -> None:
        """One audit line per decision."""
        if self.audit is not None:
            self.audit(
                "network",
                host=host,
                port=port,
                protocol=protocol,
                verdict="allow" if decision.allowed else "deny",
                rule=decision.rule,
                reason=decision.reason,
            )

    async def open(self, host: str, port: int, protocol: str, relay: Relay) -> asyncio.Transport:
        """Check ``host:port`` and connect ``relay.upstream`` to a checked address.

        Raises :class:`Refused` (policy) or :class:`UpstreamError` (network).
        Never resolves twice: the connection goes to an address that was checked.
        """
        decision = self.rules.check_host(host)
        if not decision.allowed:
            self.record(host, port, protocol, decision)
            raise Refused(decision)
        name = normalize_host(host)
        literal = parse_ip_literal(name)
        loop = asyncio.get_running_loop()
        if literal is not None:
            addresses = [literal]
        else:
            try:
                infos = await asyncio.wait_for(
                    loop.getaddrinfo(name, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP),
                    self.resolve_timeout,
                )
            except (socket.gaierror, UnicodeError) as exc:
                raise UpstreamError("resolve", f"cannot resolve {name}: {exc}") from None
            except TimeoutError:
                raise UpstreamError("timeout", f"resolving {name} timed out") from None
            addresses = []
            for info in infos:
                ip = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
                if ip not in addresses:
                    addresses.append(ip)
        decision = self.rules.check_addresses(addresses, host=name)
        self.record(host, port, protocol, decision)
        if not decision.allowed:
            raise Refused(decision)
        last: UpstreamError | None = None
        for ip in addresses:
            try:
                transport, _ = await asyncio.wait_for(
                    loop.create_connection(lambda: relay.upstream, host=ip.compressed, port=port),
                    self.connect_timeout,
                )
                assert isinstance(transport, asyncio.Transport)
                return transport
            except TimeoutError:
                last = UpstreamError("timeout", f"connecting to {ip.compressed} port {port} timed out")
            except ConnectionRefusedError:
                last = UpstreamError("refused", f"{ip.compressed} port {port} refused the connection")
            except OSError as exc:
                kind = "unreachable" if exc.errno in _UNREACHABLE else "error"
                last = UpstreamError(kind, f"connecting to {ip.compressed} port {port}: {exc.strerror or exc}")
        assert last is not None
        raise last

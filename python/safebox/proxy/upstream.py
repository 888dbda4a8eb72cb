"""Shared by the HTTP and SOCKS5 front ends: the gate (decide, resolve, check
every address, connect to a checked address, audit) and the byte relay.

After the handshake the relay moves bytes with ``splice(2)``: socket → pipe →
socket, driven by the proxy's event loop (non-blocking, level-triggered), so
the bulk bytes never enter Python and are not copied through user space. A
direction reads only while its pipe is empty, so memory per connection is two
pipe buffers. Where splice cannot be used (the client transport still holds
unsent bytes, or ``os.splice`` is missing) it falls back to two
:class:`asyncio.Protocol` halves wired to each other's transports, with
write-buffer pressure on one side pausing reading on the other.
"""

from __future__ import annotations

import errno
import fcntl
import ipaddress
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from safebox.domains import IPAddress
from safebox.proxy._asyncio import asyncio
from safebox.proxy.rules import Decision, HostError, NetworkRules, normalize_host, parse_ip_literal
from safebox.proxy.verdict import check_name, may_ask, rules_now

TYPE_CHECKING = False
if TYPE_CHECKING:
    from safebox.decide import Asker
    from safebox.proxy.config import NetKeys
    from safebox.proxy.inject import Injector
    from safebox.proxy.live import LiveLists
    from safebox.proxy.parent import ParentProxy, ProxyURL
    from safebox.proxy.tls import Mitm

__all__ = ["Gate", "Refused", "Relay", "UpstreamError", "adopt_stream"]

#: Reads are as large as asyncio does them (256 KiB); writes pause the peer's
#: reading above this many buffered bytes and resume below a quarter of it.
WRITE_HIGH_WATER = 1024 * 1024
WRITE_LOW_WATER = 256 * 1024
#: Socket buffers: large enough that a 256 KiB read is usually one syscall.
SOCKET_BUFFER = 1024 * 1024
#: Pipe size per relay direction. The kernel charges pipe pages to the user
#: (fs.pipe-user-pages-soft, 64 MiB by default); past that, F_SETPIPE_SZ fails
#: and the pipe keeps its default 64 KiB, which still works, only slower.
PIPE_SIZE = 256 * 1024
#: Reads are plain ones (bytes through Python) until one returns this many
#: bytes; then the direction splices (_Direction).
READ_FIRST = 64 * 1024
_SPLICE_FLAGS = getattr(os, "SPLICE_F_MOVE", 1) | getattr(os, "SPLICE_F_NONBLOCK", 2)
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
#: Errors that mean "the peer went away": abort the relay quietly.
_GONE = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError)


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


def _tune_fd(fd: int) -> None:
    """:func:`_tune` on a bare descriptor."""
    s = socket.socket(fileno=fd)
    try:
        _tune(s)
    finally:
        s.detach()


class _Half(asyncio.Protocol):
    """One side of a relay: forwards what it receives to its peer's transport."""

    def __init__(self, relay: Relay) -> None:
        self.relay = relay
        self.transport: asyncio.Transport | None = None
        self.peer: _Half | None = None
        self.eof = False
        self.lost = False
        #: What the upstream sent before the relay started (a server that
        #: speaks first: SSH, SMTP banners).
        self.early = bytearray()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        # Hold the upstream side still until the client side is wired up.
        # Python 3.11's transport re-adds its reader right after
        # connection_made, so bytes can still arrive early: kept in ``early``.
        if not self.relay.started:
            transport.pause_reading()

    def data_received(self, data: bytes) -> None:
        if not self.relay.started:
            self.early += data
            assert self.transport is not None
            self.transport.pause_reading()
            return
        assert self.peer is not None and self.peer.transport is not None
        self.relay.count(up=self is self.relay.client, n=len(data))
        self.peer.transport.write(data)

    def eof_received(self) -> bool:
        if not self.relay.started:
            self.eof = True
            return True
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


class _Direction:
    """One direction of a spliced relay: ``src`` → pipe → ``dst``.

    Reads from ``src`` only while the pipe is empty; when ``dst`` cannot take
    everything, stops reading and waits for ``dst`` to become writable. At EOF
    with the pipe drained it shuts down ``dst`` for writing (TCP half-close).
    """

    def __init__(self, splicer: _Splicer, src: int, dst: int, prefix: bytes, *, up: bool) -> None:
        self.splicer = splicer
        self.up = up  # client -> upstream: counted as bytes out
        splicer.relay.count(up=up, n=len(prefix))
        self.loop = splicer.loop
        self.src, self.dst = src, dst
        self.prefix = prefix  # bytes to send before anything read from src
        self.pipe: tuple[int, int] | None = None
        self.pending = 0  # bytes in the pipe
        self.reading = self.writing = False
        self.eof = self.done = False

    def start(self) -> None:
        """Send the prefix, then start reading."""
        self._flush()

    def _open_pipe(self) -> tuple[int, int]:
        # Bulk from here on: large socket buffers too (a small exchange
        # never pays for these system calls).
        _tune_fd(self.src)
        _tune_fd(self.dst)
        r, w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        try:
            fcntl.fcntl(w, _F_SETPIPE_SZ, PIPE_SIZE)
        except OSError:
            pass  # over the user's pipe quota: the default size still works
        self.pipe = (r, w)
        return self.pipe

    def _set_reading(self, on: bool) -> None:
        if on != self.reading:
            self.reading = on
            if on:
                self.loop.add_reader(self.src, self._on_readable)
            else:
                self.loop.remove_reader(self.src)

    def _set_writing(self, on: bool) -> None:
        if on != self.writing:
            self.writing = on
            if on:
                self.loop.add_writer(self.dst, self._flush)
            else:
                self.loop.remove_writer(self.dst)

    def _on_readable(self) -> None:
        if self.pipe is None:
            # Until a read fills READ_FIRST bytes, a plain read and write: a
            # request, a response head, an interactive session's keystrokes
            # cost two system calls, not a pipe (pipe2, F_SETPIPE_SZ) and
            # two splices. From the first full read on, the bytes are bulk:
            # spliced, they never enter Python again.
            try:
                data = os.read(self.src, READ_FIRST)
            except BlockingIOError:
                return
            except OSError as exc:
                self.splicer.fail(exc)
                return
            if not data:
                self.eof = True
                self._set_reading(False)
            elif len(data) == READ_FIRST:
                self._open_pipe()
            self.splicer.relay.count(up=self.up, n=len(data))
            self.prefix = data
            self._flush()
            return
        r, w = self.pipe
        try:
            n = os.splice(self.src, w, PIPE_SIZE, flags=_SPLICE_FLAGS)
        except BlockingIOError:
            return
        except OSError as exc:
            self.splicer.fail(exc)
            return
        if n == 0:
            self.eof = True
            self._set_reading(False)
        self.pending += n
        self.splicer.relay.count(up=self.up, n=n)
        self._flush()

    def _flush(self) -> None:
        try:
            while self.prefix:
                sent = os.write(self.dst, self.prefix)
                self.prefix = self.prefix[sent:]
            while self.pending:
                assert self.pipe is not None
                self.pending -= os.splice(self.pipe[0], self.dst, self.pending, flags=_SPLICE_FLAGS)
        except BlockingIOError:
            self._set_reading(False)
            self._set_writing(True)
            return
        except OSError as exc:
            self.splicer.fail(exc)
            return
        self._set_writing(False)
        if not self.eof:
            self._set_reading(True)
        elif not self.done:
            self.done = True
            try:
                _shutdown_write(self.dst)
            except OSError:
                pass
            self.splicer.direction_done()

    def close(self) -> None:
        """Stop watching the descriptors and close the pipe."""
        self._set_reading(False)
        self._set_writing(False)
        if self.pipe is not None:
            for fd in self.pipe:
                os.close(fd)
            self.pipe = None


def _shutdown_write(fd: int) -> None:
    """``shutdown(fd, SHUT_WR)`` on a descriptor we do not wrap in a socket object."""
    s = socket.socket(fileno=fd)
    try:
        s.shutdown(socket.SHUT_WR)
    finally:
        s.detach()


class _Splicer:
    """Both directions of a spliced relay, on private duplicates of the two
    sockets (the asyncio transports are closed once their sockets are duplicated)."""

    def __init__(self, relay: Relay, client_fd: int, upstream_fd: int, *, up_prefix: bytes, client_eof: bool,
                 down_prefix: bytes = b"", upstream_eof: bool = False) -> None:
        self.relay = relay
        self.loop = asyncio.get_running_loop()
        self.fds = (client_fd, upstream_fd)
        self.up = _Direction(self, client_fd, upstream_fd, up_prefix, up=True)
        self.down = _Direction(self, upstream_fd, client_fd, down_prefix, up=False)
        self.closed = False
        self.up.eof = client_eof
        self.down.eof = upstream_eof

    def start(self) -> None:
        self.up.start()
        if not self.closed:
            self.down.start()

    def direction_done(self) -> None:
        if self.up.done and self.down.done:
            self.close()

    def fail(self, _exc: OSError) -> None:
        """An error on either side: drop both (closing an fd with unread data sends RST)."""
        self.close()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for d in (self.up, self.down):
            d.close()
        for fd in self.fds:
            os.close(fd)
        if not self.relay.done.done():
            self.relay.done.set_result(None)


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
        # Bytes relayed client -> upstream and back (safebox report: per host).
        self.bytes_up = 0
        self.bytes_down = 0
        self.spliced = False
        #: The parent proxy a plain-HTTP request goes to (absolute form), if any.
        self.via: ProxyURL | None = None
        self._splicer: _Splicer | None = None

    def count(self, *, up: bool, n: int) -> None:
        """Add ``n`` relayed bytes to one direction's total."""
        if up:
            self.bytes_up += n
        else:
            self.bytes_down += n

    def start(self, client: asyncio.Transport, *, leftover: bytes = b"",
              client_eof: bool = False, head: bytes = b"") -> None:
        """Take over ``client`` (whose previous protocol is dropped), send
        ``head`` then ``leftover`` upstream, and start relaying."""
        assert self.upstream.transport is not None
        self.started = True
        up = self.upstream.transport
        if self._try_splice(client, up, prefix=head + leftover, client_eof=client_eof):
            return
        for t in (client, up):
            t.set_write_buffer_limits(high=WRITE_HIGH_WATER, low=WRITE_LOW_WATER)
            _tune(t.get_extra_info("socket"))
        client.set_protocol(self.client)
        self.client.transport = client
        self.count(up=True, n=len(head) + len(leftover))
        if head:
            up.write(head)
        if leftover:
            up.write(leftover)
        if self.upstream.early:
            self.count(up=False, n=len(self.upstream.early))
            client.write(bytes(self.upstream.early))
            self.upstream.early.clear()
        if client_eof:
            self.on_eof(self.client)
        else:
            client.resume_reading()
        if self.upstream.eof:
            self.upstream.eof = False
            self.on_eof(self.upstream)
        elif not up.is_closing():
            up.resume_reading()

    def splice(self, client: socket.socket, upstream: socket.socket, *, up_prefix: bytes = b"",
               down_prefix: bytes = b"", client_eof: bool = False) -> None:
        """Relay between two raw connected sockets (proxy/rawconn.py), which
        the relay now owns: ``up_prefix`` goes upstream first, ``down_prefix``
        to the client first."""
        self.started = self.spliced = True
        fds = (client.detach(), upstream.detach())
        self._splicer = _Splicer(self, fds[0], fds[1], up_prefix=up_prefix, client_eof=client_eof,
                                 down_prefix=down_prefix)
        self._splicer.start()

    def _try_splice(self, client: asyncio.Transport, up: asyncio.Transport, *,
                    prefix: bytes, client_eof: bool) -> bool:
        """Move both sockets to a :class:`_Splicer`; False (nothing changed) when
        splice cannot be used and the protocol relay must run instead."""
        if not hasattr(os, "splice") or client.get_write_buffer_size() or up.get_write_buffer_size():
            return False
        if any(t.get_extra_info("sslcontext") is not None for t in (client, up)):
            # A TLS transport's socket carries ciphertext: splicing it would
            # bypass the TLS layer (an https:// parent proxy).
            return False
        socks = [t.get_extra_info("socket") for t in (client, up)]
        if any(sk is None or up.is_closing() or client.is_closing() for sk in socks):
            return False
        fds = [os.dup(sk.fileno()) for sk in socks]
        for sk in socks:
            _tune(sk)
        self.spliced = True
        # The transports' own descriptors close here; the duplicates keep the
        # connections open (no FIN: the files are still referenced).
        client.pause_reading()
        client.abort()
        up.abort()
        self._splicer = _Splicer(self, fds[0], fds[1], up_prefix=prefix, client_eof=client_eof,
                                 down_prefix=bytes(self.upstream.early), upstream_eof=self.upstream.eof)
        self._splicer.start()
        return True

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
        if self.spliced:
            return  # the transports were closed on purpose; the splicer owns the sockets
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
        if self._splicer is not None:
            self._splicer.close()
        for h in (self.client, self.upstream):
            if h.transport is not None:
                h.transport.abort()
        if not self.done.done():
            self.done.set_result(None)


def adopt_stream(reader: asyncio.StreamReader) -> tuple[bytes, bool]:
    """Take what a ``StreamReader`` has buffered but not yet consumed, and whether it has seen EOF, so
    its transport can be handed to a :class:`Relay`. Uses ``StreamReader._buffer``/``_eof``: private, but
    unchanged since Python 3.4 and the only way to switch protocols without losing bytes the client sent
    right after its request (TLS ClientHello pipelined behind a CONNECT, a POST body)."""
    buffer: bytearray = reader._buffer  # type: ignore[attr-defined]  # private, see above
    leftover = bytes(buffer)
    buffer.clear()
    return leftover, bool(reader._eof)  # type: ignore[attr-defined]  # private, see above


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
    #: Puts a destination no entry allows to whoever runs the sandbox (decide.py).
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
            except TimeoutError:
                last = UpstreamError("timeout", f"connecting to {ip.compressed} port {port} timed out")
            except ConnectionRefusedError:
                last = UpstreamError("refused", f"{ip.compressed} port {port} refused the connection")
            except OSError as exc:
                kind = "unreachable" if exc.errno in _UNREACHABLE else "error"
                last = UpstreamError(kind, f"connecting to {ip.compressed} port {port}: {exc.strerror or exc}")
        assert last is not None
        raise last

    async def dial(self, addresses: list[IPAddress], port: int) -> socket.socket:
        """A raw non-blocking socket connected to the first of ``addresses``
        (checked by :meth:`check`) that answers; :meth:`_connect`'s errors."""
        loop = asyncio.get_running_loop()
        last: UpstreamError | None = None
        for ip in addresses:
            sock = socket.socket(socket.AF_INET6 if ip.version == 6 else socket.AF_INET,
                                 socket.SOCK_STREAM | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC)
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if not _connected_now(sock, (ip.compressed, port)):
                    async with asyncio.timeout(self.connect_timeout):
                        await loop.sock_connect(sock, (ip.compressed, port))  # EALREADY: waits for it
                return sock
            except TimeoutError:
                last = UpstreamError("timeout", f"connecting to {ip.compressed} port {port} timed out")
            except ConnectionRefusedError:
                last = UpstreamError("refused", f"{ip.compressed} port {port} refused the connection")
            except OSError as exc:
                kind = "unreachable" if exc.errno in _UNREACHABLE else "error"
                last = UpstreamError(kind, f"connecting to {ip.compressed} port {port}: {exc.strerror or exc}")
            except BaseException:
                sock.close()
                raise
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

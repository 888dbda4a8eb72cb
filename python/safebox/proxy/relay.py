"""The byte relay shared by the HTTP, SOCKS5 and capture front ends (moved
out of :mod:`safebox.proxy.upstream`, which keeps the gate).

After the handshake the relay moves bytes with ``splice(2)``: socket → pipe →
socket, driven by the proxy's event loop (non-blocking, level-triggered), so
the bulk bytes never enter Python and are not copied through user space. A
direction reads only while its pipe is empty, so memory per connection is two
pipe buffers; its first reads, until one fills ``READ_FIRST``, are plain ones
(a request and a response head need no pipe). Where splice cannot be used (the
client transport still holds unsent bytes, or ``os.splice`` is missing) it
falls back to two :class:`asyncio.Protocol` halves wired to each other's
transports, with write-buffer pressure on one side pausing reading on the other.
"""

from __future__ import annotations

import fcntl
import os
import socket

from safebox.proxy._asyncio import asyncio

TYPE_CHECKING = False
if TYPE_CHECKING:
    from safebox.proxy.parent import ProxyURL

__all__ = ["Relay", "adopt_stream"]

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


def _tune(sock: socket.socket | None) -> None:
    """Enlarge kernel socket buffers; best effort (the kernel may clamp)."""
    if sock is None:
        return
    for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        try:
            sock.setsockopt(socket.SOL_SOCKET, opt, SOCKET_BUFFER)
        except OSError:
            pass


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
                try:
                    self._open_pipe()
                except OSError:
                    # Out of descriptors (EMFILE, ENFILE): these bytes are
                    # read already and go on below; the next full read
                    # tries again. Raising here would drop them.
                    pass
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

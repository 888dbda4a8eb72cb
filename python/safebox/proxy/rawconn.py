"""The proxy's front doors on raw non-blocking sockets (docs/network.md,
"Performance and limits").

A connection to the HTTP or SOCKS5 port is accepted by :class:`Acceptor`
(``add_reader`` on the listener, ``accept()`` until it would block) and
served by one task on a :class:`RawConn`: the handshake reads and writes the
socket itself (``loop.sock_recv``, ``send``), the upstream is a socket
connected with ``loop.sock_connect`` (:meth:`Gate.dial`), and the relay
splices between the two descriptors (:meth:`Relay.splice`). No asyncio
transport, protocol or stream is made on the way, so the first byte costs
fewer wake-ups and objects than through ``asyncio.start_server``; the checks
are the same code (``Gate.check``), in the same order.

A :class:`RawConn` offers what the front ends use of a ``StreamReader`` and
``StreamWriter`` (``readexactly``, ``readuntil``, ``read``, ``write``,
``drain``), with the same exceptions. Where a front end needs real streams
(TLS termination, masked credentials, a parent proxy, srt's network keys),
the server hands it streams over the same socket instead (:func:`streams`).
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import logging
import socket
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from safebox.proxy._asyncio import asyncio

__all__ = ["RECV_SIZE", "Acceptor", "RawConn", "streams"]

log = logging.getLogger("safebox.proxy")

#: Bytes asked of the socket per handshake read.
RECV_SIZE = 64 * 1024
#: Connections accepted per wake-up of a listener (asyncio's backlog loop).
ACCEPT_BATCH = 64
#: After EMFILE/ENFILE/ENOBUFS/ENOMEM, accepting pauses this many seconds (as asyncio does).
ACCEPT_PAUSE = 1.0
#: Python 3.12's eager tasks (Task(..., eager_start=True)), where there are.
_EAGER: dict[str, Any] = {"eager_start": True} if sys.version_info >= (3, 12) else {}
_OUT_OF_RESOURCES = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}


class RawConn:
    """A client connection on a raw non-blocking socket, with what the
    front ends use of a ``StreamReader``/``StreamWriter``."""

    __slots__ = ("buffer", "eof", "limit", "loop", "pending", "sock")

    def __init__(self, sock: socket.socket, loop: asyncio.AbstractEventLoop, limit: int) -> None:
        self.sock = sock
        self.loop = loop
        self.limit = limit
        self.buffer = bytearray()
        self.eof = False
        #: Written but not yet taken by the socket (sent by drain(), or first by the relay).
        self.pending = bytearray()

    async def _fill(self) -> None:
        """One more read into :attr:`buffer`; sets :attr:`eof` at end of file."""
        try:
            data = self.sock.recv(RECV_SIZE)  # most often there already: no wait, no future
        except BlockingIOError:
            data = await self.loop.sock_recv(self.sock, RECV_SIZE)
        if data:
            self.buffer += data
        else:
            self.eof = True

    async def readexactly(self, n: int) -> bytes:
        while len(self.buffer) < n:
            if self.eof:
                partial = bytes(self.buffer)
                self.buffer.clear()
                raise asyncio.IncompleteReadError(partial, n)
            await self._fill()
        out = bytes(self.buffer[:n])
        del self.buffer[:n]
        return out

    async def readuntil(self, separator: bytes) -> bytes:
        """Up to and including ``separator``; ``LimitOverrunError`` when it is
        not within :attr:`limit` bytes, ``IncompleteReadError`` at end of
        file (StreamReader's contract)."""
        limit = self.limit
        start = 0
        while True:
            at = self.buffer.find(separator, start)
            if at >= 0:
                if at > limit:
                    raise asyncio.LimitOverrunError("separator found, but chunk is longer than limit", at)
                end = at + len(separator)
                out = bytes(self.buffer[:end])
                del self.buffer[:end]
                return out
            if len(self.buffer) > limit:
                raise asyncio.LimitOverrunError("separator not found, and chunk exceed the limit", len(self.buffer))
            if self.eof:
                partial = bytes(self.buffer)
                self.buffer.clear()
                raise asyncio.IncompleteReadError(partial, None)
            start = max(0, len(self.buffer) - len(separator) + 1)
            await self._fill()

    async def read(self, n: int) -> bytes:
        if not self.buffer and not self.eof:
            await self._fill()
        out = bytes(self.buffer[:n])
        del self.buffer[:n]
        return out

    def write(self, data: bytes) -> None:
        if not self.pending:
            try:
                sent = self.sock.send(data)
            except BlockingIOError:
                sent = 0
            data = data[sent:]
        self.pending += data

    async def drain(self) -> None:
        if self.pending:
            data = bytes(self.pending)
            self.pending.clear()
            await self.loop.sock_sendall(self.sock, data)

    def take(self) -> tuple[bytes, bool, bytes]:
        """(bytes read but not consumed, end of file seen, bytes written but
        not sent), all handed over: for the relay that takes the socket."""
        out = bytes(self.buffer), self.eof, bytes(self.pending)
        self.buffer.clear()
        self.pending.clear()
        return out


async def streams(sock: socket.socket, limit: int, data: bytes = b"", *, eof: bool = False
                  ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A ``StreamReader``/``StreamWriter`` pair on ``sock``, which already
    delivered ``data`` (and end of file, with ``eof``)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=limit, loop=loop)
    if data:
        reader.feed_data(data)
    if eof:
        reader.feed_eof()
    protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
    transport, _ = await loop.connect_accepted_socket(lambda: protocol, sock)
    return reader, asyncio.StreamWriter(transport, protocol, reader, loop)


class Acceptor:
    """Accepts on one listening socket and starts ``serve(sock)`` in a task
    per connection, with ``context`` (contextvars) applied to it. Quacks
    like the ``asyncio.Server`` the proxy keeps (``close``, ``wait_closed``)."""

    def __init__(self, listener: socket.socket, serve: Callable[[socket.socket], Coroutine[Any, Any, None]],
                 context: contextvars.Context | None = None, *, backlog: int = 4096) -> None:
        self.loop = asyncio.get_running_loop()
        self.listener = listener
        self.serve = serve
        self.context = context
        self.tcp = listener.family in (socket.AF_INET, socket.AF_INET6)
        self.closed = False
        self._paused: asyncio.TimerHandle | None = None
        listener.setblocking(False)
        listener.listen(backlog)  # again on a listener made elsewhere: its backlog becomes ours (as asyncio's)
        self.loop.add_reader(listener.fileno(), self._accept)

    def _accept(self) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                sock, _addr = self.listener.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError as exc:
                if exc.errno in _OUT_OF_RESOURCES:
                    # Out of descriptors: stop accepting for a while instead
                    # of spinning on a listener that stays readable.
                    log.warning("proxy: cannot accept: %s; pausing for %.0f s", exc, ACCEPT_PAUSE)
                    self.loop.remove_reader(self.listener.fileno())
                    self._paused = self.loop.call_later(ACCEPT_PAUSE, self._resume)
                    return
                log.warning("proxy: accept failed: %s", exc)
                return
            sock.setblocking(False)
            if self.tcp:
                with contextlib.suppress(OSError):  # the handshake's small replies go at once
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            # A copy per task: a value one connection sets stays its own.
            context = None if self.context is None else self.context.copy()
            if _EAGER:
                # The task runs at once, up to its first wait (the client's
                # request is often there already): no turn of the loop.
                asyncio.Task(self.serve(sock), loop=self.loop, context=context, **_EAGER)
            else:
                self.loop.create_task(self.serve(sock), context=context)

    def _resume(self) -> None:
        self._paused = None
        if not self.closed:
            self.loop.add_reader(self.listener.fileno(), self._accept)

    def close(self) -> None:
        """Stop accepting and close the listener; connections go on."""
        if self.closed:
            return
        self.closed = True
        if self._paused is not None:
            self._paused.cancel()
        with contextlib.suppress(ValueError, OSError):
            self.loop.remove_reader(self.listener.fileno())
        self.listener.close()

    async def wait_closed(self) -> None:
        return None

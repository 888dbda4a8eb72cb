"""Byte streams the TLS interceptor reads HTTP from: :class:`Stream`, a
read buffer over an asyncio reader/writer, and :class:`TLSStream`, TLS over
the same streams with an :class:`ssl.SSLObject` on memory BIOs, so that no
byte is lost between a CONNECT and its ClientHello and asyncio's TLS
transports are not needed (intercept.py)."""

from __future__ import annotations

import ssl

from safebox.proxy._asyncio import asyncio
from safebox.proxy.wire import BadRequest

__all__ = ["CHUNK", "TLS_HANDSHAKE_TIMEOUT", "Closed", "Stream", "TLSStream"]

TLS_HANDSHAKE_TIMEOUT = 30.0
CHUNK = 256 * 1024


class Closed(Exception):
    """The peer closed (or broke) the connection."""


class Stream:
    """A byte stream with a read buffer over an asyncio reader/writer."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.buf = bytearray()

    async def recv(self) -> bytes:
        """Some bytes, b"" at EOF."""
        return await self.reader.read(CHUNK)

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def _fill(self) -> None:
        data = await self.recv()
        if not data:
            raise Closed()
        self.buf += data

    async def readuntil(self, sep: bytes, limit: int) -> bytes:
        """Up to and including ``sep``; BadRequest(431) past ``limit``."""
        start = 0
        while True:
            i = self.buf.find(sep, start)
            if i >= 0:
                out = bytes(self.buf[: i + len(sep)])
                del self.buf[: i + len(sep)]
                return out
            if len(self.buf) > limit:
                raise BadRequest(431, f"more than {limit} bytes before {sep!r}")
            start = max(0, len(self.buf) - len(sep) + 1)
            await self._fill()

    async def read_some(self, n: int = CHUNK) -> bytes:
        """At most ``n`` bytes: buffered ones first, else what arrives; b"" at EOF."""
        if not self.buf:
            data = await self.recv()
            if len(data) <= n:
                return data
            self.buf += data
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    async def readexactly(self, n: int) -> bytes:
        while len(self.buf) < n:
            await self._fill()
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    async def close(self) -> None:
        self.writer.transport.close()


class TLSStream(Stream):
    """TLS over a :class:`Stream`'s reader/writer, with an SSLObject on memory BIOs."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, ctx: ssl.SSLContext, *,
                 server_side: bool, server_hostname: str | None = None, initial: bytes = b"") -> None:
        super().__init__(reader, writer)
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        if initial:
            self.incoming.write(initial)
        self.obj = ctx.wrap_bio(self.incoming, self.outgoing, server_side=server_side,
                                server_hostname=server_hostname)

    async def _flush(self) -> None:
        data = self.outgoing.read()
        if data:
            self.writer.write(data)
            await self.writer.drain()

    async def _more(self) -> bool:
        data = await self.reader.read(CHUNK)
        if not data:
            self.incoming.write_eof()
            return False
        self.incoming.write(data)
        return True

    async def handshake(self) -> None:
        """Raises ssl.SSLError (ssl.SSLCertVerificationError on the client side), Closed."""
        while True:
            try:
                self.obj.do_handshake()
                await self._flush()
                return
            except ssl.SSLWantReadError:
                await self._flush()
                if not await self._more():
                    raise Closed() from None

    async def recv(self) -> bytes:
        while True:
            try:
                data = self.obj.read(CHUNK)
                if data and self.incoming.pending:
                    # One call per TLS record (16 KiB) would cost a round of
                    # the event loop each: take every record already here.
                    parts = [data]
                    size = len(data)
                    while size < CHUNK:
                        try:
                            more = self.obj.read(CHUNK - size)
                        except ssl.SSLError:
                            break  # WantRead (a partial record), or an alert the next call reports
                        if not more:
                            break
                        parts.append(more)
                        size += len(more)
                    data = b"".join(parts)
                await self._flush()  # TLS 1.3 may answer a key update
                return data
            except ssl.SSLWantReadError:
                await self._flush()
                if not await self._more():
                    try:
                        return self.obj.read(CHUNK)
                    except ssl.SSLError:
                        return b""  # EOF without close_notify: treated as EOF
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                return b""

    async def send(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = self.obj.write(view[:CHUNK])
            view = view[n:]
            await self._flush()

    async def close(self) -> None:
        try:
            self.obj.unwrap()
        except (ssl.SSLError, OSError):
            pass
        try:
            await asyncio.wait_for(self._flush(), 5)
        except (OSError, TimeoutError):
            pass
        self.writer.transport.close()

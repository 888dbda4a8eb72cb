"""Requests the proxy reads instead of relaying blind: HTTPS CONNECTs it
terminates (``network.tlsTerminate``) and plain ``http://`` requests that
carry masked credentials (``credentials.allowPlaintextInject``).

For a terminated CONNECT (srt's ``tls-terminate-proxy.ts``):

1. the policy decides (as for any CONNECT; a refusal is the usual 403);
2. ``200 Connection established``; the client's first bytes are read: a TLS
   ClientHello is terminated with a certificate minted for the CONNECT host
   (a ClientHello naming another server, SNI, is refused: the certificate
   would be for a host the policy did not check); anything else, or nothing
   within :data:`SNIFF_TIMEOUT`, is relayed untouched as before;
3. one HTTP/1.1 request is read from the decrypted stream, its target
   reduced to origin form and its ``Host`` set to the CONNECT target (the
   client's own Host header cannot steer it elsewhere);
4. a new connection to the checked address (or through the parent proxy)
   is verified against the host's roots and ``extraCaCertPaths``; a
   certificate that does not verify gets the client a 502 whose body says
   why, and safebox says it on its stderr;
5. masked credentials for this host are substituted (``inject.py``), the
   request goes upstream with ``Connection: close``, and the response comes
   back unchanged but for ``Connection: close``: one request per
   connection, as for plain HTTP (clients open a new one).

The TLS layers are :class:`ssl.SSLObject` over memory BIOs on the proxy's
own streams, so no byte is lost between the CONNECT and the ClientHello and
asyncio's TLS transports are not needed.
"""

from __future__ import annotations

import ssl

from safebox.policy.domains import IPAddress
from safebox.proxy._asyncio import asyncio
from safebox.proxy.netkeys import strip_response_head
from safebox.proxy.relay import Relay, adopt_stream
from safebox.proxy.rules import HostError
from safebox.proxy.upstream import Gate, Refused, UpstreamError
from safebox.proxy.wire import (
    _HOP_BY_HOP,
    _TARGET_RE,
    _TOKEN_RE,
    HEAD_TIMEOUT,
    MAX_HEAD,
    BadRequest,
    Request,
    error_response,
    header_lines,
    refusal_response,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from safebox.proxy.parent import ProxyURL

__all__ = ["SNIFF_TIMEOUT", "forward_plain", "terminate"]

#: How long to wait for a client's first bytes after CONNECT before relaying
#: it untouched (a server-speaks-first protocol through CONNECT).
SNIFF_TIMEOUT = 5.0
TLS_HANDSHAKE_TIMEOUT = 30.0
CHUNK = 256 * 1024
#: A request body that substitution can lengthen is buffered to set its
#: Content-Length; beyond this it is refused (413), as srt does (64 MiB).
MAX_BUFFERED_BODY = 64 << 20
MAX_CHUNK_LINE = 4096


class _Closed(Exception):
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
            raise _Closed()
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
        """Raises ssl.SSLError (ssl.SSLCertVerificationError on the client side), _Closed."""
        while True:
            try:
                self.obj.do_handshake()
                await self._flush()
                return
            except ssl.SSLWantReadError:
                await self._flush()
                if not await self._more():
                    raise _Closed() from None

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


# ----------------------------------------------------------------- requests


def _parse_inner(head: bytes) -> tuple[str, str, list[tuple[str, str]]]:
    """(method, origin-form target, headers) of a request read inside a
    terminated tunnel. Raises BadRequest naming what is wrong."""
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not _TOKEN_RE.match(parts[0]) or not _TARGET_RE.match(parts[1]):
        raise BadRequest(400, "malformed request line")
    if parts[2] not in (b"HTTP/1.1", b"HTTP/1.0"):
        raise BadRequest(505, "only HTTP/1.0 and HTTP/1.1 are supported")
    method, target = parts[0].decode(), parts[1].decode()
    if method == "CONNECT":
        raise BadRequest(400, "CONNECT inside a CONNECT tunnel")
    if "://" in target and not target.startswith("/"):
        # Absolute form: the authority is dropped, the CONNECT target stays
        # authoritative (srt: "originFormPath").
        rest = target.split("://", 1)[1]
        cut = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
        target = rest[cut:] or "/"
        if not target.startswith("/"):
            target = "/" + target
    elif not target.startswith("/") and not (method == "OPTIONS" and target == "*"):
        raise BadRequest(400, "malformed request target")
    return method, target, header_lines(lines[1:])


def _framing(headers: list[tuple[str, str]]) -> tuple[str, int]:
    """("none" | "length" | "chunked", length) of a request body."""
    te = [v for n, v in headers if n.lower() == "transfer-encoding"]
    cl = [v for n, v in headers if n.lower() == "content-length"]
    if te and cl:
        raise BadRequest(400, "both Transfer-Encoding and Content-Length")
    if te:
        if len(te) > 1 or te[0].strip().lower() != "chunked":
            raise BadRequest(400, "only Transfer-Encoding: chunked is supported")
        return "chunked", 0
    if cl:
        if len(cl) > 1 or not (cl[0].isascii() and cl[0].isdigit()) or len(cl[0]) > 18:
            raise BadRequest(400, "bad Content-Length")
        n = int(cl[0])
        return ("length", n) if n else ("none", 0)
    return "none", 0


def _upstream_head(method: str, target: str, headers: list[tuple[str, str]], authority: str,
                   header_pairs: list[tuple[bytes, bytes]], framing: str, length: int, *,
                   via: ProxyURL | None = None) -> bytes:
    """The head sent upstream: ``Host`` the checked target, hop-by-hop and
    framing headers replaced, sentinels substituted, ``Connection: close``.
    Through a parent proxy (plain http only): absolute form and its credentials."""
    from safebox.proxy.inject import Injector

    named: set[str] = set()
    for name, value in headers:
        if name.lower() in ("connection", "proxy-connection"):
            named.update(t.strip().lower() for t in value.split(","))
    if via is not None and target.startswith("/"):
        target = f"http://{authority}{target}"
    out = [f"{method} {target} HTTP/1.1", f"Host: {authority}"]
    if via is not None and via.auth:
        out.append(f"Proxy-Authorization: {via.auth}")
    for name, value in headers:
        low = name.lower()
        if (low in _HOP_BY_HOP or low in named or low in ("host", "content-length", "transfer-encoding")
                or (low == "expect" and value.lower() == "100-continue")):
            continue
        out.append(f"{name}: {Injector.header_value(value, header_pairs)}")
    if framing == "length":
        out.append(f"Content-Length: {length}")
    elif framing == "chunked":
        out.append("Transfer-Encoding: chunked")
    out.append("Connection: close")
    return ("\r\n".join(out) + "\r\n\r\n").encode("latin-1")


async def _copy_length(src: Stream, dst: Stream, n: int, sub: object | None) -> None:
    from safebox.proxy.inject import BodySubstituter

    while n:
        data = await src.read_some(min(n, CHUNK))
        if not data:
            raise _Closed()
        n -= len(data)
        await dst.send(sub.feed(data) if isinstance(sub, BodySubstituter) else data)
    if isinstance(sub, BodySubstituter):
        tail = sub.flush()
        if tail:
            await dst.send(tail)


async def _chunks(src: Stream) -> AsyncIterator[bytes | None]:
    """The data of a chunked body, then None (trailer lines are read and dropped)."""
    while True:
        line = await src.readuntil(b"\r\n", MAX_CHUNK_LINE)
        size_text = line[:-2].split(b";", 1)[0].strip()
        if not size_text or len(size_text) > 16 or any(c not in b"0123456789abcdefABCDEF" for c in size_text):
            raise BadRequest(400, "malformed chunk size")
        size = int(size_text, 16)
        if size == 0:
            trailer = 0
            while (tline := await src.readuntil(b"\r\n", MAX_HEAD)) != b"\r\n":
                trailer += len(tline)
                if trailer > MAX_HEAD:
                    raise BadRequest(431, f"chunked trailer larger than {MAX_HEAD} bytes")
            yield None
            return
        while size:
            data = await src.read_some(min(size, CHUNK))
            if not data:
                raise _Closed()
            size -= len(data)
            yield data
        if await src.readexactly(2) != b"\r\n":
            raise BadRequest(400, "malformed chunk")


async def _send_body(client: Stream, up: Stream, framing: str, length: int,
                     pairs: list[tuple[bytes, bytes]]) -> None:
    """Forward the request body with its framing, substituting ``pairs``
    (empty: bytes unchanged). A length-changing substitution of a
    Content-Length body was buffered by the caller."""
    from safebox.proxy.inject import BodySubstituter

    sub = BodySubstituter(pairs) if pairs else None
    if framing == "length":
        await _copy_length(client, up, length, sub)
    elif framing == "chunked":
        async for data in _chunks(client):
            if data is None:
                if sub is not None and (tail := sub.flush()):
                    await up.send(b"%x\r\n%s\r\n" % (len(tail), tail))
                # Trailer fields are dropped (RFC 9112 7.1.2 lets a proxy do
                # so): they would be header lines nothing here has checked.
                await up.send(b"0\r\n\r\n")
                return
            if sub is not None:
                data = sub.feed(data)
            if data:
                await up.send(b"%x\r\n%s\r\n" % (len(data), data))


async def _relay_response(up: Stream, client: Stream, strip: frozenset[str] = frozenset()) -> None:
    """Interim (1xx) heads, then the final head with ``Connection: close``,
    each without the headers of ``strip`` (folded names,
    network.stripResponseHeaders), then every byte until the upstream closes."""
    while True:
        try:
            head = await up.readuntil(b"\r\n\r\n", MAX_HEAD)
        except _Closed:
            raise UpstreamError("error", "the upstream closed the connection without a complete response") from None
        except BadRequest:
            raise UpstreamError("error", f"the upstream's response head is larger than {MAX_HEAD} bytes") from None
        lines = head[:-4].split(b"\r\n")
        status = lines[0].split(b" ", 2)
        if len(status) < 2 or not status[0].startswith(b"HTTP/1.") or not status[1].isdigit():
            raise UpstreamError("error", "the upstream sent a malformed response")
        code = int(status[1])
        if 100 <= code < 200:
            if code == 101:
                raise UpstreamError("error", "the upstream switched protocols, which safebox does not relay here")
            # An interim head's headers too (103 Early Hints can carry any): "never passed".
            await client.send(strip_response_head(head[:-4], strip) + b"\r\n\r\n" if strip else head)
            continue
        named = {b"connection", b"keep-alive", b"proxy-connection"}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"connection":
                named.update(t.strip().lower() for t in value.split(b","))
        kept = [line for line in lines[1:] if line.partition(b":")[0].strip().lower() not in named]
        final = b"\r\n".join([lines[0], *kept])
        final = strip_response_head(final, strip) if strip else final
        await client.send(final + b"\r\nConnection: close\r\n\r\n")
        break
    while data := await up.read_some():
        await client.send(data)


def _say(gate: Gate, message: str) -> None:
    if gate.report is not None:
        gate.report(message)


async def _forward(client: Stream, gate: Gate, name: str, addresses: list[IPAddress], port: int, via: ProxyURL | None,
                   *, tls: bool, protocol: str, head: bytes | None = None) -> None:
    """Read one request from ``client`` (or use ``head``), send it to the
    checked destination, relay the response."""
    from safebox.proxy.inject import Injector

    display = f"[{name}]" if ":" in name else name
    default = 443 if tls else 80
    authority = display if port == default else f"{display}:{port}"
    request = await _read_request(client, head)
    if request is None:
        return
    method, target, headers, framing, length = request
    from safebox.proxy.netkeys import on_request  # srt 0.0.83's requireHostMatch, stripResponseHeaders

    refusal, strip = on_request(gate, headers, name, port, tls=tls, default=default)
    if refusal is not None:
        await client.send(refusal)
        return
    injector: Injector | None = gate.injector
    creds = injector.for_host(name, port) if injector is not None and (tls or injector.allow_plaintext) else []
    hpairs = Injector.header_pairs(creds)
    encoded = any(n.lower() == "content-encoding" for n, _ in headers)
    bpairs = Injector.body_pairs(creds) if framing != "none" and not encoded else []
    buffered: bytes | None = None
    if any(s != r and len(s) != len(r) for s, r in bpairs) and framing == "length":
        # The body's length changes with the substitution: buffer it (bounded) to frame it anew.
        buffered = await _substituted_body(client, length, bpairs, authority)
        if buffered is None:
            return
        framing, length, bpairs = "length", len(buffered), []
    from safebox.proxy.inject import HeaderUnsafe

    absolute = via if not tls and via is not None else None
    try:
        up_head = _upstream_head(method, target, headers, authority, hpairs, framing, length, via=absolute)
    except HeaderUnsafe as exc:  # never send a split header
        await client.send(error_response(502, f"safebox: {exc}\n"))
        return
    if any(n.lower() == "expect" and v.lower() == "100-continue" for n, v in headers):
        await client.send(b"HTTP/1.1 100 Continue\r\n\r\n")
    try:
        if absolute is not None:
            reader, writer = await gate.dial_parent(absolute)
        else:
            reader, writer = await gate.open_stream(name, addresses, port, via)
    except UpstreamError as exc:
        status = 504 if exc.kind == "timeout" else 502
        await client.send(error_response(status, f"safebox: upstream {display} port {port}: {exc}\n"))
        return
    up: Stream = Stream(reader, writer)
    try:
        if tls:
            assert gate.mitm is not None
            tls_up = TLSStream(reader, writer, gate.mitm.upstream, server_side=False, server_hostname=name)
            up = tls_up
            if not await _upstream_handshake(tls_up, client, gate, name, port, protocol):
                return
        await up.send(up_head)
        if buffered is not None:
            await up.send(buffered)
        else:
            await _send_body(client, up, framing, length, bpairs)
        await _relay_response(up, client, strip)
    except BadRequest as exc:
        await client.send(error_response(exc.status, f"safebox: bad request: {exc.message}\n"))
    except UpstreamError as exc:
        await client.send(error_response(502, f"safebox: upstream {display} port {port}: {exc}\n"))
    except (_Closed, OSError, TimeoutError):
        pass
    finally:
        await up.close()


async def _read_request(client: Stream, head: bytes | None
                        ) -> tuple[str, str, list[tuple[str, str]], str, int] | None:
    """(method, target, headers, framing, length) of the request from
    ``client`` (or in ``head``); None when there is none (a bad one has been
    answered)."""
    try:
        if head is None:
            head = await asyncio.wait_for(client.readuntil(b"\r\n\r\n", MAX_HEAD), HEAD_TIMEOUT)
        method, target, headers = _parse_inner(head[:-4])
        framing, length = _framing(headers)
    except BadRequest as exc:
        await client.send(error_response(exc.status, f"safebox: bad request: {exc.message}\n"))
        return None
    except (_Closed, TimeoutError):
        return None
    return method, target, headers, framing, length


async def _substituted_body(client: Stream, length: int, bpairs: list[tuple[bytes, bytes]],
                            authority: str) -> bytes | None:
    """The request body with the real credentials in, read whole (bounded);
    None when it cannot be (the client has been answered, or went away)."""
    if length > MAX_BUFFERED_BODY:
        await client.send(error_response(
            413, f"safebox: request body of {length} bytes to {authority} carries masked credentials whose "
                 f"real values change its length; at most {MAX_BUFFERED_BODY} bytes are buffered\n"))
        return None
    try:
        from safebox.proxy.inject import substitute

        return substitute(await client.readexactly(length), bpairs)
    except _Closed:
        return None


async def _upstream_handshake(up: TLSStream, client: Stream, gate: Gate, name: str, port: int,
                              protocol: str) -> bool:
    """The TLS handshake with the upstream; False when it failed (the client
    has been answered and the failure reported)."""
    display = f"[{name}]" if ":" in name else name
    try:
        await asyncio.wait_for(up.handshake(), TLS_HANDSHAKE_TIMEOUT)
    except ssl.SSLCertVerificationError as exc:
        why = exc.verify_message or exc.reason or str(exc)
        msg = (f"the certificate of {display} port {port} did not verify: {why}. safebox checks upstream "
               "certificates against the host's roots and network.tlsTerminate.extraCaCertPaths; add the "
               "issuing CA there, or list the host in network.tlsTerminate.excludeDomains to tunnel it "
               "untouched")
        _say(gate, f"TLS: {msg}")
        if gate.audit is not None:
            gate.audit("tls", host=name, port=port, protocol=protocol, verdict="deny",
                       rule="network.tlsTerminate", reason=msg)
        await client.send(error_response(502, f"safebox: {msg}\n", rule="network.tlsTerminate"))
        return False
    except (ssl.SSLError, _Closed, TimeoutError, OSError) as exc:
        msg = f"TLS handshake with {display} port {port} failed: {exc}"
        _say(gate, f"TLS: {msg}")
        await client.send(error_response(502, f"safebox: {msg}\n"))
        return False
    return True


async def _sniff(reader: asyncio.StreamReader) -> bytes:
    """The client's first bytes after ``200``: at least 3, or what came within SNIFF_TIMEOUT."""
    got = b""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SNIFF_TIMEOUT
    while len(got) < 3:
        left = deadline - loop.time()
        if left <= 0:
            break
        try:
            data = await asyncio.wait_for(reader.read(3 - len(got)), left)
        except TimeoutError:
            break
        if not data:
            break
        got += data
    return got


def _looks_like_client_hello(data: bytes) -> bool:
    """A TLS handshake record (content type 22, version 3.x): what srt checks."""
    return len(data) >= 3 and data[0] == 0x16 and data[1] == 0x03 and data[2] <= 0x03


async def _check(writer: asyncio.StreamWriter, gate: Gate, req: Request, kind: str, *,
                 tunnel: bool = True) -> tuple[str, list[IPAddress], ProxyURL | None] | None:
    """The gate's decision for ``req``; on a refusal or an upstream failure,
    the answer (403 naming the rule, 502/504) is written and None returned."""
    display = f"[{req.host}]" if ":" in req.host else req.host
    try:
        return await gate.check(req.host, req.port, kind, tunnel=tunnel)
    except Refused as exc:
        writer.write(refusal_response(req.host, req.port, exc.decision))
    except UpstreamError as exc:
        status = 504 if exc.kind == "timeout" else 502
        writer.write(error_response(status, f"safebox: upstream {display} port {req.port}: {exc}\n"))
    await writer.drain()
    return None


async def terminate(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, gate: Gate, req: Request) -> None:
    """Serve a CONNECT that ``network.tlsTerminate`` covers (module docstring)."""
    display = f"[{req.host}]" if ":" in req.host else req.host
    checked = await _check(writer, gate, req, "connect")
    if checked is None:
        return
    name, addresses, via = checked
    writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
    await writer.drain()
    first = await _sniff(reader)
    assert gate.mitm is not None
    if not _looks_like_client_hello(first):
        if gate.keys is not None and gate.keys.refuse_opaque_tunnels:
            from safebox.proxy.netkeys import refuse_opaque

            refuse_opaque(gate, req.host, req.port, "connect")  # said and recorded; the 200 is sent
            writer.transport.close()
            return
        # Not TLS (or a silent client): the tunnel it asked for, untouched.
        relay = Relay()
        try:
            upstream = await gate.attach(relay, name, addresses, req.port, via)
        except UpstreamError:
            return
        try:
            leftover, eof = adopt_stream(reader)
            # StreamWriter.transport is typed WriteTransport; a stream server's
            # transport is a full (read and write) Transport.
            relay.start(writer.transport, leftover=first + leftover, client_eof=eof or not first)  # type: ignore[arg-type]
            await relay.done
        finally:
            relay.abort()
            upstream.abort()
        return
    try:
        ctx = gate.mitm.server_context(name)
    except HostError:
        return
    client = TLSStream(reader, writer, ctx, server_side=True, initial=first)
    try:
        await asyncio.wait_for(client.handshake(), TLS_HANDSHAKE_TIMEOUT)
    except (ssl.SSLError, _Closed, TimeoutError, OSError) as exc:
        mismatch = getattr(client.obj, "safebox_sni_refused", None)  # set by Mitm's SNI check
        if mismatch:
            shown = "".join(c if c.isprintable() else "?" for c in mismatch[:255])
            _say(gate, f"TLS: refused a ClientHello for {shown!r} inside a CONNECT to {display} port {req.port}: "
                       "the certificate would be for a host the policy did not check")
        elif isinstance(exc, ssl.SSLError) and "alert" in str(exc):
            _say(gate, f"TLS: the command's client refused safebox's certificate for {display} ({exc.reason}): "
                       "it does not trust the run's CA (set by SSL_CERT_FILE, CURL_CA_BUNDLE, ...); point the tool "
                       "at $SSL_CERT_FILE, or list the host in network.tlsTerminate.excludeDomains")
        writer.transport.close()
        return
    try:
        await _forward(client, gate, name, addresses, req.port, via, tls=True, protocol="connect")
    finally:
        await client.close()


async def forward_plain(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, gate: Gate, req: Request,
                        head: bytes) -> None:
    """A plain ``http://`` request to a host with masked credentials, with
    ``allowPlaintextInject``: the same forwarding, without TLS."""
    checked = await _check(writer, gate, req, "http", tunnel=False)
    if checked is None:
        return
    name, addresses, via = checked
    client = Stream(reader, writer)  # what the reader buffered after the head is read first
    try:
        await _forward(client, gate, name, addresses, req.port, via, tls=False, protocol="http", head=head)
    finally:
        await client.close()

"""One HTTP/1.1 request the proxy reads instead of relaying blind (a
terminated CONNECT, or plain ``http://`` with masked credentials or stripped
response headers), forwarded to the destination the gate checked:
:func:`forward`'s steps are intercept.py's 3 to 5.

The request's target is reduced to origin form and its ``Host`` set to the
checked target; masked credentials are substituted in its headers and body;
it goes upstream with ``Connection: close`` (verified TLS for a terminated
CONNECT), and the response comes back unchanged but for ``Connection:
close``: one request per connection.
"""

from __future__ import annotations

import ssl

from safebox.policy.domains import IPAddress
from safebox.proxy._asyncio import asyncio
from safebox.proxy.netkeys import strip_response_head
from safebox.proxy.streams import CHUNK, TLS_HANDSHAKE_TIMEOUT, Closed, Stream, TLSStream
from safebox.proxy.upstream import Gate, UpstreamError
from safebox.proxy.wire import (
    _HOP_BY_HOP,
    _TARGET_RE,
    _TOKEN_RE,
    HEAD_TIMEOUT,
    MAX_HEAD,
    BadRequest,
    error_response,
    header_lines,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from safebox.proxy.inject import Credential
    from safebox.proxy.parent import ProxyURL

__all__ = ["forward", "say"]

#: A request body that substitution can lengthen is buffered to set its
#: Content-Length; beyond this it is refused (413), as srt does (64 MiB).
MAX_BUFFERED_BODY = 64 << 20
MAX_CHUNK_LINE = 4096


def say(gate: Gate, message: str) -> None:
    """Tell the user, where the gate reports (a ``safebox:`` line on stderr, or an API event)."""
    if gate.report is not None:
        gate.report(message)


async def forward(client: Stream, gate: Gate, name: str, addresses: list[IPAddress], port: int, via: ProxyURL | None,
                  *, tls: bool, protocol: str, head: bytes | None = None) -> None:
    """Read one request from ``client`` (or use ``head``), send it to the
    checked destination, relay the response."""
    from safebox.proxy.inject import HeaderUnsafe, Injector

    default = 443 if tls else 80
    authority = _shown(name) if port == default else f"{_shown(name)}:{port}"
    # 1. The request; a bad one is answered here.
    request = await _read_request(client, head)
    if request is None:
        return
    method, target, headers, framing, length = request
    # 2. The network keys' checks of it, and the response headers they strip.
    from safebox.proxy.netkeys import on_request  # srt 0.0.83's requireHostMatch, stripResponseHeaders

    refusal, strip = on_request(gate, headers, name, port, tls=tls, default=default)
    if refusal is not None:
        await client.send(refusal)
        return
    # 3. The masked credentials for this host, substituted in the headers and the body.
    injector: Injector | None = gate.injector
    creds = injector.for_host(name, port) if injector is not None and (tls or injector.allow_plaintext) else []
    body = await _request_body(client, creds, headers, framing, length, authority)
    if body is None:
        return
    framing, length, bpairs, buffered = body
    # 4. The head sent upstream; a header that would split is never sent.
    absolute = via if not tls and via is not None else None
    try:
        up_head = _upstream_head(method, target, headers, authority, Injector.header_pairs(creds), framing, length,
                                 via=absolute)
    except HeaderUnsafe as exc:
        await client.send(error_response(502, f"safebox: {exc}\n"))
        return
    if any(n.lower() == "expect" and v.lower() == "100-continue" for n, v in headers):
        await client.send(b"HTTP/1.1 100 Continue\r\n\r\n")
    # 5. The connection to the checked address, or through the parent proxy.
    opened = await _open_upstream(client, gate, name, addresses, port, via, absolute)
    if opened is None:
        return
    # 6. The exchange: TLS verified upstream, the request sent, the response relayed.
    await _exchange(client, gate, opened, name, port, tls=tls, protocol=protocol, up_head=up_head,
                    body=(framing, length, bpairs, buffered), strip=strip)


def _shown(name: str) -> str:
    """A host as messages show it: an IPv6 address in brackets."""
    return f"[{name}]" if ":" in name else name


async def _request_body(client: Stream, creds: list[Credential], headers: list[tuple[str, str]], framing: str,
                        length: int, authority: str
                        ) -> tuple[str, int, list[tuple[bytes, bytes]], bytes | None] | None:
    """(framing, length, substitutions, buffered body) of the request body
    with the real credentials in: a Content-Length body whose length they
    change is read whole (bounded) and framed anew; a content-encoded one is
    left as it is. None when the body cannot be read (the client has been
    answered, or went away)."""
    from safebox.proxy.inject import Injector

    encoded = any(n.lower() == "content-encoding" for n, _ in headers)
    bpairs = Injector.body_pairs(creds) if framing != "none" and not encoded else []
    if not (any(s != r and len(s) != len(r) for s, r in bpairs) and framing == "length"):
        return framing, length, bpairs, None
    buffered = await _substituted_body(client, length, bpairs, authority)
    if buffered is None:
        return None
    return "length", len(buffered), [], buffered


async def _open_upstream(client: Stream, gate: Gate, name: str, addresses: list[IPAddress], port: int,
                         via: ProxyURL | None, absolute: ProxyURL | None
                         ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
    """The upstream connection; None when it failed (the client has been answered 502 or 504)."""
    try:
        if absolute is not None:
            return await gate.dial_parent(absolute)
        return await gate.open_stream(name, addresses, port, via)
    except UpstreamError as exc:
        status = 504 if exc.kind == "timeout" else 502
        await client.send(error_response(status, f"safebox: upstream {_shown(name)} port {port}: {exc}\n"))
        return None


async def _exchange(client: Stream, gate: Gate, opened: tuple[asyncio.StreamReader, asyncio.StreamWriter],
                    name: str, port: int, *, tls: bool, protocol: str, up_head: bytes,
                    body: tuple[str, int, list[tuple[bytes, bytes]], bytes | None], strip: frozenset[str]) -> None:
    """Over the upstream connection: the TLS handshake (verified), the
    request, the response; a failure on the way is answered to the client,
    and the upstream is closed."""
    reader, writer = opened
    framing, length, bpairs, buffered = body
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
        await client.send(error_response(502, f"safebox: upstream {_shown(name)} port {port}: {exc}\n"))
    except (Closed, OSError, TimeoutError):
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
    except (Closed, TimeoutError):
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
    except Closed:
        return None


async def _upstream_handshake(up: TLSStream, client: Stream, gate: Gate, name: str, port: int,
                              protocol: str) -> bool:
    """The TLS handshake with the upstream; False when it failed (the client
    has been answered and the failure reported)."""
    display = _shown(name)
    try:
        await asyncio.wait_for(up.handshake(), TLS_HANDSHAKE_TIMEOUT)
    except ssl.SSLCertVerificationError as exc:
        why = exc.verify_message or exc.reason or str(exc)
        msg = (f"the certificate of {display} port {port} did not verify: {why}. safebox checks upstream "
               "certificates against the host's roots and network.tlsTerminate.extraCaCertPaths; add the "
               "issuing CA there, or list the host in network.tlsTerminate.excludeDomains to tunnel it "
               "untouched")
        say(gate, f"TLS: {msg}")
        if gate.audit is not None:
            gate.audit("tls", host=name, port=port, protocol=protocol, verdict="deny",
                       rule="network.tlsTerminate", reason=msg)
        await client.send(error_response(502, f"safebox: {msg}\n", rule="network.tlsTerminate"))
        return False
    except (ssl.SSLError, Closed, TimeoutError, OSError) as exc:
        msg = f"TLS handshake with {display} port {port} failed: {exc}"
        say(gate, f"TLS: {msg}")
        await client.send(error_response(502, f"safebox: {msg}\n"))
        return False
    return True


# ----------------------------------------------------------------- messages


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
            raise Closed()
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
                raise Closed()
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
        except Closed:
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

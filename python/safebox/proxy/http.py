"""HTTP proxy front end: ``CONNECT host:port`` tunnels and absolute-URI plain
HTTP (``GET http://host/path``), one request per client connection.

Plain HTTP is forwarded in origin form with hop-by-hop headers removed and
``Connection: close``; after the request head the bytes are relayed as they
are, so the upstream frames the body and the response.  Refusals are HTTP 403
with a ``text/plain`` body naming the host and the policy key to change;
malformed requests get 400 (431 for an over-long head, 408 for a slow one).
"""

from __future__ import annotations

from safebox.proxy._asyncio import asyncio
from safebox.proxy.rawconn import RawConn
from safebox.proxy.relay import Relay, adopt_stream
from safebox.proxy.rules import normalize_host
from safebox.proxy.upstream import Gate, Refused, UpstreamError
from safebox.proxy.wire import (
    HEAD_TIMEOUT,
    MAX_HEAD,
    BadRequest,
    Request,
    _origin_head,
    error_response,
    parse_request_head,
    refusal_response,
)

__all__ = ["MAX_HEAD", "HEAD_TIMEOUT", "BadRequest", "Request", "handle", "parse_request_head"]


async def _reply(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(data)
    try:
        await asyncio.wait_for(writer.drain(), 10)
    except (OSError, TimeoutError):
        pass


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, gate: Gate) -> None:
    """Serve one client connection: one request, then a tunnel or a response."""
    head = await _read_head(reader, writer)
    req = await _parse(head, writer, gate) if head is not None else None
    if head is None or req is None:
        return
    keys = gate.keys
    if keys is not None and keys.refuse_opaque_tunnels and req.is_connect and (
            gate.mitm is None or gate.mitm.excluded(req.host, req.port)):
        from safebox.proxy.netkeys import refuse_opaque

        await _reply(writer, refuse_opaque(gate, req.host, req.port, "connect"))
        return
    if keys is not None and keys.strip_response_headers and not req.is_connect:
        from safebox.proxy.intercept import forward_plain  # network.stripResponseHeaders: heads are read

        await forward_plain(reader, writer, gate, req, head)
        return
    if gate.mitm is not None and req.is_connect and not gate.mitm.excluded(req.host, req.port):
        from safebox.proxy.intercept import terminate  # network.tlsTerminate

        await terminate(reader, writer, gate, req)
        return
    if (gate.injector is not None and gate.injector.allow_plaintext and not req.is_connect
            and gate.injector.for_host(normalize_host(req.host), req.port)):
        from safebox.proxy.intercept import forward_plain  # credentials.allowPlaintextInject

        await forward_plain(reader, writer, gate, req, head)
        return
    protocol = "connect" if req.is_connect else "http"
    display = f"[{req.host}]" if ":" in req.host else req.host
    authority = display if req.port == 80 else f"{display}:{req.port}"
    relay = Relay()
    if isinstance(writer, RawConn):  # the server's raw path (proxy/rawconn.py)
        await _relay_raw(writer, gate, req, protocol, display, authority, relay)
        return
    try:
        upstream = await gate.open(req.host, req.port, protocol, relay)
    except Refused as exc:
        await _reply(writer, refusal_response(req.host, req.port, exc.decision))
        return
    except UpstreamError as exc:
        status = 504 if exc.kind == "timeout" else 502
        await _reply(writer, error_response(status, f"safebox: upstream {display} port {req.port}: {exc}\n"))
        return
    try:
        leftover, eof = adopt_stream(reader)
        head_up = b""
        if req.is_connect:
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        else:
            head_up = _origin_head(req, authority, via=relay.via)
        # StreamWriter.transport is typed WriteTransport; a stream server's is a full Transport.
        relay.start(writer.transport, leftover=leftover, client_eof=eof, head=head_up)  # type: ignore[arg-type]
        await relay.done
    finally:
        relay.abort()
        upstream.abort()


async def _read_head(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes | None:
    """The request head, ending in a blank line; None after answering the
    client why there is none (too large, truncated, too slow)."""
    try:
        async with asyncio.timeout(HEAD_TIMEOUT):  # not wait_for: no second task per request
            return await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError:
        await _reply(writer, error_response(431, f"safebox: request head larger than {MAX_HEAD} bytes\n"))
    except asyncio.IncompleteReadError as exc:
        if exc.partial.strip():
            await _reply(writer, error_response(400, "safebox: request head truncated (connection closed)\n"))
    except TimeoutError:
        await _reply(writer, error_response(408, f"safebox: request head not received within {HEAD_TIMEOUT:g} s\n"))
    return None


async def _parse(head: bytes, writer: asyncio.StreamWriter, gate: Gate) -> Request | None:
    """The request ``head`` holds; None after answering the client why not
    (a bad request, or a misdirected one under ``requireHostMatch``)."""
    try:
        return parse_request_head(head[:-4])
    except BadRequest as exc:
        keys = gate.keys
        if exc.misdirected and keys is not None and keys.require_host_match:
            from safebox.proxy.netkeys import misdirected

            await _reply(writer, misdirected(gate, exc.message, *exc.misdirected))
        else:
            await _reply(writer, error_response(exc.status, f"safebox: bad request: {exc.message}\n"))
        return None


async def _relay_raw(conn: RawConn, gate: Gate, req: Request, protocol: str, display: str, authority: str,
                     relay: Relay) -> None:
    """The end of :func:`handle` for a raw client: the same checks and
    answers; the relay splices the two sockets."""
    try:
        upstream = await gate.open_socket(req.host, req.port, protocol, relay)
    except Refused as exc:
        await _reply(conn, refusal_response(req.host, req.port, exc.decision))  # type: ignore[arg-type]
        return
    except UpstreamError as exc:
        status = 504 if exc.kind == "timeout" else 502
        await _reply(conn, error_response(status, f"safebox: upstream {display} port {req.port}: {exc}\n"))  # type: ignore[arg-type]
        return
    try:
        if req.is_connect:
            conn.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            head_up = b""
        else:
            head_up = _origin_head(req, authority, via=None)
        leftover, eof, unsent = conn.take()
        relay.splice(conn.sock, upstream, up_prefix=head_up + leftover, down_prefix=unsent, client_eof=eof)
        await relay.done
    finally:
        relay.abort()
        upstream.close()

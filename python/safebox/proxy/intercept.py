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

Steps 1 and 2 are here; 3 to 5, for a terminated tunnel and for plain
HTTP alike, are ``forward.py``'s. The TLS layers are ``streams.TLSStream``:
:class:`ssl.SSLObject` over memory BIOs on the proxy's own streams, so no
byte is lost between the CONNECT and the ClientHello and asyncio's TLS
transports are not needed.
"""

from __future__ import annotations

import ssl

from safebox.policy.domains import IPAddress
from safebox.proxy._asyncio import asyncio
from safebox.proxy.forward import forward, say
from safebox.proxy.relay import Relay, adopt_stream
from safebox.proxy.rules import HostError
from safebox.proxy.streams import TLS_HANDSHAKE_TIMEOUT, Closed, Stream, TLSStream
from safebox.proxy.upstream import Gate, Refused, UpstreamError
from safebox.proxy.wire import Request, error_response, refusal_response

TYPE_CHECKING = False
if TYPE_CHECKING:
    from safebox.proxy.parent import ProxyURL

__all__ = ["SNIFF_TIMEOUT", "forward_plain", "terminate"]

#: How long to wait for a client's first bytes after CONNECT before relaying
#: it untouched (a server-speaks-first protocol through CONNECT).
SNIFF_TIMEOUT = 5.0


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
        await _relay_untouched(reader, writer, gate, name, addresses, req.port, via, first)
        return
    try:
        ctx = gate.mitm.server_context(name)
    except HostError:
        return
    client = TLSStream(reader, writer, ctx, server_side=True, initial=first)
    try:
        await asyncio.wait_for(client.handshake(), TLS_HANDSHAKE_TIMEOUT)
    except (ssl.SSLError, Closed, TimeoutError, OSError) as exc:
        mismatch = getattr(client.obj, "safebox_sni_refused", None)  # set by Mitm's SNI check
        if mismatch:
            shown = "".join(c if c.isprintable() else "?" for c in mismatch[:255])
            say(gate, f"TLS: refused a ClientHello for {shown!r} inside a CONNECT to {display} port {req.port}: "
                       "the certificate would be for a host the policy did not check")
        elif isinstance(exc, ssl.SSLError) and "alert" in str(exc):
            say(gate, f"TLS: the command's client refused safebox's certificate for {display} ({exc.reason}): "
                       "it does not trust the run's CA (set by SSL_CERT_FILE, CURL_CA_BUNDLE, ...); point the tool "
                       "at $SSL_CERT_FILE, or list the host in network.tlsTerminate.excludeDomains")
        writer.transport.close()
        return
    try:
        await forward(client, gate, name, addresses, req.port, via, tls=True, protocol="connect")
    finally:
        await client.close()


async def _relay_untouched(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, gate: Gate, name: str,
                           addresses: list[IPAddress], port: int, via: ProxyURL | None, first: bytes) -> None:
    """Relay the tunnel blind, ``first`` (the bytes sniffed) first."""
    relay = Relay()
    try:
        upstream = await gate.attach(relay, name, addresses, port, via)
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
        await forward(client, gate, name, addresses, req.port, via, tls=False, protocol="http", head=head)
    finally:
        await client.close()

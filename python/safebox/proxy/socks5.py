"""SOCKS5 front end (RFC 1928): no authentication, CONNECT only, address
types domain name, IPv4 and IPv6.

Replies: 0x02 when the policy refuses the destination (the reason is in the
audit log, SOCKS has no room for it), 0x07 for a command other than CONNECT,
0x08 for an unknown address type, and for upstream failures 0x04 (host
unreachable: resolution failed or no route), 0x05 (connection refused),
0x06 (timed out) or 0x01 (anything else).
"""

from __future__ import annotations

import ipaddress
import socket
import struct

from safebox.proxy._asyncio import asyncio
from safebox.proxy.rawconn import RawConn
from safebox.proxy.relay import Relay, adopt_stream
from safebox.proxy.upstream import Gate, Refused, UpstreamError

__all__ = ["HANDSHAKE_TIMEOUT", "REPLY", "handle"]

HANDSHAKE_TIMEOUT = 30.0

#: Reply codes, RFC 1928 section 6.
REPLY = {
    "succeeded": 0x00,
    "failure": 0x01,
    "not_allowed": 0x02,
    "network_unreachable": 0x03,
    "host_unreachable": 0x04,
    "refused": 0x05,
    "ttl_expired": 0x06,
    "command_not_supported": 0x07,
    "address_type_not_supported": 0x08,
}
_UPSTREAM_REPLY = {
    "resolve": REPLY["host_unreachable"],
    "unreachable": REPLY["host_unreachable"],
    "refused": REPLY["refused"],
    "timeout": REPLY["ttl_expired"],
    "error": REPLY["failure"],
}


def reply(code: int, bound: tuple[str, int] | None = None) -> bytes:
    """A SOCKS5 reply; ``bound`` is the upstream socket's local address on success."""
    if bound is not None:
        ip = ipaddress.ip_address(bound[0].split("%", 1)[0])
        atyp = 0x01 if ip.version == 4 else 0x04
        return bytes([5, code, 0, atyp]) + ip.packed + struct.pack("!H", bound[1])
    return bytes([5, code, 0, 1, 0, 0, 0, 0, 0, 0])


async def _handshake(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> tuple[str, int] | None:
    """Method negotiation and the request; returns (host, port), or ``None``
    after answering an error."""
    ver, nmethods = await reader.readexactly(2)
    if ver != 5:
        return None  # not SOCKS5 (SOCKS4? HTTP?): nothing sensible to answer
    methods = await reader.readexactly(nmethods)
    if 0x00 not in methods:
        writer.write(b"\x05\xff")  # no acceptable method
        return None
    writer.write(b"\x05\x00")
    ver, cmd, _rsv, atyp = await reader.readexactly(4)
    if ver != 5:
        writer.write(reply(REPLY["failure"]))
        return None
    if atyp == 0x01:
        host = str(ipaddress.IPv4Address(await reader.readexactly(4)))
    elif atyp == 0x04:
        host = "[" + ipaddress.IPv6Address(await reader.readexactly(16)).compressed + "]"
    elif atyp == 0x03:
        length = (await reader.readexactly(1))[0]
        raw = await reader.readexactly(length)
        try:
            host = raw.decode("utf-8")
        except UnicodeDecodeError:
            host = raw.decode("latin-1")  # the policy check refuses it as a bad name
    else:
        writer.write(reply(REPLY["address_type_not_supported"]))
        return None
    (port,) = struct.unpack("!H", await reader.readexactly(2))
    if cmd != 0x01:
        writer.write(reply(REPLY["command_not_supported"]))
        return None
    return host, port


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, gate: Gate) -> None:
    """Serve one SOCKS5 client connection."""
    try:
        async with asyncio.timeout(HANDSHAKE_TIMEOUT):  # not wait_for: no second task per connection
            target = await _handshake(reader, writer)
    except (asyncio.IncompleteReadError, TimeoutError):
        return
    if target is None:
        await writer.drain()
        return
    host, port = target
    if gate.keys is not None and gate.keys.refuse_opaque_tunnels:
        from safebox.proxy.netkeys import refuse_opaque

        refuse_opaque(gate, host, port, "socks5")
        writer.write(reply(REPLY["not_allowed"]))
        await writer.drain()
        return
    relay = Relay()
    if isinstance(writer, RawConn):  # the server's raw path (proxy/rawconn.py)
        await _relay_raw(writer, gate, host, port, relay)
        return
    try:
        upstream = await gate.open(host, port, "socks5", relay)
    except (Refused, UpstreamError) as exc:
        await _answer_failure(reader, writer, exc, port)
        return
    try:
        sock = upstream.get_extra_info("socket")
        bound = sock.getsockname() if isinstance(sock, socket.socket) or sock is not None else None
        writer.write(reply(REPLY["succeeded"], bound[:2] if bound else ("0.0.0.0", 0)))
        leftover, eof = adopt_stream(reader)
        # StreamWriter.transport is typed WriteTransport; a stream server's is a full Transport.
        relay.start(writer.transport, leftover=leftover, client_eof=eof)  # type: ignore[arg-type]
        await relay.done
    finally:
        relay.abort()
        upstream.abort()


async def _answer_failure(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                          exc: Refused | UpstreamError, port: int) -> None:
    """The SOCKS5 reply to a request the gate refused or could not connect,
    for the stream and the raw path alike."""
    if isinstance(exc, UpstreamError):
        writer.write(reply(_UPSTREAM_REPLY[exc.kind]))
    elif exc.decision.told and port == 22:
        # network.deniedDomainReasons for SSH: ssh through a SOCKS
        # ProxyCommand (nc -X 5) prints the reason of a disconnect sent
        # in-band; the tunnel is "established" only to carry it.
        from safebox.proxy.netkeys import tell_ssh

        await tell_ssh(reader, writer, reply(REPLY["succeeded"], ("0.0.0.0", 0)), exc.decision.told)
        return
    else:
        writer.write(reply(REPLY["not_allowed"]))
    await writer.drain()


async def _relay_raw(conn: RawConn, gate: Gate, host: str, port: int, relay: Relay) -> None:
    """The end of :func:`handle` for a raw client: the same checks and
    replies; the relay splices the two sockets."""
    try:
        upstream = await gate.open_socket(host, port, "socks5", relay)
    except (Refused, UpstreamError) as exc:
        await _answer_failure(conn, conn, exc, port)  # type: ignore[arg-type]  # RawConn: a stream's part
        return
    try:
        bound = upstream.getsockname()
        conn.write(reply(REPLY["succeeded"], bound[:2]))
        leftover, eof, unsent = conn.take()
        relay.splice(conn.sock, upstream, up_prefix=leftover, down_prefix=unsent, client_eof=eof)
        await relay.done
    finally:
        relay.abort()
        upstream.close()

"""What the proxy does for srt 0.0.83's network keys (policy/srtnet.py) and
for the addresses of this host's own interfaces.

- :class:`NetKeys`: the keys' values as the proxy needs them (built by
  ``EffectivePolicy.net_keys``; ``ProxyConfig.keys``).
- :func:`ssh_disconnect`: the bytes an SSH client reads as a disconnect
  before key exchange, whose text OpenSSH prints: how a reason of
  ``deniedDomainReasons`` reaches ``ssh`` through a SOCKS5 ProxyCommand.
- :class:`OwnAddresses`: every address assigned to one of this host's
  interfaces (netlink ``RTM_GETADDR``), read at the proxy's start and again
  when older than :data:`OWN_REFRESH` seconds: a service bound to 0.0.0.0
  answers on them exactly as on loopback.
- :func:`strip_response_head`: ``stripResponseHeaders`` on a response head.

Standard library only; imported by the proxy when the policy sets a key,
and by rules.py for the interface addresses.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import struct
import time

from safebox.policy.effective import NetKeys
from safebox.proxy.rules import RULE_HOST_MATCH, RULE_OPAQUE  # here for explain.py, which netkeys reaches

TYPE_CHECKING = False
if TYPE_CHECKING:
    from asyncio import StreamReader, StreamWriter
    from collections.abc import Callable

    from safebox.policy.domains import IPAddress
    from safebox.proxy.upstream import Gate

__all__ = ["OWN_REFRESH", "RULE_HOST_MATCH", "RULE_OPAQUE", "NetKeys", "OwnAddresses", "host_mismatch", "misdirected",
           "refuse_opaque", "ssh_disconnect", "strip_response_head", "tell_ssh"]

#: Interface addresses older than this many seconds are read again before a check.
OWN_REFRESH = 2.0
#: SSH_DISCONNECT_HOST_NOT_ALLOWED_TO_CONNECT (RFC 4253 11.1).
_SSH_HOST_NOT_ALLOWED = 1




def misdirected(gate: Gate, why: str, host: str, port: int) -> bytes:
    """The 421 of ``requireHostMatch``, recorded as a refusal (srt: "recorded as violations")."""
    from safebox.proxy.rules import Decision
    from safebox.proxy.wire import error_response

    shown = "".join(c if " " <= c <= "~" else "?" for c in why)[:300]
    decision = Decision(False, RULE_HOST_MATCH, f"{shown}; {RULE_HOST_MATCH} is set")
    gate.record(host, port, "http", decision)
    if gate.explain is not None:
        gate.explain(host, port, "http", decision)
    return error_response(421, f"safebox: misdirected request: {decision.reason}\n", rule=RULE_HOST_MATCH)


def on_request(gate: Gate, headers: list[tuple[str, str]], name: str, port: int, *, tls: bool,
               default: int) -> tuple[bytes | None, frozenset[str]]:
    """For a request the proxy reads (plain HTTP it forwards itself, or
    inside a terminated tunnel): the 421 to answer instead of forwarding
    (``requireHostMatch``; a plain request's Host was checked already), and
    the folded names of the response headers to strip."""
    keys = gate.keys
    if keys is None:
        return None, frozenset()
    if tls and keys.require_host_match:
        wrong = host_mismatch(headers, name, port, default)
        if wrong is not None:
            return misdirected(gate, wrong, name, port), frozenset()
    return None, frozenset(keys.folded_strip())


def host_mismatch(headers: list[tuple[str, str]], name: str, port: int, default: int) -> str | None:
    """Why the Host header does not name ``name:port`` (None: it does, or there is none)."""
    from safebox.proxy.wire import BadRequest, split_authority

    for key, value in headers:
        if key.lower() == "host":
            try:
                if split_authority(value, default_port=default) == (name, port):
                    continue
            except BadRequest:
                pass
            return f"Host header {value!r} is not {name} port {port}, where the request is sent"
    return None


def refuse_opaque(gate: Gate, host: str, port: int, protocol: str) -> bytes:
    """A tunnel refused by ``refuseOpaqueTunnels``: recorded, said, and the 403 for a CONNECT."""
    from safebox.proxy.rules import Decision
    from safebox.proxy.wire import refusal_response

    how = ("a SOCKS5 tunnel" if protocol == "socks5"
           else "a CONNECT tunnel that is not TLS-terminated (network.tlsTerminate) or carries no TLS")
    decision = Decision(False, RULE_OPAQUE, f"{how} cannot be inspected; {RULE_OPAQUE} is set")
    gate.record(host, port, protocol, decision)
    if gate.explain is not None:
        gate.explain(host, port, protocol, decision)
    return refusal_response(host, port, decision)


def ssh_disconnect(reason: str) -> bytes:
    """An SSH server's identification line and an unencrypted
    ``SSH_MSG_DISCONNECT`` packet (RFC 4253 4.2, 6, 11.1) carrying
    ``reason``: what OpenSSH prints as ``Received disconnect from ...: REASON``."""
    from safebox.policy.srtnet import status_phrase

    text = status_phrase(reason).encode("ascii")
    payload = (bytes([1]) + struct.pack("!I", _SSH_HOST_NOT_ALLOWED) + struct.pack("!I", len(text)) + text
               + struct.pack("!I", 0))
    # packet_length || padding_length || payload || padding: the whole a
    # multiple of 8, at least 4 bytes of padding.
    pad = 8 - (5 + len(payload)) % 8
    if pad < 4:
        pad += 8
    packet = struct.pack("!IB", 1 + len(payload) + pad, pad) + payload + bytes(pad)
    return b"SSH-2.0-safebox\r\n" + packet


#: How long the connection that carried an SSH disconnect stays open for the
#: client to read it (seconds).
SSH_LINGER = 10.0


async def tell_ssh(reader: StreamReader, writer: StreamWriter, first: bytes, reason: str) -> None:
    """Write ``first`` (the SOCKS5 success) and :func:`ssh_disconnect`, then
    read and drop what the client sends until it closes (at most
    :data:`SSH_LINGER` s): closed at once, the client's key-exchange packet,
    already on its way, would meet a reset (or its ProxyCommand a broken
    pipe) before ssh reads the disconnect and prints the reason."""
    from safebox.proxy._asyncio import asyncio  # the proxy's, loaded already; not at a run's start

    writer.write(first + ssh_disconnect(reason))
    try:
        async with asyncio.timeout(SSH_LINGER):
            await writer.drain()
            while await reader.read(4096):
                pass
    except (OSError, TimeoutError):
        pass


def strip_response_head(head: bytes, folded: frozenset[str]) -> bytes:
    """A response head (status line and headers, without the blank line)
    without the headers whose folded name is in ``folded``."""
    from safebox.policy.srtnet import fold_header

    lines = head.split(b"\r\n")
    kept = [lines[0]]
    dropping = False
    for line in lines[1:]:
        if line[:1] in (b" ", b"\t"):  # obsolete line folding: belongs to the header before
            if not dropping:
                kept.append(line)
            continue
        name = line.split(b":", 1)[0].strip().decode("latin-1")
        dropping = fold_header(name) in folded
        if not dropping:
            kept.append(line)
    return b"\r\n".join(kept)


# -- this host's own addresses ---------------------------------------------------

_RTM_GETADDR = 22
_RTM_NEWADDR = 20
_NLMSG_DONE = 3
_NLMSG_ERROR = 2
_NLM_F_REQUEST = 1
_NLM_F_DUMP = 0x300
_IFA_ADDRESS = 1
_IFA_LOCAL = 2


def read_interface_addresses() -> frozenset[IPAddress]:
    """Every address assigned to an interface of this network namespace
    (IPv4 and IPv6, any scope), by one netlink ``RTM_GETADDR`` dump.
    Raises OSError when netlink cannot be used."""
    found: set[IPAddress] = set()
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, 0) as s:  # NETLINK_ROUTE
        s.settimeout(2)
        # nlmsghdr (len, type, flags, seq, pid) + ifaddrmsg (family, prefixlen, flags, scope, index)
        req = struct.pack("=IHHII", 16 + 8, _RTM_GETADDR, _NLM_F_REQUEST | _NLM_F_DUMP, 1, 0)
        req += struct.pack("=BBBBI", socket.AF_UNSPEC, 0, 0, 0, 0)
        s.send(req)
        done = False
        while not done:
            data = s.recv(1 << 16)
            if not data:
                break
            off = 0
            while off + 16 <= len(data):
                length, kind = struct.unpack_from("=IH", data, off)
                if length < 16:
                    return frozenset(found)
                if kind == _NLMSG_DONE:
                    done = True
                    break
                if kind == _NLMSG_ERROR:
                    (err,) = struct.unpack_from("=i", data, off + 16)
                    if err:
                        raise OSError(-err, os.strerror(-err))
                elif kind == _RTM_NEWADDR:
                    found.update(_addresses(data[off + 16: off + length]))
                off += (length + 3) & ~3
    return frozenset(found)


def _addresses(msg: bytes) -> list[IPAddress]:
    """IFA_ADDRESS and IFA_LOCAL of one RTM_NEWADDR message (after its nlmsghdr)."""
    if len(msg) < 8:
        return []
    family = msg[0]
    size = 4 if family == socket.AF_INET else 16 if family == socket.AF_INET6 else 0
    out: list[IPAddress] = []
    off = 8
    while size and off + 4 <= len(msg):
        rta_len, rta_type = struct.unpack_from("=HH", msg, off)
        if rta_len < 4:
            break
        if rta_type in (_IFA_ADDRESS, _IFA_LOCAL) and rta_len - 4 == size:
            out.append(ipaddress.ip_address(msg[off + 4: off + 4 + size]))
        off += (rta_len + 3) & ~3
    return out


class OwnAddresses:
    """This host's interface addresses, read at the first call and again when
    older than ``refresh`` seconds (an address added later, a DHCP renewal).
    A failed read keeps the last answer; with none, it fails closed: every
    address counts as this host's until a read succeeds."""

    def __init__(self, refresh: float = OWN_REFRESH,
                 read: Callable[[], frozenset[IPAddress]] | None = None) -> None:
        self.refresh = refresh
        self._read = read or read_interface_addresses
        self._at = -refresh - 1.0
        self._known: frozenset[IPAddress] | None = None

    def __call__(self) -> frozenset[IPAddress] | None:
        """The addresses; None when they could never be read (refuse)."""
        now = time.monotonic()
        if now - self._at > self.refresh:
            try:
                self._known = self._read()
                self._at = now
            except OSError:
                pass
        return self._known

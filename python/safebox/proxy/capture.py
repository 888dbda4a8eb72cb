"""Capture: TCP connects of programs that ignore the proxy variables
(docs/network.md, "Capture").

The seccomp supervisor (``helper/supervise.c``, ``capture``) does not run a
TCP ``connect()`` made inside: it connects to this front end, on the host's
``127.0.0.1``, sends ``capture ADDR:PORT KEY\\n`` (where the command wanted
to go, and the key safebox gave it: a line without it is not answered), and
waits for the answer. ``y`` and the proxy's answer key (a process that took
the port cannot know it): this connection becomes the command's
socket (``SECCOMP_IOCTL_NOTIF_ADDFD``) and is relayed to the destination
through the gate, as a CONNECT tunnel is; anything else: the connect fails
with EACCES. The answer comes after the name's check, before the address
checks and the upstream connect (the supervisor answers one call at a time):
a destination refused later is closed at once, explained the same way.

What ``ADDR`` stands for:

- :data:`dns.SERVER` port 53: the sandbox's DNS (``proxy/dns.py``);
- an address of :data:`dns.FAKE_NET` a lookup gave out: that name;
- any other address: itself, reached only when ``network.allowedAddresses``
  covers it (:func:`_direct`). So loopback, IPv4-mapped, IPv6 and metadata
  addresses are refused here.
"""

from __future__ import annotations

import ipaddress
import time

from safebox.proxy import dns
from safebox.proxy._asyncio import asyncio
from safebox.proxy.rules import RULE_ADDRESSES, RULE_ALLOWED, RULE_REQUEST, Decision, is_metadata
from safebox.proxy.upstream import Gate, Refused, Relay, UpstreamError, adopt_stream

__all__ = ["MAX_CAPTURED", "Capture", "connection_cap"]

#: Captured connections open at once; past this a connect is refused (said
#: once). Lower when safebox's descriptor limit is: each holds up to six
#: (client, upstream, a splice pipe each way), and the proxy path shares them.
MAX_CAPTURED = 1024
FDS_PER_CONNECTION = 6
FDS_KEPT = 256


def connection_cap() -> int:
    """:data:`MAX_CAPTURED`, or what safebox's soft ``RLIMIT_NOFILE`` leaves room for."""
    import resource

    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MAX_CAPTURED
    return max(16, min(MAX_CAPTURED, (soft - FDS_KEPT) // FDS_PER_CONNECTION))
HEAD_TIMEOUT = 5.0
PROTOCOL = "capture"


def _parse(line: bytes, key: str | None) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int] | None:
    """``capture ADDR:PORT KEY``: the destination, or None (malformed, or not the supervisor's key)."""
    import hmac

    try:
        text = line.decode("ascii").rstrip("\n")
    except UnicodeDecodeError:
        return None
    if not text.startswith("capture "):
        return None
    text, _, shown = text.rpartition(" ") if key is not None else (text, "", "")
    if key is not None and not hmac.compare_digest(shown.encode(), key.encode()):
        return None
    where, _, port_text = text[8:].rpartition(":")
    try:
        port = int(port_text)
        ip = ipaddress.ip_address(where[1:-1] if where.startswith("[") and where.endswith("]") else where)
    except ValueError:
        return None
    if not 0 < port < 65536:
        return None
    return ip, port


def _direct(gate: Gate, ip: ipaddress.IPv4Address | ipaddress.IPv6Address, host: str, port: int,
            decision: Decision) -> Decision:
    """The decision on a connect to an address no name stands for: only
    ``network.allowedAddresses`` lets it through (an IP literal in
    ``allowedDomains`` is reached through the proxy, as before capture: a
    policy that lists ``127.0.0.1`` for its registry does not open every
    loopback port to a direct connect). Deny entries still win."""
    if not decision.allowed and decision.rule != RULE_ALLOWED:
        return decision  # denied on purpose, or malformed: that says it best
    if gate.rules.address_grant(ip, port) is not None and decision.allowed:
        return decision
    if is_metadata(ip):
        return Decision(False, RULE_ALLOWED, f"{host}, a cloud metadata address, is never reached by a direct "
                                             "connection (list it literally in network.allowedDomains and go "
                                             "through the proxy)")
    return Decision(False, RULE_ADDRESSES, f"a direct connection to {host} port {port} needs an entry in "
                                           f"{RULE_ADDRESSES} (names go through the sandbox's DNS)")


class Capture:
    """The capture front end of one proxy (loop thread only)."""

    def __init__(self, gate: Gate, *, keys: tuple[str, str] | None = None) -> None:
        self.gate = gate
        self.keys = keys
        self.names = dns.FakeNames()
        self.open = 0
        self.cap = connection_cap()
        self._looked_up: dict[str, float] = {}
        self._said: set[str] = set()
        self.resolver = dns.Resolver(self.names, gate.rules, self._refuse_lookup, self._say)

    def _say(self, line: str) -> None:
        if line in self._said:
            return
        self._said.add(line)
        report = self.gate.report
        if report is not None:
            report(line)
        else:
            import sys

            try:
                sys.stderr.write(f"safebox: {line}\n")
                sys.stderr.flush()
            except (OSError, ValueError):
                pass

    def _refuse(self, host: str, port: int, protocol: str, decision: Decision) -> None:
        self.gate.record(host, port, protocol, decision)
        if self.gate.explain is not None:
            self.gate.explain(host, port, protocol, decision)

    def _refuse_lookup(self, name: str, decision: Decision) -> None:
        # One lookup asks for A and AAAA (and retries): one refusal per name
        # per second, not one per query. Bounded: forgotten past 4096 names.
        now = time.monotonic()
        if now - self._looked_up.get(name, -2.0) < 1.0:
            return
        if len(self._looked_up) >= 4096:
            self._looked_up.clear()
        self._looked_up[name] = now
        self._refuse(name, 53, "dns", decision)

    def datagrams(self) -> asyncio.DatagramProtocol:
        """The protocol of the DNS's UDP socket: one answer per query, to its sender."""
        resolver = self.resolver

        class _Dns(asyncio.DatagramProtocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                self.transport = transport

            def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
                out = resolver.answer(data[:dns.MAX_MESSAGE])
                if out is not None:
                    self.transport.sendto(out, addr)  # type: ignore[attr-defined]

        return _Dns()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, gate: Gate) -> None:
        """Serve one connection from the supervisor."""
        try:
            line = await asyncio.wait_for(reader.readuntil(b"\n"), HEAD_TIMEOUT)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            return
        target = _parse(line, self.keys[0] if self.keys else None)
        if target is None:
            return  # not our supervisor: nothing is said, nothing is answered
        ip, port = target
        yes = b"y" + (self.keys[1].encode() if self.keys else b"")
        if self.open >= self.cap:
            self._say(f"more than {self.cap} captured connections open at once; new ones are refused (EACCES) "
                      "until some close")
            writer.write(b"n")
            return
        if ip == dns.SERVER and port == 53:
            writer.write(yes)
            self.open += 1
            try:
                await dns.serve_tcp(reader, writer, self.resolver)
            finally:
                self.open -= 1
            return
        name_of_fake = None
        mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
        if mapped is not None and mapped in dns.FAKE_NET:
            ip = mapped  # a dual-stack socket (Java's) dialling the DNS's answer: the same destination
        if isinstance(ip, ipaddress.IPv4Address) and ip in dns.FAKE_NET:
            name = self.names.name(ip)
            if name is None:
                self._refuse(ip.compressed, port, PROTOCOL, Decision(
                    False, RULE_REQUEST, f"{ip} stands for no name looked up in this sandbox (look the name up "
                                         "again: the sandbox's DNS gives the address)"))
                writer.write(b"n")
                return
            host = name_of_fake = name
        else:
            mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
            host = ip.compressed if ip.version == 4 else f"[::ffff:{mapped}]" if mapped else f"[{ip.compressed}]"
        decision = gate.rules.check_host(host, port)
        if host != name_of_fake:
            decision = _direct(gate, ip, host, port, decision)
        if not decision.allowed:
            self._refuse(host, port, PROTOCOL, decision)
            writer.write(b"n")
            return
        writer.write(yes)
        self.open += 1
        relay = Relay()
        try:
            try:
                upstream = await gate.open(host, port, PROTOCOL, relay)
            except Refused:
                writer.transport.abort()  # explained by the gate
                return
            except UpstreamError as exc:
                self._say(f"captured connection to {host}:{port} failed: {exc}")
                writer.transport.abort()
                return
            try:
                leftover, eof = adopt_stream(reader)
                relay.start(writer.transport, leftover=leftover, client_eof=eof)  # type: ignore[arg-type]
                await relay.done
            finally:
                relay.abort()
                upstream.abort()
        finally:
            self.open -= 1

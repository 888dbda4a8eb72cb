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
One refusal is answered ``y``: on port 22, when the ``deniedDomains`` entry
has a ``deniedDomainReasons`` reason, the connection carries an SSH
disconnect whose text is the reason (and nothing is dialled), so ``ssh``
prints it; the refusal is recorded and explained as every other.

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
from safebox.proxy.relay import Relay, adopt_stream
from safebox.proxy.rules import (
    RULE_ADDRESSES,
    RULE_ALLOWED,
    RULE_ASK,
    RULE_HOST_MATCH,
    RULE_OPAQUE,
    RULE_REQUEST,
    Decision,
    is_metadata,
)
from safebox.proxy.upstream import Gate, Refused, UpstreamError
from safebox.proxy.verdict import check_name, may_ask, rules_now

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
#: A refusal with a deniedDomainReasons reason on this port is told to ssh as a disconnect.
SSH_PORT = 22


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
    if rules_now(gate).address_grant(ip, port) is not None and decision.allowed:
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
        self.resolver = dns.Resolver(self.names, gate.rules, self._refuse_lookup, self._say, decide=self._lookup)

    def _lookup(self, name: str) -> Decision:
        """Whether the sandbox's DNS answers ``name``: the proxy's lists as
        they are now (live ones change), and a name the proxy would put to
        whoever runs the sandbox gets its address: the question is asked at
        the connect, with the port (Gate.check), as for a CONNECT."""
        gate = self.gate
        decision = dns.dns_decision(rules_now(gate), name)
        if decision.allowed:
            return decision
        if gate.live is not None:
            decision = gate.live.explained(name, None, decision)
        if may_ask(gate, decision):
            return Decision(True, RULE_ASK, f"{name} is asked about at the connect")
        if decision.told:
            # deniedDomainReasons: the name gets its address so that the
            # refusal comes at the connect, where an ssh on port 22 can be
            # told the reason (an SSH disconnect); every other connect to it
            # is refused with EACCES and the line, as any refusal is.
            return Decision(True, decision.rule, f"{name} is refused at the connect, with its reason")
        return decision

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

    @staticmethod
    def _decide(gate: Gate, ip: ipaddress.IPv4Address | ipaddress.IPv6Address, host: str, port: int, *,
                direct: bool) -> Decision:
        """The verdict the supervisor waits for: the proxy's checks on the
        name (proxy/verdict.py: the lists as they are now), or :func:`_direct`'s
        on an address. A connect the proxy would refuse is refused here, or
        closed by :meth:`Gate.open`, which checks again with every address
        check (deniedResolvedAddresses, this host's own addresses, metadata)
        and asks (``on_request``, ``--ask``) when the proxy would."""
        keys = gate.keys
        if keys is not None and keys.refuse_opaque_tunnels:
            # A captured connection is a tunnel the proxy cannot read, like
            # a SOCKS5 one: refused as the proxy path refuses those.
            return Decision(False, RULE_OPAQUE, f"a captured connection (a program that ignores HTTPS_PROXY) "
                                                f"cannot be inspected; {RULE_OPAQUE} is set")
        decision = check_name(gate, host, port)
        if direct:
            return _direct(gate, ip, host, port, decision)
        if (keys is not None and keys.require_host_match and decision.allowed and gate.mitm is not None
                and not gate.mitm.excluded(host, port)):
            # Through the proxy this TLS would be terminated and its requests'
            # Host checked; a captured connection is relayed unread.
            return Decision(False, RULE_HOST_MATCH, f"{host} port {port} is TLS-terminated and {RULE_HOST_MATCH} "
                                                    "is set: its requests are checked only through HTTPS_PROXY")
        if may_ask(gate, decision):
            return Decision(True, RULE_ASK, f"{host} is asked about once connected (Gate.check)")
        return decision

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
        where = self._destination(ip, port)
        if where is None:
            writer.write(b"n")
            return
        ip, host, direct = where
        decision = self._decide(gate, ip, host, port, direct=direct)
        if not decision.allowed:
            self._refuse(host, port, PROTOCOL, decision)
            if decision.told and port == SSH_PORT:
                await self._tell_ssh(reader, writer, yes, decision.told)
                return
            writer.write(b"n")
            return
        writer.write(yes)
        self.open += 1
        try:
            await self._relay(reader, writer, gate, host, port)
        finally:
            self.open -= 1

    def _destination(self, ip: ipaddress.IPv4Address | ipaddress.IPv6Address, port: int
                     ) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, str, bool] | None:
        """(the address, the host to check, whether it is a direct connect)
        for a captured ``ip``; None (refused, said) for an address of the
        fake range that no lookup gave out."""
        mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
        if mapped is not None and mapped in dns.FAKE_NET:
            ip = mapped  # a dual-stack socket (Java's) dialling the DNS's answer: the same destination
        if isinstance(ip, ipaddress.IPv4Address) and ip in dns.FAKE_NET:
            name = self.names.name(ip)
            if name is None:
                self._refuse(ip.compressed, port, PROTOCOL, Decision(
                    False, RULE_REQUEST, f"{ip} stands for no name looked up in this sandbox (look the name up "
                                         "again: the sandbox's DNS gives the address)"))
                return None
            return ip, name, False
        host = ip.compressed if ip.version == 4 else f"[::ffff:{mapped}]" if mapped else f"[{ip.compressed}]"
        return ip, host, True

    async def _tell_ssh(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, yes: bytes,
                        told: str) -> None:
        """A refusal on port 22 whose deniedDomains entry has a reason
        (``deniedDomainReasons``), already recorded and explained: the
        supervisor gets ``yes`` (it reads exactly that), so this connection
        becomes the command's socket, and on it the command's ssh reads an
        SSH server's disconnect whose text is the reason (proxy/netkeys.py),
        as through SOCKS5. Nothing is dialled; the connection is closed
        after it."""
        from safebox.proxy.netkeys import tell_ssh

        self.open += 1
        try:
            await tell_ssh(reader, writer, yes, told)
        finally:
            self.open -= 1

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, gate: Gate, host: str,
                     port: int) -> None:
        """Check ``host:port`` fully and relay the supervisor's connection to it (Gate.open)."""
        relay = Relay()
        try:
            upstream = await gate.open(host, port, PROTOCOL, relay)
        except Refused as exc:  # explained by the gate
            if exc.decision.told and port == SSH_PORT:  # the lists changed since the answer
                from safebox.proxy.netkeys import tell_ssh

                await tell_ssh(reader, writer, b"", exc.decision.told)
                return
            writer.transport.abort()
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

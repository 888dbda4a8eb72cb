"""The sandbox's DNS: answers only from the policy (docs/network.md, "DNS").

Inside, ``/etc/resolv.conf`` names :data:`SERVER`. A TCP connection or a
connected UDP socket to it is captured (``proxy/capture.py``) and served
here, on the proxy's loop. Nothing is ever asked of a real resolver at lookup time:

- a name the policy allows (``network.allowedDomains``, on any port) gets an
  ``A`` record from :data:`FAKE_NET`, one address per name for the run
  (:class:`FakeNames`); a connect to that address is captured and goes to
  the *name* through the filter, which resolves it on the host then and
  checks every address, as for a CONNECT;
- ``AAAA`` and every other type of an allowed name: no records (NOERROR),
  so clients use the IPv4 answer;
- a name the policy refuses: NXDOMAIN at once, the refusal line naming the
  host, a ``network`` event and an audit record (protocol ``dns``).

Bounded: at most :data:`MAX_NAMES` names per run (then SERVFAIL, said
once), :data:`RATE` answers per second with a burst of :data:`BURST` (then
REFUSED, said once), :data:`MAX_MESSAGE` bytes per query; a malformed query
closes its connection.
"""

from __future__ import annotations

import ipaddress
import struct
import time
from collections.abc import Callable

from safebox.proxy._asyncio import asyncio
from safebox.proxy.rules import RULE_ALLOWED, Decision, NetworkRules

__all__ = ["FAKE_NET", "SERVER", "FakeNames", "Resolver", "dns_decision", "serve_tcp"]

#: The addresses that stand for names (RFC 2544's benchmarking range: never
#: a real destination). 198.18.0.0/24 is kept for safebox itself.
FAKE_NET = ipaddress.IPv4Network("198.18.0.0/15")
#: The DNS server the sandbox's resolv.conf names.
SERVER = ipaddress.IPv4Address("198.18.0.53")
_FIRST = int(ipaddress.IPv4Address("198.18.1.1"))
_LAST = int(ipaddress.IPv4Address("198.19.255.254"))
MAX_NAMES = 16384
RATE = 500.0
BURST = 1000.0
MAX_MESSAGE = 4096
IDLE_TIMEOUT = 10.0
TTL = 60

_NOERROR, _FORMERR, _SERVFAIL, _NXDOMAIN, _NOTIMP, _REFUSED = 0, 1, 2, 3, 4, 5
_TYPE_A = 1


class FakeNames:
    """The run's name ↔ address table (proxy loop only)."""

    def __init__(self, limit: int = MAX_NAMES) -> None:
        self.limit = limit
        self._by_name: dict[str, int] = {}
        self._by_ip: dict[int, str] = {}
        self._next = _FIRST

    def address(self, name: str) -> ipaddress.IPv4Address | None:
        """The address standing for ``name`` (made on first use), or None when the table is full."""
        ip = self._by_name.get(name)
        if ip is None:
            if len(self._by_name) >= self.limit or self._next > _LAST:
                return None
            ip = self._next
            self._next += 1
            self._by_name[name] = ip
            self._by_ip[ip] = name
        return ipaddress.IPv4Address(ip)

    def name(self, ip: ipaddress.IPv4Address) -> str | None:
        """The name ``ip`` stands for, or None (an address no lookup gave out)."""
        return self._by_ip.get(int(ip))


def dns_decision(rules: NetworkRules, name: str) -> Decision:
    """Whether ``name`` resolves inside: allowed on some port (an entry
    ``host:22`` lets the name resolve; the port is checked at connect)."""
    decision = rules.check_host(name, None)
    if not decision.allowed and decision.rule == RULE_ALLOWED and "allows it only as" in decision.reason:
        return Decision(True, RULE_ALLOWED, decision.reason)
    return decision


class _Bucket:
    def __init__(self, rate: float = RATE, burst: float = BURST) -> None:
        self.rate, self.burst = rate, burst
        self.tokens = burst
        self.at = time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True


def _question(msg: bytes) -> tuple[str, int, int, int] | None:
    """(name, qtype, qclass, end offset) of the one question, or None when malformed."""
    if len(msg) < 12:
        return None
    _id, flags, qd, _an, _ns, _ar = struct.unpack("!6H", msg[:12])
    if flags & 0x8000 or (flags >> 11) & 0xF or qd != 1:
        return None
    labels: list[str] = []
    pos = 12
    while True:
        if pos >= len(msg):
            return None
        n = msg[pos]
        pos += 1
        if n == 0:
            break
        if n > 63 or pos + n > len(msg):
            return None  # compression pointers have no place in a question
        labels.append(msg[pos:pos + n].decode("latin-1"))
        pos += n
        if pos > 12 + 255:
            return None
    if pos + 4 > len(msg):
        return None
    qtype, qclass = struct.unpack("!HH", msg[pos:pos + 4])
    return ".".join(labels), qtype, qclass, pos + 4


def _reply(msg: bytes, end: int, rcode: int, address: ipaddress.IPv4Address | None = None) -> bytes:
    (qid, flags) = struct.unpack("!HH", msg[:4])
    out_flags = 0x8000 | 0x0400 | (flags & 0x0100) | 0x0080 | rcode  # QR, AA, RD copied, RA
    head = struct.pack("!6H", qid, out_flags, 1, 1 if address is not None else 0, 0, 0)
    body = msg[12:end]
    if address is not None:
        body += struct.pack("!HHHIH", 0xC00C, _TYPE_A, 1, TTL, 4) + address.packed
    return head + body


class Resolver:
    """Answers queries for one run (proxy loop only)."""

    def __init__(self, names: FakeNames, rules: NetworkRules,
                 refuse: Callable[[str, Decision], None], say: Callable[[str], None], *,
                 decide: Callable[[str], Decision] | None = None) -> None:
        self.names = names
        self.rules = rules
        #: The verdict on a name (the capture front end's: the proxy's lists
        #: as they are now); None: :func:`dns_decision` on :attr:`rules`.
        self.decide = decide
        self.refuse = refuse
        self.say = say
        self.bucket = _Bucket()
        self._said: set[str] = set()

    def _once(self, what: str, line: str) -> None:
        if what not in self._said:
            self._said.add(what)
            self.say(line)

    def answer(self, msg: bytes) -> bytes | None:
        """The reply to one query; None for a message that is not one (the connection is closed)."""
        q = _question(msg)
        if q is None:
            return None
        name, qtype, qclass, end = q
        if not self.bucket.take():
            self._once("rate", f"DNS: more than {RATE:.0f} lookups per second; the rest are answered REFUSED")
            return _reply(msg, end, _REFUSED)
        if qclass != 1:
            return _reply(msg, end, _NOTIMP)
        decision = self.decide(name) if self.decide is not None else dns_decision(self.rules, name)
        if not decision.allowed:
            self.refuse(name, decision)
            return _reply(msg, end, _NXDOMAIN)
        if qtype != _TYPE_A:
            return _reply(msg, end, _NOERROR)  # no AAAA: clients use the A answer
        address = self.names.address(name.lower().rstrip("."))
        if address is None:
            self._once("full", f"DNS: more than {self.names.limit} names looked up; new names are answered "
                               "SERVFAIL (connect through HTTPS_PROXY instead)")
            return _reply(msg, end, _SERVFAIL)
        return _reply(msg, end, _NOERROR, address)


async def serve_tcp(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, resolver: Resolver) -> None:
    """DNS over TCP (RFC 7766): length-prefixed queries until the client
    closes, is idle for :data:`IDLE_TIMEOUT` or sends something malformed."""
    while True:
        try:
            (n,) = struct.unpack("!H", await asyncio.wait_for(reader.readexactly(2), IDLE_TIMEOUT))
            if n > MAX_MESSAGE:
                return
            msg = await asyncio.wait_for(reader.readexactly(n), IDLE_TIMEOUT)
        except (asyncio.IncompleteReadError, TimeoutError):
            return
        out = resolver.answer(msg)
        if out is None:
            return
        writer.write(struct.pack("!H", len(out)) + out)
        await writer.drain()

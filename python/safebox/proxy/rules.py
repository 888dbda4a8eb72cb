"""Pure network decisions: which host names, IP literals and resolved addresses
the proxy lets a sandboxed command reach.

Two checks run for every request, in this order:

1. :meth:`NetworkRules.check_host` on the name the client asked for, after
   normalisation (case, one trailing dot, IDNA).  ``deniedDomains`` wins over
   ``allowedDomains``; ``*.example.com`` matches strict subdomains only, never
   the apex; ``*`` in ``deniedDomains`` refuses every host and IP literal.
   IP literals pass only when listed literally in ``allowedDomains``.
   An entry with a ``:port`` suffix (``api.example.com:443``, ``*:22``; srt's
   syntax) matches that destination port only; one without matches every port.
2. :meth:`NetworkRules.check_address` on *every* address the name resolves to
   (DNS rebinding: an allowed name that resolves inward gets nowhere).
   Loopback, private, link-local, CGNAT, multicast, reserved, … are refused
   unless ``allowLocalDestinations`` is set; cloud metadata addresses only
   when listed literally, whatever ``allowLocalDestinations`` says.

The grammar of names and entries is :mod:`safebox.policy.domains`, shared with
``safebox policy check``. Nothing here touches the network or the
filesystem; the tests are tables.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from safebox.policy.domains import (
    DENY_ALL,
    MAX_NAME_LENGTH,
    HostError,
    IPAddress,
    check_pattern,
    normalize_host,
    parse_ip_literal,
)
from safebox.policy.hostport import split_port
from safebox.proxy.addresses import Grant

__all__ = [
    "RULE_ADDRESSES",
    "RULE_ALLOWED",
    "RULE_ASK",
    "RULE_DENIED",
    "RULE_HOST_MATCH",
    "RULE_LEARN",
    "RULE_LOCAL",
    "RULE_OPAQUE",
    "RULE_REQUEST",
    "RULE_RESOLVED",
    "Decision",
    "HostError",
    "NetworkRules",
    "normalize_host",
    "parse_ip_literal",
    "validate_entry",
    "validate_pattern",
    "validate_patterns",
]

#: Policy keys a refusal points at: the key the user would change.
RULE_ALLOWED = "network.allowedDomains"
RULE_DENIED = "network.deniedDomains"
RULE_LOCAL = "network.allowLocalDestinations"
RULE_ADDRESSES = "network.allowedAddresses"
RULE_RESOLVED = "network.deniedResolvedAddresses"
RULE_HOST_MATCH = "network.requireHostMatch"  # proxy/netkeys.py
RULE_OPAQUE = "network.refuseOpaqueTunnels"  # proxy/netkeys.py
#: Not a policy key: the request itself is malformed; no policy change helps.
RULE_REQUEST = "request"
#: Not a policy key: ``safebox exec --learn`` let a name through that no
#: entry allows, to record it (the address checks still apply).
RULE_LEARN = "learn"
#: Not a policy key: whoever runs the sandbox answered when asked
#: (``on_request``, ``safebox exec --ask``; runtime/decisions.py).
RULE_ASK = "ask"

#: Cloud instance-metadata and credential endpoints (AWS/GCP/Azure/OpenStack
#: at 169.254.169.254, AWS IPv6 on Nitro, Alibaba, Azure's WireServer
#: 168.63.129.16, AWS ECS task credentials 169.254.170.2, EKS Pod Identity
#: 169.254.170.23 and fd00:ec2::23).  Credentials live there, so
#: ``allowLocalDestinations`` is not enough: they must be listed literally in
#: ``allowedDomains``.  So must anything else link-local (METADATA_NETWORKS):
#: providers keep adding endpoints there (found in review).
METADATA_ADDRESSES: frozenset[IPAddress] = frozenset(
    {
        ipaddress.ip_address("169.254.169.254"),
        ipaddress.ip_address("fd00:ec2::254"),
        ipaddress.ip_address("fd00:ec2::23"),
        ipaddress.ip_address("100.100.100.200"),
        ipaddress.ip_address("168.63.129.16"),
        # srt 0.0.83's list of platform endpoints outside link-local: Oracle
        # Cloud's 192.0.0.192, GCP's fd20:ce::254, and fd00:c1::a9fe:a9fe,
        # fd00:42::42. Private by class already; listed so that
        # allowLocalDestinations does not open them.
        ipaddress.ip_address("192.0.0.192"),
        ipaddress.ip_address("fd20:ce::254"),
        ipaddress.ip_address("fd00:c1::a9fe:a9fe"),
        ipaddress.ip_address("fd00:42::42"),
    }
)
METADATA_NETWORKS = (ipaddress.ip_network("169.254.0.0/16"), ipaddress.ip_network("fe80::/10"))

_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
_UNIQUE_LOCAL = ipaddress.ip_network("fc00::/7")
_SITE_LOCAL = ipaddress.ip_network("fec0::/10")
_BROADCAST = ipaddress.ip_address("255.255.255.255")


@dataclass(frozen=True)
class Decision:
    """The verdict on one host or address.

    ``rule`` names the policy key to change to get the other verdict
    (:data:`RULE_ALLOWED`, :data:`RULE_DENIED`, :data:`RULE_LOCAL`), or
    :data:`RULE_REQUEST` when the request is malformed.  ``reason`` is one
    human sentence fragment, used in 403 bodies and the audit log.
    """

    allowed: bool
    rule: str
    reason: str
    #: ``deniedDomainReasons``: the reason the user wrote for the entry that
    #: refused (already in ``reason``); the 403's status phrase, and an SSH
    #: client's disconnect text on port 22 (proxy/netkeys.py).
    told: str = ""


def validate_pattern(pattern: str, *, denied: bool = False) -> str:
    """The canonical form of one ``allowedDomains`` (or, with ``denied``,
    ``deniedDomains``) entry; :func:`safebox.policy.domains.check_pattern`."""
    return check_pattern(pattern, denied=denied)


def validate_entry(entry: str, *, denied: bool = False) -> str:
    """:func:`validate_pattern`, by its ``host:port`` name: the canonical
    entry with its optional port (``Example.COM:443`` → ``example.com:443``)."""
    return check_pattern(entry, denied=denied)


# An entry already in canonical form that check_pattern returns unchanged:
# lower-case LDH(+_) labels of at most 63 characters, at least two, the last
# beginning with a letter or "_" (so it cannot read as a number), after an
# optional "*."; no port. With no "xn--" (IDNA) and at most 253 characters,
# check_pattern would return it as it is. One C-level match over the joined
# list of 10,000 entries replaces 10,000 calls (36 ms measured).
_CANONICAL_ENTRY = (r"(?:\*\.)?(?:[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?\.)+"
                    r"[a-z_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")
_CANONICAL_ENTRY_RE = re.compile(_CANONICAL_ENTRY)
_CANONICAL_LIST_RE = re.compile(f"{_CANONICAL_ENTRY}(?:\n{_CANONICAL_ENTRY})*")


def _already_canonical(p: str) -> bool:
    return len(p) <= MAX_NAME_LENGTH and "xn--" not in p and _CANONICAL_ENTRY_RE.fullmatch(p) is not None


def validate_patterns(patterns: tuple[str, ...] | list[str], *, denied: bool = False) -> tuple[str, ...]:
    """``validate_pattern`` of each entry, in order; a list that is already
    canonical (the usual case) is checked in one pass, the others entry by
    entry with a quick test first. Raises HostError for the first bad one."""
    if not patterns:
        return ()
    try:
        joined = "\n".join(patterns)
    except TypeError:  # not all strings: check_pattern says which
        joined = ""
    if (joined and joined.count("\n") == len(patterns) - 1 and "xn--" not in joined
            and max(map(len, patterns)) <= MAX_NAME_LENGTH and _CANONICAL_LIST_RE.fullmatch(joined)):
        return tuple(patterns)
    return tuple(p if isinstance(p, str) and _already_canonical(p) else check_pattern(p, denied=denied)
                 for p in patterns)


class _Index:
    """A list of canonical entries by what they match, in list order, so that
    a lookup costs a few dict probes (one per label of the name) instead of
    a pass over the list (1.6 ms a request with 10,000 entries)."""

    def __init__(self, entries: tuple[str, ...]) -> None:
        self.exact: dict[str, list[tuple[int, int | None, str]]] = {}
        self.suffix: dict[str, list[tuple[int, int | None, str]]] = {}  # ".example.com" for "*.example.com"
        self.anything: list[tuple[int, int | None, str]] = []  # DENY_ALL, with or without a port
        self.ips: list[tuple[IPAddress, int | None]] = []
        for i, e in enumerate(entries):
            pattern, port = _entry(e)
            item = (i, port, e)
            if pattern == DENY_ALL:
                self.anything.append(item)
            elif pattern.startswith("*."):
                self.suffix.setdefault(pattern[1:], []).append(item)
            else:
                self.exact.setdefault(pattern, []).append(item)
                if pattern[-1:].isdigit() or ":" in pattern:
                    try:
                        self.ips.append((ipaddress.ip_address(pattern), port))
                    except ValueError:
                        pass

    def matching(self, name: str) -> list[tuple[int, int | None, str]]:
        """Every entry whose pattern ``_matches`` the canonical ``name``, in list order."""
        found = [*self.anything, *self.exact.get(name, ())]
        dot = name.find(".")
        while dot >= 0:
            found += self.suffix.get(name[dot:], ())
            dot = name.find(".", dot + 1)
        return sorted(found)


@functools.lru_cache(maxsize=1024)
def _entry(canonical: str) -> tuple[str, int | None]:
    """(pattern, port) of a canonical entry; the pattern without brackets."""
    host, port = split_port(canonical)
    return host.strip("[]"), port


def _port_ok(entry_port: int | None, port: int | None, *, deny: bool) -> bool:
    """Whether an entry's port covers the destination ``port``. An unknown
    ``port`` (``None``) is covered by a ported deny entry but never by a
    ported allow entry: when in doubt, refuse."""
    if entry_port is None:
        return True
    if port is None:
        return deny
    return entry_port == port


def _matches(name: str, pattern: str) -> bool:
    """Whether the canonical ``name`` matches the canonical ``pattern``."""
    if pattern == DENY_ALL:
        return True
    if pattern.startswith("*."):
        return name.endswith(pattern[1:])  # ".example.com": strict subdomains
    return name == pattern


def _is_metadata(ip: IPAddress) -> bool:
    return ip in METADATA_ADDRESSES or any(ip in n for n in METADATA_NETWORKS if n.version == ip.version)


def is_metadata(ip: IPAddress) -> bool:
    """A cloud metadata address, or an IPv6 form embedding one."""
    if _is_metadata(ip):
        return True
    return isinstance(ip, ipaddress.IPv6Address) and any(_is_metadata(v4) for v4 in _embedded_ipv4(ip))


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """IPv4 addresses an IPv6 address reaches: mapped (``::ffff:a.b.c.d``),
    compatible (``::a.b.c.d``), NAT64 (``64:ff9b::/96``), 6to4 and Teredo."""
    found: list[ipaddress.IPv4Address] = []
    if ip.ipv4_mapped is not None:
        found.append(ip.ipv4_mapped)
    packed = ip.packed
    if packed[:12] == bytes(12) and int(ip) > 1:
        found.append(ipaddress.IPv4Address(packed[12:]))
    if ip in _NAT64:
        found.append(ipaddress.IPv4Address(packed[12:]))
    if ip.sixtofour is not None:
        found.append(ip.sixtofour)
    if ip.teredo is not None:
        found.extend(ip.teredo)
    return found


def address_class(ip: IPAddress) -> str | None:
    """Name the non-public class of ``ip`` (``"loopback"``, ``"private"``, …),
    or ``None`` for an ordinary public address.  IPv6 forms that embed an
    IPv4 address are classed by the embedded address as well."""
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(ip)
        if embedded:
            return _embedded_class(ip, embedded)
        v6 = _ipv6_class(ip)
        if v6 is not None:
            return v6
    return _shared_class(ip)


def _embedded_class(ip: ipaddress.IPv6Address, embedded: list[ipaddress.IPv4Address]) -> str | None:
    """The class of an IPv6 address that embeds IPv4 ones: theirs."""
    for v4 in embedded:
        inner = address_class(v4)
        if inner is not None:
            return f"{inner} (embedded in {ip.compressed})"
    return None  # a translation of public IPv4 addresses: as public as they are


def _ipv6_class(ip: ipaddress.IPv6Address) -> str | None:
    """The IPv6-only classes the ``is_*`` properties do not name."""
    if ip in _NAT64_LOCAL:
        return "local-use NAT64"
    if ip in _UNIQUE_LOCAL:
        return "private"
    if ip in _SITE_LOCAL:
        return "site-local"
    return None


def _shared_class(ip: IPAddress) -> str | None:
    """The classes both families have, in the order that names the most specific one."""
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    if ip.is_multicast:
        return "multicast"
    if ip == _BROADCAST:
        return "broadcast"
    if isinstance(ip, ipaddress.IPv4Address) and ip in _CGNAT:
        return "shared address space (CGNAT)"
    if ip.is_reserved:
        return "reserved"
    if ip.is_private:
        return "private"
    if not ip.is_global:
        return "special-purpose"
    return None


@dataclass(frozen=True)
class NetworkRules:
    """The network part of a policy, canonicalised once.

    Build it with :meth:`from_policy`; ``check_host`` and ``check_address``
    are pure and cheap enough to call per request.
    """

    allowed: tuple[str, ...]
    denied: tuple[str, ...]
    allow_local_destinations: bool = False
    #: ``--learn``: any name or IP literal not denied passes :meth:`check_host`
    #: (rule :data:`RULE_LEARN`); :meth:`check_address` is unchanged, so
    #: loopback, private and metadata addresses stay refused.
    learn: bool = False
    #: ``network.allowedAddresses`` entries (proxy/addresses.py), validated when the policy was read.
    allowed_addresses: tuple[str, ...] = ()
    #: ``deniedDomainReasons``: canonical deniedDomains entry -> reason.
    reasons: tuple[tuple[str, str], ...] = ()
    #: ``deniedResolvedAddresses``: ranges no resolved address may fall in.
    denied_resolved: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()
    #: This host's interface addresses (proxy/netkeys.py OwnAddresses):
    #: refused like loopback. None: not consulted (unit tests of the table).
    own: Callable[[], frozenset[IPAddress] | None] | None = field(default=None, compare=False)

    @classmethod
    def from_policy(
        cls,
        allowed_domains: tuple[str, ...] | list[str],
        denied_domains: tuple[str, ...] | list[str] = (),
        *,
        allow_local_destinations: bool = False,
        learn: bool = False,
        allowed_addresses: tuple[str, ...] = (),
        reasons: tuple[tuple[str, str], ...] = (),
        denied_resolved: tuple[str, ...] = (),
        own: Callable[[], frozenset[IPAddress] | None] | None = None,
    ) -> NetworkRules:
        """Canonicalise the entries; raises :class:`HostError` naming a bad one."""
        def compiled(key: str, patterns: tuple[str, ...] | list[str]) -> tuple[str, ...]:
            try:
                return validate_patterns(patterns, denied=key == RULE_DENIED)
            except HostError:
                pass  # say which entry: the slow way
            out = []
            for p in patterns:
                try:
                    out.append(check_pattern(p, denied=key == RULE_DENIED))
                except HostError as exc:
                    raise HostError(f"{key} entry {p!r}: {exc}") from None
            return tuple(out)

        return cls(
            allowed=compiled(RULE_ALLOWED, allowed_domains),
            denied=compiled(RULE_DENIED, denied_domains),
            allow_local_destinations=allow_local_destinations,
            learn=learn,
            allowed_addresses=tuple(allowed_addresses),
            reasons=tuple((check_pattern(e, denied=True), r) for e, r in reasons),
            denied_resolved=tuple(ipaddress.ip_network(n, strict=False) for n in denied_resolved),
            own=own,
        )

    def _refused_by(self, entry: str, reason: str) -> Decision:
        """A refusal by the deniedDomains ``entry``, with its deniedDomainReasons text if any."""
        told = dict(self.reasons).get(entry, "")
        if not told:
            return Decision(False, RULE_DENIED, reason)
        from safebox.policy.srtnet import clean_reason

        told = clean_reason(told)
        return Decision(False, RULE_DENIED, f"{reason}: {told}", told=told)

    @functools.cached_property
    def _allowed_index(self) -> _Index:
        return _Index(self.allowed)

    @functools.cached_property
    def _grant(self) -> Grant:
        return Grant(self.allowed_addresses)

    @functools.cached_property
    def _denied_index(self) -> _Index:
        return _Index(self.denied)

    def _literal_ips(self, patterns: tuple[str, ...], port: int | None = None, *,
                     deny: bool = False) -> set[IPAddress]:
        """The IP literals among canonical ``patterns`` (``allowed`` or
        ``denied``) whose port covers ``port``."""
        index = self._denied_index if patterns is self.denied else self._allowed_index
        return {ip for ip, entry_port in index.ips if _port_ok(entry_port, port, deny=deny)}

    def _deny_all(self, port: int | None) -> str | None:
        """The ``*`` (or ``*:port``) entry of ``deniedDomains`` covering ``port``."""
        return next((p for _, entry_port, p in self._denied_index.anything
                     if _port_ok(entry_port, port, deny=True)), None)

    def _other_ports(self, name: str) -> str:
        """The ``allowedDomains`` entries naming ``name`` with a port, for a
        refusal that says which ports are allowed (empty when none)."""
        return ", ".join(repr(p) for _, entry_port, p in self._allowed_index.matching(name) if entry_port is not None)

    def check_host(self, host: str, port: int | None = None) -> Decision:
        """Decide on the host a client asked for, before any resolution.

        ``port`` is the destination port; entries with a ``:port`` suffix
        match only it. ``None`` (unknown) matches no ported allow entry.
        """
        try:
            name = normalize_host(host)
        except HostError as exc:
            return Decision(False, RULE_REQUEST, f"invalid {exc}")  # "invalid host 'a@b': contains userinfo"
        try:
            ip = ipaddress.ip_address(name)
        except ValueError:
            ip = None
        everything = self._deny_all(port)
        if everything is not None:
            # Names and IP literals alike: "refuses everything" (policy-reference.md).
            return self._refused_by(everything, f"{name} matches {everything!r} in {RULE_DENIED}")
        on = f" port {port}" if port is not None else ""
        if ip is not None:
            return self._check_literal(name, ip, port)
        for _, entry_port, p in self._denied_index.matching(name):
            if _port_ok(entry_port, port, deny=True):
                return self._refused_by(p, f"{name} matches {p!r} in {RULE_DENIED}")
        for _, entry_port, p in self._allowed_index.matching(name):
            if _port_ok(entry_port, port, deny=False):
                return Decision(True, RULE_ALLOWED, f"{name} matches {p!r} in {RULE_ALLOWED}")
        if self.learn:
            return Decision(True, RULE_LEARN, f"{name} is allowed while learning (--learn)")
        others = self._other_ports(name)
        if others:
            return Decision(False, RULE_ALLOWED,
                            f"{name}{on} is not allowed: {RULE_ALLOWED} allows it only as {others}")
        return Decision(False, RULE_ALLOWED, f"{name} is not in {RULE_ALLOWED}")

    def address_grant(self, ip: IPAddress, port: int | None) -> str | None:
        """The ``allowedAddresses`` entry covering ``ip`` on ``port``; never one for a metadata address."""
        if not self.allowed_addresses or _is_metadata(ip):
            return None
        return self._grant.match(ip, port)

    def _check_literal(self, name: str, ip: IPAddress, port: int | None) -> Decision:
        """:meth:`check_host` for an IP literal."""
        on = f" port {port}" if port is not None else ""
        hit = next((p for _, entry_port, p in self._denied_index.matching(name)
                    if _port_ok(entry_port, port, deny=True)), None)
        if hit is not None or ip in self._literal_ips(self.denied, port, deny=True):
            return self._refused_by(hit or "", f"{name} is listed in {RULE_DENIED}")
        if ip in self._literal_ips(self.allowed, port):
            return Decision(True, RULE_ALLOWED, f"{name} is listed literally in {RULE_ALLOWED}")
        entry = self.address_grant(ip, port)
        if entry is not None:
            return Decision(True, RULE_ADDRESSES, f"{name} is covered by {entry!r} in {RULE_ADDRESSES}")
        if self.learn:
            return Decision(True, RULE_LEARN, f"{name} is allowed while learning (--learn)")
        others = self._other_ports(name)
        if others:
            return Decision(False, RULE_ALLOWED,
                            f"{name}{on} is not allowed: {RULE_ALLOWED} allows it only as {others}")
        return Decision(
            False, RULE_ALLOWED,
            f"IP address {name} is not listed literally in {RULE_ALLOWED}",
        )

    def literal_refusal(self, host: str, port: int) -> Decision | None:
        """The refusal of an IP-literal ``host`` whose address no answer may
        open (loopback, private, metadata, this host's own, in any spelling,
        e.g. ``::ffff:127.0.0.1``), or None: a name or a public literal, asked
        about as any host (runtime/decisions.py). An answer remembered would list the
        literal, and a literal entry passes whatever its class (found in review)."""
        literal = parse_ip_literal(host)
        local = self.check_address(literal, host=host, port=port) if literal is not None else None
        return local if local is not None and not local.allowed else None

    def check_address(self, ip: IPAddress, *, host: str = "", port: int | None = None) -> Decision:
        """Decide on one address a host resolved to (or an IP literal).

        An address listed literally in ``allowedDomains`` (for ``port``, when
        the entry has one) is an explicit grant and passes whatever its class;
        a listed ``deniedDomains`` literal never passes.  ``host`` only
        enriches the reason.
        """
        via = f"{host} resolves to " if host and host != ip.compressed else ""
        everything = self._deny_all(port)
        if everything is not None:  # check_host refused already; kept for callers that skip it
            return Decision(False, RULE_DENIED, f"{via}{ip.compressed} matches {everything!r} in {RULE_DENIED}")
        embedded = _embedded_ipv4(ip) if isinstance(ip, ipaddress.IPv6Address) else []
        # A denied IPv4 literal is denied in every form an IPv6 answer can
        # carry it (::ffff:a.b.c.d, NAT64, 6to4): the dual-stack socket
        # reaches the same host (found in review).
        denied = self._literal_ips(self.denied, port, deny=True)
        hit = next((a for a in (ip, *embedded) if a in denied), None)
        if hit is not None:
            entry = next((e for _, entry_port, e in self._denied_index.exact.get(hit.compressed, ())
                          if _port_ok(entry_port, port, deny=True)), "")
            return self._refused_by(entry, f"{via}{ip.compressed}, {hit.compressed} is listed in {RULE_DENIED}")
        literal = self._literal_ips(self.allowed, port)
        if ip in literal:
            return Decision(True, RULE_ALLOWED, f"{ip.compressed} is listed literally in {RULE_ALLOWED}")
        listed = next((f"{a.compressed} in {n.compressed}" for a in (ip, *embedded) for n in self.denied_resolved
                       if a.version == n.version and a in n), None)
        if listed is not None:
            return Decision(False, RULE_RESOLVED, f"{via}{ip.compressed}, {listed} is listed in {RULE_RESOLVED}")
        if _is_metadata(ip) or any(_is_metadata(v4) for v4 in embedded):
            return Decision(
                False, RULE_ALLOWED,
                f"{via}{ip.compressed}, a cloud metadata address; it is reachable only when "
                f"listed literally in {RULE_ALLOWED}",
            )
        granted = self._grant.match(ip, port) if self.allowed_addresses else None
        if granted is not None:
            return Decision(True, RULE_ADDRESSES, f"{via}{ip.compressed}, covered by {granted!r} in {RULE_ADDRESSES}")
        cls = address_class(ip)
        if cls is None and self.own is not None:
            own = self.own()
            if own is None or any(a in own for a in (ip, *embedded)):
                # A service bound to 0.0.0.0 answers on this host's public
                # address exactly as on loopback (srt's check; issue 27).
                # Addresses never read: every one may be this host's.
                what = ("an address of this host's own interfaces" if own is not None
                        else "possibly this host's own (its interface addresses could not be read)")
                if self.allow_local_destinations:
                    return Decision(True, RULE_LOCAL, f"{via}{ip.compressed} ({what}); {RULE_LOCAL} is set")
                return Decision(False, RULE_LOCAL,
                                f"{via}{ip.compressed}, {what}; local destinations need {RULE_LOCAL}")
        if cls is None:
            return Decision(True, RULE_ALLOWED, f"{via}{ip.compressed}, a public address")
        if self.allow_local_destinations:
            return Decision(True, RULE_LOCAL, f"{via}{ip.compressed} ({cls}); {RULE_LOCAL} is set")
        return Decision(
            False, RULE_LOCAL,
            f"{via}{ip.compressed}, a {cls} address; local destinations need {RULE_LOCAL}",
        )

    def check_addresses(self, addresses: list[IPAddress], *, host: str = "", port: int | None = None) -> Decision:
        """Check every address; the first refusal wins, else the first grant."""
        if not addresses:
            return Decision(False, RULE_REQUEST, f"{host} resolved to no address")
        verdicts = [self.check_address(a, host=host, port=port) for a in addresses]
        for d in verdicts:
            if not d.allowed:
                return d
        return verdicts[0]

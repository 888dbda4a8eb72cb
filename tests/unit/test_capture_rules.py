"""The pure parts of capture: ``network.allowedAddresses`` in the rules, and
the sandbox's DNS answering bytes (proxy/addresses.py, proxy/dns.py)."""

from __future__ import annotations

import ipaddress
import os
import struct

import pytest

from safebox.policy.address_entries import parse_address_entry
from safebox.proxy import dns
from safebox.proxy.rules import Decision, NetworkRules


def _rules(**kw: object) -> NetworkRules:
    return NetworkRules.from_policy(["db.example:5432", "git.example"], ["bad.git.example"], **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(("entry", "net", "port"), [
    ("10.0.0.0/24", "10.0.0.0/24", None), ("10.0.0.5:5432", "10.0.0.5/32", 5432),
    ("127.0.0.1/32:2222", "127.0.0.1/32", 2222), ("fd00::/8", "fd00::/8", None),
    ("[fd00::5]:5432", "fd00::5/128", 5432), ("[fd00::/64]:443", "fd00::/64", 443),
])
def test_an_address_entry_is_a_cidr_with_an_optional_port(entry: str, net: str, port: int | None) -> None:
    assert parse_address_entry(entry) == (ipaddress.ip_network(net), port)


@pytest.mark.parametrize("entry", ["", "10.0.0.5/24", "10.0.0.0/33", "10.0.0.0:0", "10.0.0.0:x", "[fd00::1",
                                   "[fd00::1]5", "db.example", " 10.0.0.1"])
def test_a_bad_address_entry_is_refused(entry: str) -> None:
    with pytest.raises(ValueError):
        parse_address_entry(entry)


def test_an_address_entry_lets_a_private_address_through_on_its_port_only() -> None:
    rules = _rules(allowed_addresses=("10.0.0.0/24:5432",))
    ip = ipaddress.ip_address("10.0.0.7")
    assert rules.check_address(ip, host="db.example", port=5432).allowed
    assert not rules.check_address(ip, host="db.example", port=5433).allowed
    assert not _rules().check_address(ip, host="db.example", port=5432).allowed  # control: no entry
    assert rules.check_host("10.0.0.7", 5432).allowed  # a literal the command dialled
    assert not rules.check_host("10.0.0.7", 22).allowed


def test_an_address_entry_never_covers_metadata_or_an_ipv6_form_of_its_addresses() -> None:
    rules = _rules(allowed_addresses=("169.254.0.0/16", "10.0.0.0/8"))
    meta = rules.check_address(ipaddress.ip_address("169.254.169.254"), port=80)
    assert not meta.allowed and "metadata" in meta.reason
    assert not rules.check_host("169.254.169.254", 80).allowed  # a literal the command dialled, too
    assert not rules.check_address(ipaddress.ip_address("::ffff:10.0.0.5"), port=80).allowed


def _query(name: str, qtype: int = 1, qid: int = 7) -> bytes:
    labels = b"".join(bytes([len(p)]) + p.encode() for p in name.split("."))
    return struct.pack("!6H", qid, 0x0100, 1, 0, 0, 0) + labels + b"\0" + struct.pack("!HH", qtype, 1)


def _resolver(refused: list[tuple[str, Decision]], said: list[str], limit: int = dns.MAX_NAMES) -> dns.Resolver:
    return dns.Resolver(dns.FakeNames(limit), _rules(), lambda n, d: refused.append((n, d)), said.append)


def test_the_dns_answers_an_allowed_name_from_the_fake_range_and_refuses_others_naming_them() -> None:
    refused: list[tuple[str, Decision]] = []
    r = _resolver(refused, [])
    out = r.answer(_query("git.example"))
    assert out is not None and out[3] & 0xF == 0 and struct.unpack("!H", out[6:8]) == (1,)
    assert ipaddress.IPv4Address(out[-4:]) in dns.FAKE_NET
    assert r.answer(_query("git.example")) == out  # one address per name for the run
    assert r.answer(_query("db.example"))[-4:] != out[-4:]  # type: ignore[index]  # allowed on one port: resolves
    nx = r.answer(_query("evil.example"))
    assert nx is not None and nx[3] & 0xF == 3  # NXDOMAIN
    den = r.answer(_query("bad.git.example"))
    assert den is not None and den[3] & 0xF == 3
    assert [(n, d.rule) for n, d in refused] == [("evil.example", "network.allowedDomains"),
                                                 ("bad.git.example", "network.deniedDomains")]
    aaaa = r.answer(_query("git.example", qtype=28))
    assert aaaa is not None and aaaa[3] & 0xF == 0 and struct.unpack("!H", aaaa[6:8]) == (0,)


def test_garbage_is_never_answered_and_never_raises() -> None:
    r = _resolver([], [])
    rng = os.urandom(1 << 16)
    for i in range(0, len(rng) - 64, 64):
        r.answer(rng[i:i + (rng[i] % 64)])  # must not raise
    assert r.answer(b"") is None
    assert r.answer(_query("git.example")[:-2]) is None  # truncated question
    looped = struct.pack("!6H", 1, 0x0100, 1, 0, 0, 0) + b"\xc0\x0c" + struct.pack("!HH", 1, 1)
    assert r.answer(looped) is None  # a compression pointer in a question


def test_the_name_table_is_bounded_and_says_so_once() -> None:
    said: list[str] = []
    r = _resolver([], said, limit=3)
    rules = NetworkRules.from_policy(["*.example.org"])
    r.rules = rules
    codes = [r.answer(_query(f"n{i}.example.org"))[3] & 0xF for i in range(6)]  # type: ignore[index]
    assert codes == [0, 0, 0, 2, 2, 2]  # SERVFAIL past the table
    assert len(said) == 1 and "more than 3 names" in said[0]


def test_answers_are_rate_limited_and_the_limit_is_said_once() -> None:
    said: list[str] = []
    r = _resolver([], said)
    codes = [r.answer(_query("git.example"))[3] & 0xF for _ in range(int(dns.BURST) * 2)]  # type: ignore[index]
    assert codes.count(5) >= dns.BURST / 2 and codes[0] == 0  # REFUSED past the burst
    assert len(said) == 1 and "lookups per second" in said[0]


class _Mitm:
    """network.tlsTerminate's exclusion list, as Capture._decide reads it."""

    def __init__(self, excluded: tuple[str, ...] = ()) -> None:
        self.names = excluded

    def excluded(self, host: str, _port: int) -> bool:
        return host in self.names


class _Ask:
    """Stands for runtime/decisions.py's Asker: Capture._decide only looks whether there is one."""


def _decide(host: str, *, direct: bool = False, **gate: object) -> Decision:
    from safebox.proxy.capture import Capture
    from safebox.proxy.upstream import Gate

    g = Gate(NetworkRules.from_policy(["git.example"], ["bad.example"]), **gate)  # type: ignore[arg-type]
    ip = ipaddress.ip_address("127.0.0.1" if direct else "198.18.1.1")
    return Capture._decide(g, ip, host, 443, direct=direct)


def test_a_captured_connect_meets_the_keys_that_refuse_it_through_the_proxy() -> None:
    from safebox.policy.effective import NetKeys

    assert _decide("git.example").allowed  # the control: no key set
    opaque = _decide("git.example", keys=NetKeys(refuse_opaque_tunnels=True))
    assert (opaque.allowed, opaque.rule) == (False, "network.refuseOpaqueTunnels")
    match = NetKeys(require_host_match=True)
    host = _decide("git.example", keys=match, mitm=_Mitm())
    assert (host.allowed, host.rule) == (False, "network.requireHostMatch")  # terminated through the proxy
    assert _decide("git.example", keys=match, mitm=_Mitm(("git.example",))).allowed  # excluded: a plain tunnel
    assert _decide("git.example", keys=match).allowed  # nothing is terminated


def test_a_name_no_entry_allows_is_asked_about_at_the_connect_unless_strict_allowlist_or_denied() -> None:
    from safebox.policy.effective import NetKeys

    assert not _decide("other.example").allowed  # the control: nobody to ask
    asked = _decide("other.example", ask=_Ask())
    assert (asked.allowed, asked.rule) == (True, "ask")  # Gate.open asks, with the port
    strict = _decide("other.example", ask=_Ask(), keys=NetKeys(strict_allowlist=True))
    assert (strict.allowed, strict.rule) == (False, "network.allowedDomains")
    denied = _decide("bad.example", ask=_Ask())
    assert (denied.allowed, denied.rule) == (False, "network.deniedDomains")
    direct = _decide("127.0.0.1", direct=True, ask=_Ask())  # an address is never asked about
    assert (direct.allowed, direct.rule) == (False, "network.allowedAddresses")

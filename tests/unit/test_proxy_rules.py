"""Decision tables for the proxy's domain and address rules (pure, no network)."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from safebox.proxy.rules import (
    RULE_ALLOWED,
    RULE_DENIED,
    RULE_LOCAL,
    RULE_REQUEST,
    Decision,
    HostError,
    NetworkRules,
    normalize_host,
    validate_pattern,
)

RULES = NetworkRules.from_policy(
    ["allowed.com", "*.wild.com", "x.com", "bücher.de", "203.0.113.7", "[2001:db8::1]", "169.254.169.254"],
    ["bad.allowed.com", "*.deny.wild.com", "203.0.113.8"],
)


@pytest.mark.parametrize(
    ("host", "allowed", "rule"),
    [
        ("allowed.com", True, RULE_ALLOWED),
        ("ALLOWED.COM", True, RULE_ALLOWED),
        ("EXAMPLE.com.".replace("EXAMPLE", "Allowed"), True, RULE_ALLOWED),
        ("allowed.com.", True, RULE_ALLOWED),
        ("allowed.com..", False, RULE_REQUEST),
        ("sub.allowed.com", False, RULE_ALLOWED),  # exact entry: no subdomains
        ("allowed.com.evil.com", False, RULE_ALLOWED),
        ("evilallowed.com", False, RULE_ALLOWED),
        ("evil.com@allowed.com", False, RULE_REQUEST),
        ("allowed.com@evil.com", False, RULE_REQUEST),
        ("allowed.com#frag", False, RULE_REQUEST),
        ("allowed.com:443", False, RULE_REQUEST),
        ("allowed.com/x", False, RULE_REQUEST),
        ("allowed%2ecom", False, RULE_REQUEST),
        ("allowed .com", False, RULE_REQUEST),
        ("allowed.com\x00.evil", False, RULE_REQUEST),
        (".allowed.com", False, RULE_REQUEST),
        ("", False, RULE_REQUEST),
        ("a" * 64 + ".com", False, RULE_REQUEST),
        (("a" * 60 + ".") * 5 + "com", False, RULE_REQUEST),
        ("wild.com", False, RULE_ALLOWED),  # *.x.com does not match the apex
        ("a.wild.com", True, RULE_ALLOWED),
        ("a.b.wild.com", True, RULE_ALLOWED),
        ("A.Wild.Com.", True, RULE_ALLOWED),
        ("xwild.com", False, RULE_ALLOWED),
        ("x.com", True, RULE_ALLOWED),
        ("a.x.com", False, RULE_ALLOWED),
        ("bad.allowed.com", False, RULE_DENIED),
        ("deny.wild.com", True, RULE_ALLOWED),  # *.deny.wild.com: not the apex
        ("a.deny.wild.com", False, RULE_DENIED),  # deny wins over *.wild.com
        ("bücher.de", True, RULE_ALLOWED),
        ("BÜCHER.de", True, RULE_ALLOWED),
        ("xn--bcher-kva.de", True, RULE_ALLOWED),
        ("xn--zz.de", False, RULE_REQUEST),  # undecodable punycode
        ("büc her.de", False, RULE_REQUEST),
        ("203.0.113.7", True, RULE_ALLOWED),
        ("203.0.113.8", False, RULE_DENIED),
        ("203.0.113.9", False, RULE_ALLOWED),  # IP literal not listed
        ("[2001:db8::1]", True, RULE_ALLOWED),
        ("2001:db8::1", True, RULE_ALLOWED),
        ("2001:DB8:0::1", True, RULE_ALLOWED),
        ("[2001:db8::2]", False, RULE_ALLOWED),
        ("169.254.169.254", True, RULE_ALLOWED),  # metadata, listed literally
        ("127.0.0.1", False, RULE_ALLOWED),
        ("[::ffff:127.0.0.1]", False, RULE_ALLOWED),
        ("[::1]", False, RULE_ALLOWED),
        ("0x7f.1", False, RULE_REQUEST),
        ("0x7f000001", False, RULE_REQUEST),
        ("2130706433", False, RULE_REQUEST),
        ("127.1", False, RULE_REQUEST),
        ("0177.0.0.1", False, RULE_REQUEST),
        ("127.000.000.001", False, RULE_REQUEST),
        ("1.2.3.4.5", False, RULE_REQUEST),
        ("256.1.1.1", False, RULE_REQUEST),
        ("allowed.com.0x7f", False, RULE_REQUEST),
        ("[fe80::1%eth0]", False, RULE_REQUEST),
        ("[127.0.0.1]", False, RULE_REQUEST),
        ("[::1", False, RULE_REQUEST),
        ("::1]", False, RULE_REQUEST),
    ],
)
def test_check_host_decision_table(host: str, allowed: bool, rule: str) -> None:
    d = RULES.check_host(host)
    assert (d.allowed, d.rule) == (allowed, rule), d


LOCAL = [
    "127.0.0.1", "127.255.0.1", "10.0.0.1", "172.16.5.5", "192.168.1.1",
    "0.0.0.0", "224.0.0.1", "239.255.255.250", "255.255.255.255", "100.64.0.1",
    "100.127.255.254", "240.0.0.1", "192.0.2.1", "198.18.0.1",
    "::1", "::", "fc00::1", "fd12:3456::1", "ff02::1", "fec0::1",
    "::ffff:127.0.0.1", "::ffff:10.0.0.1", "::127.0.0.1", "64:ff9b::10.0.0.1",
    "64:ff9b::7f00:1", "2002:7f00:1::1", "2002:c0a8:101::1",
]
PUBLIC = ["8.8.8.8", "1.1.1.1", "100.128.0.1", "2606:4700:4700::1111", "64:ff9b::8.8.8.8", "::ffff:8.8.8.8"]
# Metadata and credential endpoints, and everything link-local around them
# (ECS task credentials, EKS Pod Identity, Azure WireServer: found in review).
METADATA = ["169.254.169.254", "fd00:ec2::254", "100.100.100.200", "::ffff:169.254.169.254",
            "64:ff9b::169.254.169.254", "169.254.170.2", "169.254.170.23", "fd00:ec2::23", "168.63.129.16",
            "169.254.1.1", "fe80::1"]


@pytest.mark.parametrize("addr", LOCAL)
def test_local_addresses_are_refused_without_allow_local(addr: str) -> None:
    rules = NetworkRules.from_policy(["example.com"])
    d = rules.check_address(ipaddress.ip_address(addr), host="example.com")
    assert not d.allowed and d.rule == RULE_LOCAL, d
    assert "example.com resolves to" in d.reason


@pytest.mark.parametrize("addr", LOCAL)
def test_local_addresses_pass_with_allow_local(addr: str) -> None:
    rules = NetworkRules.from_policy(["example.com"], allow_local_destinations=True)
    d = rules.check_address(ipaddress.ip_address(addr))
    assert d.allowed and d.rule == RULE_LOCAL


@pytest.mark.parametrize("addr", PUBLIC)
def test_public_addresses_pass(addr: str) -> None:
    d = NetworkRules.from_policy(["example.com"]).check_address(ipaddress.ip_address(addr))
    assert d.allowed and d.rule == RULE_ALLOWED


@pytest.mark.parametrize("addr", METADATA)
@pytest.mark.parametrize("allow_local", [False, True])
def test_metadata_addresses_need_a_literal_entry_even_with_allow_local(addr: str, allow_local: bool) -> None:
    rules = NetworkRules.from_policy(["example.com"], allow_local_destinations=allow_local)
    d = rules.check_address(ipaddress.ip_address(addr), host="example.com")
    assert not d.allowed and d.rule == RULE_ALLOWED
    assert "metadata" in d.reason


def test_metadata_address_listed_literally_passes() -> None:
    rules = NetworkRules.from_policy(["169.254.169.254"])
    assert rules.check_address(ipaddress.ip_address("169.254.169.254")).allowed
    assert rules.check_host("169.254.169.254").allowed


def test_every_address_is_checked_and_one_local_address_refuses_the_name() -> None:
    rules = NetworkRules.from_policy(["rebind.example"])
    addrs = [ipaddress.ip_address("8.8.8.8"), ipaddress.ip_address("127.0.0.1")]
    d = rules.check_addresses(addrs, host="rebind.example")
    assert not d.allowed and d.rule == RULE_LOCAL and "127.0.0.1" in d.reason
    assert not rules.check_addresses([], host="x").allowed
    assert rules.check_addresses(addrs[:1], host="rebind.example").allowed


def test_denied_literal_address_wins_after_resolution() -> None:
    rules = NetworkRules.from_policy(["a.example"], ["8.8.8.8"])
    d = rules.check_address(ipaddress.ip_address("8.8.8.8"), host="a.example")
    assert not d.allowed and d.rule == RULE_DENIED


def test_decision_is_frozen() -> None:
    d = Decision(True, RULE_ALLOWED, "x")
    with pytest.raises(AttributeError):
        d.allowed = False  # type: ignore[misc]


@pytest.mark.parametrize(
    ("pattern", "canonical"),
    [("Example.COM.", "example.com"), ("*.Example.com", "*.example.com"), ("[::1]", "::1"),
     ("bücher.de", "xn--bcher-kva.de"), ("1.2.3.4", "1.2.3.4")],
)
def test_validate_pattern_canonicalises(pattern: str, canonical: str) -> None:
    assert validate_pattern(pattern) == canonical


@pytest.mark.parametrize("pattern", ["*", "*.", "a.*.com", "*example.com", "*.1.2.3.4", "**.a.com", "a@b.com", "127.1", ""])
def test_validate_pattern_rejects(pattern: str) -> None:
    with pytest.raises(HostError):
        validate_pattern(pattern)


@given(st.text(max_size=80))
@settings(max_examples=300, deadline=None)
def test_normalize_host_never_crashes_and_output_is_clean(text: str) -> None:
    try:
        out = normalize_host(text)
    except HostError:
        return
    assert out.isascii() and out == out.lower() and not out.endswith(".")
    assert not any(c in out for c in "@#/?% \x00") and len(out) <= 253
    assert normalize_host(out) == out  # idempotent


@pytest.mark.parametrize("answer", ["93.184.216.34", "::ffff:93.184.216.34", "64:ff9b::93.184.216.34",
                                    "2002:5db8:d822::1"])
def test_a_denied_ipv4_literal_is_denied_in_every_form_an_ipv6_answer_carries_it(answer: str) -> None:
    """An AAAA answer ::ffff:A.B.C.D reaches A.B.C.D through the dual-stack
    socket (found in review). Control: another address passes."""
    rules = NetworkRules.from_policy(["*.example.com"], ["93.184.216.34"])
    d = rules.check_address(ipaddress.ip_address(answer), host="www.example.com")
    assert not d.allowed and d.rule == RULE_DENIED, d
    assert "93.184.216.34 is listed in network.deniedDomains" in d.reason
    assert rules.check_address(ipaddress.ip_address("::ffff:93.184.216.35"), host="www.example.com").allowed

"""``host:port`` entries in ``allowedDomains``/``deniedDomains`` (srt's syntax):
the grammar (policy check and proxy agree) and the decisions (pure)."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from safebox.policy.hostport import PortError, join_port, split_port
from safebox.proxy.rules import RULE_ALLOWED, RULE_DENIED, HostError, NetworkRules, validate_entry


@pytest.mark.parametrize(("entry", "split"), [
    ("api.example.com:443", ("api.example.com", 443)),
    ("*.example.com:8443", ("*.example.com", 8443)),
    ("[2001:db8::1]:443", ("[2001:db8::1]", 443)),
    ("1.2.3.4:22", ("1.2.3.4", 22)),
    ("localhost:1", ("localhost", 1)),
    ("localhost:65535", ("localhost", 65535)),
    ("example.com", ("example.com", None)),
    ("[2001:db8::1]", ("[2001:db8::1]", None)),
    # A bare IPv6 address never carries a port: 2001:db8::1:443 is an address.
    ("2001:db8::1:443", ("2001:db8::1:443", None)),
    # Not a port: left for the host check to name ("not a domain name").
    ("http://x.com", ("http://x.com", None)),
    ("x.com:", ("x.com:", None)),
    ("x.com:https", ("x.com:https", None)),
    ("[::1]x", ("[::1]x", None)),
])
def test_split_port_takes_only_a_numeric_suffix(entry: str, split: tuple[str, int | None]) -> None:
    assert split_port(entry) == split


@pytest.mark.parametrize("entry", ["x.com:0", "x.com:65536", "x.com:000443", "[::1]:99999"])
def test_split_port_refuses_ports_out_of_range(entry: str) -> None:
    with pytest.raises(PortError, match="out of range"):
        split_port(entry)


@pytest.mark.parametrize(("entry", "canonical"), [
    ("API.Example.COM:443", "api.example.com:443"),
    ("*.Example.com:8443", "*.example.com:8443"),
    ("[2001:DB8:0::1]:443", "[2001:db8::1]:443"),
    ("bücher.de:80", "xn--bcher-kva.de:80"),
    ("example.com", "example.com"),
])
def test_the_proxy_canonicalises_entries_with_their_port(entry: str, canonical: str) -> None:
    assert validate_entry(entry) == canonical
    assert split_port(canonical)[1] == split_port(entry)[1]


@pytest.mark.parametrize("entry", ["x.com:0", "*:443", "a.*.com:443", "x.com:https", "[zz]:443"])
def test_the_proxy_refuses_bad_entries_with_ports(entry: str) -> None:
    with pytest.raises(HostError):
        validate_entry(entry)


@given(st.text(max_size=40))
@settings(max_examples=400, deadline=None, database=None)  # no example database: runs as any user
def test_policy_check_and_the_proxy_accept_the_same_entries(entry: str) -> None:
    """One grammar: what `safebox policy check` accepts the proxy accepts
    (found in review before: two validators disagreed)."""
    from safebox.policy.model import _check_domain_pattern

    try:
        _check_domain_pattern(entry)
        model_ok = True
    except ValueError:
        model_ok = False
    if model_ok:
        validate_entry(entry)  # must not raise


@given(st.sampled_from(["a.com", "*.a.com", "1.2.3.4", "2001:db8::1"]), st.integers(1, 65535))
@settings(database=None)
def test_join_port_inverts_split_port(host: str, port: int) -> None:
    assert split_port(join_port(host, port)) == (host if ":" not in host else f"[{host}]", port)


RULES = NetworkRules.from_policy(
    ["api.example.com:443", "*.pkg.example:8443", "open.example.com", "203.0.113.7:22", "[2001:db8::7]:443",
     "twice.example:80", "twice.example:8080"],
    ["open.example.com:25", "bad.pkg.example:8443"],
)


@pytest.mark.parametrize(("host", "port", "allowed", "rule"), [
    ("api.example.com", 443, True, RULE_ALLOWED),
    ("api.example.com", 80, False, RULE_ALLOWED),
    ("api.example.com", None, False, RULE_ALLOWED),  # unknown port: no ported grant
    ("a.pkg.example", 8443, True, RULE_ALLOWED),
    ("a.pkg.example", 443, False, RULE_ALLOWED),
    ("pkg.example", 8443, False, RULE_ALLOWED),  # *. is strict subdomains, as without ports
    ("bad.pkg.example", 8443, False, RULE_DENIED),
    ("bad.pkg.example", 9000, False, RULE_ALLOWED),  # the deny names 8443 only; nothing allows 9000
    ("open.example.com", 443, True, RULE_ALLOWED),
    ("open.example.com", 25, False, RULE_DENIED),
    ("open.example.com", None, False, RULE_DENIED),  # unknown port: a ported deny applies
    ("203.0.113.7", 22, True, RULE_ALLOWED),
    ("203.0.113.7", 23, False, RULE_ALLOWED),
    ("[2001:db8::7]", 443, True, RULE_ALLOWED),
    ("[2001:db8::7]", 80, False, RULE_ALLOWED),
    ("twice.example", 80, True, RULE_ALLOWED),
    ("twice.example", 8080, True, RULE_ALLOWED),
    ("twice.example", 443, False, RULE_ALLOWED),
])
def test_a_ported_entry_matches_only_its_port(host: str, port: int | None, allowed: bool, rule: str) -> None:
    d = RULES.check_host(host, port)
    assert (d.allowed, d.rule) == (allowed, rule), d


def test_the_refusal_names_the_ports_that_are_allowed() -> None:
    d = RULES.check_host("api.example.com", 80)
    assert d.reason == ("api.example.com port 80 is not allowed: network.allowedDomains allows it only as "
                        "'api.example.com:443'")
    d = RULES.check_host("twice.example", 443)
    assert "only as 'twice.example:80', 'twice.example:8080'" in d.reason


def test_an_entry_without_a_port_still_matches_every_port() -> None:
    rules = NetworkRules.from_policy(["example.com"])
    assert all(rules.check_host("example.com", p).allowed for p in (1, 80, 443, 65535))


def test_a_literal_address_grant_with_a_port_covers_only_that_port() -> None:
    rules = NetworkRules.from_policy(["127.0.0.1:8080"])
    ip = ipaddress.ip_address("127.0.0.1")
    assert rules.check_address(ip, port=8080).allowed
    d = rules.check_address(ip, port=9090)
    assert not d.allowed and "loopback" in d.reason  # no explicit grant: the class decides


def test_a_denied_literal_with_a_port_denies_only_that_port() -> None:
    rules = NetworkRules.from_policy(["*.example.com"], ["93.184.216.34:25"])
    ip = ipaddress.ip_address("93.184.216.34")
    assert not rules.check_address(ip, host="mx.example.com", port=25).allowed
    assert rules.check_address(ip, host="mx.example.com", port=443).allowed


def test_deny_all_with_a_port_refuses_every_host_on_that_port_only() -> None:
    """srt: `*:22` in deniedDomains (SSH nowhere, the rest as allowed)."""
    rules = NetworkRules.from_policy(["example.com", "203.0.113.7"], ["*:22"])
    assert rules.denied == ("*:22",)
    for host in ("example.com", "203.0.113.7"):
        d = rules.check_host(host, 22)
        assert (d.allowed, d.rule) == (False, RULE_DENIED) and "'*:22'" in d.reason
        assert rules.check_host(host, 443).allowed
    assert not rules.check_address(ipaddress.ip_address("203.0.113.7"), port=22).allowed


def test_the_stderr_explanation_of_a_wrong_port_suggests_the_host_port_entry() -> None:
    from safebox.proxy.explain import refusal_line

    d = RULES.check_host("api.example.com", 80)
    line = refusal_line("api.example.com", 80, "connect", d)
    assert line.endswith("fix: --allow-domain api.example.com:80 (network.allowedDomains in a policy file)\n"), line

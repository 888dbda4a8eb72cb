"""One grammar for domain patterns: ``safebox policy check`` (the pydantic
model) and ``safebox exec`` (the proxy's rule compilation) accept the same
entries, with the same meaning (issue 11 item 7: ``deniedDomains: ["*"]``
passed the check, then every run failed with "invalid network domain
pattern", because the two had validators of their own)."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from safebox.errors import PolicyError, ProxyError
from safebox.policy.domains import DENY_ALL, HostError, check_pattern
from safebox.policy.hostport import split_port
from safebox.policy.load import Layer, validate_layer
from safebox.proxy import ProxyConfig, ProxyServer
from safebox.proxy.rules import RULE_ALLOWED, RULE_DENIED, NetworkRules

KEYS = {"allowedDomains": False, "deniedDomains": True}


def policy_check_accepts(key: str, pattern: str) -> bool:
    """What ``safebox policy check`` says of a file holding only this entry."""
    try:
        validate_layer(Layer(name="p.json", data={"network": {key: [pattern]}}))
    except PolicyError as e:
        assert f"network.{key}[0]" in e.message, e.message  # the error names the key
        return False
    return True


def exec_compiles(key: str, pattern: str, run_dir: Path) -> NetworkRules | None:
    """The proxy ``safebox exec`` starts, built from the entry (not started)."""
    allowed, denied = ((pattern,), ()) if key == "allowedDomains" else (("example.org",), (pattern,))
    try:
        return ProxyServer(ProxyConfig(allowed_domains=allowed, denied_domains=denied), run_dir=run_dir).rules
    except ProxyError:
        return None


_LABEL = st.text(alphabet="abcxyz019-_", min_size=1, max_size=8)
_JUNK = st.sampled_from(["*", "*.", ".", "..", ":", ":443", "[", "]", "/", "@", "%", " ", "ü", "A", "0x7f", "-",
                         "xn--", "xn--zz", "localhost", "com", "127", "1", "::1", "http://"])


@st.composite
def patterns(draw: st.DrawFn) -> str:
    """Entries near the grammar's edges: names, wildcards, IP literals and
    junk spliced into them."""
    kind = draw(st.integers(0, 4))
    if kind == 0:
        text = ".".join(draw(st.lists(_LABEL, min_size=1, max_size=4)))
    elif kind == 1:
        text = str(draw(st.ip_addresses()))
        if ":" in text and draw(st.booleans()):
            text = f"[{text}]"
    elif kind == 2:
        return draw(st.text(alphabet="ab.*-:[]/@%1 ü", max_size=12))
    elif kind == 3:
        text = ".".join(draw(st.lists(st.one_of(_LABEL, _JUNK), min_size=1, max_size=4)))
    else:
        text = draw(_JUNK)
    if draw(st.booleans()):
        text = "*." + text
    if draw(st.integers(0, 5)) == 0:
        text = text.upper()
    if draw(st.integers(0, 5)) == 0:
        text += "."
    return text


@given(pattern=patterns(), key=st.sampled_from(sorted(KEYS)))
@example(pattern="*", key="deniedDomains")
@example(pattern="*", key="allowedDomains")
@example(pattern="*.com", key="allowedDomains")
@example(pattern="127.1", key="allowedDomains")
@example(pattern="intranet", key="allowedDomains")
@example(pattern="[fe80::1%eth0]", key="deniedDomains")
@example(pattern="*.1.2.3.4", key="deniedDomains")
@example(pattern="example.com..", key="allowedDomains")
@settings(max_examples=1500, deadline=None, database=None)  # no example database: it must run as any user
def test_policy_check_and_exec_accept_the_same_patterns_with_the_same_meaning(pattern: str, key: str,
                                                                              tmp_path_factory) -> None:
    run_dir = tmp_path_factory.getbasetemp()
    checked = policy_check_accepts(key, pattern)
    rules = exec_compiles(key, pattern, run_dir)
    assert checked == (rules is not None), (pattern, key, checked)
    if rules is None:
        return
    # The same meaning: the proxy holds the one canonical form of the entry
    # and decides as the policy reference says it does.
    canonical = check_pattern(pattern, denied=KEYS[key])
    assert (rules.allowed if key == "allowedDomains" else rules.denied)[-1] == canonical
    # An entry with a :port (srt's host:port) is checked on that port.
    entry, port = split_port(canonical)
    entry = entry.strip("[]")
    if entry == DENY_ALL:
        for host in ("example.org", "a.example.org", "203.0.113.9", "[2001:db8::1]"):
            d = rules.check_host(host, port)
            assert (d.allowed, d.rule) == (False, RULE_DENIED), (host, d)
        return
    verdict = {"allowedDomains": (True, RULE_ALLOWED), "deniedDomains": (False, RULE_DENIED)}[key]
    if entry.startswith("*."):
        apex = entry[2:]
        assert (lambda d: (d.allowed, d.rule))(rules.check_host("sub." + apex, port)) == verdict
        if key == "allowedDomains":  # *.x matches strict subdomains, never the apex
            assert not rules.check_host(apex, port).allowed
        return
    try:
        ipaddress.ip_address(entry)
    except ValueError:
        d = rules.check_host(entry, port)
        assert (d.allowed, d.rule) == verdict, (canonical, d)
        if key == "allowedDomains":  # an exact name does not cover its subdomains
            assert not rules.check_host("sub." + entry, port).allowed
        return
    d = rules.check_host(entry, port)  # IP literals match only themselves
    assert (d.allowed, d.rule) == verdict, (canonical, d)


@pytest.mark.parametrize(("pattern", "denied", "canonical"), [
    ("*", True, "*"),
    ("Example.COM.", False, "example.com"),
    ("*.Example.com", True, "*.example.com"),
    ("[::1]", False, "::1"),
    ("localhost", False, "localhost"),
    ("bücher.de", False, "xn--bcher-kva.de"),
])
def test_an_accepted_entry_has_one_canonical_form(pattern: str, denied: bool, canonical: str) -> None:
    assert check_pattern(pattern, denied=denied) == canonical


@pytest.mark.parametrize(("pattern", "denied", "message"), [
    ("*", False, "'*' alone would let every host through"),
    ("*.com", True, "too broad: it covers a whole top-level domain"),
    ("intranet", False, "a domain needs at least two labels (or is 'localhost')"),
    ("a.*.com", True, "a wildcard is only allowed as a leading '*.' (or '*' alone, which refuses everything)"),
    ("127.1", False, "an ambiguous number: write IPv4 addresses as a plain dotted quad"),
    ("*.1.2.3.4", True, "wildcards do not apply to IP addresses"),
    ("https://x.com", False, "not a domain name: give the name alone (or name:port), without a scheme, path or user"),
    ("x.com:https", True, "not a domain name: give the name alone"),
    ("x.com:0", False, "port 0 is out of range (1 to 65535)"),
    ("*:443", False, "'*' alone would let every host through"),
    ("[zz]", False, "not an IPv6 address between the brackets"),
    ("[fe80::1%eth0]", True, "IPv6 zone ids are not allowed"),
    (" x.com", False, "empty, or padded with spaces"),
])
def test_a_refused_entry_says_why_without_repeating_it(pattern: str, denied: bool, message: str) -> None:
    # The caller puts the entry in front, as the user spelled it.
    with pytest.raises(HostError) as e:
        check_pattern(pattern, denied=denied)
    assert str(e.value).startswith(message), str(e.value)
    if len(pattern) > 1:  # '*' is named in its own reason
        assert pattern.strip() not in str(e.value)


def test_policy_check_refuses_a_star_in_allowed_domains_with_the_reason() -> None:
    with pytest.raises(PolicyError) as e:
        validate_layer(Layer(name="p.json", data={"network": {"allowedDomains": ["*"]}}))
    assert e.value.message.startswith('p.json: network.allowedDomains[0] = "*": '
                                      "'*' alone would let every host through"), e.value.message

"""The pure parts of runtime decisions (docs/api.md, "Runtime decisions"):
how an answer is read, how a harness's reason is cleaned, how the live
lists change, and how a ``--control-fd`` line is read (srt's format). The
behaviour through the real proxy is tests/integration/test_runtime_decisions.py
and test_exec_ask.py."""

from __future__ import annotations

import json

import pytest

from safebox.proxy.live import LiveLists, clean_reason
from safebox.runtime.control_fd import apply_line
from safebox.runtime.decisions import Decision, interpret


@pytest.mark.parametrize(("value", "allow", "remember"), [
    (True, True, False),
    (Decision(True), True, True),
    (Decision(True, once=True), True, False),
    (False, False, False),
    (None, False, False),
    (Decision(False, "no"), False, True),
    (1, False, False),  # truthy is not True: denied, as srt does since 0.0.80
    ("yes", False, False),
    ({"allow": True}, False, False),
])
def test_only_true_or_an_allowing_decision_allows(value: object, allow: bool, remember: bool) -> None:
    answer = interpret(value)
    assert (answer.allow, answer.remember) == (allow, remember)


@pytest.mark.parametrize(("text", "want"), [
    ("use the mirror", "use the mirror"),
    ("  two\nlines\t\there  ", "two lines here"),
    ("re-run with <host> listed", "re-run with host listed"),
    ("zero\u200bwidth \u202ebidi", "zero width bidi"),
    ("\x1b[31mred", "[31mred"),
    ("", "denied"),
    ("\n\t", "denied"),
    (42, "denied"),
    ("x" * 600, "x" * 500),
])
def test_a_harness_reason_becomes_one_printable_line(text: object, want: str) -> None:
    assert clean_reason(text, default="denied") == want


def test_allow_and_deny_replace_the_same_entry_and_other_denies_still_win() -> None:
    live = LiveLists(("example.com",), ("*.bad.example",))
    assert not live.rules.check_host("x.bad.example", 443).allowed
    assert live.allow("X.Bad.Example") == "x.bad.example"
    assert not live.rules.check_host("x.bad.example", 443).allowed  # "*.bad.example" still denies
    assert live.deny("example.com", "closed") == "example.com"
    d = live.explained("example.com", 443, live.rules.check_host("example.com", 443))
    assert (d.allowed, d.reason) == (False, "example.com is denied ('example.com' in network.deniedDomains): closed")
    live.allow("example.com")
    assert live.rules.check_host("example.com", 443).allowed
    # An answer remembered as "deny" is dropped by an allow that covers it.
    live.deny("api.example.org:443", "denied when asked", rule="ask")
    d = live.explained("api.example.org", 443, live.rules.check_host("api.example.org", 443))
    assert (d.allowed, d.rule, d.reason) == (False, "ask", "denied when asked")
    live.allow("*.example.org")
    assert live.rules.check_host("api.example.org", 443).allowed
    with pytest.raises(ValueError, match="not a domain entry: 'http://x'"):
        live.allow("http://x")


def test_a_control_line_replaces_both_lists_or_is_refused_whole() -> None:
    live = LiveLists(("old.example",), ())
    line = {"network": {"allowedDomains": ["new.example"], "deniedDomains": ["bad.example"],
                        "deniedDomainReasons": {"bad.example": "phishing"}}, "filesystem": {}}
    assert apply_line(json.dumps(line).encode(), live) is None
    assert live.rules.allowed == ("new.example",) and live.rules.denied == ("bad.example",)
    d = live.explained("bad.example", 443, live.rules.check_host("bad.example", 443))
    assert d.reason.endswith(": phishing")
    for bad, why in [(b"{", "not JSON"), (b"[]", "not a JSON object"), (b"{}", 'no "network" object'),
                     (b'{"network": {"allowedDomains": "x.example"}}', "network.allowedDomains must be a list"),
                     (b'{"network": {"allowedDomains": ["a b"]}}', "not a domain entry: 'a b'")]:
        assert (apply_line(bad, live) or "").startswith(why), bad
        assert live.rules.allowed == ("new.example",)  # the lists in force stay
    assert apply_line(b"   ", live) is None  # a blank line is ignored
    assert apply_line(b'{"network": {}}', live) is None  # a list left out is empty, as in srt
    assert live.rules.allowed == () and live.rules.denied == ()

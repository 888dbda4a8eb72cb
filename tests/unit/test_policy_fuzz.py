"""Malformed policies never crash the loader: every document is either valid
or a PolicyError naming the file and a key path (hypothesis-generated)."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_policy import PYDANTIC_PHRASES

from safebox.errors import PolicyError
from safebox.policy.load import Layer, parse_document, validate_layer

KEYS = ["network", "filesystem", "env", "strict", "trustProjectFiles", "mandatoryDenySearchDepth",
        "allowedDomains", "deniedDomains", "allowUnixSockets", "allowLocalBinding", "allowLocalDestinations",
        "denyRead", "allowWrite", "denyWrite", "deny", "allow", "ignoreViolations", "ripgrep", "command",
        "httpProxyPort", "enableWeakerNestedSandbox", "allowPty", "bogus"]
scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 70000), st.floats(allow_nan=False),
                    st.text(max_size=12), st.sampled_from(["~/.ssh", "*.x.com", "x.com", "*", "/", "~root", ""]))
documents = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4),
    st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=6), inner, max_size=4)), max_leaves=12)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(KEYS), documents, max_size=4))
def test_any_document_is_valid_or_a_clean_error_naming_the_file(doc: dict) -> None:
    try:
        validate_layer(Layer(name="fuzz.json", data=doc))
    except PolicyError as e:
        assert e.message.startswith("fuzz.json: ")
        assert "\n" not in e.message
        assert not [p for p in PYDANTIC_PHRASES if p in e.message], e.message


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_are_a_document_or_a_clean_error(raw: bytes) -> None:
    for name in ("p.json", "p.toml", "p"):
        try:
            doc = parse_document(name, raw)
        except PolicyError as e:
            assert e.message.startswith(f"{name}: ")
            continue
        try:
            validate_layer(Layer(name=name, data=doc))
        except PolicyError as e:
            assert e.message.startswith(f"{name}: ")


def test_a_document_that_is_not_an_object_is_refused() -> None:
    for raw in (b"[]", b"1", b'"x"', json.dumps([{"network": {}}]).encode()):
        try:
            parse_document("p.json", raw)
        except PolicyError as e:
            assert "the top level must be an object" in e.message
        else:
            raise AssertionError(raw)


def test_a_key_with_a_newline_is_named_escaped_on_one_line() -> None:
    """Found by the test above: the key is quoted, so no second line can be forged."""
    try:
        validate_layer(Layer(name="p.json", data={"network": {"\nsafebox: all good": None}}))
    except PolicyError as e:
        assert e.message == ("p.json: network.'\\nsafebox: all good': unknown key "
                             "(the keys are listed in docs/policy-reference.md)")
    else:
        raise AssertionError("an unknown key was accepted")

"""The sentinel → real substitution (proxy/inject.py), fuzzed with hypothesis:
no partial or overlapping substitution, chunking never changes the result,
only the credentials of the destination are substituted, and no substituted
header can split the request."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from safebox.proxy.forward import _upstream_head
from safebox.proxy.inject import (
    SENTINEL_PREFIX,
    BodySubstituter,
    Credential,
    HeaderUnsafe,
    Injector,
    header_safe,
    mint_sentinel,
    substitute,
)
from safebox.proxy.wire import BadRequest, parse_request_head

FUZZ = settings(max_examples=300, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def reference(data: bytes, pairs: list[tuple[bytes, bytes]]) -> bytes:
    """A second, independent implementation: one regex alternation, leftmost
    match (sentinels never nest, so alternation order does not matter)."""
    if not pairs:
        return data
    table = dict(pairs)
    rx = re.compile(b"|".join(re.escape(s) for s, _ in pairs))
    return rx.sub(lambda m: table[m.group(0)], data)


def test_a_sentinel_has_srts_shape_and_is_padded_to_a_longer_real_value() -> None:
    s = mint_sentinel(b"short")
    assert re.fullmatch(rb"fake_value_[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", s)
    long_real = b"x" * 200
    padded = mint_sentinel(long_real)
    assert len(padded) == 200 and padded.startswith(SENTINEL_PREFIX.encode())
    assert re.fullmatch(rb"[a-z0-9_-]+", padded[len(SENTINEL_PREFIX):])
    assert len({mint_sentinel(b"") for _ in range(1000)}) == 1000


# Sentinels shaped as mint_sentinel makes them (uuid4, then padding), but
# drawn by hypothesis so that a failure reproduces; distinct uuids never nest.
_PAD = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-", max_size=40)
sentinels = st.lists(st.tuples(st.uuids(version=4), _PAD), min_size=1, max_size=4,
                     unique_by=lambda t: t[0]).map(
    lambda ts: [f"{SENTINEL_PREFIX}{u}{pad}".encode() for u, pad in ts])
reals = st.binary(max_size=60)


@st.composite
def body_and_pairs(draw):  # type: ignore[no-untyped-def]
    ss = draw(sentinels)
    pairs = [(s, draw(reals)) for s in ss]
    # Bodies made of noise, whole sentinels, and prefixes/suffixes of them
    # (the partial matches a chunk boundary could cut).
    piece = st.one_of(
        st.binary(max_size=30),
        st.sampled_from(ss),
        st.sampled_from(ss).flatmap(lambda s: st.integers(1, len(s) - 1).map(lambda i: s[:i])),
        st.sampled_from(ss).flatmap(lambda s: st.integers(1, len(s) - 1).map(lambda i: s[i:])),
        st.sampled_from([r for _, r in pairs]),
    )
    body = b"".join(draw(st.lists(piece, max_size=12)))
    cuts = sorted(draw(st.lists(st.integers(0, len(body)), max_size=8)))
    return body, pairs, cuts


@given(body_and_pairs())
@FUZZ
def test_substitution_equals_an_independent_reference(case: tuple[bytes, list, list[int]]) -> None:
    body, pairs, _ = case
    assert substitute(body, pairs) == reference(body, pairs)


@given(body_and_pairs())
@FUZZ
def test_streaming_substitution_does_not_depend_on_where_chunks_are_cut(case: tuple[bytes, list, list[int]]) -> None:
    body, pairs, cuts = case
    sub = BodySubstituter(pairs)
    out = b""
    last = 0
    for c in [*cuts, len(body)]:
        out += sub.feed(body[last:c])
        last = c
    out += sub.flush()
    assert out == substitute(body, pairs)


@given(sentinels.filter(lambda ss: len(ss) >= 2), st.integers(1, 20))
@FUZZ
def test_an_inserted_real_value_is_never_rescanned(ss: list[bytes], cut: int) -> None:
    """A real value that completes another sentinel with what follows it is
    emitted as it is: the output holds that sentinel, not its real value
    (one substitution per occurrence in the input, none in the output)."""
    s0, s1 = ss[0], ss[1]
    pairs = [(s0, s1[:cut]), (s1, b"\xffNEVER\xff")]
    data = s0 + s1[cut:]
    out = substitute(data, pairs)
    assert out == s1 and b"NEVER" not in out
    sub = BodySubstituter(pairs)
    assert sub.feed(data[:7]) + sub.feed(data[7:]) + sub.flush() == s1


@given(st.binary(max_size=200), sentinels)
@FUZZ
def test_a_partial_sentinel_is_left_alone(noise: bytes, ss: list[bytes]) -> None:
    pairs = [(s, b"\xffREAL\xff") for s in ss]
    for s in ss:
        for cut in (1, len(s) // 2, len(s) - 1):
            data = noise + s[:cut]
            assert substitute(data, pairs) == reference(data, pairs)
            assert b"\xffREAL\xff" not in substitute(s[:cut] + b"\x00" + s[cut:], pairs)


def _cred(name: str, real: bytes, hosts: tuple[str, ...]) -> Credential:
    return Credential(name, mint_sentinel(real), real, hosts)


def test_each_credential_is_substituted_only_at_its_own_hosts() -> None:
    """srt's anti-laundering: A's sentinel sent to B's host stays a sentinel."""
    gh = _cred("GH_TOKEN", b"gh-secret", ("api.github.com",))
    npm = _cred("NPM_TOKEN", b"npm-secret", ("registry.npmjs.org:443",))
    inj = Injector([gh, npm], allow_plaintext=False)
    assert inj.for_host("api.github.com", 443) == [gh]
    assert inj.for_host("registry.npmjs.org", 443) == [npm]
    assert inj.for_host("registry.npmjs.org", 80) == []  # a ported entry: that port only
    assert inj.for_host("evil.example", 443) == []
    value = f"Bearer {gh.sentinel.decode()} {npm.sentinel.decode()}"
    at_gh = Injector.header_value(value, Injector.header_pairs(inj.for_host("api.github.com", 443)))
    assert at_gh == f"Bearer gh-secret {npm.sentinel.decode()}"
    at_evil = Injector.header_value(value, Injector.header_pairs(inj.for_host("evil.example", 443)))
    assert at_evil == value


def test_nesting_sentinels_are_refused() -> None:
    a = _cred("A", b"a", ("x.com",))
    b = Credential("B", a.sentinel + b"tail", b"b", ("x.com",))
    with pytest.raises(ValueError, match="nest"):
        Injector([a, b], allow_plaintext=False)


@given(st.binary(min_size=1, max_size=40), st.lists(st.text(
    alphabet=st.characters(min_codepoint=0x20, max_codepoint=0xFF, blacklist_characters="\x7f"), max_size=30),
    max_size=4))
@FUZZ
def test_no_real_value_can_split_a_forwarded_request_head(real: bytes, noise: list[str]) -> None:
    """Whatever the real value (CR, LF, NUL, a whole header), the head sent
    upstream parses back to the same header names, and a value that may not
    go into a header never does (the sentinel stays instead)."""
    cred = _cred("T", real, ("x.example",))
    s = cred.sentinel.decode()
    headers = [("Authorization", f"Bearer {s}"), ("X-Api-Key", s)] + [(f"X-N{i}", n.strip()) for i, n in
                                                                        enumerate(noise)]
    head = _upstream_head("GET", "/p", headers, "x.example", Injector.header_pairs([cred]), "none", 0)
    assert head.endswith(b"\r\n\r\n") and head.count(b"\r\n\r\n") == 1
    lines = head[:-4].split(b"\r\n")
    assert len(lines) == 1 + 1 + len(headers) + 1  # request line, Host, the headers, Connection
    names = [ln.split(b":", 1)[0] for ln in lines[1:]]
    assert names == [b"Host", *(n.encode() for n, _ in headers), b"Connection"]
    # The safebox parser accepts the result as a well-formed head.
    absolute = head.replace(b"GET /p", b"GET http://x.example/p", 1)
    parse_request_head(absolute[:-4])
    if header_safe(real):
        assert b"Bearer " + real + b"\r\n" in head
    else:
        assert b"Bearer " + cred.sentinel + b"\r\n" in head  # the sentinel stays: never a split header


def test_a_substituted_header_is_checked_again_before_it_is_sent() -> None:
    with pytest.raises(HeaderUnsafe):
        Injector.header_value(f"x {SENTINEL_PREFIX}abc", [(f"{SENTINEL_PREFIX}abc".encode(), b"a\r\nEvil: 1")])


def test_the_parser_refuses_a_head_that_substitution_could_not_have_made() -> None:
    with pytest.raises(BadRequest):
        parse_request_head(b"GET http://x.example/ HTTP/1.1\r\nA: b\nEvil: 1")

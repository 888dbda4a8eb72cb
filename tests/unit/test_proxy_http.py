"""Request-head parsing of the HTTP proxy front end (pure; fuzzed with hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from safebox.proxy.wire import BadRequest, _origin_head, parse_request_head


def test_absolute_uri_becomes_origin_form_without_hop_by_hop_headers() -> None:
    req = parse_request_head(
        b"GET http://Example.COM./a?b=1 HTTP/1.1\r\nHost: example.com\r\nConnection: keep-alive, X-Secret\r\n"
        b"X-Secret: 1\r\nProxy-Authorization: x\r\nAccept: */*"
    )
    assert (req.host, req.port, req.path) == ("example.com", 80, "/a?b=1")
    head = _origin_head(req, "example.com").decode()
    assert head.startswith("GET /a?b=1 HTTP/1.1\r\n")
    assert "X-Secret" not in head and "Proxy-Authorization" not in head and "keep-alive" not in head
    assert head.endswith("Accept: */*\r\nConnection: close\r\n\r\n")


def test_connect_target_and_query_only_path() -> None:
    assert parse_request_head(b"CONNECT [::1]:443 HTTP/1.1").port == 443
    assert parse_request_head(b"GET http://a.com?q HTTP/1.0").path == "/?q"


@pytest.mark.parametrize(
    "head",
    [b"", b"GET", b"GET  http://a.com/ HTTP/1.1", b"GET http://a.com/ HTTP/1.1 x", b"G\x00T http://a.com/ HTTP/1.1",
     b"GET http://a.com/\x7f HTTP/1.1", b"GET ftp://a.com/ HTTP/1.1", b"GET http://u@a.com/ HTTP/1.1",
     b"GET http://a.com:99999/ HTTP/1.1", b"GET http://a.com:-1/ HTTP/1.1", b"GET http:///x HTTP/1.1",
     b"CONNECT a.com HTTP/1.1", b"CONNECT ::1:443 HTTP/1.1", b"CONNECT [::1]x:443 HTTP/1.1",
     b"GET http://a.com/ HTTP/1.1\r\nHost: b.com", b"GET http://a.com/ HTTP/1.1\r\nHost: a.com:81",
     b"GET http://a.com/ HTTP/1.1\r\nX: a\x00b", b"GET http://a.com/ HTTP/1.1\r\n: x",
     b"GET http://a.com/ HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2"],
)
def test_malformed_heads_are_bad_requests(head: bytes) -> None:
    with pytest.raises(BadRequest) as info:
        parse_request_head(head)
    assert info.value.status in (400, 431, 505) and info.value.message


@given(st.binary(max_size=300))
@settings(max_examples=400, deadline=None)
def test_parser_only_ever_raises_bad_request(data: bytes) -> None:
    try:
        req = parse_request_head(data)
    except BadRequest:
        return
    assert req.host and 0 < req.port < 65536


_line = st.from_regex(rb"\A(GET|CONNECT|POST) [ -~]{0,40} HTTP/1\.[01]\Z")
_header = st.from_regex(rb"\A[A-Za-z-]{1,12}: [ -~]{0,30}\Z")


@given(_line, st.lists(_header, max_size=5))
@settings(max_examples=300, deadline=None)
def test_parser_on_plausible_heads(line: bytes, headers: list[bytes]) -> None:
    try:
        req = parse_request_head(b"\r\n".join([line, *headers]))
    except BadRequest:
        return
    if not req.is_connect:
        assert req.path.startswith("/") and "#" not in req.path
        assert b"\r\n\r\n" not in _origin_head(req, req.host)[:-4]


@settings(max_examples=300, deadline=None)
@given(host=st.text(max_size=80), port=st.integers(1, 65535),
       rule=st.sampled_from(["network.allowedDomains", "network.deniedDomains",
                             "network.allowLocalDestinations", "request"]),
       reason=st.text(max_size=80))
def test_a_refusals_header_and_line_are_printable_ascii_whatever_the_host(host: str, port: int, rule: str,
                                                                          reason: str) -> None:
    # The host and reason come from the sandboxed command (a SOCKS5 name is
    # any bytes): a CR or LF would let it write its own response headers.
    from safebox.proxy.rules import Decision
    from safebox.proxy.wire import refusal_response

    head, _, body = refusal_response(host, port, Decision(False, rule, reason)).partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert [ln.split(b":")[0] for ln in lines[1:]] == [
        b"Content-Type", b"Content-Length", b"Connection", b"X-Safebox-Rule", b"X-Safebox-Refused"]
    value = lines[-1].partition(b": ")[2]
    assert all(0x20 <= c < 0x7F for ln in lines for c in ln) and all(0x20 <= c < 0x7F for c in body[:-1])
    assert body.endswith(b"\n") and body.count(b"\n") == 1
    assert value.count(b"; ") >= 2 and value.split(b"; ")[1] == rule.encode()

"""``network.parentProxy``: URL parsing, srt's environment fallbacks, its
``noProxy`` rules, and the gate's choice of route (pure, plus one loopback
round trip through a real parent proxy)."""

from __future__ import annotations

import asyncio

import pytest

from safebox.policy.proxy_url import parse_proxy_url
from safebox.proxy.parent import NoProxy, resolve_parent
from safebox.proxy.rules import NetworkRules
from safebox.proxy.upstream import Gate, Refused, UpstreamError


@pytest.mark.parametrize(("url", "scheme", "host", "port", "auth", "shown"), [
    ("http://proxy.corp:3128", "http", "proxy.corp", 3128, None, "http://proxy.corp:3128"),
    ("http://proxy.corp", "http", "proxy.corp", 80, None, "http://proxy.corp:80"),
    ("https://proxy.corp/", "https", "proxy.corp", 443, None, "https://proxy.corp:443"),
    ("HTTP://U%40x:p%3Aw@10.0.0.1:8080", "http", "10.0.0.1", 8080, "Basic VUB4OnA6dw==",
     "http://U%40x:***@10.0.0.1:8080"),
    ("http://[::1]:3128", "http", "::1", 3128, None, "http://[::1]:3128"),
    ("http://user@p.corp:1", "http", "p.corp", 1, "Basic dXNlcjo=", "http://user@p.corp:1"),
])
def test_parse_proxy_url(url: str, scheme: str, host: str, port: int, auth: str | None, shown: str) -> None:
    p = parse_proxy_url(url)
    assert (p.scheme, p.host, p.port, p.auth, p.shown) == (scheme, host, port, auth, shown)


@pytest.mark.parametrize(("url", "why"), [
    ("socks5://p:1080", "http:// or https://"),
    ("p.corp:3128", "http:// or https://"),
    ("http://p.corp:3128/path", "path"),
    ("http://p.corp:99999", "not a proxy URL"),
    ("http://", "no host"),
    ("http://p corp:1", "spaces"),
    ("http://p.corp:1\r\nX: y", "control characters"),
    ("", "empty"),
])
def test_parse_proxy_url_refuses(url: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_proxy_url(url)


def test_a_password_never_appears_in_a_refusal() -> None:
    with pytest.raises(ValueError) as e:
        parse_proxy_url("ftp://me:hunter2@p.corp:21")
    assert "hunter2" not in str(e.value)


def test_the_keys_fall_back_to_the_environment_as_srt_does() -> None:
    env = {"HTTP_PROXY": "http://h:1", "https_proxy": "http://s:2", "NO_PROXY": "a.com"}
    p, notes = resolve_parent(http=None, https=None, no_proxy=None, environ=env)
    assert p is not None and notes == []
    assert (p.http.host, p.https.host) == ("h", "s")  # type: ignore[union-attr]
    assert p.no_proxy.matches("a.com") and p.origin == (("http", "HTTP_PROXY"), ("https", "https_proxy"))
    # https falls back to http when neither its key nor its variables are set.
    p, _ = resolve_parent(http=None, https=None, no_proxy=None, environ={"http_proxy": "http://h:1"})
    assert p is not None and p.https == p.http
    # A key wins over the environment; noProxy "" is a value (nothing bypasses).
    p, _ = resolve_parent(http="http://k:3", https=None, no_proxy="", environ=env)
    assert p is not None and p.http.host == "k" and p.https.host == "s"  # type: ignore[union-attr]
    assert not p.no_proxy.matches("a.com")
    assert resolve_parent(http=None, https=None, no_proxy=None, environ={}) == (None, [])


def test_a_bad_variable_is_skipped_with_a_note_and_a_bad_key_is_an_error() -> None:
    p, notes = resolve_parent(http=None, https=None, no_proxy=None, environ={"HTTPS_PROXY": "socks5://x:1"})
    assert p is None and notes and "HTTPS_PROXY" in notes[0]
    with pytest.raises(ValueError, match="network.parentProxy.https"):
        resolve_parent(http=None, https="socks5://x:1", no_proxy=None, environ={})


@pytest.mark.parametrize(("rules", "host", "bypass"), [
    ("example.com", "example.com", True),
    ("example.com", "a.example.com", True),
    ("example.com", "badexample.com", False),
    (".example.com", "example.com", True),
    (".example.com", "a.b.example.com", True),
    ("*.example.com", "a.example.com", True),
    ("example.com:443", "example.com", True),
    ("10.0.0.0/8", "10.1.2.3", True),
    ("10.0.0.0/8", "11.0.0.1", False),
    ("10.0.0.0/8", "ten.example", False),
    ("fd00::/8", "fd12::1", True),
    ("[::1]", "::1", True),
    ("10.0.0.0/99", "10.0.0.1", False),  # malformed CIDR: ignored
    (" a.com , ,b.com ", "b.com", True),
    ("*", "anything.example", True),
    ("", "example.com", False),
])
def test_no_proxy_rules(rules: str, host: str, bypass: bool) -> None:
    assert NoProxy.parse(rules).matches(host) is bypass


def test_loopback_always_bypasses_and_tunnels_prefer_the_https_proxy() -> None:
    p, _ = resolve_parent(http="http://h:1", https="http://s:2", no_proxy=None, environ={})
    assert p is not None
    for host in ("localhost", "127.0.0.1", "127.9.9.9", "::1", "::ffff:127.0.0.1"):
        assert p.select(host, tunnel=True) is None
    assert p.select("example.com", tunnel=True).host == "s"  # type: ignore[union-attr]
    assert p.select("example.com", tunnel=False).host == "h"  # type: ignore[union-attr]


def test_a_name_the_local_resolver_cannot_see_goes_to_the_parent_which_resolves_it() -> None:
    """Behind a corporate proxy the host often cannot resolve public names:
    the name goes to the parent in the CONNECT. A real parent proxy on
    loopback (it maps every target to the origin) answers; control: without a
    parent, the same resolution failure is an upstream error."""
    from netservers import ParentProxy, start_origin

    origin = start_origin()
    parent = ParentProxy(origin.server_address[1])
    rules = NetworkRules.from_policy(["pkg.corp.example"])
    pp, _ = resolve_parent(http=None, https=f"http://127.0.0.1:{parent.port}", no_proxy=None, environ={})

    async def no_dns(_self: Gate, name: str, _port: int) -> list[object]:
        raise UpstreamError("resolve", f"cannot resolve {name}")

    async def go(gate: Gate) -> bytes:
        name, addresses, via = await gate.check("pkg.corp.example", 443, "connect")
        reader, writer = await gate.open_stream(name, addresses, 443, via)
        writer.write(b"GET /x HTTP/1.1\r\nHost: pkg.corp.example\r\nConnection: close\r\n\r\n")
        data = await reader.read()
        writer.close()
        return data

    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(Gate, "_resolve", no_dns)
            out = asyncio.run(go(Gate(rules, parent=pp)))
            assert out.endswith(b"GET /x")
            assert parent.requests[-1][0] == "CONNECT pkg.corp.example:443 HTTP/1.1"
            with pytest.raises(UpstreamError, match="cannot resolve"):
                asyncio.run(go(Gate(rules)))
    finally:
        for srv in (parent, origin):
            srv.shutdown()
            srv.server_close()


def test_an_address_the_local_resolver_gives_is_still_checked_behind_a_parent() -> None:
    import ipaddress

    rules = NetworkRules.from_policy(["intranet.example"])
    pp, _ = resolve_parent(http=None, https="http://127.0.0.1:9", no_proxy=None, environ={})

    async def inward(_self: Gate, _name: str, _port: int) -> list[object]:
        return [ipaddress.ip_address("10.1.2.3")]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Gate, "_resolve", inward)
        with pytest.raises(Refused) as e:
            asyncio.run(Gate(rules, parent=pp).check("intranet.example", 443, "connect"))
    assert e.value.decision.rule == "network.allowLocalDestinations"

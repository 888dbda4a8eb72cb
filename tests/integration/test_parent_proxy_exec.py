"""``network.parentProxy`` through the real ``safebox exec``: safebox's proxy
forwards through a parent proxy running in this test on 127.0.0.1, which
sends everything to a local origin server and records what it was asked.

The destination is ``192.0.2.10`` (TEST-NET-1, an IP literal: no DNS) which
nothing here ever connects to: the parent proxy maps it to the loopback
origin. So no packet leaves the machine; the tests only assert what the
parent proxy saw. Loopback destinations always bypass the parent (srt).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from netservers import OriginServer, ParentProxy, serving
from sbx import FakeHome, token

pytestmark = pytest.mark.needs_bwrap

DEST = "192.0.2.10"  # never reached: the parent proxy maps it to the origin


@pytest.fixture(scope="module")
def origin() -> Iterator[OriginServer]:
    with serving() as srv:
        yield srv


@pytest.fixture
def parent(origin: OriginServer) -> Iterator[ParentProxy]:
    p = ParentProxy(origin.port, user="corp", password=f"pw-{token()}")
    yield p
    p.shutdown()
    p.server_close()


def _policy(home: FakeHome, network: dict[str, object]) -> list[str]:
    path = home.root / f"policy-{token()}.json"
    path.write_text(json.dumps({"network": network}))
    return ["-p", str(path)]


def _url(p: ParentProxy, password: str | None = None) -> str:
    user, pw = "corp", password
    if pw is None:
        assert p.auth is not None
        import base64

        pw = base64.b64decode(p.auth.split()[1]).decode().split(":", 1)[1]
    return f"http://{user}:{pw}@127.0.0.1:{p.port}"


def _curl(home: FakeHome, args: list[str], url: str, opts: list[str], env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return home.run(["curl", "-sS", "--max-time", "20", *args, url], opts=opts, env=env)


@pytest.mark.parametrize(("args", "protocol"), [(["-p"], "connect"), (["-x", "socks5h://127.0.0.1:1080"], "socks5")])
def test_tunnels_go_through_the_parent_proxy_as_connect_with_its_credentials(
        shared_home: FakeHome, parent: ParentProxy, origin: OriginServer, args: list[str], protocol: str) -> None:
    opts = _policy(shared_home, {"allowedDomains": [DEST], "parentProxy": {"https": _url(parent)}})
    r = _curl(shared_home, args, f"http://{DEST}:8080/{protocol}", opts)
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"origin-{origin.port} GET /{protocol}"
    line, headers = parent.requests[-1]
    assert line == f"CONNECT {DEST}:8080 HTTP/1.1"
    assert headers["proxy-authorization"] == parent.auth


@pytest.mark.usefixtures("origin")
def test_plain_http_goes_to_the_parent_proxy_in_absolute_form(shared_home: FakeHome, parent: ParentProxy) -> None:
    opts = _policy(shared_home, {"allowedDomains": [DEST], "parentProxy": {"http": _url(parent)}})
    r = _curl(shared_home, ["-H", "Proxy-Authorization: Basic c2FuZGJveDpzZWNyZXQ="], f"http://{DEST}:8080/plain",
              opts)
    assert r.returncode == 0, r.stderr
    assert r.stdout.endswith("GET /plain")
    line, headers = parent.requests[-1]
    assert line == f"GET http://{DEST}:8080/plain HTTP/1.1"
    # The parent's credentials, never what the sandboxed client sent for safebox's proxy.
    assert headers["proxy-authorization"] == parent.auth
    assert headers["connection"] == "close"


def test_the_policy_decides_before_the_parent_proxy_is_asked(shared_home: FakeHome, parent: ParentProxy) -> None:
    opts = _policy(shared_home, {"allowedDomains": [DEST], "parentProxy": {"http": _url(parent)}})
    r = _curl(shared_home, [], "http://192.0.2.11:8080/no", opts)
    assert r.stdout.startswith("safebox refused 192.0.2.11:8080 by network.allowedDomains: IP address 192.0.2.11 "
                               "is not listed literally in network.allowedDomains"), r.stdout
    assert parent.requests == []


def test_loopback_destinations_bypass_the_parent_proxy(shared_home: FakeHome, parent: ParentProxy,
                                                       origin: OriginServer) -> None:
    port = origin.port
    opts = _policy(shared_home, {"allowedDomains": ["localhost"], "allowLocalDestinations": True,
                                 "parentProxy": {"http": _url(parent), "https": _url(parent)}})
    for args in ([], ["-p"]):
        r = _curl(shared_home, args, f"http://localhost:{port}/direct", opts)
        assert r.stdout.endswith("GET /direct"), r.stderr
    assert parent.requests == []


def test_a_refusal_by_the_parent_proxy_reaches_the_client_with_the_reason(shared_home: FakeHome,
                                                                         parent: ParentProxy) -> None:
    opts = _policy(shared_home, {"allowedDomains": [DEST],
                                 "parentProxy": {"https": _url(parent, "wrong-password")}})
    r = shared_home.run(["curl", "-sS", "-p", "--max-time", "20", "-o", "/dev/null", "-w", "%{http_connect}",
                         f"http://{DEST}:8080/"], opts=opts)
    assert r.stdout == "502" and r.returncode == 56, (r.stdout, r.stderr)
    assert parent.requests[-1][0] == f"CONNECT {DEST}:8080 HTTP/1.1"
    # Through SOCKS5 there is no body: the reply is "general failure".
    r = _curl(shared_home, ["-x", "socks5h://127.0.0.1:1080"], f"http://{DEST}:8080/", opts)
    assert r.returncode == 97 and "(1)" in r.stderr, r.stderr
    # A plain request goes to the parent as it is: its own answer comes back.
    opts_plain = _policy(shared_home, {"allowedDomains": [DEST],
                                       "parentProxy": {"http": _url(parent, "wrong-password")}})
    r = _curl(shared_home, ["-o", "/dev/null", "-w", "%{http_code}"], f"http://{DEST}:8080/", opts_plain)
    assert r.stdout == "407", r.stdout


def test_the_502_body_names_the_parent_proxy_and_its_answer_but_not_its_password(fresh_home: FakeHome,
                                                                                 parent: ParentProxy) -> None:
    """The CONNECT refusal as a client that shows the body sees it (curl
    does not print a failed CONNECT's body: read it with a raw socket)."""
    opts = _policy(fresh_home, {"allowedDomains": [DEST], "parentProxy": {"https": _url(parent, "wrong-password")}})
    script = ("import socket\n"
              "s = socket.create_connection(('127.0.0.1', 3128))\n"
              f"s.sendall(b'CONNECT {DEST}:8080 HTTP/1.1\\r\\nHost: {DEST}:8080\\r\\n\\r\\n')\n"
              "out = b''\n"
              "while chunk := s.recv(4096):\n    out += chunk\n"
              "print(out.decode())\n")
    r = fresh_home.run(["python3", "-c", script], opts=opts)
    assert r.stdout.startswith("HTTP/1.1 502 Bad Gateway"), r.stdout
    assert (f"safebox: upstream {DEST} port 8080: the parent proxy http://corp:***@127.0.0.1:{parent.port} "
            f"refused CONNECT {DEST}:8080: HTTP/1.1 407 Proxy Authentication Required") in r.stdout
    assert "wrong-password" not in r.stdout + r.stderr


@pytest.mark.usefixtures("origin")
def test_without_the_key_safebox_follows_its_own_https_proxy_variable_as_srt_does(
        shared_home: FakeHome, parent: ParentProxy) -> None:
    opts = _policy(shared_home, {"allowedDomains": [DEST]})
    r = _curl(shared_home, ["-p"], f"http://{DEST}:8080/env", opts, env={"HTTPS_PROXY": _url(parent)})
    assert r.stdout.endswith("GET /env"), r.stderr
    assert parent.requests[-1][0] == f"CONNECT {DEST}:8080 HTTP/1.1"
    # Inside, the proxy variables still point at safebox's own proxy.
    r = shared_home.run(["printenv", "HTTPS_PROXY"], opts=opts, env={"HTTPS_PROXY": _url(parent)})
    assert r.stdout.strip() == "http://127.0.0.1:3128"


def test_a_bad_parent_proxy_url_is_refused_naming_the_key(shared_home: FakeHome) -> None:
    opts = _policy(shared_home, {"allowedDomains": [DEST], "parentProxy": {"http": "socks5://127.0.0.1:1080"}})
    r = shared_home.run(["true"], opts=opts)
    assert r.returncode == 125
    assert "network.parentProxy.http" in r.stderr and "http:// or https://" in r.stderr

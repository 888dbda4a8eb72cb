"""``host:port`` entries through the real ``safebox exec``: sandboxed curl
against two HTTP servers on 127.0.0.1, reached by the name ``localhost``
(``allowLocalDestinations``). An entry with a port lets the host through on
that port only; the other port is refused with the reason, on every proxy
path (HTTP, CONNECT, SOCKS5). Loopback only."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from netservers import start_origin, stop_origin
from sbx import FakeHome, token

pytestmark = pytest.mark.needs_bwrap

SOCKS = ["-x", "socks5h://127.0.0.1:1080"]


#: The two origins of the module, by port (netservers: each records what it received).
_ORIGINS: dict[int, Any] = {}


def _hits(port: int) -> list[str]:
    return [s.path for s in _ORIGINS[port].seen]


@pytest.fixture(scope="module")
def two_ports() -> Iterator[tuple[int, int]]:
    servers = [start_origin(), start_origin()]
    for srv in servers:
        port = srv.server_address[1]
        srv.body = f"served-by-{port}".encode()
        _ORIGINS[port] = srv
    yield servers[0].server_address[1], servers[1].server_address[1]
    for srv in servers:
        stop_origin(srv)


def _policy(home: FakeHome, network: dict[str, object]) -> list[str]:
    path = home.root / f"policy-{token()}.json"
    path.write_text(json.dumps({"network": {"allowLocalDestinations": True, **network}}))
    return ["-p", str(path)]


def _curl(home: FakeHome, args: list[str], url: str, opts: list[str]):  # type: ignore[no-untyped-def]
    return home.run(["curl", "-sS", "--max-time", "20", *args, url], opts=opts)


def test_a_host_with_a_port_is_reachable_on_that_port(shared_home: FakeHome, two_ports: tuple[int, int]) -> None:
    good, _ = two_ports
    opts = _policy(shared_home, {"allowedDomains": [f"localhost:{good}"]})
    for args in ([], ["-p"], SOCKS):
        r = _curl(shared_home, args, f"http://localhost:{good}/ok", opts)
        assert (r.returncode, r.stdout) == (0, f"served-by-{good}"), (args, r.stderr)


def test_the_same_host_on_another_port_is_refused_with_the_reason(shared_home: FakeHome,
                                                                  two_ports: tuple[int, int]) -> None:
    good, other = two_ports
    opts = _policy(shared_home, {"allowedDomains": [f"localhost:{good}"]})
    before = _hits(other)
    r = _curl(shared_home, ["-D", "/dev/stderr"], f"http://localhost:{other}/no", opts)
    assert r.returncode == 0 and "403 Forbidden" in r.stderr, r.stderr
    assert r.stdout == (f"safebox refused localhost:{other} by network.allowedDomains: localhost port {other} is "
                        f"not allowed: network.allowedDomains allows it only as 'localhost:{good}'. Fix, for whoever "
                        f"runs the sandbox: add localhost:{other} to network.allowedDomains. Retrying, or another "
                        "route to the host, is refused the same way.\n")
    assert (f"X-Safebox-Refused: localhost; network.allowedDomains; add localhost:{other} to "
            "network.allowedDomains\n") in r.stderr  # text mode: CRLF read as LF
    r = _curl(shared_home, ["-p"], f"http://localhost:{other}/no", opts)
    assert r.returncode == 56 and "CONNECT tunnel failed, response 403" in r.stderr
    r = _curl(shared_home, SOCKS, f"http://localhost:{other}/no", opts)
    assert r.returncode == 97, r.stderr
    assert _hits(other) == before  # nothing reached the other server


def test_control_without_a_port_the_entry_covers_every_port(shared_home: FakeHome,
                                                             two_ports: tuple[int, int]) -> None:
    good, other = two_ports
    opts = _policy(shared_home, {"allowedDomains": ["localhost"]})
    for port in (good, other):
        r = _curl(shared_home, [], f"http://localhost:{port}/any", opts)
        assert (r.returncode, r.stdout) == (0, f"served-by-{port}"), r.stderr


def test_a_denied_host_with_a_port_is_refused_on_that_port_only(shared_home: FakeHome,
                                                                two_ports: tuple[int, int]) -> None:
    good, other = two_ports
    opts = _policy(shared_home, {"allowedDomains": ["localhost"], "deniedDomains": [f"localhost:{other}"]})
    r = _curl(shared_home, [], f"http://localhost:{good}/ok", opts)
    assert (r.returncode, r.stdout) == (0, f"served-by-{good}"), r.stderr
    r = _curl(shared_home, [], f"http://localhost:{other}/no", opts)
    assert r.stdout.startswith(f"safebox refused localhost:{other} by network.deniedDomains: localhost matches "
                               f"'localhost:{other}' in network.deniedDomains. "), r.stdout


def test_policy_check_accepts_an_srt_file_with_host_port_entries(shared_home: FakeHome) -> None:
    from sbx import SAFEBOX, host

    path = shared_home.root / f"srt-{token()}.json"
    path.write_text(json.dumps({"network": {"allowedDomains": ["registry.npmjs.org:443", "*.example.com:8443",
                                                               "[2001:db8::1]:443"], "deniedDomains": []}}))
    r = host([str(SAFEBOX), "policy", "check", str(path)], env=shared_home.env())
    assert r.returncode == 0, r.stderr

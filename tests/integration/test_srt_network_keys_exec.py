"""srt 0.0.83's network keys through the real ``safebox exec``: sandboxed
curl against an HTTP server on 127.0.0.1, reached by the name ``localhost``
(``allowLocalDestinations``). Every refusal has its control: the same
request without the key. Loopback only."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from netservers import OriginServer, Reply, Seen, serving
from sbx import SAFEBOX, FakeHome, host, token

pytestmark = pytest.mark.needs_bwrap

SOCKS = ["-x", "socks5h://127.0.0.1:1080"]


def _served(seen: Seen) -> Reply:
    # /early*: an interim head first (103 Early Hints) with the header in it.
    early = (("Set-Cookie", "early=secret"),) if seen.path.startswith("/early") else ()
    return Reply(f"served {seen.path}".encode(), headers=(("Set-Cookie", "session=secret"), ("X-Keep", "kept")),
                 early=early)


@pytest.fixture(scope="module")
def origin() -> Iterator[OriginServer]:
    with serving(reply=_served) as srv:
        yield srv


@pytest.fixture(scope="module")
def port(origin: OriginServer) -> int:
    return origin.port


def _opts(home: FakeHome, network: dict[str, object]) -> list[str]:
    path = home.root / f"policy-{token()}.json"
    path.write_text(json.dumps({"network": {"allowedDomains": ["localhost"], "allowLocalDestinations": True,
                                            **network}}))
    return ["-p", str(path)]


def _curl(home: FakeHome, args: list[str], url: str, network: dict[str, object]):  # type: ignore[no-untyped-def]
    return home.run(["curl", "-sS", "--max-time", "20", *args, url], opts=_opts(home, network))


#: Every network key of srt 0.0.83 safebox accepts, in one settings file.
SRT_FILE = {
    "network": {
        "allowedDomains": ["github.com", "*.npmjs.org"],
        "deniedDomains": ["github.com:22"],
        "deniedDomainReasons": {"github.com:22": "SSH pushes to GitHub are blocked; use an https:// remote"},
        "deniedResolvedAddresses": ["10.0.0.0/8", "fc00::/7"],
        "strictAllowlist": True,
        "requireHostMatch": True,
        "refuseOpaqueTunnels": True,
        "stripResponseHeaders": ["set-cookie"],
        "allowPlaintextHeaderSet": False,
    },
}


def test_an_srt_settings_file_with_every_network_key_runs_and_mitm_proxy_is_refused_with_the_reason(
        shared_home: FakeHome) -> None:
    path = shared_home.root / f"srt-{token()}.json"
    path.write_text(json.dumps(SRT_FILE))
    r = shared_home.run(["true"], opts=["-p", str(path)])
    assert r.returncode == 0, r.stderr
    assert host([str(SAFEBOX), "policy", "check", str(path)], env=shared_home.env()).returncode == 0
    path.write_text(json.dumps({"network": {**SRT_FILE["network"],
                                            "mitmProxy": {"socketPath": "/tmp/mitm.sock", "domains": ["a.com"]}}}))
    r = shared_home.run(["true"], opts=["-p", str(path)])
    assert r.returncode == 125
    assert r.stderr.startswith(f"safebox: {path}: network.mitmProxy: srt key not supported by safebox: safebox does "
                               "not hand connections to another proxy by domain"), r.stderr


def test_a_denied_entrys_reason_is_in_the_refusal_line_the_403_status_phrase_and_the_body(
        shared_home: FakeHome, origin: OriginServer, port: int) -> None:
    reason = "Pushes are blocked here; use the https remote"
    net = {"deniedDomains": [f"localhost:{port}"], "deniedDomainReasons": {f"localhost:{port}": reason}}
    before = len(origin.seen)
    r = _curl(shared_home, ["-p", "-v"], f"http://localhost:{port}/x", net)
    assert r.returncode == 56, r.stderr
    assert f"< HTTP/1.1 403 {reason}" in r.stderr  # what curl -v shows of the CONNECT's answer
    assert (f"safebox: refused CONNECT to localhost:{port} (localhost matches 'localhost:{port}' in "
            f"network.deniedDomains: {reason});") in r.stderr
    r = _curl(shared_home, [], f"http://localhost:{port}/x", net)
    assert r.stdout.startswith(f"safebox refused localhost:{port} by network.deniedDomains: localhost matches "
                               f"'localhost:{port}' in network.deniedDomains: {reason}. "), r.stdout
    assert len(origin.seen) == before
    # Control: without the entry the same request is served.
    r = _curl(shared_home, ["-p"], f"http://localhost:{port}/x", {})
    assert (r.returncode, r.stdout) == (0, "served /x"), r.stderr


def test_a_name_resolving_into_deniedResolvedAddresses_is_refused_before_any_connect(
        shared_home: FakeHome, origin: OriginServer, port: int) -> None:
    net = {"deniedResolvedAddresses": ["127.0.0.0/8", "::1"]}
    before = len(origin.seen)
    r = _curl(shared_home, [], f"http://localhost:{port}/r", net)
    assert r.stdout.startswith(f"safebox refused localhost:{port} by network.deniedResolvedAddresses: localhost "
                               "resolves to "), r.stdout
    assert "is listed in network.deniedResolvedAddresses" in r.stdout
    r = _curl(shared_home, SOCKS, f"http://localhost:{port}/r", net)
    assert r.returncode == 97, r.stderr
    assert len(origin.seen) == before  # refused before any connect
    # Control: allowLocalDestinations alone lets the same name through.
    r = _curl(shared_home, SOCKS, f"http://localhost:{port}/r", {})
    assert (r.returncode, r.stdout) == (0, "served /r"), r.stderr


def test_strip_response_headers_takes_them_off_a_plain_http_response(shared_home: FakeHome, port: int) -> None:
    r = _curl(shared_home, ["-D", "/dev/stderr"], f"http://localhost:{port}/s", {"stripResponseHeaders": ["SET_cookie"]})
    assert (r.returncode, r.stdout) == (0, "served /s"), r.stderr
    assert "Set-Cookie" not in r.stderr and "X-Keep: kept" in r.stderr
    # Control: without the key the header reaches the client.
    r = _curl(shared_home, ["-D", "/dev/stderr"], f"http://localhost:{port}/s", {})
    assert "Set-Cookie: session=secret" in r.stderr


def test_strip_response_headers_takes_them_off_an_interim_response_too(shared_home: FakeHome, port: int) -> None:
    # Found in review: a 1xx head (103 Early Hints) was relayed unchanged, its Set-Cookie with it, though the
    # key says "never passed to the command".
    r = _curl(shared_home, ["-D", "/dev/stderr"], f"http://localhost:{port}/early", {"stripResponseHeaders": ["set-cookie"]})
    assert (r.returncode, r.stdout) == (0, "served /early"), r.stderr
    assert " 103 " in r.stderr and "cookie" not in r.stderr.lower(), r.stderr
    # Control: without the key both heads carry it.
    r = _curl(shared_home, ["-D", "/dev/stderr"], f"http://localhost:{port}/early", {})
    assert "Set-Cookie: early=secret" in r.stderr and "Set-Cookie: session=secret" in r.stderr, r.stderr


def test_require_host_match_answers_421_to_a_host_header_naming_another_host(shared_home: FakeHome,
                                                                            port: int) -> None:
    wrong = ["-H", "Host: other.example", "-o", "/dev/null", "-w", "%{http_code}"]
    r = _curl(shared_home, wrong, f"http://localhost:{port}/h", {"requireHostMatch": True})
    assert r.stdout == "421", r.stderr
    assert "network.requireHostMatch is set" in r.stderr  # the refusal line
    # Controls: without the key safebox refuses the mismatch too (400); a
    # matching Host is served with the key.
    assert _curl(shared_home, wrong, f"http://localhost:{port}/h", {}).stdout == "400"
    r = _curl(shared_home, ["-H", f"Host: localhost:{port}"], f"http://localhost:{port}/h", {"requireHostMatch": True})
    assert (r.returncode, r.stdout) == (0, "served /h"), r.stderr


def test_refuse_opaque_tunnels_refuses_connect_and_socks5_but_not_plain_http(shared_home: FakeHome,
                                                                           port: int) -> None:
    net = {"refuseOpaqueTunnels": True}
    r = _curl(shared_home, ["-p"], f"http://localhost:{port}/o", net)
    assert r.returncode == 56 and "CONNECT tunnel failed, response 403" in r.stderr, r.stderr
    assert "network.refuseOpaqueTunnels is set" in r.stderr
    assert _curl(shared_home, SOCKS, f"http://localhost:{port}/o", net).returncode == 97
    # Controls: plain HTTP, which the proxy reads, still passes; without the
    # key the tunnels work.
    r = _curl(shared_home, [], f"http://localhost:{port}/o", net)
    assert (r.returncode, r.stdout) == (0, "served /o"), r.stderr
    for args in (["-p"], SOCKS):
        assert _curl(shared_home, args, f"http://localhost:{port}/o", {}).stdout == "served /o"


def test_strict_allowlist_refuses_learn_and_ask_modes_with_one_line(shared_home: FakeHome, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "learned.json"
    r = shared_home.run(["true"], opts=[*_opts(shared_home, {"strictAllowlist": True}), "--learn", str(out)])
    assert r.returncode == 125
    assert r.stderr.startswith("safebox: --learn lets the command reach hosts outside network.allowedDomains, "
                               "which network.strictAllowlist forbids"), r.stderr
    r = shared_home.run(["true"], opts=[*_opts(shared_home, {"strictAllowlist": True}), "--ask"])
    assert r.returncode == 125
    assert r.stderr.startswith("safebox: --ask would never ask: network.strictAllowlist refuses every host "
                               "outside network.allowedDomains without asking"), r.stderr
    # Controls: the same runs without the key.
    r = shared_home.run(["true"], opts=[*_opts(shared_home, {}), "--learn", str(out)])
    assert r.returncode == 0, r.stderr
    assert shared_home.run(["true"], opts=[*_opts(shared_home, {}), "--ask"]).returncode == 0


# -- with network.tlsTerminate: the keys inside a terminated tunnel ------------------


@pytest.fixture(scope="module")
def tls_origin(scratch):  # type: ignore[no-untyped-def]
    from netservers import make_test_ca

    ca = make_test_ca(scratch / f"tls-{token()}")
    with serving(tls=ca.server_context(["localhost", "127.0.0.1"])) as srv:
        yield ca, srv.port


def test_inside_a_terminated_tunnel_require_host_match_answers_421_and_opaque_tunnels_are_closed(
        shared_home: FakeHome, tls_origin, origin: OriginServer, port: int) -> None:  # type: ignore[no-untyped-def]
    ca, tls_port = tls_origin
    tls = {"tlsTerminate": {"extraCaCertPaths": [str(ca.cert_path)]}}
    keys = {**tls, "requireHostMatch": True, "refuseOpaqueTunnels": True}
    code = ["-o", "/dev/null", "-w", "%{http_code}"]
    url = f"https://localhost:{tls_port}/t"
    # HTTPS is terminated, so refuseOpaqueTunnels lets it through.
    r = _curl(shared_home, [], url, keys)
    assert (r.returncode, r.stdout) == (0, f"origin-{tls_port} GET /t"), r.stderr
    r = _curl(shared_home, ["-H", "Host: other.example", *code], url, keys)
    assert r.stdout == "421", r.stderr
    # A CONNECT that carries no TLS is closed once its first bytes are seen.
    before = len(origin.seen)
    r = _curl(shared_home, ["-p"], f"http://localhost:{port}/plain", keys)
    assert r.returncode == 52 and "Empty reply from server" in r.stderr, r.stderr
    assert "network.refuseOpaqueTunnels is set" in r.stderr and len(origin.seen) == before
    # Controls, termination alone: the mismatched Host is rewritten to the
    # CONNECT target and served; the plain tunnel is relayed.
    assert _curl(shared_home, ["-H", "Host: other.example", *code], url, tls).stdout == "200"
    assert _curl(shared_home, ["-p"], f"http://localhost:{port}/plain", tls).stdout == "served /plain"


# -- with runtime decisions (runtime/decisions.py): the keys hold for lists that change ---------


def _ok(r) -> bool:  # type: ignore[no-untyped-def]
    return r.returncode == 0 and r.stdout == "served /a"


def test_strict_allowlist_never_asks_on_request_and_live_lists_keep_the_resolved_address_check(
        shared_home: FakeHome, port: int) -> None:
    import safebox

    url = f"http://localhost:{port}/a"
    cmd = ["curl", "-sS", "--max-time", "20", url]
    asked: list[object] = []
    strict = {"network": {"allowLocalDestinations": True, "strictAllowlist": True}}
    with safebox.Sandbox(strict, cwd=shared_home.work, env=shared_home.env(),
                         on_request=lambda req: asked.append(req) is None) as sb:
        r = sb.run(cmd, capture_output=True, text=True)
    assert asked == [] and r.stdout.startswith(f"safebox refused localhost:{port} by network.allowedDomains"), r.stdout
    # Control: without the key the callback is asked, and its yes is served.
    with safebox.Sandbox({"network": {"allowLocalDestinations": True}}, cwd=shared_home.work, env=shared_home.env(),
                         on_request=lambda req: asked.append(req) is None) as sb:
        assert _ok(sb.run(cmd, capture_output=True, text=True))
    assert len(asked) == 1
    # deniedResolvedAddresses holds for a host allowed while the sandbox runs.
    resolved = {"network": {"allowLocalDestinations": True, "deniedResolvedAddresses": ["127.0.0.0/8", "::1"]}}
    with safebox.Sandbox(resolved, cwd=shared_home.work, env=shared_home.env(), on_request=lambda _r: True) as sb:
        r = sb.run(cmd, capture_output=True, text=True)
        assert "by network.deniedResolvedAddresses" in r.stdout, r.stdout
        sb.allow_domain("localhost")
        r = sb.run(cmd, capture_output=True, text=True)
        assert "by network.deniedResolvedAddresses" in r.stdout, r.stdout

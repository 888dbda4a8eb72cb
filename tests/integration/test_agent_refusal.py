"""A refusal an agent can act on (docs/network.md, "What a refused client
sees"): real curl through ``safebox exec`` and through the API gets a 403
whose body and ``X-Safebox-Refused: <host>; <rule>; <fix>`` header say why in
one line, for plain HTTP and CONNECT; SOCKS5 gets reply 0x02 and the API's
``network`` event carries the same line as ``message``.

Refused names are refused before any lookup; the control is a local server
reached by an allowed name (``localhost`` with allowLocalDestinations).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

import safebox
from netservers import serving
from sbx import BWRAP_ONLY, HELPER_ONLY, FakeHome, token

pytestmark = pytest.mark.needs_bwrap

LOCAL = {"allowedDomains": ["localhost"], "allowLocalDestinations": True}
WITHOUT = {"both": None, HELPER_ONLY: "bwrap", BWRAP_ONLY: "helper"}


def line(host: str, port: int, fix: str) -> str:
    return (f"safebox refused {host}:{port} by network.allowedDomains: {host} is not in network.allowedDomains. "
            f"Fix, for whoever runs the sandbox: {fix}. Retrying, or another route to the host, is refused the "
            "same way.")


@pytest.fixture(scope="module")
def server() -> Iterator[int]:
    with serving(body=b"ok\n") as srv:
        yield srv.port


def policy(home: FakeHome) -> list[str]:
    path = home.root / f"policy-{token()}.json"
    path.write_text(json.dumps({"network": LOCAL}))
    return ["-p", str(path)]


def test_a_refused_plain_http_request_gets_a_403_that_says_why_in_one_line(shared_home: FakeHome,
                                                                         server: int) -> None:
    opts = policy(shared_home)
    r = shared_home.run(["curl", "-sS", "-D", "-", "--max-time", "20", f"http://pypi.org:{server}/"], opts=opts)
    assert r.returncode == 0, r.stderr
    head, _, body = r.stdout.partition("\n\n")  # text mode: CRLF read as LF
    assert head.startswith("HTTP/1.1 403 Forbidden\n"), r.stdout
    fix = "add pypi.org to network.allowedDomains or use the preset pip"
    assert f"\nX-Safebox-Refused: pypi.org; network.allowedDomains; {fix}\n" in head + "\n", head
    assert body == line("pypi.org", server, fix) + "\n"
    # The CLI's own line on stderr is unchanged (the user's view).
    assert f"safebox: refused HTTP to pypi.org:{server}" in r.stderr and "--allow-domain pypi.org" in r.stderr
    # Control: an allowed name through the same proxy gets the server's answer.
    r = shared_home.run(["curl", "-sS", "-D", "-", "--max-time", "20", f"http://localhost:{server}/"], opts=opts)
    assert r.returncode == 0 and r.stdout.startswith("HTTP/1.1 200") and "X-Safebox" not in r.stdout, r.stdout


def test_a_refused_connect_gets_the_header_too(shared_home: FakeHome, server: int) -> None:
    opts = policy(shared_home)
    r = shared_home.run(["curl", "-sS", "-p", "-D", "-", "--max-time", "20", f"http://refused.invalid:{server}/"],
                        opts=opts)
    assert r.returncode == 56 and "CONNECT tunnel failed, response 403" in r.stderr, r.stderr
    assert ("X-Safebox-Refused: refused.invalid; network.allowedDomains; add refused.invalid to "
            "network.allowedDomains\n") in r.stdout, r.stdout
    r = shared_home.run(["curl", "-sS", "-p", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "20",
                         f"http://localhost:{server}/"], opts=opts)
    assert (r.returncode, r.stdout) == (0, "200"), r.stderr  # control: an allowed CONNECT


@pytest.mark.parametrize("mode", ["both", HELPER_ONLY, BWRAP_ONLY])
def test_through_the_api_every_front_end_refuses_with_the_line_and_the_event_carries_it(
        shared_home: FakeHome, server: int, mode: str) -> None:
    with safebox.Sandbox({"network": LOCAL}, cwd=shared_home.work, env=shared_home.env(),
                         without=WITHOUT[mode]) as sb:
        r = sb.run(["curl", "-sS", "-D", "-", "--max-time", "20", f"http://agent.invalid:{server}/"],
                   capture_output=True, text=True)
        # ALL_PROXY: the SOCKS5 port (another one without bwrap).
        socks = sb.run(f'curl -sS -x "$ALL_PROXY" --max-time 20 http://socks.invalid:{server}/', shell=True,
                       capture_output=True, text=True)
        ok = sb.run(f'curl -sS -x "$ALL_PROXY" --max-time 20 http://localhost:{server}/', shell=True,
                    capture_output=True, text=True)
    want = line("agent.invalid", server, "add agent.invalid to network.allowedDomains")
    assert r.stdout.endswith("\n\n" + want + "\n"), r.stdout  # text mode: universal newlines
    assert ("X-Safebox-Refused: agent.invalid; network.allowedDomains; add agent.invalid to "
            "network.allowedDomains\n") in r.stdout
    [ev] = [e for e in r.events if e.kind == "network"]
    assert (ev.data["host"], ev.data["protocol"], ev.data["rule"], ev.data["message"]) == (
        "agent.invalid", "http", "network.allowedDomains", want)
    # SOCKS5 has room for a reply code only (0x02: not allowed); the event says why.
    assert socks.returncode == 97 and "(2)" in socks.stderr, socks.stderr
    [ev] = [e for e in socks.events if e.kind == "network"]
    assert (ev.data["protocol"], ev.data["message"]) == (
        "socks5", line("socks.invalid", server, "add socks.invalid to network.allowedDomains"))
    assert (ok.returncode, ok.stdout) == (0, "ok\n"), ok.stderr  # control: an allowed name through SOCKS5

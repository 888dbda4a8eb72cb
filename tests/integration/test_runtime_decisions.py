"""Runtime decisions through the API (docs/api.md, "Runtime decisions"):
``Sandbox(on_request=...)`` answers for a host no entry allows, and
``allow_domain``/``deny_domain`` change the lists of a live sandbox. Real
proxy, real curl inside, a real local server; ``localhost`` and
``127.0.0.1`` (allowLocalDestinations) stand for hosts the policy does not
list. Each refusal has its control: the same request, answered or listed,
gets the server's answer.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest

import safebox
from netservers import serving
from sbx import FakeHome

pytestmark = pytest.mark.needs_bwrap

LOCAL = {"network": {"allowLocalDestinations": True}}


@pytest.fixture(scope="module")
def server() -> Iterator[int]:
    with serving(body=b"ok\n") as srv:
        yield srv.port


def curl(host: str, port: int) -> list[str]:
    return ["curl", "-sS", "-D", "-", "--max-time", "20", f"http://{host}:{port}/"]


def test_on_request_allows_once_for_the_lifetime_or_denies_with_a_reason(shared_home: FakeHome,
                                                                         server: int) -> None:
    asked: list[safebox.Request] = []
    answers: dict[str, list[object]] = {
        "localhost": [False, True, safebox.Decision(True)],
        "127.0.0.1": [safebox.Decision(False, "use the package mirror <mirror.internal> instead\nof this host")],
    }

    def on_request(req: safebox.Request) -> object:
        asked.append(req)
        return answers[req.host].pop(0)

    with safebox.Sandbox(LOCAL, cwd=shared_home.work, env=shared_home.env(), on_request=on_request) as sb:
        runs = [sb.run(curl("LOCALHOST", server), capture_output=True, text=True) for _ in range(4)]
        literal = [sb.run(curl("127.0.0.1", server), capture_output=True, text=True) for _ in range(2)]
    # False: this request is refused, by the rule "ask", with a 403 that says so.
    assert runs[0].returncode == 0 and runs[0].stdout.startswith("HTTP/1.1 403"), runs[0].stdout
    assert "\nX-Safebox-Refused: localhost; ask; none: whoever runs the sandbox refused it when asked\n" in runs[0].stdout
    [ev] = [e for e in runs[0].events if e.kind == "network"]
    assert (ev.data["rule"], ev.data["host"]) == ("ask", "localhost")
    assert ev.data["message"].startswith(f"safebox refused localhost:{server} by ask: denied when asked. ")
    # Control: True lets the same request through, once: the next one is asked again.
    assert runs[1].stdout.endswith("\nok\n") and runs[1].stdout.startswith("HTTP/1.1 200"), runs[1].stdout
    # Decision(True): allowed from then on, without asking again.
    assert runs[2].stdout.endswith("\nok\n") and runs[3].stdout.endswith("\nok\n"), runs[3].stdout
    assert [(r.kind, r.host, r.port, r.protocol) for r in asked] == [("network", "localhost", server, "http")] * 3 + [
        ("network", "127.0.0.1", server, "http")]
    # Decision(False, reason): the reason, cleaned to one line, is what the client and the event read;
    # remembered: the second request is refused without asking.
    want = "use the package mirror mirror.internal instead of this host"
    for r in literal:
        assert r.stdout.startswith("HTTP/1.1 403") and f"by ask: {want}. Fix" in r.stdout, r.stdout
        [ev] = [e for e in r.events if e.kind == "network"]
        assert want in ev.data["message"]
    assert len(asked) == 4


def test_questions_are_serialised_and_one_left_unanswered_is_denied(shared_home: FakeHome, server: int) -> None:
    active = [0]
    most = [0]
    lock = threading.Lock()

    def slow_yes(_req: safebox.Request) -> bool:
        with lock:
            active[0] += 1
            most[0] = max(most[0], active[0])
        time.sleep(0.4)
        with lock:
            active[0] -= 1
        return True

    both = (f"curl -sS --max-time 20 http://localhost:{server}/ & curl -sS --max-time 20 "
            f"http://127.0.0.1:{server}/ & wait")
    with safebox.Sandbox(LOCAL, cwd=shared_home.work, env=shared_home.env(), on_request=slow_yes) as sb:
        r = sb.run(both, shell=True, capture_output=True, text=True)
    # Control: answered in time, both connections go through; never two questions at once.
    assert (r.returncode, r.stdout) == (0, "ok\nok\n"), r.stderr
    assert most[0] == 1

    def never(_req: safebox.Request) -> bool:
        time.sleep(3)
        return True

    with safebox.Sandbox(LOCAL, cwd=shared_home.work, env=shared_home.env(), on_request=never,
                         request_timeout=0.5) as sb:
        r = sb.run(curl("localhost", server), capture_output=True, text=True)
    assert r.stdout.startswith("HTTP/1.1 403") and "by ask: denied: no answer within 0.5 s." in r.stdout, r.stdout


def test_an_async_on_request_runs_on_the_harness_event_loop(shared_home: FakeHome, server: int) -> None:
    seen: list[object] = []

    async def on_request(req: safebox.Request) -> object:
        seen.append(asyncio.get_running_loop())
        await asyncio.sleep(0.01)
        return safebox.Decision(req.host == "localhost", "only localhost")

    async def main() -> tuple[safebox.CompletedRun, safebox.CompletedRun, object]:
        with safebox.Sandbox(LOCAL, cwd=shared_home.work, env=shared_home.env(), on_request=on_request) as sb:
            ok = await sb.run_async(curl("localhost", server), capture_output=True, text=True)
            no = await sb.run_async(curl("127.0.0.1", server), capture_output=True, text=True)
        return ok, no, asyncio.get_running_loop()

    ok, no, loop = asyncio.run(main())
    assert ok.stdout.endswith("\nok\n"), ok.stdout  # control
    assert no.stdout.startswith("HTTP/1.1 403") and "by ask: only localhost." in no.stdout, no.stdout
    assert seen == [loop, loop]


def test_allow_domain_and_deny_domain_change_the_lists_while_a_command_runs(shared_home: FakeHome,
                                                                            server: int) -> None:
    step = (f"curl -sS -o /dev/null -w '%{{http_code}}\\n' --max-time 20 http://localhost:{server}/; read go")
    script = f"{step}; {step}; {step}; {step}; {step}"
    with safebox.Sandbox({"network": {"allowLocalDestinations": True, "allowedDomains": ["example.com"]}},
                         cwd=shared_home.work, env=shared_home.env()) as sb:
        p = sb.popen(["sh", "-c", script], stdin=safebox.PIPE, stdout=safebox.PIPE, text=True)
        assert p.stdout is not None and p.stdin is not None

        def next_code() -> str:
            line = p.stdout.readline().strip()  # type: ignore[union-attr]
            return line

        assert next_code() == "403"  # not listed
        assert sb.allow_domain("LOCALHOST") == "localhost"
        p.stdin.write("\n")
        p.stdin.flush()
        assert next_code() == "200"  # control: the same command, the same request, now listed
        sb.deny_domain("localhost", reason="the maintenance window began")
        p.stdin.write("\n")
        p.stdin.flush()
        assert next_code() == "403"
        sb.allow_domain(f"localhost:{server}")  # another entry: the deny still wins
        p.stdin.write("\n")
        p.stdin.flush()
        assert next_code() == "403"
        sb.allow_domain("localhost")  # the same entry: the caller's latest word
        p.stdin.write("\n")
        p.stdin.flush()
        assert next_code() == "200"
        p.stdin.write("\n")
        p.stdin.close()
        assert p.wait(timeout=30) == 0
        p.stdout.close()
        with pytest.raises(ValueError, match="not a domain entry: 'a b'"):
            sb.allow_domain("a b")
    denied = [e for e in p.events if e.kind == "network"]
    assert "localhost is denied ('localhost' in network.deniedDomains): the maintenance window began" in (
        denied[-1].data["message"])
    # A sandbox that has no network cannot be given one later: it says how.
    with safebox.Sandbox(cwd=shared_home.work, env=shared_home.env()) as sb, \
            pytest.raises(safebox.SafeboxError, match="this sandbox has no network to change"):
        sb.allow_domain("localhost")


def test_a_flood_of_questions_is_bounded_and_the_rest_denied_at_once(shared_home: FakeHome, server: int) -> None:
    # 40 connections to 40 ports at once while the first question hangs: 32
    # may wait for an answer, the others are denied without being asked.
    release = threading.Event()
    asked: list[int] = []

    def hold(req: safebox.Request) -> bool:
        asked.append(req.port)
        if req.port == server:
            (shared_home.work / "asked").touch()
        release.wait(20)
        return req.port == server

    ports = [server, *range(20001, 20040)]
    one = "(curl -s -o /dev/null -w '%{{http_code}} {p}\\n' --max-time 30 http://localhost:{p}/) &"
    # The control's question first (it waits for its answer), then the flood:
    # started all at once, the control's could be among those denied unasked.
    flood = (one.format(p=server) + " until [ -e asked ]; do sleep 0.02; done; "
             + " ".join(one.format(p=p) for p in ports[1:]) + " wait")
    with safebox.Sandbox(LOCAL, cwd=shared_home.work, env=shared_home.env(), on_request=hold,
                         request_timeout=25) as sb:
        p = sb.popen(flood, shell=True, stdout=safebox.PIPE, text=True)
        assert p.stdout is not None
        early = [p.stdout.readline() for _ in range(len(ports) - 32)]
        release.set()
        rest, _ = p.communicate(timeout=60)
    (shared_home.work / "asked").unlink(missing_ok=True)
    assert all(line.startswith("403 ") for line in early), early
    assert f"200 {server}\n" in rest  # control: the question answered yes
    assert len(asked) <= 32
    denied = [e for e in p.events if e.kind == "network" and "questions are already waiting" in e.data["message"]]
    assert len(denied) == len(ports) - 32


def test_an_answer_allows_the_name_never_a_local_address_behind_it(shared_home: FakeHome, server: int) -> None:
    # "localhost" allowed when asked still resolves to loopback: without
    # allowLocalDestinations the address check refuses it after the answer.
    with safebox.Sandbox(cwd=shared_home.work, env=shared_home.env(), on_request=lambda _r: True) as sb:
        r = sb.run(curl("localhost", server), capture_output=True, text=True)
    assert r.stdout.startswith("HTTP/1.1 403"), r.stdout
    assert "\nX-Safebox-Refused: localhost; network.allowLocalDestinations; " in r.stdout, r.stdout
    # A denied host is never put to the callback at all.
    asked: list[safebox.Request] = []
    with safebox.Sandbox({"network": {"allowLocalDestinations": True, "deniedDomains": ["localhost"]}},
                         cwd=shared_home.work, env=shared_home.env(),
                         on_request=lambda req: asked.append(req) is None) as sb:
        r = sb.run(curl("localhost", server), capture_output=True, text=True)
    assert "\nX-Safebox-Refused: localhost; network.deniedDomains; " in r.stdout and asked == [], r.stdout
    # Control: with local destinations allowed, the same answer reaches the server
    # (test_on_request_allows_once_for_the_lifetime_or_denies_with_a_reason).
    with safebox.Sandbox(LOCAL, cwd=shared_home.work, env=shared_home.env(), on_request=lambda _r: True) as sb:
        r = sb.run(curl("localhost", server), capture_output=True, text=True)
    assert r.stdout.endswith("\nok\n"), r.stdout


def test_an_answer_for_the_lifetime_never_opens_a_local_address_literal(shared_home: FakeHome, server: int) -> None:
    # Found in review: Decision(True) listed the literal it was asked about, and a literal entry passes whatever
    # its class, so a harness allowing "any host but ..." opened host loopback (any spelling) without
    # allowLocalDestinations. Such a literal is now refused without asking.
    asked: list[safebox.Request] = []

    def anything(req: safebox.Request) -> safebox.Decision:
        asked.append(req)
        return safebox.Decision(True)

    forms = ("127.0.0.1", "[::ffff:127.0.0.1]", "[::ffff:7f00:1]")
    with safebox.Sandbox(cwd=shared_home.work, env=shared_home.env(), on_request=anything) as sb:
        runs = [sb.run(curl(h, server), capture_output=True, text=True) for h in forms for _ in range(2)]
    for r in runs:
        assert r.stdout.startswith("HTTP/1.1 403"), r.stdout
        assert "; network.allowLocalDestinations; " in r.stdout, r.stdout
    assert asked == []
    # Control: with local destinations allowed, the literal is asked about and the answer opens it.
    with safebox.Sandbox(LOCAL, cwd=shared_home.work, env=shared_home.env(), on_request=anything) as sb:
        r = sb.run(curl("[::ffff:127.0.0.1]", server), capture_output=True, text=True)
    assert r.stdout.endswith("\nok\n") and [a.host for a in asked] == ["::ffff:7f00:1"], r.stdout

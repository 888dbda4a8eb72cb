"""``Sandbox.run``/``popen`` against the stdlib (docs/api.md, "subprocess
parity"): the same call through ``subprocess`` on the host and through a
real sandbox gives the same return code, output (types and values) and
exception with the same attributes. Plus what the stdlib cannot be compared
with: a str command without ``shell=True`` is refused, a timeout and a kill
keep what was read, no reader thread ever prints a traceback, refusals reach
a harness as events only, each command's events are its own.
"""

from __future__ import annotations

import select
import subprocess
import threading
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import safebox
from sbx import FakeHome

pytestmark = pytest.mark.needs_bwrap

ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "FOO": "bar baz", "LC_ALL": "C.UTF-8"}

#: (id, args, keywords): each run through subprocess.run and Sandbox.run.
CASES: list[tuple[str, Any, dict[str, Any]]] = [
    ("bytes", ["sh", "-c", "echo out; echo err >&2; exit 3"], {"capture_output": True}),
    ("text", ["sh", "-c", "echo out; echo err >&2; exit 3"], {"capture_output": True, "text": True}),
    ("universal_newlines", ["sh", "-c", r"printf 'a\r\nb\rc\n'"], {"stdout": subprocess.PIPE,
                                                                     "universal_newlines": True}),
    ("encoding_errors", ["sh", "-c", r"printf '\377ok\r\nx'"], {"capture_output": True, "encoding": "utf-8",
                                                               "errors": "replace"}),
    ("errors_alone_is_text", ["sh", "-c", r"printf '\377'"], {"capture_output": True, "errors": "surrogateescape"}),
    ("check_fails", ["sh", "-c", "echo partial; exit 4"], {"capture_output": True, "check": True}),
    ("check_passes", ["sh", "-c", "echo fine"], {"capture_output": True, "check": True, "text": True}),
    ("shell_str", "echo $((1+2)) \"$FOO\"; exit 5", {"shell": True, "capture_output": True, "env": ENV}),
    ("shell_list", ['echo "$0-$1"', "a", "b"], {"shell": True, "capture_output": True}),
    ("input_bytes", ["cat"], {"input": b"abc\x00def", "capture_output": True}),
    ("input_text", ["cat"], {"input": "h\u00e9llo\n", "capture_output": True, "encoding": "utf-8"}),
    ("stderr_to_stdout", ["sh", "-c", "echo a; echo b >&2"], {"stdout": subprocess.PIPE,
                                                             "stderr": subprocess.STDOUT}),
    ("devnull", ["sh", "-c", "echo a; echo b >&2"], {"stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE}),
    ("not_captured", ["true"], {}),
    ("env", ["sh", "-c", 'echo "$FOO"'], {"env": ENV, "capture_output": True, "text": True}),
    ("timeout", ["sh", "-c", "echo start; echo e >&2; sleep 30"], {"capture_output": True, "timeout": 1.5}),
    ("timeout_text", ["sh", "-c", "echo start; sleep 30"], {"capture_output": True, "timeout": 1.5, "text": True}),
    ("check_and_timeout", ["sh", "-c", "sleep 30"], {"timeout": 1, "check": True}),
    ("input_and_stdin", ["cat"], {"input": b"x", "stdin": subprocess.DEVNULL}),
    ("capture_and_stdout", ["true"], {"capture_output": True, "stdout": subprocess.PIPE}),
    ("input_str_without_text", ["cat"], {"input": "x", "capture_output": True}),
]


def outcome(call: Any) -> tuple[Any, ...]:
    """What a harness can observe of a run: the result, or the exception and
    every attribute subprocess's exceptions have."""
    try:
        r = call()
    except subprocess.TimeoutExpired as exc:  # safebox.TimeoutExpired is one
        # round(): without pipes the stdlib's own ``timeout`` is the time left (0.99997...).
        return ("TimeoutExpired", exc.cmd, round(exc.timeout, 2), exc.output, type(exc.output), exc.stderr)
    except subprocess.CalledProcessError as exc:  # safebox.CalledProcessError is one
        return ("CalledProcessError", exc.returncode, exc.cmd, exc.output, type(exc.output), exc.stderr)
    except (ValueError, TypeError) as exc:
        return (type(exc).__name__,)
    return ("done", r.returncode, r.stdout, type(r.stdout), r.stderr, type(r.stderr))


@pytest.fixture(scope="module")
def sb(shared_home: FakeHome) -> Any:
    with safebox.Sandbox(cwd=shared_home.work, env=shared_home.env()) as box:
        yield box


@pytest.mark.parametrize(("args", "kw"), [(a, k) for _, a, k in CASES], ids=[i for i, _, _ in CASES])
def test_a_run_gives_what_subprocess_run_gives(sb: safebox.Sandbox, shared_home: FakeHome, args: Any,
                                              kw: dict[str, Any]) -> None:
    env = kw.pop("env", shared_home.env())
    want = outcome(lambda: subprocess.run(args, cwd=shared_home.work, env=env, **kw))  # noqa: PLW1510
    got = outcome(lambda: sb.run(args, env=env, **kw))
    assert got == want


def test_safeboxs_exceptions_are_subprocesss_and_its_own(sb: safebox.Sandbox) -> None:
    with pytest.raises(safebox.CalledProcessError) as e:
        sb.run(["false"], check=True)
    assert isinstance(e.value, subprocess.CalledProcessError) and e.value.returncode == 1
    with pytest.raises(safebox.TimeoutExpired):
        sb.run(["sleep", "30"], timeout=0.5)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=3000), code=st.integers(0, 255),
       mode=st.sampled_from([{}, {"text": True, "errors": "surrogateescape"},
                             {"encoding": "latin-1"}, {"encoding": "utf-8", "errors": "replace"}]))
def test_any_bytes_and_exit_status_come_back_as_subprocess_returns_them(
        sb: safebox.Sandbox, shared_home: FakeHome, data: bytes, code: int, mode: dict[str, Any]) -> None:
    args = ["sh", "-c", 'cat; cat >&2 </dev/null; printf "%s" "$1" >&2; exit "$1"', "sh", str(code)]
    given_input: bytes | str = data
    if mode:  # text mode: the input is a str, encoded by the callee
        given_input = data.decode(mode.get("encoding", "utf-8"), mode.get("errors", "surrogateescape"))
        if mode.get("errors") == "replace":
            given_input = data.decode("utf-8", "replace")
    kw = {"input": given_input, "capture_output": True, **mode}
    want = outcome(lambda: subprocess.run(args, cwd=shared_home.work, env=shared_home.env(), **kw))  # noqa: PLW1510
    assert outcome(lambda: sb.run(args, **kw)) == want


def test_a_str_command_is_refused_unless_shell_is_true(sb: safebox.Sandbox) -> None:
    # subprocess would look for a program named "echo hi"; a person meant a
    # shell line. Neither is guessed: a TypeError says which to pass.
    with pytest.raises(TypeError, match=r"pass a list of arguments, or shell=True"):
        sb.run("echo hi", capture_output=True)
    with pytest.raises(TypeError):
        sb.popen("echo hi")
    r = sb.run("echo hi", shell=True, capture_output=True)  # control: stated, it runs
    assert (r.returncode, r.stdout) == (0, b"hi\n")


def test_a_timeout_carries_the_output_read_and_never_prints_a_reader_traceback(
        sb: safebox.Sandbox, capfd: pytest.CaptureFixture[str]) -> None:
    crashed: list[Any] = []
    old, threading.excepthook = threading.excepthook, crashed.append
    try:
        for _ in range(8):  # the traceback was a race: 7 of 8 tries
            with pytest.raises(safebox.TimeoutExpired) as e:
                sb.run(["sh", "-c", "echo out; echo err >&2; sleep 30"], capture_output=True, timeout=0.8)
            assert (e.value.output, e.value.stdout, e.value.stderr) == (b"out\n", b"out\n", b"err\n")
        time.sleep(0.5)  # any reader thread left has ended by now
    finally:
        threading.excepthook = old
    assert crashed == []
    assert "Exception in thread" not in capfd.readouterr().err


def test_communicate_after_a_timeout_and_kill_returns_all_that_was_read(sb: safebox.Sandbox) -> None:
    with sb.popen(["sh", "-c", "echo a; echo b >&2; sleep 30"], stdout=safebox.PIPE, stderr=safebox.PIPE,
                  text=True) as p:
        with pytest.raises(subprocess.TimeoutExpired) as e:
            p.communicate(timeout=1)
        assert (e.value.output, e.value.stderr) == (b"a\n", b"b\n")  # bytes, as subprocess's
        p.kill()
        assert p.communicate() == ("a\n", "b\n")
    assert p.returncode == 137


def test_communicate_after_kill_alone_returns_what_the_command_wrote(sb: safebox.Sandbox) -> None:
    with sb.popen(["sh", "-c", "echo ready; sleep 30"], stdout=safebox.PIPE, stderr=safebox.PIPE) as p:
        assert p.stdout is not None
        assert select.select([p.stdout], [], [], 30)[0]  # the line is in the pipe, unread
        p.kill()
        assert p.communicate() == (b"ready\n", b"")
    assert p.returncode == 137


def test_the_async_forms_take_the_same_keywords(sb: safebox.Sandbox) -> None:
    import asyncio

    async def go() -> tuple[Any, ...]:
        r = await sb.run_async("printf '%s' \"$0\"", shell=True, capture_output=True, text=True)
        p = await sb.popen_async(["cat"], stdin=safebox.PIPE, stdout=safebox.PIPE, encoding="utf-8")
        out = await p.communicate("\u00e9", timeout=30)
        with pytest.raises(safebox.CalledProcessError):
            await sb.run_async(["false"], check=True)
        return r.stdout, out

    assert asyncio.run(go()) == ("/bin/sh", ("\u00e9", None))  # $0 of /bin/sh -c, as subprocess's


# ------------------------------------------------------------- events, quiet

REFUSED = ["curl", "-s", "-o", "/dev/null", "--max-time", "10"]


def test_refusals_reach_the_harness_as_events_only_unless_quiet_is_false(
        shared_home: FakeHome, capfd: pytest.CaptureFixture[str]) -> None:
    policy = {"network": {"allowedDomains": ["example.com"]}}
    capfd.readouterr()
    with safebox.Sandbox(policy, cwd=shared_home.work, env=shared_home.env()) as sb:
        r = sb.run([*REFUSED, "http://quiet.invalid/"])
    err = capfd.readouterr().err
    assert "quiet.invalid" not in err and "--allow-domain" not in err, err
    assert [e.data["host"] for e in r.events if e.kind == "network"] == ["quiet.invalid"]
    # Control: quiet=False prints safebox exec's line on the process's stderr.
    with safebox.Sandbox(policy, cwd=shared_home.work, env=shared_home.env(), quiet=False) as sb:
        sb.run([*REFUSED, "http://loud.invalid/"])
    err = capfd.readouterr().err
    assert "safebox: refused HTTP to loud.invalid:80" in err and "fix: --allow-domain loud.invalid" in err, err


def test_each_commands_network_events_are_in_its_own_completed_run(shared_home: FakeHome) -> None:
    seen: list[safebox.Event] = []
    with safebox.Sandbox({"network": {"allowedDomains": ["example.com"]}}, cwd=shared_home.work,
                         env=shared_home.env(), on_event=seen.append) as sb:
        r = sb.run([*REFUSED, "http://one.invalid/"])
        # Two at once: each refusal goes to the command it came from.
        got: dict[str, safebox.CompletedRun] = {}
        threads = [threading.Thread(target=lambda h=h: got.__setitem__(h, sb.run(
            ["sh", "-c", f"sleep 0.5; {' '.join(REFUSED)} http://{h}/; sleep 0.5"]))) for h in ("a.invalid", "b.invalid")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    mine = [e for e in r.events if e.kind == "network"]
    start = next(e for e in r.events if e.kind == "start")
    assert [e.data["host"] for e in mine] == ["one.invalid"] and mine[0].pid == start.pid
    assert mine[0].data["message"].startswith("safebox refused one.invalid:80 by network.allowedDomains: ")
    assert mine[0] in seen  # the same event the sandbox's feed had
    for h in ("a.invalid", "b.invalid"):
        assert [e.data["host"] for e in got[h].events if e.kind == "network"] == [h], got[h].events


def test_a_policy_shows_its_layers_and_gives_them_back_as_one_dict() -> None:
    a = safebox.Policy.from_dict({"network": {"allowedDomains": ["a.com"]}, "filesystem": {"allowWrite": ["."]}},
                                 name="base")
    b = safebox.Policy.from_dict({"network": {"allowedDomains": ["b.com", "a.com"],
                                              "allowLocalDestinations": True}}, name="more")
    merged = a.merge(b)
    assert repr(merged) == "Policy(layers=['base', 'more'])"
    assert merged.to_dict() == {"network": {"allowedDomains": ["a.com", "b.com"], "allowLocalDestinations": True},
                                "filesystem": {"allowWrite": ["."]}}
    again = safebox.Policy.from_dict(merged.to_dict())
    assert again.to_dict() == merged.to_dict() and again == merged
    d = merged.to_dict()
    d["network"]["allowedDomains"].append("c.com")  # a copy: the policy is unchanged
    assert "c.com" not in merged.to_dict()["network"]["allowedDomains"]

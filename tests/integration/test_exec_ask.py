"""``safebox exec --ask`` and ``--control-fd`` (docs/index.md, "Deciding
while it runs"): real safebox, proxy and curl; a pseudo-terminal made by the
test is safebox's controlling terminal (``setsid -c``), and the test answers
on it as the user would. ``localhost`` (allowLocalDestinations) stands for a
host the policy does not list; each refusal has its control.
"""

from __future__ import annotations

import errno
import json
import os
import select
import subprocess
import time
from collections.abc import Iterator, Sequence

import pytest

from netservers import serving
from sbx import BOTH, BWRAP_ONLY, HELPER_ONLY, FakeHome, token

pytestmark = pytest.mark.needs_bwrap

PROMPT = "allow [o]nce, for this [r]un, or [d]eny?"


@pytest.fixture(scope="module")
def server() -> Iterator[int]:
    with serving(body=b"ok\n") as srv:
        yield srv.port


def local_policy(home: FakeHome, allowed: Sequence[str] = ()) -> list[str]:
    path = home.root / f"policy-{token()}.json"
    path.write_text(json.dumps({"network": {"allowLocalDestinations": True, "allowedDomains": list(allowed)}}))
    return ["-p", str(path)]


def code(port: int, host: str = "localhost") -> str:
    return f"curl -sS -o /dev/null -w '%{{http_code}}\\n' --max-time 30 http://{host}:{port}/"


def on_terminal(home: FakeHome, command: Sequence[str], opts: Sequence[str], answers: Sequence[str | None], *,
                delay: float = 0.0, timeout: float = 60, mode: str = BOTH, typeahead: bytes = b""
                ) -> tuple[int, str, str, str]:
    """Run safebox with a new pseudo-terminal as its controlling terminal;
    answer each question with the next of ``answers`` (None: say nothing),
    ``delay`` seconds after it appears. Returns (status, stdout, stderr, what
    the terminal showed)."""
    master, slave = os.openpty()
    p = subprocess.Popen(["setsid", "-w", "-c", *home.argv(command, opts=opts, mode=mode)], stdin=slave,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=home.work, env=home.env(), text=True)
    os.close(slave)
    if typeahead:
        os.write(master, typeahead)  # typed before any question, as for the command
    shown = ""
    pending = list(answers)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 4096)
                except OSError as exc:
                    assert exc.errno == errno.EIO
                    chunk = b""
                if not chunk:
                    break  # every end of the terminal closed: safebox is gone
                shown += chunk.decode("ascii", "replace")
                while shown.count(PROMPT) > len(answers) - len(pending):
                    answer = pending.pop(0) if pending else None
                    if answer is not None:
                        time.sleep(delay)
                        os.write(master, answer.encode() + b"\n")
            elif p.poll() is not None:
                break
        out, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        os.close(master)
    return p.returncode, out, err, shown


def test_ask_prompts_on_the_terminal_and_for_this_run_is_remembered_audited_and_learned(
        fresh_home: FakeHome, server: int) -> None:
    log, learned = fresh_home.root / "audit.jsonl", fresh_home.root / "learned.json"
    opts = [*local_policy(fresh_home), "--ask", "--audit-log", str(log), "--learn", str(learned)]
    rc, out, err, tty = on_terminal(fresh_home, ["sh", "-c", f"{code(server)}; {code(server)}"], opts, ["r"])
    assert (rc, out) == (0, "200\n200\n"), err + tty
    assert tty.count(PROMPT) == 1 and f"the command wants localhost port {server} (HTTP)" in tty, tty
    assert f"localhost:{server} allowed for this run" in tty
    events = [json.loads(line) for line in log.read_text().splitlines()]
    [ask] = [e for e in events if e["event"] == "ask"]
    assert (ask["host"], ask["port"], ask["answer"], ask["by"]) == ("localhost", server, "allow", "terminal")
    # --learn with --ask: the answers decide, and what was allowed becomes policy.
    assert "localhost" in json.loads(learned.read_text())["network"]["allowedDomains"]


def test_ask_allow_once_asks_again_and_deny_is_said_to_the_client(fresh_home: FakeHome, server: int) -> None:
    log = fresh_home.root / "audit.jsonl"
    three = f"{code(server)}; {code(server)}; {code(server)}"
    rc, out, err, tty = on_terminal(fresh_home, ["sh", "-c", three],
                                    [*local_policy(fresh_home), "--ask", "--audit-log", str(log)], ["o", "d"])
    # Once: allowed (the control), then asked again; deny: refused, and not asked a third time.
    assert (rc, out) == (0, "200\n403\n403\n"), err + tty
    assert tty.count(PROMPT) == 2, tty
    assert f"safebox: refused HTTP to localhost:{server} by ask (denied at the terminal)" in err, err
    answers = [(e["answer"], e["by"]) for e in map(json.loads, log.read_text().splitlines()) if e["event"] == "ask"]
    assert answers == [("allow-once", "terminal"), ("deny", "terminal")]


PROBE = """\
import errno, fcntl, termios
try:
    for c in b"r\\n":
        fcntl.ioctl(0, termios.TIOCSTI, bytes([c]))
    print("TIOCSTI injected")
except OSError as e:
    print("TIOCSTI", errno.errorcode[e.errno])
"""


@pytest.mark.parametrize("mode", [BOTH, HELPER_ONLY, BWRAP_ONLY])
@pytest.mark.parametrize("user", [None, "o"], ids=["nobody-answers", "control-the-user-answers"])
def test_the_command_cannot_answer_its_own_question(fresh_home: FakeHome, server: int, user: str | None,
                                                    mode: str) -> None:
    # While safebox asks, the command pushes "r\n" into the terminal (TIOCSTI)
    # and writes it on the terminal it holds: neither is an answer.
    (fresh_home.work / "probe.py").write_text(PROBE)
    script = f"{code(server)} & sleep 1; python3 probe.py; printf 'r\\n' >&0; printf 'r\\n' >/dev/tty; wait"
    rc, out, err, tty = on_terminal(fresh_home, ["sh", "-c", script],
                                    [*local_policy(fresh_home), "--ask", "--ask-timeout", "5"], [user], delay=2.5,
                                    mode=mode)
    assert "TIOCSTI EPERM" in out, out + err
    assert tty.count(PROMPT) == 1, tty
    if user is None:
        assert out.startswith("403\n") or "\n403\n" in out, out + err + tty
        assert f"no answer: localhost:{server} denied" in tty, tty
    else:
        assert "200\n" in out, out + err + tty


def test_keys_typed_before_the_question_are_not_its_answer(fresh_home: FakeHome, server: int) -> None:
    rc, out, err, tty = on_terminal(fresh_home, ["sh", "-c", f"sleep 1; {code(server)}"],
                                    [*local_policy(fresh_home), "--ask", "--ask-timeout", "2"], [None],
                                    typeahead=b"r\n")
    assert (rc, out) == (0, "403\n"), err + tty
    assert f"no answer: localhost:{server} denied" in tty, tty
    # Control: the same keys typed after the question answer it.
    rc, out, err, tty = on_terminal(fresh_home, ["sh", "-c", f"sleep 1; {code(server)}"],
                                    [*local_policy(fresh_home), "--ask", "--ask-timeout", "5"], ["r"])
    assert (rc, out) == (0, "200\n"), err + tty


def test_a_local_address_literal_is_refused_without_a_question_whatever_its_spelling(
        fresh_home: FakeHome, server: int) -> None:
    # Found in review: "[::ffff:7f00:1] port N" at the prompt hides loopback;
    # "for this run" listed it literally, and a literal entry passes whatever
    # its class: the command reached a host-loopback service without
    # allowLocalDestinations. No answer may open a local address.
    script = f"{code(server, '[::ffff:127.0.0.1]')}; {code(server, '127.0.0.1')}"
    rc, out, err, tty = on_terminal(fresh_home, ["sh", "-c", script], ["--ask"], ["r", "r"])
    assert (rc, out) == (0, "403\n403\n"), err + tty
    assert PROMPT not in tty, tty
    assert "127.0.0.1, a loopback address; local destinations need network.allowLocalDestinations" in err, err
    # Control: with local destinations allowed, the same literals are asked about, and "r" opens them.
    rc, out, err, tty = on_terminal(fresh_home, ["sh", "-c", script], [*local_policy(fresh_home), "--ask"], ["r", "r"])
    assert (rc, out) == (0, "200\n200\n"), err + tty
    assert tty.count(PROMPT) == 2 and "the command wants [::ffff:7f00:1] port" in tty, tty


def test_ask_without_a_terminal_denies_and_says_so_once(fresh_home: FakeHome, server: int) -> None:
    both = f"{code(server)}; {code(server, '127.0.0.1')}"
    p = subprocess.run(fresh_home.argv(["sh", "-c", both], opts=[*local_policy(fresh_home), "--ask"]),
                       cwd=fresh_home.work, env=fresh_home.env(), stdin=subprocess.DEVNULL, capture_output=True,
                       text=True, timeout=60, start_new_session=True)  # no controlling terminal
    assert (p.returncode, p.stdout) == (0, "403\n403\n"), p.stderr
    said = [line for line in p.stderr.splitlines() if line.startswith("safebox: --ask:")]
    assert said == [f"safebox: --ask: no terminal to ask on (/dev/tty: No such device or address): "
                    f"localhost:{server} and every other host no entry allows are denied"], p.stderr
    # Control: the same run with the host listed reaches it.
    p = subprocess.run(fresh_home.argv(["sh", "-c", code(server)], opts=[*local_policy(fresh_home, ["localhost"]),
                                                                          "--ask"]),
                       cwd=fresh_home.work, env=fresh_home.env(), stdin=subprocess.DEVNULL, capture_output=True,
                       text=True, timeout=60, start_new_session=True)
    assert (p.returncode, p.stdout) == (0, "200\n"), p.stderr


def test_control_fd_replaces_the_lists_while_the_command_runs_and_the_command_never_gets_it(
        fresh_home: FakeHome, server: int) -> None:
    r, w = os.pipe()
    try:
        if r < 3:  # pragma: no cover - pytest holds 0-2
            r = os.dup(r)
        # Control: outside the sandbox the descriptor is there to read.
        outside = subprocess.run(["sh", "-c", f"test -e /proc/self/fd/{r} && echo open"], pass_fds=(r,),
                                 capture_output=True, text=True, check=False)
        assert outside.stdout == "open\n"
        poll = (f"for i in $(seq 100); do c=$({code(server)}); [ $c = 200 ] && break; sleep 0.1; done; echo $c")
        script = (f"{code(server)}; ls /proc/self/fd/{r} 2>&1 | sed 's/.*: //'; "
                  f" python3 -c 'import os; os.read({r}, 1)' 2>&1 | tail -1 | sed 's/.*] //';"
                  f" echo ready; read go; {poll}")
        p = subprocess.Popen(fresh_home.argv(["sh", "-c", script],
                                             opts=[*local_policy(fresh_home), "--control-fd", str(r)]),
                             cwd=fresh_home.work, env=fresh_home.env(), stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, pass_fds=(r,))
        os.close(r)
        assert p.stdout is not None and p.stdin is not None
        first = [p.stdout.readline() for _ in range(4)]
        assert first == ["403\n", "No such file or directory\n", "Bad file descriptor\n", "ready\n"], first
        os.write(w, b'{"network": {"allowedDomains": ["a b"]}}\n')
        os.write(w, json.dumps({"network": {"allowedDomains": ["localhost"], "deniedDomains": []},
                                "filesystem": {}}).encode() + b"\n")
        p.stdin.write("\n")
        p.stdin.flush()
        rest, err = p.communicate(timeout=60)
        assert (p.returncode, rest) == (0, "200\n"), err
        assert (f"safebox: invalid config on --control-fd {r}: not a domain entry: 'a b'") in err, err
    finally:
        os.close(w)


def _fifo_run(home: FakeHome, fifo: str, server: int) -> subprocess.CompletedProcess[str]:
    """Run a command that writes a config of its own into ``fifo`` and then
    asks for a host the policy does not list, with ``fifo`` as --control-fd."""
    os.mkfifo(fifo)
    r = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    w = os.open(fifo, os.O_WRONLY)  # the caller's end, kept open: the reader waits for lines
    try:
        line = json.dumps({"network": {"allowedDomains": ["localhost"]}})
        script = f"(printf '%s\\n' '{line}' > {fifo}) 2>/dev/null || echo cannot; sleep 1; {code(server)}"
        return subprocess.run(home.argv(["sh", "-c", script], opts=[*local_policy(home), "--control-fd", str(r)]),
                              cwd=home.work, env=home.env(), capture_output=True, text=True, pass_fds=(r,),
                              timeout=60)
    finally:
        os.close(r)
        os.close(w)


def test_a_control_fifo_the_command_can_write_is_refused(fresh_home: FakeHome, server: int) -> None:
    # Found in review: `mkfifo ctl` in the project (the work dir, a write root) and --control-fd 3 3<ctl:
    # the command wrote {"network": {"allowedDomains": ["localhost"]}} into ./ctl and reached the host.
    inside = str(fresh_home.work / f"ctl-{token()}")
    p = _fifo_run(fresh_home, inside, server)
    assert p.returncode == 125 and p.stdout == "", p.stdout + p.stderr
    assert p.stderr.startswith(f"safebox: --control-fd {p.args[p.args.index('--control-fd') + 1]} is {inside}, "
                               f"inside {fresh_home.work}, which the command may write"), p.stderr
    # Control: the same FIFO in a directory the command may not write is accepted, and stays the caller's.
    private = fresh_home.root / f"ctl-dir-{token()}"
    private.mkdir(mode=0o700)
    p = _fifo_run(fresh_home, str(private / "ctl"), server)
    assert (p.returncode, p.stdout) == (0, "cannot\n403\n"), p.stderr


@pytest.mark.parametrize(("value", "why"), [
    ("2", "--control-fd 2: must be an integer file descriptor >= 3"),
    ("1017", "--control-fd 1017 is not usable: Bad file descriptor; refusing to run the command without the "
             "control channel it asks for"),
])
def test_control_fd_that_cannot_be_read_is_an_error(shared_home: FakeHome, value: str, why: str) -> None:
    r = shared_home.run(["true"], opts=["--control-fd", value])
    assert r.returncode == 125 and r.stderr.startswith(f"safebox: {why}"), r.stderr


"""Signals sent to safebox's process group during start-up are never lost (issue 11, item 6).

``timeout`` and Ctrl-C signal the whole process group. With a network, the
proxy runs on a thread of safebox's; the kernel could hand the signal to that
thread, where Python only sets a flag, and the main thread, blocked in
``waitpid``, never ran the relay: ``timeout 1 safebox exec --allow-domain …
-- sleep 5`` ran the full 5 s in a quarter to a half of the runs.

The rule tested here (docs/index.md, "Signals"): a SIGTERM, SIGINT or SIGHUP
arriving at any point of start-up means the command either never starts
(safebox exits 128+N and leaves no run dir, TMPDIR, proxy or process behind)
or receives it (it dies of it: 128+N). Each run sends one of the three to
the process group either after a random delay spanning start-up (from
safebox's handler existing to past the command's start), or at a named point
where safebox stops itself (``SAFEBOX_TEST_PAUSE``: before the proxy exists,
before bubblewrap exists, before the command exists). One run in eight sends
SIGTERM or SIGHUP in the interpreter's own start-up, before safebox's first
call: there the default action kills it with nothing created. (SIGINT is
left out of that window: CPython may swallow it there, see ``drive``.) The
command is ``sleep`` itself, not ``sh -c``: dash catches SIGINT under ``-c``
and acts on one that lands before it forks only after its child ends, which
would be the command's own choice, not a lost signal.

Runs go a few at a time (the suite shares two cores); the schedule is seeded
and printed, so a failure can be replayed with ``SAFEBOX_SIGNAL_SEED``.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from sbx import BOTH, BWRAP_ONLY, HELPER_ONLY, FakeHome, kill_tree_by_arg, pids_with_arg, unique_sleep_arg, wait_for

# serial: four starts at a time against a time bound each, which other tests beside it would stretch.
pytestmark = pytest.mark.serial

RUNS_PER_MODE = int(os.environ.get("SAFEBOX_SIGNAL_RUNS", "200"))
POOL = 4
SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
#: The stop points of SAFEBOX_TEST_PAUSE (run/supervise.py, test_pause).
POINTS = ("proxy", "bwrap", "command")
#: From the signal to safebox's exit. A lost signal lets `sleep 600.…` run on.
DEADLINE = 15.0
NET = ("--allow-domain", "example.com")  # never contacted: the command only sleeps
# The one line a networked helper-only run always prints (runner: a hole the user must know of).
HELPER_ONLY_NOTE = "safebox: without bubblewrap the command shares the host's network"


@pytest.fixture(autouse=True)
def _signals_at_their_default() -> Iterator[None]:
    """The rule is about signals at their default action. One this test
    process ignores is ignored by every process it starts (SIG_IGN survives
    exec): run under nohup, a SIGHUP landing before safebox's handler
    existed was ignored, as nohup asks, and read here as lost. So each of
    the three is at its default in safebox's process for these tests, as a
    terminal's or timeout(1)'s child has it; restored after."""
    ignored = [s for s in SIGNALS if signal.getsignal(s) == signal.SIG_IGN]
    for s in ignored:
        signal.signal(s, signal.SIG_DFL)
    yield None
    for s in ignored:
        signal.signal(s, signal.SIG_IGN)


@dataclass
class Outcome:
    """One run: what was sent when, and what came of it."""

    what: str
    sig: int
    rc: int | None = None
    stderr: str = ""
    lost: bool = False
    leftovers: list[str] = field(default_factory=list)

    def problems(self, *, allowed_stderr: Sequence[str] = (), may_die: bool = False) -> list[str]:
        """Everything wrong with this run (empty: it kept the rule). ``may_die``:
        the signal may have landed before safebox's handler existed, where the
        default action (death by the signal, nothing created yet) applies."""
        out = []
        name = signal.Signals(self.sig).name
        if self.lost:
            out.append(f"{name} lost: still running {DEADLINE:.0f} s after it")
        elif self.rc != 128 + self.sig and not (may_die and self.rc == -self.sig):
            out.append(f"exit {self.rc}, expected {128 + self.sig} ({name})")
        lines = [ln for ln in self.stderr.splitlines() if not any(ln.startswith(a) for a in allowed_stderr)]
        if lines:
            out.append(f"unexpected stderr: {lines[:3]}")
        if self.leftovers:
            out.append(f"left behind: {self.leftovers}")
        return [f"{self.what}, {name}: {p}" for p in out]


def _session_members(sid: int) -> list[str]:
    """Live host processes of session ``sid`` (``comm`` and pid): safebox's
    own children (bwrap, the helper, ripgrep, find, socat) stay in it."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        comm = stat[stat.find("(") + 1:stat.rfind(")")]
        fields = stat[stat.rfind(")") + 2:].split()
        if int(fields[3]) == sid and fields[0] != "Z":
            found.append(f"{comm}[{name}]")
    return found


def _leftovers(home: FakeHome, tmpdir: Path, pid: int, arg: str) -> list[str]:
    out = [f"run dir {p}" for p in (home.run_base.iterdir() if home.run_base.is_dir() else ())
           if p.name.startswith(f"{pid}-")]
    out += [f"TMPDIR {p}" for p in tmpdir.iterdir() if p.name.startswith(f"safebox-tmp-{os.getuid()}-{pid}-")]
    out += _session_members(pid)
    out += [f"the command (sleep {arg})[{p}]" for p in pids_with_arg(arg)]
    return out


def _wait_stopped(pid: int, *, timeout: float) -> int | None:
    """The wait status once ``pid`` stopped (or ended); None after ``timeout``."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got, status = os.waitpid(pid, os.WNOHANG | os.WUNTRACED)
        if got:
            return status
        time.sleep(0.005)
    return None


def _as_timeout_does(pid: int, sig: int) -> None:
    """Signal ``pid`` and its whole process group as coreutils' timeout does:
    the signal to the child, then to the group, then SIGCONT to each. The
    SIGCONT is what lost the signal before the fix: the kernel hands it to
    a thread that is not already woken (the proxy's), and that thread, once
    awake, takes the still-pending SIGTERM too; Python runs the relay only in
    the main thread, whose waitpid restarts as if nothing came. With a
    single killpg the old relay lost nothing in 60 networked runs; with
    this sequence, 35."""
    for s in (sig, signal.SIGCONT):
        os.kill(pid, s)
        os.killpg(pid, s)


def _wait_caught(pid: int, sig: int, *, timeout: float) -> None:
    """Until ``pid`` has a handler for ``sig`` (SigCgt in /proc), has ended, or ``timeout``."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            return
        caught = next((ln.split()[1] for ln in status.splitlines() if ln.startswith("SigCgt:")), "0")
        if int(caught, 16) >> (sig - 1) & 1 or "State:\tZ" in status:
            return
        time.sleep(0.001)


def drive(argv: list[str], *, sig: int, when: float | str, home: FakeHome, tmpdir: Path,
          arg: str, env: dict[str, str] | None = None, deadline: float = DEADLINE,
          from_exec: bool = False) -> Outcome:
    """Start ``argv`` in a session of its own, signal its process group with
    ``sig`` -- ``when`` seconds after safebox's handler exists (after the
    exec with ``from_exec``), at the stop point ``when`` names, or
    (``"ready"``) once it printed a line -- and see what came of it."""
    stop_at = when if isinstance(when, str) and when in POINTS else None
    what = (f"at {stop_at}" if stop_at else "once ready" if when == "ready"
            else f"{float(when):.3f} s after {'the exec' if from_exec else 'the handler'}")
    env = home.env({"TMPDIR": str(tmpdir), **(env or {}), **({"SAFEBOX_TEST_PAUSE": stop_at} if stop_at else {})})
    p = subprocess.Popen(argv, cwd=home.work, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    out = Outcome(what=what, sig=sig)
    try:
        if stop_at:
            status = _wait_stopped(p.pid, timeout=deadline)
            if status is None:
                out.lost = True
                out.what += " (never stopped there)"
                return out
            if not os.WIFSTOPPED(status):
                p.returncode = os.waitstatus_to_exitcode(status)
                out.what += " (ended before reaching it)"
            else:
                _as_timeout_does(p.pid, sig)  # its SIGCONT resumes safebox
        else:
            if when == "ready":
                assert p.stdout is not None
                p.stdout.readline()
            else:
                if not from_exec:
                    # safebox's handler exists from its launcher's first call on. Before it
                    # the interpreter starts (~20 ms), and CPython itself may swallow a
                    # SIGINT there: a KeyboardInterrupt raised in its own start-up imports,
                    # cleared, and the run goes on (1 in ~150 SIGINTs in the first 30 ms).
                    # No code of safebox's runs yet; the from_exec runs cover that
                    # window with SIGTERM and SIGHUP, whose default action is final.
                    _wait_caught(p.pid, signal.SIGTERM, timeout=deadline)
                time.sleep(float(when))
            _as_timeout_does(p.pid, sig)
        try:
            _, out.stderr = p.communicate(timeout=deadline)
        except subprocess.TimeoutExpired:
            out.lost = True
    finally:
        if p.returncode is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.communicate()
            kill_tree_by_arg(arg)
    out.rc = p.returncode
    if not out.lost:
        # safebox waits for bwrap and the helper before it exits; the grace is for the kernel's
        # teardown of the sandbox's pid namespace, never for a process safebox forgot.
        out.leftovers = _leftovers(home, tmpdir, p.pid, arg)
        if out.leftovers:
            wait_for(lambda: not _leftovers(home, tmpdir, p.pid, arg), timeout=3)
            out.leftovers = _leftovers(home, tmpdir, p.pid, arg)
    return out


def _span(home: FakeHome, tmpdir: Path, mode: str, opts: Sequence[str]) -> float:
    """How long a start-up (to the command's end) takes here now: random delays span it."""
    times = []
    for _ in range(2):
        t = time.monotonic()
        r = subprocess.run(home.argv(["true"], mode=mode, opts=opts), cwd=home.work,
                           env=home.env({"TMPDIR": str(tmpdir)}), capture_output=True, text=True,
                           timeout=60, check=False)
        assert r.returncode == 0, r.stderr
        times.append(time.monotonic() - t)
    return 1.3 * max(times)


@pytest.fixture
def tmpdir_for_runs(fresh_home: FakeHome) -> Path:
    d = fresh_home.root / "tmp"
    d.mkdir()
    return d


STRESS_MODES = {
    "no-network": (BOTH, False),
    "network": (BOTH, True),
    "helper-only": (HELPER_ONLY, None),  # None: every other run with a network
    "bwrap-only": (BWRAP_ONLY, None),
}


@pytest.mark.parametrize("name", [pytest.param(n, marks=() if m is HELPER_ONLY else pytest.mark.needs_bwrap)
                                  for n, (m, _) in STRESS_MODES.items()])
def test_a_signal_to_the_process_group_during_start_up_is_never_lost(
        fresh_home: FakeHome, tmpdir_for_runs: Path, name: str) -> None:
    mode, net = STRESS_MODES[name]
    seed = int(os.environ.get("SAFEBOX_SIGNAL_SEED") or random.randrange(1 << 32))
    rng = random.Random(seed)
    with_net = [net if net is not None else i % 2 == 0 for i in range(RUNS_PER_MODE)]
    span = {n: _span(fresh_home, tmpdir_for_runs, mode, NET if n else ()) for n in set(with_net)}
    plan: list[tuple[int, float | str, bool, bool]] = []
    for i in range(RUNS_PER_MODE):
        # Every fourth run stops at a named point, in turn; one in eight is signalled in the
        # interpreter's start-up (SIGTERM or SIGHUP, 0-30 ms after the exec); the others after
        # a random delay from safebox's handler existing to past the command's start.
        if i % 4 == 0:
            plan.append((SIGNALS[i % 3], POINTS[(i // 4) % 3], with_net[i], False))
        elif i % 8 == 1:
            plan.append(((signal.SIGTERM, signal.SIGHUP)[(i // 8) % 2], rng.uniform(0, 0.03), with_net[i], True))
        else:
            plan.append((SIGNALS[i % 3], rng.uniform(0, span[with_net[i]]), with_net[i], False))

    def one(step: tuple[int, float | str, bool, bool]) -> Outcome:
        sig, when, n, from_exec = step
        arg = unique_sleep_arg()
        argv = fresh_home.argv(["sleep", arg], mode=mode, opts=NET if n else ())
        return drive(argv, sig=sig, when=when, home=fresh_home, tmpdir=tmpdir_for_runs, arg=arg,
                     from_exec=from_exec)

    started = time.monotonic()
    with ThreadPoolExecutor(POOL) as pool:
        outcomes = list(pool.map(one, plan))
    allowed = (HELPER_ONLY_NOTE,) if mode is HELPER_ONLY else ()
    problems = [p for o, step in zip(outcomes, plan, strict=True)
                for p in o.problems(allowed_stderr=allowed, may_die=step[3])]
    aborted = sum(o.rc == 128 + o.sig for o in outcomes)
    assert not problems, (f"seed {seed}: {len(problems)} problem(s) in {len(outcomes)} runs "
                          f"({time.monotonic() - started:.0f} s):\n" + "\n".join(problems[:20]))
    assert aborted > 0  # the runs did end by the signal (a sanity check of the schedule)


def test_the_harness_reports_a_signal_the_command_ignores_as_lost(
        fresh_home: FakeHome, tmpdir_for_runs: Path) -> None:
    """Control: the same harness, on the host without safebox: plain
    ``sleep`` dies of each signal and leaves nothing; a command that ignores
    them is reported lost -- the stress test can fail."""
    for sig in SIGNALS:
        arg = unique_sleep_arg()
        o = drive(["sleep", arg], sig=sig, when=0.05, home=fresh_home, tmpdir=tmpdir_for_runs, arg=arg,
                  from_exec=True)
        assert o.problems(may_die=True) == [] and o.rc == -sig
    arg = unique_sleep_arg()
    ignoring = ["sh", "-c", f"trap '' TERM INT HUP; echo ready; exec sleep {arg}"]
    o = drive(ignoring, sig=signal.SIGTERM, when="ready", home=fresh_home, tmpdir=tmpdir_for_runs, arg=arg,
              deadline=1.0)
    assert o.lost and o.problems() == [f"once ready, SIGTERM: SIGTERM lost: still running {DEADLINE:.0f} s after it"]


@pytest.mark.needs_bwrap
@pytest.mark.parametrize(("net", "foreground"), [(True, False), (False, False), (True, True)],
                         ids=["network", "no-network-control", "network-foreground-control"])
def test_timeout_ends_a_sandboxed_sleep_within_a_second(
        fresh_home: FakeHome, tmpdir_for_runs: Path, net: bool, foreground: bool) -> None:
    """The issue's reproducer, as written: ``setsid -w timeout 1 safebox exec
    --allow-domain example.com -- sh -c 'sleep 5'``. ``timeout`` signals its
    whole process group; with ``--foreground`` it signals safebox alone (a
    control, as is the run without a network: neither lost it before)."""
    mode_opts = NET if net else ()
    runs = 12 if net and not foreground else 4

    def one(_: int) -> float:
        argv = ["setsid", "-w", "timeout", *(["--foreground"] if foreground else []), "1",
                *fresh_home.argv(["sh", "-c", "sleep 5"], opts=mode_opts)]
        t = time.monotonic()
        r = subprocess.run(argv, cwd=fresh_home.work, env=fresh_home.env({"TMPDIR": str(tmpdir_for_runs)}),
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30, check=False)
        assert r.returncode == 124 and r.stderr == "", r.stderr
        return time.monotonic() - t

    with ThreadPoolExecutor(4) as pool:
        took = list(pool.map(one, range(runs)))
    assert max(took) < 4.0, [round(t, 2) for t in took]
    assert wait_for(lambda: not fresh_home.run_base.is_dir() or not any(fresh_home.run_base.iterdir()), 5)

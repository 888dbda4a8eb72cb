"""Terminal attacks: pushing keystrokes into the caller's terminal (TIOCSTI), TIOCLINUX, sessions.

The caller is given a real pseudo-terminal as its controlling terminal
(``setsid -c``, as an interactive shell has), so the control shows what an
unsandboxed command could do to it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sbx import (
    BOTH,
    BWRAP_ONLY,
    EPERM,
    HELPER_ONLY,
    FakeHome,
    kill_tree_by_arg,
    missing,
    pids_with_arg,
    unique_sleep_arg,
    wait_for,
)

ALL_MODES = [BOTH, BWRAP_ONLY, HELPER_ONLY]
SECCOMP_MODES = [BOTH, HELPER_ONLY]


@pytest.fixture
def pty() -> Iterator[tuple[int, int]]:
    """A pseudo-terminal (master, slave)."""
    master, slave = os.openpty()
    try:
        yield master, slave
    finally:
        os.close(master)
        os.close(slave)


def _on_tty(argv: list[str], slave: int, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run argv in a new session whose controlling terminal is the pty slave."""
    setsid = shutil.which("setsid")
    if setsid is None:
        missing("setsid (util-linux) is needed to give the caller a controlling terminal")
    return subprocess.run([setsid, "-c", *argv], stdin=slave, capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=60, check=False)


# Junk in the upper 32 bits of the ioctl number is a seccomp-filter concern;
# bubblewrap's defence (the new session) does not depend on it.
@pytest.mark.parametrize(("mode", "verb"), [(m, "tiocsti") for m in ALL_MODES] +
                         [(m, "tiocsti_hi") for m in SECCOMP_MODES])
def test_tiocsti_cannot_push_input_into_the_callers_terminal(shared_home: FakeHome, probe: Path,
                                                            pty: tuple[int, int], mode: str, verb: str) -> None:
    _, slave = pty
    control = _on_tty([str(probe), verb], slave, shared_home.env(), shared_home.work)
    # Root may inject (0); an unprivileged caller gets 0 or EIO (dev.tty.legacy_tiocsti=0). Never EPERM.
    assert control.returncode in (0, 5), control.stdout
    r = _on_tty(shared_home.argv([str(probe), verb], mode=mode), slave, shared_home.env(), shared_home.work)
    # seccomp: EPERM; bubblewrap alone: --new-session, so the tty is not the command's controlling one (EPERM).
    assert r.returncode == EPERM, r.stdout + r.stderr


@pytest.mark.parametrize("mode", SECCOMP_MODES)
def test_tioclinux_is_refused(shared_home: FakeHome, probe: Path, pty: tuple[int, int], mode: str) -> None:
    _, slave = pty
    control = _on_tty([str(probe), "tioclinux"], slave, shared_home.env(), shared_home.work)
    assert control.returncode not in (0, EPERM), control.stdout  # reaches the tty driver (not a VT: EINVAL/ENOTTY)
    r = _on_tty(shared_home.argv([str(probe), "tioclinux"], mode=mode), slave, shared_home.env(), shared_home.work)
    assert r.returncode == EPERM, r.stdout + r.stderr


@pytest.mark.parametrize("mode", [BOTH, BWRAP_ONLY])
def test_command_runs_in_a_new_session(shared_home: FakeHome, mode: str) -> None:
    arg = unique_sleep_arg()
    proc = shared_home.popen(["sleep", arg], mode=mode)
    try:
        assert wait_for(lambda: pids_with_arg(arg)), proc.stderr
        (pid,) = pids_with_arg(arg)
        assert os.getsid(pid) != os.getsid(0)     # not the caller's session
        assert os.getsid(pid) != os.getsid(proc.pid)  # nor safebox's: bwrap --new-session made one
        control = subprocess.Popen(["sleep", arg + "1"])
        try:
            assert os.getsid(control.pid) == os.getsid(0)  # control: a plain child shares the caller's
        finally:
            control.kill()
            control.wait()
    finally:
        proc.kill()
        proc.communicate()
        kill_tree_by_arg(arg)


@pytest.mark.parametrize("mode", ALL_MODES)
def test_the_users_other_terminals_cannot_be_opened(shared_home: FakeHome, pty: tuple[int, int], mode: str) -> None:
    """Another terminal of the same user (a second pty): opening it would let
    the command read what is typed there and write into it (found in review:
    helper-only granted all of /dev/pts). Under bwrap /dev/pts is a fresh
    instance; the helper alone grants only the command's own terminal."""
    _, own = pty
    v_master, victim = os.openpty()
    try:
        script = f"(echo x > {os.ttyname(victim)}) 2>&1; echo own > {os.ttyname(own)} && echo own-ok"
        control = subprocess.run(["sh", "-c", script], stdin=own, capture_output=True, text=True, timeout=60)
        assert control.stdout == "own-ok\n", control.stdout  # on the host both open
        r = subprocess.run(shared_home.argv(["sh", "-c", script], mode=mode), stdin=own, capture_output=True,
                           text=True, env=shared_home.env(), cwd=shared_home.work, timeout=60, check=False)
        lines = r.stdout.splitlines()
        assert lines[0] == f"sh: 1: cannot create {os.ttyname(victim)}: Permission denied", r.stdout
        # The helper alone still lets the command open its own terminal by
        # name; under bwrap it has it as fd 0-2 only (docs/index.md).
        assert lines[1:] == (["own-ok"] if mode == HELPER_ONLY else []), r.stdout + r.stderr
    finally:
        os.close(v_master)
        os.close(victim)


GUIDE = Path(__file__).resolve().parents[2] / "docs" / "index.md"


def _interact(argv: list[str], home: FakeHome, keys: bytes) -> str:
    """Run argv with a fresh pty as its controlling terminal (stdin, stdout and
    stderr), type ``keys`` into it and return everything written to it."""
    import select
    import time

    setsid = shutil.which("setsid")
    if setsid is None:
        missing("setsid (util-linux) is needed to give the caller a controlling terminal")
    master, slave = os.openpty()
    try:
        proc = subprocess.Popen([setsid, "-c", *argv], stdin=slave, stdout=slave, stderr=slave,
                                env=home.env({"TERM": "dumb", "PS1": "$ "}), cwd=home.work)
    finally:
        os.close(slave)
    try:
        os.write(master, keys)
        out = b""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1)
            if ready:
                try:
                    chunk = os.read(master, 4096)
                except OSError:  # EIO: the last holder of the slave is gone
                    break
                if not chunk:
                    break
                out += chunk
            elif proc.poll() is not None:
                break
        proc.wait(timeout=30)
    finally:
        proc.kill()
        os.close(master)
    return out.decode(errors="replace").replace("\r\n", "\n")


@pytest.mark.parametrize("mode", [BOTH, BWRAP_ONLY])
def test_an_interactive_shell_says_it_has_no_job_control_as_the_guide_explains(shared_home: FakeHome,
                                                                              mode: str) -> None:
    bash = shutil.which("bash")
    if bash is None:
        missing("bash is needed for the interactive shell")
    keys = b"echo READY-$((6*7)); exit\n"
    control = _interact([bash, "--norc", "-i"], shared_home, keys)
    assert "READY-42" in control and "job control" not in control, control
    out = _interact(shared_home.argv([bash, "--norc", "-i"], mode=mode), shared_home, keys)
    assert "READY-42" in out, out  # the shell works
    warning = [ln for ln in out.splitlines() if ln.startswith("bash: ")]
    assert warning == ["bash: cannot set terminal process group (1): Inappropriate ioctl for device",
                       "bash: no job control in this shell"], out
    guide = GUIDE.read_text()
    assert "\n".join(warning) in guide  # explained once, word for word, in the user guide


@pytest.mark.parametrize("mode", [BOTH, BWRAP_ONLY])
def test_script_gives_the_shell_a_terminal_of_the_sandboxs_own_with_job_control(shared_home: FakeHome,
                                                                               mode: str) -> None:
    bash, script = shutil.which("bash"), shutil.which("script")
    if bash is None or script is None:
        missing("bash and script (util-linux) are needed for the documented job-control recipe")
    keys = b"sleep 30 &\njobs\nkill %1\necho READY-$((6*7))\nexit\n"
    out = _interact(shared_home.argv([script, "-qec", f"{bash} --norc -i", "/dev/null"], mode=mode), shared_home,
                    keys)
    assert "READY-42" in out and "[1]+  Running" in out, out
    assert "job control" not in out, out
    assert "safebox exec -- script -qec 'bash -i' /dev/null" in GUIDE.read_text()

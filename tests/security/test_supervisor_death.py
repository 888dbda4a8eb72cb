"""A violations supervisor that dies ends the run, at once and loudly
(issue 22, item 13).

With the supervisor gone, the observing filter has no listener: the kernel
answers ENOSYS to every notified call, the denied ones (still refused) and
the watched ones alike, so the command's writes, execs and connects would
fail, unexplained, for the rest of the run. safebox used to say nothing and
exit with the command's status. It now polls the supervisor's pidfd while it
waits for the sandbox: a supervisor that ends other than by itself (exit 0,
once no sandboxed task is left) stops the sandbox at once, says so on a line
of its own and again after the summary, and safebox exits 125.
"""

from __future__ import annotations

import os
import signal

import pytest

from sbx import BOTH, HELPER_ONLY, FakeHome, supervisor_of, token, wait_for

PY = "/usr/bin/python3"


@pytest.mark.parametrize("kill", [True, False], ids=["supervisor killed", "control"])
@pytest.mark.parametrize("mode", [BOTH, HELPER_ONLY])
def test_a_supervisor_killed_mid_run_stops_the_run_and_says_so(fresh_home: FakeHome, mode: str, kill: bool) -> None:
    ready, go, after = (fresh_home.work / f"{n}-{token()}" for n in ("ready", "go", "after"))
    # No watched call (open for writing, exec, connect) between "ready" and
    # "go": the command only polls; then it creates a file in its work dir,
    # a watched call that the kernel answers ENOSYS without a supervisor.
    code = ("import os, time\n"
            f"open({str(ready)!r}, 'w').close()\n"
            f"while not os.path.exists({str(go)!r}): time.sleep(0.02)\n"
            f"try: open({str(after)!r}, 'w').close(); print(0)\n"
            "except OSError as e: print(e.errno)\n")
    proc = fresh_home.popen([PY, "-c", code], mode=mode)
    try:
        assert wait_for(ready.exists, timeout=30), proc.communicate(timeout=60)
        sup = supervisor_of(proc.pid)
        assert sup is not None
        if kill:
            os.kill(sup, signal.SIGKILL)
            # At once: the command still waits for "go", which never comes;
            # the run ends because safebox ends it.
            assert wait_for(lambda: proc.poll() is not None, timeout=10)
        else:
            go.touch()
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.communicate(timeout=60)
    lines = [ln for ln in err.splitlines() if ln.startswith("safebox:")]
    if not kill:
        assert (proc.returncode, out, lines) == (0, "0\n", []), err
        assert after.exists()
        return
    assert proc.returncode == 125, err
    assert out == "" and not after.exists()
    assert lines == [
        f"safebox: the violations supervisor (safebox-helper --supervise, pid {sup}) died (killed by SIGKILL): "
        "stopping the sandbox, whose watched calls would fail with ENOSYS from now on; exit status 125",
        "safebox: the run was stopped when the violations supervisor died (killed by SIGKILL): refusals after that "
        "were not observed; exit status 125",
    ], err


def test_through_the_api_a_dead_supervisor_ends_the_command_at_the_next_poll(fresh_home: FakeHome) -> None:
    # A harness runs the supervisor as its own child; poll() looks at it
    # (docs/violations.md, "Mechanism", step 6).
    import safebox

    ready = fresh_home.work / f"ready-{token()}"
    code = (f"import os, time\nopen({str(ready)!r}, 'w').close()\n"
            "while True: time.sleep(0.02)\n")
    with safebox.Sandbox(None, cwd=fresh_home.work, env=fresh_home.env()) as sb:  # type: ignore[arg-type]
        p = sb.popen([PY, "-c", code])
        try:
            assert wait_for(ready.exists, timeout=30)
            assert p.poll() is None  # control: it runs while the supervisor does
            sup = supervisor_of(os.getpid())
            assert sup is not None
            os.kill(sup, signal.SIGKILL)
            assert wait_for(lambda: p.poll() is not None, timeout=10)
        finally:
            p.kill()
            p.wait()
    assert p.returncode == 125
    texts = [e.data["text"] for e in p.events if e.kind == "message"]
    assert any(t.startswith(f"the violations supervisor (safebox-helper --supervise, pid {sup}) died (killed by "
                            "SIGKILL): stopping the sandbox") for t in texts), texts

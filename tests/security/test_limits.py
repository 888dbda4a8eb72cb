"""Per-sandbox limits, for real: a fork bomb, an allocation, /tmp and
/dev/shm filled, a command past its wall time, through ``safebox exec``.

Every stress is bounded by itself, whether or not the limit holds: the fork
bomb is a binary tree of depth 7 (255 processes at most, each sleeping 2 s
and exiting), the allocation and the writes have a fixed size, and every run
has a timeout; the sandbox's pid namespace ends whatever is left. Each test
has a control: the same stress under a higher limit succeeds.

What enforces a limit depends on the host and the user (safebox/run/limits.py):
as root on this CI host, a cgroup v1 (``pids``, ``memory``); as an
unprivileged user, RLIMIT_NPROC in the sandbox's user namespace and
RLIMIT_DATA per process. The tests assert what each mechanism must do (and,
where a host offers no mechanism, that the limit is refused), so they mean
something as either user, and nothing is skipped.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from safebox.policy import limit_values
from safebox.run import cgroups, limits
from sbx import BOTH, BWRAP_ONLY, HELPER_ONLY, FakeHome, pids_with_arg, token, unique_sleep_arg, wait_for

ROOT = os.geteuid() == 0
MiB = 1 << 20

# A fork bomb that stops by itself: every process forks two children until
# depth DEPTH (2**(DEPTH+1) - 1 processes at most, so the host is safe even if
# the limit failed), each child sleeps 2 s and exits; no forking after 20 s.
# Each fork reports "+" (done) or "E" (EAGAIN) on a pipe; the root prints the
# totals once every child has exited.
FORK_BOMB = r"""
import errno, os, sys, time
depth, marker = int(sys.argv[1]), sys.argv[2]
r, w = os.pipe()
stop = time.monotonic() + 20
def grow(level):
    for _ in range(2):
        if level >= depth or time.monotonic() > stop:
            return
        try:
            pid = os.fork()
        except OSError as e:
            os.write(w, b"E" if e.errno == errno.EAGAIN else b"?")
            continue
        if pid == 0:
            if level == 0:
                os.close(r)  # the root's read end; deeper children no longer have it
            os.write(w, b"+")
            grow(level + 1)
            time.sleep(2)
            os._exit(0)
grow(0)
os.close(w)
got = b""
while True:
    chunk = os.read(r, 4096)
    if not chunk:
        break
    got += chunk
print(f"forked {got.count(b'+')} refused {got.count(b'E')} other {got.count(b'?')}", flush=True)
"""
BOMB_DEPTH = 7  # 254 children at most

# Touch N bytes (a bytes object filled with 1s: every page is written).
ALLOC = r"""
import sys
try:
    b = b"\x01" * int(sys.argv[1])
except MemoryError:
    print("MemoryError", flush=True)
    sys.exit(3)
print("allocated", len(b), flush=True)
"""

# Write N bytes to PATH in 1 MiB chunks; report how far it got and the errno.
FILL = r"""
import os, sys
path, n = sys.argv[1], int(sys.argv[2])
done, err = 0, 0
with open(path, "wb", buffering=0) as f:
    try:
        while done < n:
            done += f.write(b"\0" * min(1 << 20, n - done))
        os.fsync(f.fileno())
    except OSError as e:
        err = e.errno
print(f"wrote {done} errno {err}", flush=True)
"""


def _py(script: str, *args: object) -> list[str]:
    return ["python3", "-c", script, *(str(a) for a in args)]


def _cgroup_for_pids() -> bool:
    """Whether this host gives the running user a pids cgroup (asserted
    separately against what ``exec -v`` and doctor say)."""
    return cgroups.find_cgroup("pids")[0] is not None


# ------------------------------------------------------------------ processes


def test_a_fork_bomb_stops_at_the_sandboxs_process_limit_and_a_higher_limit_lets_it_finish(
        shared_home: FakeHome) -> None:
    marker = f"bomb-{token()}"
    r = shared_home.run(_py(FORK_BOMB, BOMB_DEPTH, marker), opts=["--limit-processes", "64", "--timeout", "60"],
                        timeout=120)
    try:
        if ROOT and not _cgroup_for_pids():
            # Root is exempt from RLIMIT_NPROC: without a cgroup the limit
            # cannot hold, and safebox refuses to run rather than pretend.
            assert r.returncode == 125
            assert "safebox: limits.processes = 64 cannot be enforced here" in r.stderr
            return
        assert r.returncode == 0, r.stderr
        forked, refused = int(r.stdout.split()[1]), int(r.stdout.split()[3])
        assert forked < 64 <= forked + refused, r.stdout  # stopped at the limit: bwrap's init and python count
        assert "other 0" in r.stdout  # every refusal was EAGAIN
        if _cgroup_for_pids():
            assert "safebox: the sandbox reached limits.processes (64 processes and threads): " in r.stderr
        # Control: the same bomb under a higher limit grows its whole tree.
        ok = shared_home.run(_py(FORK_BOMB, BOMB_DEPTH, marker), opts=["--limit-processes", "512"], timeout=120)
        assert ok.returncode == 0, ok.stderr
        assert ok.stdout.strip() == f"forked {2 ** (BOMB_DEPTH + 1) - 2} refused 0 other 0"
        assert "limits.processes" not in ok.stderr
    finally:
        # Nothing of either bomb outlives its sandbox.
        assert wait_for(lambda: not pids_with_arg(marker, argv0="python3"), timeout=10)


def _host_pid_of(arg: str) -> int:
    assert wait_for(lambda: pids_with_arg(arg), timeout=20)
    return pids_with_arg(arg)[0]


def _limits_of(pid: int) -> dict[str, str]:
    out = {}
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines()[1:]:
        name, soft = line[:26].strip(), line[26:47].strip()
        out[name] = soft
    return out


def _sandbox_cgroup(pid: int, controller: str) -> Path | None:
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        if controller in names.split(",") and "/safebox-" in path:
            mount = cgroups._cgroup_mounts()[controller]
            return Path(cgroups._host_dir(mount, path) or "")
    return None


@pytest.mark.parametrize("opts, expected", [((), "4096"), (("--limit-processes", "unlimited"), "unlimited")])
def test_the_default_process_limit_is_4096_for_the_sandbox_and_unlimited_lifts_it(
        shared_home: FakeHome, opts: tuple[str, ...], expected: str) -> None:
    arg = unique_sleep_arg()
    proc = shared_home.popen(["sleep", arg], opts=opts)
    try:
        pid = _host_pid_of(arg)
        cgroup = _sandbox_cgroup(pid, "pids")
        if ROOT:
            # Root: a cgroup, or (no cgroup here) not enforced at all, as -v says.
            if expected == "unlimited" or not _cgroup_for_pids():
                assert cgroup is None
            else:
                assert cgroup is not None and (cgroup / "pids.max").read_text().strip() == expected
            assert _limits_of(pid)["Max processes"] == _limits_of(os.getpid())["Max processes"]
        elif expected == "unlimited":
            # Not set by safebox: the caller's own RLIMIT_NPROC, inherited.
            assert _limits_of(pid)["Max processes"] == _limits_of(os.getpid())["Max processes"] != "4096"
        else:
            assert _limits_of(pid)["Max processes"] == expected
    finally:
        proc.kill()
        proc.communicate(timeout=30)


# ------------------------------------------------------------------ memory


def test_an_allocation_past_the_memory_limit_fails_and_one_under_a_higher_limit_succeeds(
        shared_home: FakeHome) -> None:
    r = shared_home.run(_py(ALLOC, 192 * MiB), opts=["--limit-memory", "96MiB", "--timeout", "60"], timeout=120)
    memory_cgroup = cgroups.find_cgroup("memory")[0] is not None
    if memory_cgroup:
        # The whole sandbox is bounded: the kernel OOM-kills inside it, and says so.
        assert r.returncode == 128 + signal.SIGKILL, (r.stdout, r.stderr)
        assert "safebox: the kernel killed 1 process of the sandbox for exceeding limits.memory (96 MiB)" in r.stderr
    else:
        # RLIMIT_DATA: the allocation itself fails (ENOMEM), and safebox
        # warned that the limit is per process.
        assert r.returncode == 3 and r.stdout.strip() == "MemoryError", (r.stdout, r.stderr)
        assert "safebox: limits.memory is enforced per process, not for the sandbox as a whole" in r.stderr
    assert "allocated" not in r.stdout
    ok = shared_home.run(_py(ALLOC, 192 * MiB), opts=["--limit-memory", "512MiB"], timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.strip() == f"allocated {192 * MiB}"


# ------------------------------------------------------------------ /tmp and /dev/shm


@pytest.mark.parametrize("where", ["/tmp", "/dev/shm"])
def test_writing_past_the_tmp_size_fails_with_enospc_and_a_larger_size_takes_it(shared_home: FakeHome,
                                                                                where: str) -> None:
    target = f"{where}/fill-{token()}"
    r = shared_home.run(_py(FILL, target, 48 * MiB), opts=["--limit-tmp", "16MiB"])
    assert r.returncode == 0, r.stderr
    wrote, err = int(r.stdout.split()[1]), int(r.stdout.split()[3])
    assert err == 28 and wrote <= 16 * MiB, r.stdout  # ENOSPC at the size, not later
    assert f"safebox: the sandbox's {where} filled up limits.tmpSize (16 MiB; writes there failed with ENOSPC)" \
        in r.stderr
    ok = shared_home.run(_py(FILL, target, 48 * MiB), opts=["--limit-tmp", "64MiB"])
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.strip() == f"wrote {48 * MiB} errno 0"
    assert "limits.tmpSize" not in ok.stderr


def _tmpfs_sizes(home: FakeHome, opts: tuple[str, ...]) -> list[int]:
    r = home.run(["python3", "-c", "import os\nfor p in ('/tmp', '/dev/shm'):\n st = os.statvfs(p)\n"
                  " print(st.f_blocks * st.f_frsize)"], opts=opts)
    assert r.returncode == 0, r.stderr
    return [int(x) for x in r.stdout.split()]


def test_the_default_tmp_and_shm_are_a_quarter_of_the_ram_at_most_4_gib(shared_home: FakeHome) -> None:
    expected = limit_values.default("tmpSize")
    assert expected == min(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 4, 4 << 30)
    page = os.sysconf("SC_PAGE_SIZE")
    assert _tmpfs_sizes(shared_home, ()) == [expected // page * page] * 2
    # Control: "unlimited" is the kernel's tmpfs default, half the RAM, for /tmp.
    host_half = os.sysconf("SC_PHYS_PAGES") * page // 2
    tmp = _tmpfs_sizes(shared_home, ("--limit-tmp", "unlimited"))[0]
    assert abs(tmp - host_half) <= host_half // 100 and tmp > expected


def test_a_tmp_size_without_bwraps_private_tmp_is_refused(shared_home: FakeHome) -> None:
    r = shared_home.run(["true"], mode=HELPER_ONLY, opts=["--limit-tmp", "16MiB"])
    assert r.returncode == 125
    assert r.stderr.startswith("safebox: limits.tmpSize = 16 MiB cannot be enforced here: without bubblewrap "
                               "there is no private /tmp")
    assert "hint: run with bubblewrap; or remove limits.tmpSize / --limit-tmp" in r.stderr
    assert shared_home.run(["true"], mode=HELPER_ONLY).returncode == 0  # control: the default is only noted


# ------------------------------------------------------------------ wall time


@pytest.mark.parametrize("mode", [BOTH, HELPER_ONLY, BWRAP_ONLY])
@pytest.mark.serial  # the elapsed time is bounded
def test_a_command_past_its_wall_time_is_stopped_with_its_whole_tree_and_exit_status_124(
        fresh_home: FakeHome, mode: str) -> None:
    arg = unique_sleep_arg()
    audit = fresh_home.root / "audit.jsonl"
    # A child in its own session, as a daemon would detach: it goes too.
    script = f"setsid sleep {arg} & sleep {arg}"
    start = time.monotonic()
    r = fresh_home.run(["sh", "-c", script], mode=mode, opts=["--timeout", "1", "--audit-log", str(audit)],
                       timeout=60)
    elapsed = time.monotonic() - start
    assert r.returncode == 124, r.stderr
    assert 1 <= elapsed < 1 + limit_values.TIMEOUT_GRACE, elapsed  # the SIGTERM was enough: no grace needed
    assert ("safebox: the command ran longer than limits.wallTime (1s): the sandbox was stopped (SIGTERM, then "
            "SIGKILL after 5 s); exit status 124; raise it with --timeout or limits.wallTime") in r.stderr
    assert wait_for(lambda: not pids_with_arg(arg), timeout=10)
    stop = [json.loads(line) for line in audit.read_text().splitlines() if '"stop"' in line]
    assert stop and stop[-1]["limits"] == ["wallTime"]
    # Control: within its time the same command runs to its own end.
    ok = fresh_home.run(["sh", "-c", "sleep 0.2; exit 7"], mode=mode, opts=["--timeout", "30"])
    assert ok.returncode == 7 and "wallTime" not in ok.stderr


@pytest.mark.serial  # the elapsed time is bounded
def test_a_command_that_ignores_sigterm_is_killed_after_the_grace_period(shared_home: FakeHome) -> None:
    arg = unique_sleep_arg()
    # An ignored SIGTERM is inherited: the shell and both sleeps ignore it.
    script = f"trap '' TERM; sleep {arg} & sleep {arg}; wait"
    start = time.monotonic()
    r = shared_home.run(["sh", "-c", script], opts=["--timeout", "1"], timeout=60)
    elapsed = time.monotonic() - start
    assert r.returncode == 124, r.stderr
    assert 1 + limit_values.TIMEOUT_GRACE <= elapsed < 1 + limit_values.TIMEOUT_GRACE + 5, elapsed
    assert wait_for(lambda: not pids_with_arg(arg), timeout=10)


def test_a_bad_timeout_is_refused_before_anything_runs(shared_home: FakeHome) -> None:
    r = shared_home.run(["touch", "ran"], opts=["--timeout", "1h30"])
    assert r.returncode == 125
    assert r.stderr.startswith("safebox: --timeout 1h30: not a duration: give seconds, or a duration such as 90s")
    assert not (shared_home.work / "ran").exists()


# ------------------------------------------------------------------ cgroups: life cycle


def test_the_sandboxs_cgroup_is_removed_even_when_safebox_was_killed(shared_home: FakeHome) -> None:
    arg = unique_sleep_arg()
    proc = shared_home.popen(["sleep", arg], opts=["--limit-processes", "64"])
    try:
        pid = _host_pid_of(arg)
        cgroup = _sandbox_cgroup(pid, "pids")
        if not _cgroup_for_pids():
            # No writable cgroup for this user: none is made, and the
            # limit is RLIMIT_NPROC in the sandbox's user namespace.
            assert cgroup is None and not ROOT
            assert _limits_of(pid)["Max processes"] == "64"
            return
        assert cgroup is not None and cgroup.name.startswith(f"safebox-{proc.pid}-")
        assert (cgroup / "pids.max").read_text().strip() == "64"
        proc.send_signal(signal.SIGKILL)  # no clean-up by safebox
        proc.communicate(timeout=30)
        assert wait_for(lambda: not pids_with_arg(arg), timeout=10)  # --die-with-parent ended the sandbox
        # The next run sweeps the dead run's cgroup.
        assert shared_home.run(["true"], opts=["--limit-processes", "64"]).returncode == 0
        assert not cgroup.exists()
    finally:
        proc.kill()
        proc.communicate(timeout=30)


@pytest.mark.serial  # it lists the cgroups: another test's run beside it has one
def test_a_finished_run_leaves_no_cgroup(shared_home: FakeHome) -> None:
    site, _ = cgroups.find_cgroup("pids")
    before = {p.name for p in Path(site.parent).iterdir()} if site else set()
    r = shared_home.run(["true"], opts=["--limit-processes", "64", "--limit-memory", "1GiB"])
    assert r.returncode == 0, r.stderr
    if site:
        assert {p.name for p in Path(site.parent).iterdir()} == before


def test_cgroup_v2_placement_and_kill_work_on_this_hosts_unified_hierarchy() -> None:
    """The v2 code path (one directory, ``cgroup.kill``) on the real v2
    hierarchy, without a controller (this host binds pids and memory to v1):
    the trampoline puts the process in, the kill ends it, the directory goes."""
    mount = cgroups._cgroup_mounts().get("")
    own = cgroups._own_cgroups().get("")
    assert mount is not None and own is not None, "no cgroup v2 hierarchy mounted"
    parent = cgroups._host_dir(mount, own)
    assert parent is not None
    cg = cgroups.Cgroup({"pids": cgroups.CgroupSite(version=2, parent=parent)}, pids=0, memory=0)
    if not os.access(parent, os.W_OK):
        with pytest.raises(PermissionError):  # an unprivileged user cannot write it: refused, nothing made
            cg.create()
        assert not os.path.exists(os.path.join(parent, cg.name))
        return
    arg = unique_sleep_arg()
    cg.create()
    try:
        path, argv = cg.wrap("/bin/sleep", ["sleep", arg])
        proc = subprocess.Popen(argv, executable=path)
        pid = _host_pid_of(arg)
        assert f"0::{own.rstrip('/')}/{cg.name}" in Path(f"/proc/{pid}/cgroup").read_text()
        cg.kill()
        assert proc.wait(timeout=10) == -signal.SIGKILL
    finally:
        cg.remove()
    assert not os.path.exists(os.path.join(parent, cg.name))


# ------------------------------------------------------------------ saying which mechanism


def test_exec_verbose_and_doctor_name_the_same_mechanism_for_each_limit(shared_home: FakeHome) -> None:
    from safebox.doctor import info

    r = shared_home.run(["true"], opts=["-v"])
    assert r.returncode == 0, r.stderr
    line = next(x for x in r.stderr.splitlines() if x.startswith("safebox: limits: "))
    check = info.check_limits()
    expected = limits.plan(limits.requested(_default_policy()), limits.probe(
        limits.requested(_default_policy()), bwrap="/usr/bin/bwrap", cache_dir=None),
        bwrap=True, helper=True, strict=False)
    for key in ("processes", "tmpSize"):
        lim = expected.get(key)
        assert lim.how in line and lim.how in check.found, (line, check.found)
    how = ("cgroup v1 pids.max" if ROOT else "RLIMIT_NPROC in the sandbox's user namespace")
    assert f"processes 4096 ({how}, the whole sandbox)" in line
    assert "tmpSize" in line and "(tmpfs size of /tmp and of /dev/shm, each)" in line


def _default_policy():  # noqa: ANN202 - an EffectivePolicy
    from safebox.policy.effective import EffectivePolicy

    return EffectivePolicy()

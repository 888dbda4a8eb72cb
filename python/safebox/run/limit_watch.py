"""The limits while the command runs and after it ends: the wall-time
deadline (SIGTERM, then SIGKILL to the whole sandbox), the private /tmp's
fullness, the sandbox killed at once, and what the run reached, told to the
user.

What enforces each limit is decided before the run (``run/limits.py``);
this module acts on that plan (run/supervise.py calls it). Standard library
only.
"""

from __future__ import annotations

import os

from safebox.policy.limit_values import KEYS, TIMEOUT_GRACE, human

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from safebox.run.cgroups import Cgroup
    from safebox.run.limits import Plan



def open_tmp_watch(ns_init: int | None, tmp_size: int) -> list[tuple[str, int]]:
    """Descriptors of the sandbox's sized tmpfs mounts, opened through
    bwrap's init (``/proc/PID/root``) once the sandbox is set up: holding
    one keeps the tmpfs alive after the sandbox ends, so that safebox can
    tell afterwards whether it was full (:func:`full_tmp`). ``O_PATH``: no
    access to the files, and the mount points cannot be replaced (the
    command cannot unmount or rename a mount point)."""
    if not tmp_size or not ns_init:
        return []
    out = []
    for name in ("/tmp", "/dev/shm"):
        try:
            fd = os.open(f"/proc/{ns_init}/root{name}", os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        out.append((name, fd))
    return out


def full_tmp(watch: list[tuple[str, int]]) -> list[str]:
    """The watched mounts with no free block left; closes the descriptors."""
    full = []
    for name, fd in watch:
        try:
            st = os.fstatvfs(fd)
            if st.f_blocks and st.f_bavail == 0:
                full.append(name)
        except OSError:
            pass
        finally:
            os.close(fd)
    return full


def wait_until(pid: int, deadline: float, *, watch: tuple[int, Callable[[], None]] | None = None) -> int | None:
    """``waitpid(pid)`` until the ``time.monotonic()`` deadline: the wait
    status, or None when the deadline passed first (``pid`` still runs).
    Through a pidfd (Linux 5.3; polled before), so the wait needs neither a
    signal nor a thread; signal handlers (the relay) run while it waits.
    ``watch``: (descriptor, callback): the callback runs, once, as soon as
    the descriptor is readable (the violations supervisor's pidfd: its
    death ends the run at once, run/supervise.py)."""
    import select
    import time

    try:
        fd = os.pidfd_open(pid)
    except OSError:  # Linux < 5.3: poll the child instead, every 50 ms
        while time.monotonic() < deadline:
            if watch is not None and select.select([watch[0]], [], [], 0)[0]:
                watch[1]()
                watch = None
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except InterruptedError:
                continue
            if done:
                return status
            time.sleep(min(0.05, max(deadline - time.monotonic(), 0)))
        return None
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        if watch is not None:
            poller.register(watch[0], select.POLLIN)
        while True:
            left = deadline - time.monotonic()
            # Polled at least once, even past the deadline (poll(), a
            # timeout of 0): the watch is looked at on every call.
            ready = {r for r, _ in poller.poll(max(0.0, min(left, 86400.0)) * 1000 + (1 if left > 0 else 0))}
            if watch is not None and watch[0] in ready:
                poller.unregister(watch[0])
                watch[1]()
                watch = None
            if fd in ready:
                break
            if left <= 0:
                return None
    finally:
        os.close(fd)
    while True:
        try:
            return os.waitpid(pid, 0)[1]
        except InterruptedError:
            continue


def stop_at_deadline(pid: int, deadline: float, *, terminate: Callable[[], None],
                     kill: Callable[[], None],
                     watch: tuple[int, Callable[[], None]] | None = None) -> tuple[int | None, bool]:
    """Wait for ``pid``; at the deadline ``terminate()`` (SIGTERM to the
    command), and ``kill()`` (SIGKILL to the whole sandbox) after
    :data:`TIMEOUT_GRACE` seconds. Returns (wait status or None when
    ``kill`` was needed and the caller must reap, whether the deadline
    passed). ``watch``: as for :func:`wait_until`, until the deadline."""
    import time

    status = wait_until(pid, deadline, watch=watch)
    if status is not None:
        return status, False
    terminate()
    status = wait_until(pid, time.monotonic() + TIMEOUT_GRACE)
    if status is None:
        kill()
    return status, True


def explain(plan: Plan, *, timed_out: bool, cgroup: Cgroup | None, full: list[str]) -> list[tuple[str, str]]:
    """(limit key, message) for every limit the run reached, for the user."""
    out: list[tuple[str, str]] = []

    def raise_it(key: str) -> str:
        return f"raise it with {KEYS[key][0]} or limits.{key}"

    if timed_out:
        lim = plan.get("wallTime")
        out.append(("wallTime", f"the command ran longer than limits.wallTime ({human('wallTime', lim.value)}): the "
                    f"sandbox was stopped (SIGTERM, then SIGKILL after {TIMEOUT_GRACE:g} s); exit status 124; "
                    + raise_it("wallTime")))
    if cgroup is not None:
        refused, oom = cgroup.events()
        if refused:
            lim = plan.get("processes")
            out.append(("processes", f"the sandbox reached limits.processes ({human('processes', lim.value)} processes and "
                        f"threads): {refused} fork/clone call{'s' if refused > 1 else ''} failed with EAGAIN; "
                        + raise_it("processes")))
        if oom:
            lim = plan.get("memory")
            out.append(("memory", f"the kernel killed {oom} process{'es' if oom > 1 else ''} of the sandbox for "
                        f"exceeding limits.memory ({human('memory', lim.value)}); " + raise_it("memory")))
    if full:
        lim = plan.get("tmpSize")
        out.append(("tmpSize", f"the sandbox's {' and '.join(full)} filled up limits.tmpSize "
                    f"({human('tmpSize', lim.value)}; writes there failed with ENOSPC); " + raise_it("tmpSize")
                    + ", or write large files under the working directory"))
    return out


def kill_sandbox(*, ns_init: int | None, pgid: int | None, pid: int, cgroup: Cgroup | None) -> None:
    """SIGKILL the whole sandbox: bwrap's init (the kernel then kills every
    process of its pid namespace), or without bwrap the command's process
    group and the helper's pid; and everything in the sandbox's cgroup."""
    targets: list[tuple[Callable[[int, int], None], int]] = []
    if ns_init:
        targets.append((os.kill, ns_init))
    if pgid:
        targets.append((os.killpg, pgid))
    targets.append((os.kill, pid))
    for fn, target in targets:
        try:
            fn(target, 9)
        except OSError:
            pass
    if cgroup is not None:
        cgroup.kill()

"""Per-sandbox resource limits: processes, memory, the private /tmp's size, wall time.

What each limit means, its default and why: docs/policy-reference.md
("Limits"). Where each is enforced: docs/layers.md ("Resource limits"). Each
run uses the best mechanism the host offers, decided by :func:`plan`:

* **processes** (threads included): a cgroup's ``pids.max``, for the whole
  sandbox; otherwise ``RLIMIT_NPROC``, set by the helper. Inside bwrap's user
  namespace that, too, counts the sandbox only (since Linux 5.14 the count
  is kept per user namespace: ``ucounts``); without bwrap it counts every
  process of the user on the host, and it never applies to root (the kernel
  exempts uid 0).
* **memory**: a cgroup's ``memory.max`` (swap off), for the whole sandbox;
  the kernel OOM-kills inside the sandbox only. Otherwise ``RLIMIT_DATA``,
  per process (a sandbox of N processes may use N times the limit).
* **tmpSize**: the tmpfs ``size=`` of the private ``/tmp`` and ``/dev/shm``
  (bwrap ``--size``), each. Nothing without bwrap (no private /tmp).
* **wallTime**: safebox itself: SIGTERM to the command, SIGKILL to the whole
  sandbox :data:`TIMEOUT_GRACE` seconds later, exit status 124.

A limit set by a policy or flag that no mechanism here can enforce is an
error; one that can be enforced only per process or per user says so on
every run, and ``--strict`` refuses it. A default that cannot be enforced is
said with ``-v`` and by ``safebox doctor``.

Cgroups: ``safebox/run/cgroups.py``.

The values (defaults, units, bounds): ``policy/limit_values.py``. Here:
the plan (which mechanism enforces each limit, decided before the run) and
what safebox itself does while the command runs and after it (the
wall-time deadline, the private /tmp's fullness, the kill of the whole
sandbox, what the run reached, told to the user).

Standard library only, cheap to import: ``safebox doctor`` runs it from a
fresh checkout, and ``safebox exec`` on every run.
"""

from __future__ import annotations

import os

from safebox._record import Frozen
from safebox.errors import BuildError
from safebox.policy.limit_values import KEYS, TIMEOUT_GRACE, default, human
from safebox.run.cgroups import Cgroup, CgroupSite, find_cgroup

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import NoReturn

    from safebox.policy.effective import EffectivePolicy


_CONTROLLER = {"processes": "pids", "memory": "memory"}



class Limit(Frozen):
    """One limit as this run enforces it."""

    key: str  # the policy key under `limits`
    value: float  # 0: unlimited
    explicit: bool  # set by a policy or flag (else the default)
    how: str = ""  # the mechanism, for -v and doctor ("" when not enforced)
    scope: str = ""  # "sandbox", "process", "user", or "" when not enforced

    def describe(self) -> str:
        """``processes 4096 (cgroup v2 pids.max, the whole sandbox)``."""
        shown = human(self.key, self.value)
        if not self.value:
            return f"{self.key} {shown}"
        if not self.scope:
            return f"{self.key} {shown}: NOT enforced ({self.how})"
        return f"{self.key} {shown} ({self.how})"


class Plan(Frozen):
    """The limits of one run and what enforces each."""

    limits: tuple[Limit, ...]
    rlimit_nproc: int = 0  # for the helper; 0: not set
    rlimit_data: int = 0
    tmp_size: int = 0  # bwrap --size of /tmp and /dev/shm; 0: none
    cgroup_sites: tuple[tuple[str, CgroupSite], ...] = ()
    cgroup_pids: int = 0
    cgroup_memory: int = 0
    wall_time: float = 0.0
    warnings: tuple[str, ...] = ()  # said on every run

    def get(self, key: str) -> Limit:
        """The limit named ``key``."""
        return next(lim for lim in self.limits if lim.key == key)

    def summary(self) -> str:
        """One line for -v."""
        return "limits: " + "; ".join(lim.describe() for lim in self.limits)

    def cgroup(self) -> Cgroup | None:
        """A (not yet created) cgroup for this run, when one is used."""
        if not self.cgroup_sites:
            return None
        return Cgroup(dict(self.cgroup_sites), pids=self.cgroup_pids, memory=self.cgroup_memory)


class HostFacts(Frozen):
    """What the host offers for limits (probed by :func:`probe`)."""

    uid: int
    cgroups: tuple[tuple[str, CgroupSite | None, str], ...]  # (controller, site, why not)
    bwrap_size: bool  # bwrap takes --size (False without bwrap)


def requested(policy: EffectivePolicy) -> dict[str, tuple[float, bool]]:
    """key → (value, explicit) from the merged policy, defaults filled in."""
    out: dict[str, tuple[float, bool]] = {}
    for key, (_, field) in KEYS.items():
        v = getattr(policy, field)
        out[key] = (default(key), False) if v is None else (v, True)
    return out


def probe(values: dict[str, tuple[float, bool]], *, bwrap: str | None, cache_dir: str | None) -> HostFacts:
    """Look at the host, only as far as ``values`` need it."""
    cgroups = []
    for key, controller in _CONTROLLER.items():
        if values[key][0]:
            site, why = find_cgroup(controller)
            cgroups.append((controller, site, why))
    return HostFacts(uid=os.getuid(), cgroups=tuple(cgroups),
                     bwrap_size=bool(bwrap and values["tmpSize"][0] and bwrap_has_size(bwrap, cache_dir)))


def bwrap_has_size(bwrap: str, cache_dir: str | None) -> bool:
    """Whether ``bwrap --help`` lists ``--size`` (bubblewrap 0.8.0 has it,
    Ubuntu 22.04's 0.6.1 does not). Remembered per bwrap binary (device,
    inode, size, mtime) in the cache dir: one stat on a hit."""
    try:
        st = os.stat(bwrap)
    except OSError:
        return False
    marker = None
    if cache_dir:
        marker = os.path.join(cache_dir, f"bwrap-size-{st.st_dev}-{st.st_ino}-{st.st_size}-{st.st_mtime_ns}")
        for answer in ("yes", "no"):
            if os.path.exists(f"{marker}.{answer}"):
                return answer == "yes"
    from safebox._record import run_capture

    try:
        _, out, err = run_capture([bwrap, "--help"], timeout=10)
    except (OSError, TimeoutError):
        return False
    has = b"--size" in out + err
    if marker:
        try:
            os.makedirs(cache_dir or "", mode=0o700, exist_ok=True)
            os.close(os.open(f"{marker}.{'yes' if has else 'no'}", os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
        except OSError:
            pass
    return has


class LimitError(BuildError):
    """A limit the policy set cannot be enforced here (``hint``: how to proceed)."""


def for_run(policy: EffectivePolicy, *, bwrap: str | None, helper: bool, strict: bool,
            cache_dir: str | None) -> Plan:
    """The plan of one run: ``bwrap`` is its path when the run uses it."""
    values = requested(policy)
    return plan(values, probe(values, bwrap=bwrap, cache_dir=cache_dir), bwrap=bwrap is not None,
                helper=helper, strict=strict)


def plan(values: dict[str, tuple[float, bool]], host: HostFacts, *, bwrap: bool, helper: bool,
         strict: bool) -> Plan:
    """Decide the mechanism of every limit (pure). ``bwrap``/``helper``: the
    layers this run has. Raises LimitError for a limit that was set and
    cannot be enforced (or, with ``strict``, only per process or per user)."""
    p = _Planner(values, host, strict=strict)
    p.processes(bwrap=bwrap, helper=helper)
    p.memory(helper=helper)
    p.tmp_size(bwrap=bwrap)
    # wallTime: safebox's own clock, on every host.
    value, explicit = values["wallTime"]
    p.limits.append(Limit(key="wallTime", value=value, explicit=explicit, scope="sandbox" if value else "",
                          how=f"safebox: SIGTERM, SIGKILL to the whole sandbox {TIMEOUT_GRACE:g} s later, exit 124"))

    used = {c for c in ("pids", "memory") if p.out.get(f"cgroup_{c}")}
    return Plan(limits=tuple(p.limits), cgroup_sites=tuple((c, p.sites[c]) for c in sorted(used)),
                warnings=tuple(p.warnings), wall_time=float(value), **p.out)


class _Planner:
    """The decisions of :func:`plan`, one method per limit."""

    def __init__(self, values: dict[str, tuple[float, bool]], host: HostFacts, *, strict: bool) -> None:
        self.values, self.host, self.strict = values, host, strict
        self.sites = {c: s for c, s, _ in host.cgroups if s is not None}
        self.why_not = {c: w for c, s, w in host.cgroups if s is None}
        self.limits: list[Limit] = []
        self.warnings: list[str] = []
        self.out: dict[str, int] = {}  # Plan's integer fields this run sets

    def refuse(self, key: str, why: str, fix: str) -> NoReturn:
        flag = KEYS[key][0]
        raise LimitError(f"limits.{key} = {human(key, self.values[key][0])} cannot be enforced here: {why}",
                         hint=f"{fix}; or remove limits.{key} / {flag} (`safebox doctor` shows what this host offers)")

    def weaker(self, key: str, scope: str, why: str) -> None:
        # Enforced, but not for the sandbox as a whole: said on every run,
        # as the helper-only network hole is; --strict refuses.
        if self.strict:
            self.refuse(key, f"only per {scope} ({why}), and --strict asks for the whole sandbox",
                        "give safebox a cgroup (docs/layers.md, \"Resource limits\")")
        self.warnings.append(f"limits.{key} is enforced per {scope}, not for the sandbox as a whole: {why}")

    def processes(self, *, bwrap: bool, helper: bool) -> None:
        value, explicit = self.values["processes"]
        cg = "pids" in self.sites
        if not value:
            self.limits.append(Limit(key="processes", value=0, explicit=explicit))
        elif cg:
            self.limits.append(Limit(key="processes", value=value, explicit=explicit, scope="sandbox",
                                     how=f"cgroup v{self.sites['pids'].version} pids.max, the whole sandbox"))
            self.out["cgroup_pids"] = int(value)
        elif self.host.uid == 0:
            why = f"RLIMIT_NPROC does not apply to root, and no cgroup: {self.why_not.get('pids', '')}"
            if explicit:
                self.refuse("processes", why, "run safebox as an unprivileged user, or give it a cgroup")
            self.limits.append(Limit(key="processes", value=value, explicit=False, how=why))
        elif not helper:
            why = "--without helper: the helper sets RLIMIT_NPROC, and no cgroup"
            if explicit:
                self.refuse("processes", why, "run with the helper, or give safebox a cgroup")
            self.limits.append(Limit(key="processes", value=value, explicit=False, how=why))
        elif bwrap:
            self.limits.append(Limit(key="processes", value=value, explicit=explicit, scope="sandbox",
                                     how="RLIMIT_NPROC in the sandbox's user namespace, the whole sandbox"))
            self.out["rlimit_nproc"] = int(value)
        elif explicit:
            self.weaker("processes", "user", "without bubblewrap RLIMIT_NPROC counts all of your processes on the host")
            self.limits.append(Limit(key="processes", value=value, explicit=True, scope="user",
                                     how="RLIMIT_NPROC, counting all of your processes on the host"))
            self.out["rlimit_nproc"] = int(value)
        else:
            # The default must never stop a normal build: all of the user's
            # processes (a desktop has thousands of threads) would count.
            self.limits.append(Limit(key="processes", value=value, explicit=False,
                                     how="without bubblewrap RLIMIT_NPROC would count all of your processes"))

    def memory(self, *, helper: bool) -> None:
        value, explicit = self.values["memory"]
        if not value:
            self.limits.append(Limit(key="memory", value=0, explicit=explicit))
        elif "memory" in self.sites:
            self.limits.append(Limit(key="memory", value=value, explicit=explicit, scope="sandbox",
                                     how=f"cgroup v{self.sites['memory'].version} memory limit, the whole sandbox"))
            self.out["cgroup_memory"] = int(value)
        elif not helper:
            self.refuse("memory", f"--without helper (the helper sets RLIMIT_DATA), and no cgroup: {self.why_not.get('memory', '')}",
                        "run with the helper, or give safebox a cgroup")
        else:
            self.weaker("memory", "process", f"RLIMIT_DATA; no cgroup: {self.why_not.get('memory', '')}")
            self.limits.append(Limit(key="memory", value=value, explicit=explicit, scope="process",
                                     how="RLIMIT_DATA, each process"))
            self.out["rlimit_data"] = int(value)

    def tmp_size(self, *, bwrap: bool) -> None:
        value, explicit = self.values["tmpSize"]
        if not value:
            self.limits.append(Limit(key="tmpSize", value=0, explicit=explicit))
        elif not bwrap:
            why = "without bubblewrap there is no private /tmp (the command's TMPDIR is on the host's /tmp)"
            if explicit:
                self.refuse("tmpSize", why, "run with bubblewrap")
            self.limits.append(Limit(key="tmpSize", value=value, explicit=False, how=why))
        elif not self.host.bwrap_size:
            why = "this bubblewrap has no --size option (0.8.0 has it)"
            if explicit:
                self.refuse("tmpSize", why, "upgrade bubblewrap")
            self.limits.append(Limit(key="tmpSize", value=value, explicit=False, how=why))
        else:
            self.limits.append(Limit(key="tmpSize", value=value, explicit=explicit, scope="sandbox",
                                     how="tmpfs size of /tmp and of /dev/shm, each"))
            self.out["tmp_size"] = int(value)


# --------------------------------------------------------------- during the run


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

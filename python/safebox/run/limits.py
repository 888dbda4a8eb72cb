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

The values (defaults, units, bounds): ``policy/limit_values.py``; what
happens while the command runs and after it: ``run/limit_watch.py``.

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

"""The sandbox's cgroup: where safebox may create one, and its life cycle.

safebox never changes a cgroup it did not create. It makes
``safebox-PID-PIDNS-RANDOM`` (:class:`Cgroup`) in a directory found by
:func:`find_cgroup`: on cgroup v2, a parent that holds no process, passes
``pids``/``memory`` on to its children (``cgroup.subtree_control``) and is
writable (a subtree delegated to the caller, or the root as root); on
cgroup v1 (one hierarchy per controller), the caller's own cgroup when it is
writable (root on a host without systemd). The sandbox enters it through a
one-line shell that moves itself and then execs bwrap (or the helper), so
nothing of the sandbox ever runs outside it and safebox itself never moves.
Why and how: docs/layers.md, "Resource limits". Standard library only.
"""

from __future__ import annotations

import os

from safebox._record import Frozen

# --------------------------------------------------------------- cgroups

class CgroupSite(Frozen):
    """Where safebox may create a sandbox's cgroup for one controller."""

    version: int  # 1 or 2
    parent: str  # the directory the sandbox's cgroup is created in


def _own_cgroups() -> dict[str, str]:
    """``/proc/self/cgroup``: controller → path (``""`` for the v2 line)."""
    out: dict[str, str] = {}
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, names, path = line.rstrip("\n").split(":", 2)
                for name in names.split(",") if names else [""]:
                    out[name] = path
    except (OSError, ValueError):
        pass
    return out


def _cgroup_mounts() -> dict[str, tuple[str, str]]:
    """Mounted cgroup hierarchies: controller (``""`` for v2) → (mount point, root)."""
    out: dict[str, tuple[str, str]] = {}
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                if " - cgroup" not in line:
                    continue
                pre, _, post = line.partition(" - ")
                fields, tail = pre.split(), post.split()
                if len(fields) < 5 or len(tail) < 3:
                    continue
                root, point = fields[3], fields[4].replace("\\040", " ")
                if tail[0] == "cgroup2":
                    out.setdefault("", (point, root))
                elif tail[0] == "cgroup":
                    for opt in tail[2].split(","):
                        out.setdefault(opt, (point, root))
    except OSError:
        pass
    return out


def _host_dir(mount: tuple[str, str], path: str) -> str | None:
    """The directory of cgroup ``path`` under ``mount`` (None when outside it)."""
    point, root = mount
    if root != "/":
        if path != root and not path.startswith(root.rstrip("/") + "/"):
            return None
        path = path[len(root.rstrip("/")):] or "/"
    return os.path.normpath(point + path)


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def _systemd_manages() -> bool:
    return os.path.isdir("/run/systemd/system")


def _delegated(path: str) -> bool:
    """Whether systemd delegated cgroup ``path`` (it owns the tree otherwise):
    chowned to an unprivileged user, or marked with its ``delegate`` xattr."""
    try:
        if os.stat(path).st_uid == os.getuid() != 0:
            return True
    except OSError:
        return False
    for attr in ("trusted.delegate", "user.delegate"):
        try:
            if os.getxattr(path, attr) == b"1":
                return True
        except OSError:
            pass
    return False


def _usable(path: str) -> str | None:
    """Why safebox cannot create a child cgroup in ``path`` (None: it can)."""
    if not os.access(path, os.W_OK | os.X_OK) or not os.access(os.path.join(path, "cgroup.procs"), os.W_OK):
        return f"{path} is not writable by uid {os.getuid()}"
    if _systemd_manages() and not _delegated(path):
        return f"{path} belongs to systemd (not delegated)"
    return None


def find_cgroup(controller: str) -> tuple[CgroupSite | None, str]:
    """Where a sandbox's cgroup with ``controller`` (``pids`` or ``memory``)
    can be created, and otherwise why not (for -v and doctor)."""
    own, mounts = _own_cgroups(), _cgroup_mounts()
    why: list[str] = []
    if "" in own and "" in mounts:
        base = _host_dir(mounts[""], own[""])
        if base is not None:
            # "No internal processes": a cgroup holding a process (this one)
            # cannot pass controllers to children, except the root. So the
            # parent of the one safebox runs in, when that passes them on.
            point = mounts[""][0].rstrip("/")
            for cand in dict.fromkeys((base, os.path.dirname(base))):
                if cand != point and not cand.startswith(point + "/"):
                    continue
                if controller not in _read(os.path.join(cand, "cgroup.subtree_control")).split():
                    continue
                reason = _usable(cand)
                if reason is None:
                    return CgroupSite(version=2, parent=cand), ""
                why.append(reason)
            if not why:
                why.append(f"cgroup v2: {controller} is not enabled for children of {base} or its parent")
    if controller in own and controller in mounts:
        base = _host_dir(mounts[controller], own[controller])
        if base is not None:
            reason = "systemd manages the cgroup v1 hierarchies" if _systemd_manages() else _usable(base)
            if reason is None:
                return CgroupSite(version=1, parent=base), ""
            why.append(f"cgroup v1 {controller}: {reason}")
    if not why:
        why.append(f"no cgroup hierarchy with the {controller} controller")
    return None, "; ".join(why)


class Cgroup:
    """One sandbox's cgroup(s): one directory on cgroup v2, one per
    controller on v1. Created before the sandbox, removed after it."""

    PREFIX = "safebox-"

    def __init__(self, sites: dict[str, CgroupSite], *, pids: int, memory: int) -> None:
        # PID and pid namespace: the sweep judges a run dead only by a pid
        # of its own namespace (a cgroup tree can be shared with containers).
        self.name = f"{self.PREFIX}{os.getpid()}-{_pidns()}-{os.urandom(4).hex()}"
        self.pids, self.memory = pids, memory
        # controller → the sandbox's directory; one entry per directory to enter.
        self.dirs = {c: os.path.join(s.parent, self.name) for c, s in sites.items()}
        self.version = {c: s.version for c, s in sites.items()}
        self.created: list[str] = []

    def create(self) -> None:
        """Make the directories and write the limits; raises OSError (nothing left behind)."""
        try:
            for c, d in self.dirs.items():
                if d not in self.created:
                    sweep_stale(os.path.dirname(d))
                    os.mkdir(d, 0o755)
                    self.created.append(d)
                self._write_limit(c, d)
        except OSError:
            self.remove()
            raise

    def _write_limit(self, controller: str, d: str) -> None:
        v2 = self.version[controller] == 2
        if not (self.pids if controller == "pids" else self.memory):
            return  # no limit: the cgroup only holds the sandbox together
        if controller == "pids":
            _write(os.path.join(d, "pids.max"), str(self.pids))
        elif v2:
            _write(os.path.join(d, "memory.max"), str(self.memory))
            # Swap would let the sandbox use more than the limit, slowly.
            if os.path.exists(os.path.join(d, "memory.swap.max")):
                _write(os.path.join(d, "memory.swap.max"), "0")
        else:
            _write(os.path.join(d, "memory.limit_in_bytes"), str(self.memory))
            if os.path.exists(os.path.join(d, "memory.memsw.limit_in_bytes")):
                _write(os.path.join(d, "memory.memsw.limit_in_bytes"), str(self.memory))

    def procs_files(self) -> list[str]:
        """The files the sandbox's first process writes itself ("0") into:
        ``cgroup.procs`` on cgroup v2; on v1 the ``tasks`` file, which for a
        single-threaded process (the shell of ``wrap``) is the same move.

        Why ``tasks``: writing a pid to v1's ``cgroup.procs`` moves a thread
        group, so the kernel takes ``cgroup_threadgroup_rwsem`` for writing
        (``cgroup_procs_write_start``: ``*threadgroup_locked = pid ||
        threadgroup``), and that percpu rwsem waits for an RCU grace period:
        about 10 ms of every start here. Moving the current thread alone
        ("0" to ``tasks``) skips the lock (kernel/cgroup/cgroup.c, "If we
        migrate a single thread, we don't care about threadgroup
        stability")."""
        out: dict[str, None] = {}
        for c, d in self.dirs.items():
            out[os.path.join(d, "tasks" if self.version[c] == 1 else "cgroup.procs")] = None
        return list(out)

    def wrap(self, path: str, argv: list[str]) -> tuple[str, list[str]]:
        """(path, argv) that runs ``argv`` (whose program is ``path``)
        inside the cgroup: a shell writes its own pid ("0") into each
        ``procs_files`` entry and execs, so bwrap and everything it starts is
        inside from its first instruction (no window to fork outside)."""
        files = self.procs_files()
        script = ('n=$1; shift; while [ "$n" -gt 0 ]; do echo 0 > "$1" || '
                  '{ echo "safebox: cannot enter the sandbox cgroup $1" >&2; exit 125; }; '
                  'shift; n=$((n-1)); done; exec "$@"')
        return "/bin/sh", ["/bin/sh", "-c", script, "safebox-cgroup", str(len(files)), *files, path, *argv[1:]]

    def events(self) -> tuple[int, int]:
        """(forks refused at ``pids.max``, processes OOM-killed) so far."""
        refused = oom = 0
        if "pids" in self.dirs:
            refused = _field(_read(os.path.join(self.dirs["pids"], "pids.events")), "max")
        if "memory" in self.dirs:
            name = "memory.events" if self.version["memory"] == 2 else "memory.oom_control"
            oom = _field(_read(os.path.join(self.dirs["memory"], name)), "oom_kill")
        return refused, oom

    def kill(self) -> None:
        """SIGKILL every process in the cgroup(s)."""
        for d in dict.fromkeys(self.dirs.values()):
            _kill_all(d)

    def remove(self) -> None:
        """Kill what is left and remove the directories (idempotent). A
        directory still busy is left to the next run's sweep."""
        for d in reversed(self.created):
            _kill_all(d)
            for attempt in range(50):
                try:
                    os.rmdir(d)
                    break
                except OSError as e:
                    if e.errno != 16:  # EBUSY: retried; gone or not ours: nothing to do
                        break
                    # The kernel frees a killed task's cgroup link
                    # asynchronously; a few ms at most.
                    import time

                    time.sleep(0.002 * (attempt + 1))
        self.created = []


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _field(text: str, name: str) -> int:
    for line in text.splitlines():
        k, _, v = line.partition(" ")
        if k == name and v.strip().isdigit():
            return int(v)
    return 0


def _kill_all(d: str) -> None:
    """SIGKILL the processes of cgroup ``d`` until none is left (a fork in
    between is caught by the next round; pids.max bounds the rounds)."""
    kill_file = os.path.join(d, "cgroup.kill")  # v2, Linux 5.14
    if os.path.exists(kill_file):
        try:
            _write(kill_file, "1")
            return
        except OSError:
            pass
    for _ in range(100):
        pids = [int(p) for p in _read(os.path.join(d, "cgroup.procs")).split() if p.isdigit()]
        if not pids:
            return
        for p in pids:
            try:
                os.kill(p, 9)
            except OSError:
                pass


def _pidns() -> str:
    try:
        return f"{os.stat('/proc/self/ns/pid').st_ino:x}"
    except OSError:
        return "0"


def sweep_stale(parent: str) -> None:
    """Remove the cgroups of safebox runs that died (SIGKILL) in ``parent``:
    their processes are killed (bwrap's --die-with-parent has usually done
    it) and the directory removed. Only runs of this pid namespace are
    judged (another's pids mean nothing here); a name whose pid is alive is
    left alone (a reused pid only delays the sweep)."""
    try:
        names = [n for n in os.listdir(parent) if n.startswith(Cgroup.PREFIX)]
    except OSError:
        return
    ns = _pidns()
    for name in names:
        fields = name[len(Cgroup.PREFIX):].split("-")
        if len(fields) != 3 or fields[1] != ns or not fields[0].isdigit():
            continue
        pid = fields[0]
        if int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
            continue
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        d = os.path.join(parent, name)
        _kill_all(d)
        try:
            os.rmdir(d)
        except OSError:
            pass

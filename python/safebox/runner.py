"""Running one sandboxed command: run dir, plumbing, spawn, signal relay, exit status.

The sequence (``run``):

1. Mark every inherited descriptor above 2 close-on-exec (the command gets
   only stdin, stdout and stderr).
2. Sweep run dirs left by killed runs; create a private 0700 run dir holding a
   lock that lives exactly as long as this process.
3. Load the policy (cached; pydantic only on a miss); pick the layers.
4. Start the filtering proxy when any domain is allowed.
5. Resolve (lstat, realpath, ripgrep) and build: bwrap argv, helper policy
   (0600), seccomp program (cached).
6. Spawn bwrap (or the helper alone) in its own process group; read the
   helper's status line; relay SIGINT/SIGTERM/SIGHUP/SIGQUIT to the command.
   A terminating signal that arrives before the spawn ends the start-up
   (128+N, everything above undone); one that arrives after it is queued
   until the command exists, then relayed (``_signals``).
7. Wait; map the exit status (own; 128+N on signal N; 125 when safebox or
   bwrap failed before the command ran); quarantine any protected file the
   command created; stop the proxy; remove the run dir.
"""

from __future__ import annotations

import fcntl
import os
import _signal as signal  # the C module: `signal` wraps it in enums (~4.5 ms of import)
import sys
import time

from safebox import _signals
from safebox import limits as _limits
from safebox._record import Frozen, StrEnum, path_outside, read_until, realpath_cached, rmtree, which
from safebox.builder.resolved import Bridge, Layers, NetKind, ResolvedPolicy
from safebox.errors import EXIT_TIMEOUT, BuildError, HelperError, PolicyError, RunError
from safebox.policy.effective import EffectivePolicy
from safebox.policy.defaults import credential_env
from safebox.policy.load import Context, Flags, load_cached, state_dir

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from safebox.builder.bulk import BulkPlan
    from safebox.limits import Plan
    from safebox.proxy.deferred import DeferredProxy
    from safebox.violations.observer import Observer

# Ports the bridges listen on inside the sandbox's own network namespace
# (private, so fixed numbers cannot collide with anything on the host).
HTTP_BRIDGE_PORT = 3128
SOCKS_BRIDGE_PORT = 1080
FORWARDED_SIGNALS = _signals.FORWARDED


class Without(StrEnum):
    """``--without``: run one layer alone."""

    BWRAP = "bwrap"
    HELPER = "helper"


class ExecRequest(Frozen):
    """Everything ``safebox exec`` was asked to do."""

    command: tuple[str, ...]
    policy_file: str | None = None
    flags: Flags = Flags()
    without: Without | None = None
    strict: bool = False
    dry_run: bool = False
    audit_log: str | None = None
    verbose: bool = False
    publish: tuple[str, ...] = ()  # ports as given on the command line
    quiet: bool = False  # no refused-host lines, no hints
    learn: str | None = None  # --learn OUT: any public host; the suggested policy goes to OUT
    summary: str | None = None  # --summary FILE: append this run's Markdown report
    observe: str | None = None  # --observe: off, writes, all; None: writes, or all with --audit-log


def _say(msg: str) -> None:
    sys.stderr.write(f"safebox: {msg}\n")
    sys.stderr.flush()


def _cloexec_inherited() -> None:
    try:
        fds = [int(n) for n in os.listdir("/proc/self/fd")]
    except OSError:
        fds = list(range(3, 1024))
    for fd in fds:
        if fd > 2:
            try:
                os.set_inheritable(fd, False)
            except OSError:
                pass


def _home() -> str:
    home = os.environ.get("HOME")
    if not home or not home.startswith("/"):
        import pwd

        home = pwd.getpwuid(os.getuid()).pw_dir
    return os.path.normpath(home)


def _private_dir(path: str) -> None:
    """Create ``path`` 0700 (and parents); refuse one that is not ours and private."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.lstat(path)
    except OSError as e:
        raise RunError(f"cannot create {path}: {e.strerror}") from None
    if not os.path.isdir(path) or os.path.islink(path) or st.st_uid != os.getuid():
        raise RunError(f"{path} is not a directory owned by you; refusing to use it")
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)


_WATCH = "watch"


def write_watch(run_dir: str, rp: ResolvedPolicy) -> None:
    """Record in the run dir what the end of the run must check (protected
    names that did not exist, protected symlinks), so that a run whose
    safebox was SIGKILLed is settled by the next start (:func:`sweep_stale`)
    instead of leaving a planted ``~/.bashrc`` for good. Hex paths, one
    record a line: ``missing HEX`` or ``link HEX HEXTARGET``."""
    if not rp.watch_missing and not rp.watch_links and not rp.watch_tops:
        return
    from safebox.builder.helper_policy import write_policy_file

    lines = [f"missing {os.fsencode(p).hex()}" for p in rp.watch_missing]
    # `top HEXROOT HEXNAMES`: the protected names whose first component
    # (NAMES, comma-separated) was absent at the top of ROOT.
    lines += [f"top {os.fsencode(r).hex()} {','.join(firsts).encode().hex()}" for r, firsts in rp.watch_tops]
    lines += [f"link {os.fsencode(p).hex()} {os.fsencode(t).hex()}" for p, t in rp.watch_links]
    write_policy_file(os.path.join(run_dir, _WATCH), ("\n".join(lines) + "\n").encode())


def _settle_watch(run_dir: str, state: str) -> list[str]:
    """Quarantine and restore what a dead run's watch file names; returns messages."""
    try:
        with open(os.path.join(run_dir, _WATCH), "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return []
    missing: list[str] = []
    links: list[tuple[str, str]] = []
    tops: list[tuple[str, tuple[str, ...]]] = []
    for line in raw.decode("ascii", "replace").splitlines():
        kind, *hexes = line.split(" ")
        try:
            paths = [os.fsdecode(bytes.fromhex(h)) for h in hexes]
        except ValueError:
            continue  # our own file, 0600 in a private dir: a torn write at most
        if kind == "missing" and len(paths) == 1:
            missing.append(paths[0])
        elif kind == "link" and len(paths) == 2:
            links.append((paths[0], paths[1]))
        elif kind == "top" and len(paths) == 2:
            tops.append((paths[0], tuple(paths[1].split(","))))
    if tops:
        from safebox.builder.resolve import top_candidates

        missing += top_candidates(tops)
    out = [f"a killed earlier run's command created protected file {src}; moved it to {dest}"
           for src, dest in quarantine(tuple(missing), state)]
    for link, replaced in restore_links(tuple(links), state):
        what = f"replaced it; moved the replacement to {replaced}" if replaced else "removed it"
        out.append(f"protected symlink {link}: a killed earlier run's command {what}; the link is restored")
    return out


def sweep_stale(run_base: str) -> list[str]:
    """Remove run dirs whose owner died (their lock is free), after settling
    what their watch files name. Returns what was done, for the user."""
    done: list[str] = []
    try:
        names = os.listdir(run_base)
    except FileNotFoundError:
        return done
    for name in names:
        d = os.path.join(run_base, name)
        try:
            fd = os.open(os.path.join(d, "lock"), os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError:
            # A dir without a lock: a run killed between mkdir and lock; old enough ⇒ stale.
            try:
                if time.time() - os.lstat(d).st_mtime > 60:
                    rmtree(d)
            except OSError:
                pass
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue  # alive
        try:
            done += _settle_watch(d, os.path.dirname(run_base))
        except OSError as e:  # keep the run dir: the next start tries again
            os.close(fd)
            done.append(f"cannot settle the killed run {d}: {e.strerror or e}")
            continue
        rmtree(d)
        os.close(fd)
    return done


_TMP_PREFIX = "safebox-tmp-"


def _sweep_stale_tmp(base: str) -> None:
    """Remove helper-only TMPDIRs (``safebox-tmp-UID-PID-RANDOM``) of ours whose run died."""
    prefix = f"{_TMP_PREFIX}{os.getuid()}-"
    try:
        names = [n for n in os.listdir(base) if n.startswith(prefix)]
    except OSError:
        return
    for name in names:
        pid = name[len(prefix):].split("-", 1)[0]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
            continue  # alive (or not ours to judge)
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        path = os.path.join(base, name)
        try:
            if os.lstat(path).st_uid == os.getuid() and not os.path.islink(path):
                rmtree(path)
        except OSError:
            pass


class RunDir:
    """A private run dir under the state dir, locked for this process's lifetime."""

    def __init__(self, base: str) -> None:
        _private_dir(base)
        self.swept = sweep_stale(base)
        self.path = os.path.join(base, f"{os.getpid()}-{os.urandom(4).hex()}")
        os.mkdir(self.path, 0o700)
        # Locked before it is visible as `lock`: a concurrent start's sweep
        # that found an unlocked `lock` would take this live run for a dead
        # one and remove it (found with 20 sandboxes at once). A dir without
        # `lock` is left alone by the sweep for 60 s.
        tmp = os.path.join(self.path, "lock.new")
        self._lock = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        fcntl.flock(self._lock, fcntl.LOCK_EX)
        os.rename(tmp, os.path.join(self.path, "lock"))

    def remove(self) -> None:
        """Delete the run dir (idempotent)."""
        rmtree(self.path)
        if self._lock >= 0:
            os.close(self._lock)
            self._lock = -1


def _publish_ports(raw: tuple[str, ...], policy: EffectivePolicy) -> tuple[int, ...]:
    """Validate ``--publish`` values; publishing needs the command to be allowed to listen."""
    ports: list[int] = []
    for value in raw:
        if not value.isdigit() or not 1 <= int(value) <= 65535:
            raise PolicyError(f"--publish: {value!r} is not a port number (1-65535)")
        if int(value) in ports:
            raise PolicyError(f"--publish: port {value} given twice")
        if int(value) in (HTTP_BRIDGE_PORT, SOCKS_BRIDGE_PORT) and policy.allowed_domains:
            raise PolicyError(f"--publish: port {value} is taken by the proxy bridge inside the sandbox")
        ports.append(int(value))
    if ports and not policy.allow_local_binding:
        raise PolicyError("--publish needs network.allowLocalBinding = true (the command may not listen otherwise)")
    return tuple(ports)


def decide_layers(req: ExecRequest, *, bwrap: str | None) -> tuple[Layers, list[str]]:
    """Which layers run, and what to tell the user about it."""
    notes: list[str] = []
    match req.without:
        case Without.BWRAP:
            return Layers.HELPER_ONLY, notes
        case Without.HELPER:
            return Layers.BWRAP_ONLY, notes
        case None:
            if bwrap is None:
                notes.append("bubblewrap not found: running with the helper alone "
                             "(Landlock + seccomp + capability drop; no mount or pid isolation)")
                return Layers.HELPER_ONLY, notes
            return Layers.BOTH, notes


def _seccomp_program(layers: Layers, policy: EffectivePolicy, net: NetKind, cache_dir: str,
                     observe: str = "off") -> tuple[bytes, str]:
    from safebox.builder import bpf_cache

    # The values of seccomp.InetMode (not imported here: see bpf_cache).
    if layers is Layers.HELPER_ONLY:
        inet = "tcp_only" if net is NetKind.PROXY else "none"
    else:
        inet = "any"  # an empty network namespace: inet sockets reach nothing
    return bpf_cache.load(cache_dir=cache_dir,
                          allow_unix_sockets=bool(policy.allow_unix_sockets or policy.allow_all_unix_sockets),
                          inet=inet, observe=observe)


def helper_policy_for(rp: ResolvedPolicy, policy: EffectivePolicy, *, strict: bool,
                      seccomp_path: str | None, connect_ports: tuple[int, ...], socat: str | None,
                      limits: Plan | None = None, observe_path: str | None = None) -> bytes:
    """The helper policy bytes for a resolved run (pure)."""
    from safebox.builder.helper_policy import FsAccess, HelperPolicy, NetMode, render

    abi_max = os.environ.get("SAFEBOX_TEST_ABI_MAX")  # test-only: prove the down-level paths
    net = NetMode.PROXY if rp.net is NetKind.PROXY else NetMode.OFF
    # Inside bwrap the helper listens on the proxy ports and hands the
    # listeners to the proxy; without bwrap the proxy listens on the host.
    listens = tuple(b.port for b in rp.bridges) if rp.layers is Layers.BOTH else ()
    publishes = rp.publish if rp.layers is Layers.BOTH else ()
    hp = HelperPolicy(
        fs_rules=tuple((FsAccess(c), p) for c, p in rp.landlock_rules),
        net=net, connect_ports=connect_ports if net is NetMode.PROXY else (),
        bind_any=policy.allow_local_binding, seccomp_path=seccomp_path, observe_path=observe_path, strict=strict,
        abi_max=int(abi_max) if abi_max else None, listens=listens, publishes=publishes,
        socat_path=socat if publishes else None,
        rlimit_nproc=limits.rlimit_nproc if limits else 0, rlimit_data=limits.rlimit_data if limits else 0)
    return render(hp)


def _spawn(path: str, argv: list[str], env: dict[str, str], *, pass_fds: tuple[int, ...], cwd: str,
           block_signals: bool = False, dup_to: tuple[tuple[int, int], ...] = ()) -> int:
    """posix_spawn ``path``; ``pass_fds`` are inherited as they are, each
    (fd, number) of ``dup_to`` as that number in the child."""
    for fd in pass_fds:
        os.set_inheritable(fd, True)
    # Python ignores SIGPIPE; the command must get the default dispositions back.
    sigdef = (signal.SIGPIPE, signal.SIGXFSZ, *FORWARDED_SIGNALS)
    # block_signals: the child starts with every signal blocked (the
    # violations supervisor): a signal sent to safebox's process group while
    # the child is still in it (before setpgid) stays pending, and the
    # supervisor discards it (helper/supervise.c) instead of dying of it.
    mask = signal.valid_signals() if block_signals else ()
    old = os.getcwd()
    os.chdir(cwd)
    try:
        return os.posix_spawn(path, argv, env, setpgroup=0, setsigdef=sigdef, setsigmask=mask,
                              file_actions=[(os.POSIX_SPAWN_DUP2, fd, n) for fd, n in dup_to])
    except OSError as e:
        raise RunError(f"cannot start {path}: {e.strerror}") from None
    finally:
        os.chdir(old)
        for fd in pass_fds:
            try:
                os.set_inheritable(fd, False)
            except OSError:
                pass


def _become_subreaper() -> None:
    """Without bwrap there is no pid namespace: make safebox the child
    subreaper (prctl(2), PR_SET_CHILD_SUBREAPER), so descendants that detach
    (``setsid cmd &``) are re-parented to safebox instead of init, and
    ``_reap_descendants`` can end them when the command has exited."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    PR_SET_CHILD_SUBREAPER = 36
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise RunError(f"prctl(PR_SET_CHILD_SUBREAPER) failed: {os.strerror(ctypes.get_errno())}")


def _children() -> list[int]:
    out: list[int] = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/children") as f:
                out += [int(x) for x in f.read().split()]
        except OSError:
            pass
    return out


def _reap_descendants(keep: int = -1) -> None:
    """SIGKILL and reap every remaining child (orphans re-parented to us), until
    none is left but ``keep`` (the violations supervisor, which exits by itself
    once no sandboxed task is left)."""
    for _ in range(100):
        kids = [k for k in _children() if k != keep]
        if not kids:
            return
        for k in kids:
            try:
                os.kill(k, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for k in kids:
            try:
                os.waitpid(k, 0)
            except ChildProcessError:
                pass


def _group_members(pgid: int) -> list[int]:
    """Host pids whose process group is ``pgid`` (from /proc/*/stat field 5)."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 2 and int(fields[2]) == pgid:
            out.append(int(name))
    return out


class _Relay:
    """Forwards signals to the command's process group."""

    def __init__(self) -> None:
        self.target_pgid: int | None = None
        self.bwrap_child: int | None = None
        self.spawned: int | None = None
        self.got: list[int] = []
        # Until the helper has reported (it is about to exec), there is no
        # command to signal: signals are queued and replayed by ``ready``,
        # never dropped, and never turned into a kill of bwrap.
        self.is_ready = False
        self.pending: list[int] = []

    def ready(self) -> None:
        """The command exists now: deliver what arrived before it did."""
        self.is_ready = True
        _signals.command_started()
        pending, self.pending = self.pending, []
        for signum in pending:
            self.handler(signum)

    def _command_pgid(self) -> int | None:
        if self.target_pgid:
            return self.target_pgid
        if self.bwrap_child:
            # bwrap's pid 1 (reaper) has one child: the helper, which became the
            # command; it leads its own session (--new-session), so its pid is its pgid.
            try:
                with open(f"/proc/{self.bwrap_child}/task/{self.bwrap_child}/children") as f:
                    kids = f.read().split()
                if kids:
                    return int(kids[0])
            except OSError:
                return None
        return None

    def handler(self, signum: int) -> None:
        self.got.append(signum)
        if not self.is_ready:
            self.pending.append(signum)
            return
        pid = self._command_pgid()
        try:
            if pid is None:
                if self.bwrap_child is None and self.spawned:
                    # bwrap never said where the sandbox is: no way to reach
                    # the command but through the whole sandbox.
                    os.kill(self.spawned, signal.SIGKILL if signum != signal.SIGWINCH else 0)
                # Otherwise bwrap's pid 1 has no child left: the command has
                # ended and its status is on its way. A second signal (a
                # SIGCONT after the SIGTERM, Ctrl-C twice) used to SIGKILL
                # bwrap here and turn the command's 143 into 137.
                return
            pgid = os.getpgid(pid)
            if self.bwrap_child and pgid == os.getpgid(self.bwrap_child):
                # bwrap's --new-session puts its pid-1 reaper and the command in
                # one group; signalling the group would kill the reaper and with
                # it the whole namespace (SIGKILL instead of the signal). So the
                # group's members other than the reaper are signalled one by one.
                for member in _group_members(pgid):
                    if member != self.bwrap_child:
                        os.kill(member, signum)
            else:
                os.killpg(pgid, signum)
        except ProcessLookupError:
            pass

    def install(self) -> None:
        """Take the signals over, just before the sandbox is spawned: the
        last point where a terminating signal still ends the start-up
        (:class:`_signals.StartInterrupted`); from here on the command gets it."""
        _signals.catch()
        _signals.check()
        self.pending = _signals.forward_to(self.handler) + self.pending


def _exit_status(wstatus: int) -> int:
    code = os.waitstatus_to_exitcode(wstatus)
    return 128 - code if code < 0 else code


def _wait(pid: int) -> int:
    while True:
        try:
            _, st = os.waitpid(pid, 0)
            return st
        except ChildProcessError:
            return 0
        except InterruptedError:
            continue


def _host_mount_points() -> frozenset[str]:
    """Every mount point of this mount namespace (``/proc/self/mountinfo``,
    field 5, octal escapes decoded)."""
    try:
        with open("/proc/self/mountinfo", "rb") as f:
            lines = f.read().split(b"\n")
    except OSError as e:
        raise BuildError(f"cannot read /proc/self/mountinfo ({e.strerror}); cannot place the write roots") from None
    out = set()
    for line in lines:
        fields = line.split(b" ", 5)
        if len(fields) > 4:
            raw = fields[4]
            if b"\\" in raw:  # space, tab, newline and backslash come as \ooo
                parts = raw.split(b"\\")
                raw = parts[0] + b"".join(bytes([int(x[:3], 8)]) + x[3:] for x in parts[1:])
            out.add(os.fsdecode(raw))
    return frozenset(out)


def bulk_plan(rp: ResolvedPolicy, bwrap: str) -> tuple[ResolvedPolicy, BulkPlan]:
    """(what bubblewrap mounts, what safebox mounts after it): a big policy's
    entries go to ``safebox.mounter`` when this host allows it (a setuid
    bubblewrap's namespaces are root's; ``mount_setattr`` needs Linux 5.12).
    Otherwise, and for every small policy, bubblewrap makes them all."""
    import stat

    from safebox.builder.bulk import BULK_MIN, BulkPlan, split

    movable = (len(rp.write_roots) + len(rp.pinned_dirs) + len(rp.read_only) + len(rp.mask_dirs)
               + len(rp.mask_files))
    if movable < BULK_MIN or rp.layers is Layers.HELPER_ONLY:
        return rp, BulkPlan()
    try:
        if os.stat(bwrap).st_mode & stat.S_ISUID:
            return rp, BulkPlan()
    except OSError:
        return rp, BulkPlan()  # spawning it will say why
    from safebox import mounter

    if not mounter.supported():
        return rp, BulkPlan()
    return split(rp, host_mounts=_host_mount_points() if len(rp.write_roots) > 1 else frozenset())


#: bubblewrap refuses more arguments than this, --args file included
#: (bubblewrap.c: MAX_ARGS), whatever E2BIG would allow.
BWRAP_MAX_ARGS = 9000


def _check_bwrap_limit(count: int, mounts: ResolvedPolicy, *, moved: int) -> None:
    """Refuse, naming the cause, a policy whose mounts bubblewrap would refuse
    with a bare "Exceeded maximum number of arguments"."""
    if count <= BWRAP_MAX_ARGS:
        return
    why = (f"{len(mounts.write_roots)} write roots, {len(mounts.pinned_dirs)} pinned dirs, "
           f"{len(mounts.read_only)} read-only entries, {len(mounts.mask_dirs) + len(mounts.mask_files)} masks")
    hint = ("write roots under /tmp are bound by bubblewrap itself (the sandbox's /tmp is private): "
            "list their common parent instead" if moved else
            "this host cannot use safebox's own mounter (a setuid bubblewrap, or Linux older than 5.12): "
            "list common parents instead of every entry")
    raise BuildError(f"the policy needs {count} bubblewrap arguments ({why}); bubblewrap takes at most "
                     f"{BWRAP_MAX_ARGS}", hint=hint)


def _read_bwrap_child(fd: int) -> int | None:
    """bwrap's --json-status-fd: the first document holds "child-pid" once the
    sandbox exists. A fixed key in a fixed document; read without a JSON parser
    (``json`` costs ~5 ms of import on the hot path)."""
    buf = read_until(fd, b"}")
    if not buf:
        return None
    key = b'"child-pid":'
    at = buf.find(key)
    if at < 0:
        return None
    digits = buf[at + len(key):].lstrip(b" ").split(b",", 1)[0].split(b"}", 1)[0].strip()
    return int(digits) if digits.isdigit() else None


# The quarantine keeps the newest QUARANTINE_MAX_ENTRIES entries (one
# directory per second in which something was moved there); older ones are
# removed when a new entry is made, and safebox says so in one line. What a
# command planted is kept for the user to look at, but a harness whose tasks
# keep planting must not fill the disk (docs/policy-reference.md).
QUARANTINE_MAX_ENTRIES = 100


def _is_quarantine_entry(name: str) -> bool:
    """``YYYYmmddTHHMMSS``: the names ``quarantine`` makes (nothing else there is touched)."""
    return len(name) == 15 and name[8] == "T" and name[:8].isdigit() and name[9:].isdigit()


def bound_quarantine(qdir: str, *, keep: str, max_entries: int = QUARANTINE_MAX_ENTRIES) -> list[str]:
    """Remove the oldest quarantine entries beyond ``max_entries`` (never
    ``keep``, the one just filled); returns their names. Called only when
    something was quarantined, so runs that plant nothing pay nothing."""
    try:
        names = sorted(n for n in os.listdir(qdir) if _is_quarantine_entry(n))
    except OSError:
        return []
    excess = len(names) - max_entries
    removed = []
    for name in names:
        if excess <= 0:
            break
        path = os.path.join(qdir, name)
        if path == keep:
            continue
        rmtree(path)
        if not os.path.lexists(path):
            removed.append(name)
            excess -= 1
    return removed


def quarantine(paths: tuple[str, ...], state: str) -> list[tuple[str, str]]:
    """Move protected files the command created (they did not exist before) out of the tree.

    The paths were resolved before the run; a parent the command replaced
    with a symlink (``proj/.config -> ~/.config``) would make the move land
    on whatever the link names, the user's own ``~/.config/git/config``
    (found in review). Such a path is left alone and reported instead.
    """
    moved = []
    qdir = os.path.join(state, "quarantine")
    dest_dir = ""
    real: dict[str, str] = {}  # resolved now, after the run; each parent once
    listed: dict[str, set[str] | None] = {}
    for p in paths:
        parent = os.path.dirname(p)
        if realpath_cached(parent, real) != parent:
            _say(f"a directory on the way to protected path {p} was replaced by a symlink during the run; "
                 "nothing moved there (check it by hand)")
            continue
        # One listing per parent, not an lstat per watched name (forty
        # names at the top of each write root).
        if parent not in listed:
            try:
                listed[parent] = set(os.listdir(parent))
            except OSError:
                listed[parent] = None
        names = listed[parent]
        if (os.path.basename(p) in names) if names is not None else os.path.lexists(p):
            dest_dir = os.path.join(qdir, time.strftime("%Y%m%dT%H%M%S"))
            os.makedirs(dest_dir, mode=0o700, exist_ok=True)
            base = os.path.join(dest_dir, p.strip("/").replace("/", "%"))
            dest, n = base, 1
            while os.path.lexists(dest):
                # The same path quarantined twice in one second (two runs, or
                # a restored link replaced again): rename(2) would replace the
                # first, and that is the user's evidence.
                dest, n = f"{base}.{n}", n + 1
            try:
                os.rename(p, dest)
            except OSError:
                import shutil

                shutil.move(p, dest)
            moved.append((p, dest))
    if moved:
        removed = bound_quarantine(qdir, keep=dest_dir)
        if removed:
            shown = ", ".join(removed[:3]) + (f" and {len(removed) - 3} more" if len(removed) > 3 else "")
            _say(f"the quarantine keeps the newest {QUARANTINE_MAX_ENTRIES} entries: removed "
                 f"{len(removed)} older one{'s' if len(removed) > 1 else ''} from {qdir} ({shown})")
    return moved


def restore_links(links: tuple[tuple[str, str], ...], state: str) -> list[tuple[str, str | None]]:
    """Put back protected symlinks the command removed or replaced.

    A symlink named like a protected file (``~/.bashrc -> dotfiles/bashrc``)
    lives in a writable directory and is no mount point, so the command can
    unlink it and plant a file of its own there. Whatever now stands at the
    path is quarantined and the original link recreated. Returns (path,
    quarantine destination or None when nothing replaced the link).
    """
    restored: list[tuple[str, str | None]] = []
    for path, target in links:
        try:
            if os.readlink(path) == target:
                continue
        except FileNotFoundError:
            pass
        except OSError:
            pass  # no longer a symlink (EINVAL): a replacement
        if not os.path.isdir(os.path.dirname(path)):
            # Its directory is gone, and everything in it: nothing stands at
            # the path, and nothing can until someone outside the sandbox
            # recreates the directory. Raising here would make one vanished
            # temporary tree (a killed run's watch list) stop every later start.
            continue
        try:
            dest = quarantine((path,), state)
            os.symlink(target, path)
        except OSError as e:
            raise RunError(f"cannot restore protected symlink {path} -> {target}: {e.strerror or e}") from None
        restored.append((path, dest[0][1] if dest else None))
    return restored


def _tool(name: str, tools_path: str) -> str | None:
    """``name`` from ``tools_path`` ($PATH outside the write roots). Raises
    BuildError when the only one on $PATH lies in a write root: running it
    would run whatever the command left there; None when there is none."""
    found = which(name, tools_path)
    if found is None:
        elsewhere = which(name)
        if elsewhere is not None:
            raise BuildError(f"{name} is on PATH only at {elsewhere}, inside a write root: a sandboxed "
                             "command could have replaced it, and safebox runs it outside the sandbox",
                             hint=f"install {name} outside the write roots, or take that directory off PATH")
    return found


#: Directories that, as the work dir (a write root without a word from the
#: user), make a whole system tree writable: warned about on every run.
#: ``$HOME`` is added at run time. Exact matches only: ``/usr/src/app``, a
#: common container work dir, is a project like any other.
SYSTEM_DIRS = frozenset({"/bin", "/boot", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32", "/media",
                         "/mnt", "/opt", "/root", "/run", "/sbin", "/srv", "/usr", "/usr/bin", "/usr/lib",
                         "/usr/local", "/usr/local/bin", "/usr/sbin", "/usr/share", "/var", "/var/lib"})


def check_write_roots(policy: EffectivePolicy, *, cwd: str, home: str) -> str | None:
    """Refuse a write root of ``/`` by the flag or key that asked for it;
    return a warning (said on every run, not only with -v, once the sandbox
    is built) when the work dir is ``$HOME`` or a system directory. Runs
    before any tool is looked up: a write root of ``/`` holds every tool, and
    the refusal would otherwise speak of bwrap's location (issue 11 item 12)."""
    for w in policy.allow_write:
        if os.path.realpath(w) != "/":
            continue
        via = "" if w == "/" else " (it resolves to /)"
        if w == cwd:
            raise PolicyError(f"the work dir {w}{via} is a write root (the built-in filesystem.allowWrite entry "
                              "`.`): `/` is refused: it would make the whole host writable",
                              hint="cd into a project directory first")
        raise PolicyError(f"{policy.entry('filesystem.allowWrite', w)}{via}: `/` is refused: it would make "
                          "the whole host writable", hint="allow only the directories the command writes")
    at_home = cwd in (home, os.path.realpath(home))
    if at_home or cwd in SYSTEM_DIRS:
        what = "your home directory" if at_home else "a system directory"
        return (f"warning: the work dir {cwd} is {what}, and the work dir is writable: all of {cwd} is writable "
                "inside but for the protected and denied paths; run from a project directory to narrow it")
    return None


def _test_pause(point: str) -> None:
    """``SAFEBOX_TEST_PAUSE=POINT``: safebox stops itself (SIGSTOP) at the
    point of start-up named ``POINT`` -- ``proxy`` (before the proxy
    exists), ``bwrap`` (before the sandbox is spawned, ahead of resolving)
    or ``command`` (spawned, before the command exists) -- so that the stress
    test can land a signal exactly there and SIGCONT it
    (tests/security/test_signal_stress.py). Harmless outside tests: it only
    stops, as SIGSTOP from the caller could at any point, and the points lie
    before anything is resolved or after the sandbox exists, so it widens no
    window between a check and its use."""
    if os.environ.get("SAFEBOX_TEST_PAUSE") == point:
        os.kill(os.getpid(), signal.SIGSTOP)


def _checkpoint(before: str) -> None:
    """A point of start-up where a terminating signal ends it (``_signals.check``)."""
    _signals.check()
    _test_pause(before)
    _signals.check()


def run(req: ExecRequest, *, prescan: dict[tuple[str, int], Any] | None = None) -> int:
    """Run ``req.command`` sandboxed; return the exit status for ``safebox exec``.

    Raises :class:`_signals.StartInterrupted` when a terminating signal
    arrived before the sandbox was spawned, after undoing the start-up."""
    if not req.command:
        raise RunError("no command given (usage: safebox exec [OPTIONS] -- COMMAND [ARGS]...)")
    _signals.catch()  # the cli did already; run() called otherwise must not lose one either
    _cloexec_inherited()
    cwd = os.path.realpath(os.getcwd())
    home = _home()
    ctx = Context(cwd=cwd, home=home, credential_env=credential_env(os.environ))
    state = state_dir(home)
    flags = req.flags
    if req.strict and not flags.strict:
        flags = flags.replace(strict=True)
    _private_dir(state)
    # Runs whose safebox died (SIGKILL) are settled before anything looks at
    # the tree: protected files their commands planted are quarantined now,
    # and a walk started earlier (the prescan) saw them, so it is dropped
    # (the cli cancels what run() does not adopt).
    settled = sweep_stale(os.path.join(state, "run"))
    for note in settled:
        _say(note)
    if settled:
        prescan = None
    # safebox's own config dir is created (0700, empty) so that it exists to
    # be masked: a missing one under a write root could otherwise be created
    # by the command, planting the user policy of the next run.
    from safebox.policy.load import user_config_dir

    _private_dir(user_config_dir(home))
    policy = load_cached(ctx, policy_file=req.policy_file, flags=flags, cache_dir=os.path.join(state, "cache"))
    warning = check_write_roots(policy, cwd=cwd, home=home)
    strict = policy.strict

    ports = _publish_ports(req.publish, policy)
    # bwrap, socat, ripgrep and find run on the host: never from a PATH entry
    # the sandboxed command can write (found in review: a planted .venv/bin/rg).
    tools = path_outside([cwd, *policy.allow_write])
    bwrap = _tool("bwrap", tools)
    layers, notes = decide_layers(req, bwrap=bwrap)
    if strict and layers is not Layers.BOTH:
        raise BuildError(f"--strict: refusing to run with {layers.value} (every layer must be enforced)",
                         hint="run `safebox doctor` to see why bubblewrap cannot run here")
    for n in notes:
        _say(n)
    limits = _limits.for_run(policy, bwrap=bwrap if layers is not Layers.HELPER_ONLY else None,
                             helper=layers is not Layers.BWRAP_ONLY, strict=strict,
                             cache_dir=os.path.join(state, "cache"))
    for w in limits.warnings:
        _say(w)
    if req.verbose:
        _say(limits.summary())

    from safebox.builder.resolve import (WRITE_ROOTS, HostFacts, Scan, import_paths, read_write_roots,
                                         refuse_planted_links, remember_write_roots, resolve, self_paths)
    from safebox.helper import check_helper, find_helper, replaceable

    roots_file = os.path.join(state, WRITE_ROOTS)
    earlier_roots = read_write_roots(roots_file)
    refuse_planted_links(policy, layers=layers, cwd=cwd, pwd=os.environ.get("PWD"), earlier=earlier_roots)
    # A missing write root the user asked for is created or refused, never
    # skipped (builder/write_roots.py); after the symlink check, so that no
    # directory is created through a link a sandbox planted.
    missing_roots = [w for w in policy.allow_write if not os.path.lexists(w)]
    if missing_roots:
        from safebox.builder.write_roots import create_missing
        from safebox.policy.load import user_config_dir as _ucd

        for n in create_missing(tuple(missing_roots),
                                skip=("/tmp",) if layers is not Layers.HELPER_ONLY else (),
                                never_under=(state, _ucd(home)), deny_read=policy.deny_read,
                                allow_read=policy.allow_read, dry_run=req.dry_run):
            if not req.quiet:
                _say(n)

    helper = find_helper()
    if layers is not Layers.BWRAP_ONLY:
        check_helper(helper)
        # What `safebox doctor` fails on (a user's own venv): refused with
        # --strict, said once on every other run, never silent.
        exposed = replaceable(helper)
        if exposed and strict:
            raise HelperError(f"--strict: refusing a helper that a process other than root could replace: {exposed}",
                              hint="install safebox as root, system-wide (`safebox doctor` shows the fix)")
        if exposed:
            _say(f"warning: a process other than root could replace the helper ({exposed}); "
                 "`safebox doctor` fails on this and --strict refuses to run")
    socat = _tool("socat", tools)
    # Run records (report.py) only when a log, a summary or --learn wants
    # them: the common run pays for one environment lookup.
    summary = req.summary or os.environ.get("GITHUB_STEP_SUMMARY") or None
    recorder = None  # its .audit is the run's event sink (file, memory or both)
    if (req.audit_log or summary or req.learn) and not req.dry_run:
        from safebox.report import Recorder

        recorder = Recorder(audit_log=req.audit_log, summary=summary, learn=req.learn)
    ci_run = None
    if os.environ.get("GITHUB_ACTIONS") == "true" or os.environ.get("GITLAB_CI") == "true":
        from safebox import ci

        kind = ci.detect(os.environ)
        if kind is not None:
            ci_run = ci.prepare(os.environ, kind=kind, cwd=cwd, home=home, bwrap=layers is not Layers.HELPER_ONLY,
                                dry_run=req.dry_run)
            deny = tuple(p for p in ci_run.deny_read if p not in policy.allow_read)
            policy = policy.replace(deny_read=(*policy.deny_read, *deny),
                                    deny_write=(*policy.deny_write, *ci_run.deny_write),
                                    allow_write=(*policy.allow_write, *ci_run.allow_write))

    run_tmp: str | None = None
    if layers is Layers.HELPER_ONLY and not req.dry_run:
        # No private /tmp without bwrap. The command gets its own TMPDIR, a
        # write root of its own: /tmp itself may refuse new entries when it
        # lies on the way to safebox's installation (see landlock_rules).
        base = os.environ.get("TMPDIR") or "/tmp"
        _sweep_stale_tmp(base)
        run_tmp = os.path.join(base, f"{_TMP_PREFIX}{os.getuid()}-{os.getpid()}-{os.urandom(4).hex()}")
        os.mkdir(run_tmp, 0o700)
        policy = policy.replace(allow_write=(*policy.allow_write, run_tmp))
    # ripgrep starts now and searches the write roots while the rest is prepared.
    try:
        scan = Scan(policy, layers=layers, rg_path=_tool("rg", tools), prestarted=prescan)
    except BaseException:
        if run_tmp is not None:
            rmtree(run_tmp)
        if ci_run is not None:
            ci_run.cleanup()
        raise
    run_dir: RunDir | None = None
    proxy = None
    forwarders: list[Any] = []
    # The proxy's refusals (host, port, protocol, decision), for the feed.
    feed_network: list[tuple[Any, ...]] = []
    try:
        if req.dry_run:
            run_path = os.path.join(state, "run", "DRY-RUN")
        else:
            run_dir = RunDir(os.path.join(state, "run"))
            run_path = run_dir.path
            for note in run_dir.swept:  # a run killed in the meantime
                _say(note)
        bridges: tuple[Bridge, ...] = ()
        connect_ports: tuple[int, ...] = ()
        net = NetKind.PROXY if policy.allowed_domains or req.learn else NetKind.NONE
        netplan = None
        if policy.needs_netplan(os.environ):  # srt's parentProxy, tlsTerminate, credentials (netplan.py)
            from safebox.netplan import prepare

            netplan = prepare(policy, environ=os.environ, networked=net is NetKind.PROXY,
                              run_dir=None if req.dry_run else run_path, can_bind=layers is not Layers.HELPER_ONLY)
            for note in (*netplan.warnings, *(netplan.notes if req.verbose else ())):
                _say(note)
            if netplan.deny_read:
                policy = policy.replace(deny_read=(*policy.deny_read, *netplan.deny_read))
        _checkpoint("proxy")
        if net is NetKind.PROXY:
            if layers is Layers.BWRAP_ONLY and socat is None:
                raise BuildError("socat not found; without the helper it bridges the proxy into the sandbox",
                                 hint="install socat (apt-get install socat)")
            if not req.dry_run:
                from safebox.proxy.config import ProxyConfig
                from safebox.proxy.deferred import DeferredProxy

                # Listeners now, the proxy itself at the first client (proxy/deferred.py).
                proxy = DeferredProxy(ProxyConfig(
                    allowed_domains=policy.allowed_domains, denied_domains=policy.denied_domains,
                    allow_local_destinations=policy.allow_local_destinations,
                    audit_log=req.audit_log or None, explain=not req.quiet, learn=bool(req.learn),
                    run_id=recorder.run if recorder else None,
                    parent=netplan.parent if netplan else None,
                    mitm=netplan.mitm if netplan else None, injector=netplan.injector if netplan else None,
                    denied=lambda *refusal: feed_network.append(refusal)),
                    run_dir=run_path, tcp=layers is Layers.HELPER_ONLY,
                    # Unix sockets only for the socat bridges of --without helper;
                    # with the helper, the proxy serves on the listeners it hands over.
                    unix=layers is Layers.BWRAP_ONLY)
                proxy.start()
                http_sock, socks_sock = str(proxy.http_socket), str(proxy.socks_socket)
            else:
                http_sock, socks_sock = os.path.join(run_path, "http.sock"), os.path.join(run_path, "socks.sock")
            if layers is Layers.HELPER_ONLY:
                ports = (proxy.http_port, proxy.socks_port) if proxy else (0, 0)
                connect_ports = tuple(p for p in ports if p)
                if connect_ports:
                    # Stated on every such run, not only with -v: it is a hole
                    # the user must know of (docs/threat-model.md).
                    _say(f"without bubblewrap the command shares the host's network: Landlock limits its TCP "
                         f"connections to ports {' and '.join(map(str, connect_ports))}, but on any address "
                         "(Landlock port rules carry no address); use bwrap, or --strict to refuse")
                bridges = (Bridge(port=ports[0] or 0, socket_path=http_sock, scheme="http"),
                           Bridge(port=ports[1] or 0, socket_path=socks_sock, scheme="socks5h"))
            else:
                bridges = (Bridge(port=HTTP_BRIDGE_PORT, socket_path=http_sock, scheme="http"),
                           Bridge(port=SOCKS_BRIDGE_PORT, socket_path=socks_sock, scheme="socks5h"))
                connect_ports = (HTTP_BRIDGE_PORT, SOCKS_BRIDGE_PORT)

        _checkpoint("bwrap")
        from safebox.policy.load import expand_path

        # The --policy file is this run's input like the user and project
        # files (those are protected by name): read-only inside. So are the
        # --audit-log and --summary files: the command must not forge the
        # record of its own run (the proxy and safebox append from the host).
        given = tuple(expand_path(f, ctx) for f in (req.policy_file, req.audit_log, summary) if f)
        host = HostFacts(helper_path=helper, self_paths=(*self_paths(), helper), run_files=given,
                         import_paths=import_paths(),
                         path_dirs=tuple(os.environ.get("PATH", "").split(":")),
                         state_dir=state, run_dir=run_path,
                         policy_path=os.path.join(run_path, "policy"), rg_path=_tool("rg", tools))
        caches = None
        if policy.cache_presets:
            # Presets named, or whose registry is allowed anyway: their tools'
            # caches go to sandbox-private dirs (builder/caches.py).
            from safebox.builder.caches import prepare

            caches = prepare(policy.cache_presets, state=state, home=home, create=not req.dry_run)
        rp = resolve(policy, layers=layers, cwd=cwd, home=home, host=host, bridges=bridges, scan=scan,
                     **({"cache_dirs": caches.dirs, "cache_host_paths": caches.host_paths} if caches else {}))
        if netplan is not None and netplan.masked_files:
            rp = rp.replace(masked_files=netplan.masked_files)  # credentials.files, mode "mask"
        if not req.dry_run:
            # Remembered before the command exists: a link it plants in one
            # of these is refused by later runs (refuse_planted_links).
            remember_write_roots(roots_file, earlier_roots, tuple(r for r in rp.write_roots if r != run_tmp),
                                 time.time())
        if ports and layers is Layers.BWRAP_ONLY:
            # The host relay connects only through a socket the helper pinned
            # before the command existed (publish.py); without the helper
            # nothing can pin it, and the name alone can be redirected.
            raise PolicyError("--publish needs the helper: it cannot be used with --without helper")
        if ports and layers is not Layers.HELPER_ONLY:
            # Without bwrap the command shares the host's network: its port
            # is reachable as it is, and --publish has nothing to do.
            if socat is None:
                raise BuildError("socat not found; --publish needs it", hint="install socat")
            pub_dir = os.path.join(run_path, "pub")
            if not req.dry_run:
                os.mkdir(pub_dir, 0o700)
                from safebox.publish import PublishForwarder

                for port in ports:
                    forwarders.append(PublishForwarder(port, os.path.join(pub_dir, f"{port}.sock")))
            rp = rp.replace(publish=tuple((p, os.path.join(pub_dir, f"{p}.sock")) for p in ports),
                            publish_dir=pub_dir)
        if warning:
            _say(warning)  # now that the sandbox is built: a refusal stays one line
        if ci_run is not None:
            rp = rp.replace(overlays=ci_run.materialize(run_path, dry_run=req.dry_run))
            if req.verbose:
                for n in ci_run.notes:
                    _say(n)
        for w in rp.warnings:
            _say(w)
        if req.verbose:
            for n in rp.notes:
                _say(n)
        rp = rp.replace(tmp_size=limits.tmp_size)
        if run_dir is not None:
            write_watch(run_dir.path, rp)

        seccomp_path: str | None = None
        bpf = b""
        filter_id = ""
        observe = _observe_mode(req, layers)
        observe_bpf = b""
        observe_path: str | None = None
        if layers is not Layers.BWRAP_ONLY:
            bpf, filter_id = _seccomp_program(layers, policy, rp.net, os.path.join(state, "cache"))
            seccomp_path = os.path.join(run_path, "seccomp.bpf")
            if observe != "off":
                observe_bpf, _ = _seccomp_program(layers, policy, rp.net, os.path.join(state, "cache"), observe)
                observe_path = os.path.join(run_path, "observe.bpf")
        policy_bytes = helper_policy_for(rp, policy, strict=strict, seccomp_path=seccomp_path,
                                         connect_ports=connect_ports, socat=socat, limits=limits,
                                         observe_path=observe_path)

        from safebox.builder.env import build_env

        env, removed = build_env(os.environ, deny=policy.env_deny, allow=policy.env_allow,
                                 bridges=rp.bridges if layers is not Layers.HELPER_ONLY else
                                 tuple(b for b in rp.bridges if b.port),
                                 private_tmp=layers is not Layers.HELPER_ONLY, tmpdir=run_tmp)
        if netplan is not None:  # credentials.envVars; the TLS trust bundle variables
            removed += [k for k in netplan.env_unset if env.pop(k, None) is not None]
            env.update(netplan.env_set)
            removed = [k for k in removed if k not in env]  # masked ones are there, as sentinels
        if req.verbose and removed:
            _say(f"removed from the environment: {', '.join(removed)}")
        if caches is not None:
            from safebox.builder.caches import cache_env

            http = next((b for b in rp.bridges if b.scheme == "http" and b.port), None)
            env.update(cache_env(caches, env, proxy=("127.0.0.1", http.port) if http else None))
        if ci_run is not None:
            env.update(ci_run.env)  # $GITHUB_ENV & co. name this run's own files

        if req.dry_run:
            return _dry_run(rp, req, policy_bytes, filter_id, socat=socat or "socat", limits=limits,
                            bwrap=bwrap)

        from safebox.builder.helper_policy import write_policy_file

        if seccomp_path:
            write_policy_file(seccomp_path, bpf)
        observers: list[Observer] = []
        make_observer = None
        if observe_path:
            write_policy_file(observe_path, observe_bpf)

            def make_observer() -> Observer:
                # Called by _execute once bwrap (or the helper) is starting:
                # these imports, the table and the supervisor's start overlap
                # the sandbox's set-up instead of preceding it.
                from safebox.violations.observer import Observer
                from safebox.violations.table import build as build_table

                obs = Observer(helper=helper, run_dir=run_path,
                               table=build_table(rp, reads=observe == "all", ports=connect_ports))
                observers.append(obs)
                return obs
        write_policy_file(rp.policy_path, policy_bytes)
        status: list[Any] | None = None
        if recorder is not None:
            status = []
            recorder.start(command=list(req.command), layers=layers.value, cwd=cwd,
                           mode="learn" if req.learn else "enforce", policy=req.policy_file,
                           presets=list(policy.presets), ci=ci_run.kind if ci_run else None, observe=observe)
        hit: list[str] = []
        try:
            rc = _execute(rp, req, env, bwrap=bwrap, socat=socat or "socat", strict=strict, proxy=proxy,
                          filter_id=filter_id, forwarders=forwarders, status_out=status, limits=limits,
                          limits_hit=hit, make_observer=make_observer)
        finally:
            observer = observers[0] if observers else None
            records = observer.finish() if observer is not None else []
        if rc != 0 and not req.quiet and rp.private_tmp:
            hint = hidden_tmp_hint(req.command, rp)
            if hint:
                _say(hint)
        if observer is not None or feed_network:
            _explain(req, rp, observer, records, feed_network, audit=recorder.audit if recorder else None,
                     policy=policy, home=home, own=given)
        if rp.watch_tops:
            from safebox.builder.resolve import top_candidates

            moved = quarantine((*rp.watch_missing, *top_candidates(rp.watch_tops)), state)
        else:
            moved = quarantine(rp.watch_missing, state)
        for src, dest in moved:
            _say(f"the command created protected file {src}; moved it to {dest}")
        relinked = restore_links(rp.watch_links, state)
        for link, replaced in relinked:
            what = f"replaced it; moved the replacement to {replaced}" if replaced else "removed it"
            _say(f"protected symlink {link}: the command {what}; the link is restored")
        refused = ci_run.finish((*rp.write_roots, *rp.cache_dirs)) if ci_run is not None else []
        for r in refused:
            _say(f"refused {r.file} entry {r.name!r}: {r.reason} (not passed on to later steps; docs/ci.md)")
        if recorder is not None:
            if proxy is not None:
                proxy.stop()  # every relay closed: the byte counts are final
            recorder.stop(exit=rc, limits=hit, quarantined=[m[0] for m in moved],
                          restored_links=[link for link, _ in relinked],
                          hosts=proxy.destinations() if proxy is not None else [],
                          enforced=_enforced(status[0]) if status else None,
                          refused_entries=[{"file": r.file, "name": r.name, "reason": r.reason} for r in refused],
                          learn_out=req.learn)
            for note in recorder.finish(home=home):
                _say(note)
        return rc
    finally:
        scan.abandon()
        if ci_run is not None:
            ci_run.cleanup()
        for fw in forwarders:
            fw.close()
        if proxy is not None:
            proxy.stop()
        if run_dir is not None:
            run_dir.remove()
        if run_tmp is not None:
            rmtree(run_tmp)


def hidden_tmp_hint(command: tuple[str, ...], rp: ResolvedPolicy) -> str | None:
    """One hint when the command named a path under the host's /tmp that
    exists there but is hidden by the sandbox's private /tmp (and was not
    bound in): ``safebox exec -- cat /tmp/foo`` fails with ENOENT otherwise
    unexplained. ``--opt=/tmp/x`` counts too."""
    for arg in command[1:]:
        at = arg.find("/tmp/")
        if at != 0 and not (at > 0 and arg[at - 1] == "="):
            continue
        path = os.path.normpath(arg[at:])
        if not path.startswith("/tmp/") or not os.path.lexists(path):
            continue
        if any(path == b or path.startswith(b + "/") for b in (*rp.write_roots, *rp.socket_binds)):
            continue
        return (f"hint: {path} exists on the host, but the sandbox has a private /tmp that hides it; "
                f"use --allow-write {path} to bind it in, or a path outside /tmp")
    return None


def _observe_mode(req: ExecRequest, layers: Layers) -> str:
    """``--observe``: off, writes or all (the default: writes, and all with
    --audit-log, which is where reads of masked paths are recorded). Nothing
    is observed without the helper, which installs the observing filter."""
    if layers is Layers.BWRAP_ONLY or req.dry_run:
        return "off"
    if req.observe is not None:
        return req.observe
    return "all" if req.audit_log else "writes"


def _explain(req: ExecRequest, rp: ResolvedPolicy, observer: Observer | None, records: list[bytes],
             network: list[tuple[Any, ...]], *, audit: Any, policy: EffectivePolicy, home: str,
             own: tuple[str, ...] = ()) -> None:
    """The feed's output: a line when observation was impossible, the
    ``denied`` audit events, the summary (every event with -v)."""
    if observer is not None and observer.off is not None and not req.quiet:
        from safebox.violations.observer import WHY_OFF

        _say(f"refusals are not observed in this run: {WHY_OFF.get(observer.off, observer.off)} "
             "(the sandbox is enforced as usual; `safebox doctor` checks this host)")
    if not records and not network:
        return
    from safebox.violations.feed import Feed  # only when there is something to explain

    feed = Feed(rp, policy=policy, home=home, table=observer.table if observer else None,
                status=observer.status if observer else None, own=tuple(os.path.realpath(p) for p in own))
    feed.add_records(records)
    feed.add_network(network)
    if audit is not None:
        feed.write_audit(audit)
    if req.quiet and not req.verbose:
        return  # --quiet: the audit log keeps every refusal
    for line in feed.summary(verbose=req.verbose):
        _say(line)


def _dry_run(rp: ResolvedPolicy, req: ExecRequest, policy_bytes: bytes, filter_id: str, *, socat: str,
             limits: Plan | None = None, bwrap: str | None = None) -> int:
    import shlex

    from safebox.builder.bwrap import command_args, mount_args, namespace_args

    ops: tuple[tuple[Any, str], ...] = ()
    if rp.layers is not Layers.HELPER_ONLY:
        handoff = 5 if rp.layers is Layers.BOTH and (rp.bridges or rp.publish) else None
        mounts, plan = bulk_plan(rp, bwrap) if bwrap else (rp, None)
        ops = plan.ops if plan else ()
        argv = ["bwrap", *mount_args(mounts), *namespace_args(rp, bwrap_status_fd=4),
                *command_args(rp, list(req.command), status_fd=3, socat=socat, handoff_fd=handoff,
                              sync_fd=6 if ops else None)]
    else:
        argv = [rp.helper_path, "--policy-file", rp.policy_path, "--status-fd", "3", "--", *req.command]
    print("# bwrap argv" if rp.layers is not Layers.HELPER_ONLY else "# helper argv (no bwrap)")
    print(" \\\n  ".join(shlex.quote(a) for a in argv))
    if ops:
        print(f"# then made by safebox inside the sandbox, before the command starts ({len(ops)} mounts; "
              "docs/layers.md, \"Big policies\")")
        for op, path in ops:
            print(f"{op.value} {shlex.quote(path)}")
    if limits is not None:
        print(f"# {limits.summary()}")
    from safebox.builder.helper_policy import readable

    print(f"# helper policy ({rp.policy_path}; seccomp filter {filter_id or 'none'}): "
          "paths shown decoded; the file holds them hex-encoded")
    sys.stdout.write(readable(policy_bytes))
    return 0


def _enforced(status: Any) -> dict[str, Any]:
    """The helper's status as the ``stop`` run record's ``enforced``."""
    ll = status.landlock
    return {"landlock": None if ll is None else {"abi": ll.abi, "kernel_abi": ll.kernel_abi, "fs": ll.fs,
                                                  "net": ll.net, "scope": ll.scope},
            "seccomp": status.seccomp, "caps": status.caps, "nnp": status.nnp}


def _execute(rp: ResolvedPolicy, req: ExecRequest, env: dict[str, str], *, bwrap: str | None,
             socat: str, strict: bool, proxy: DeferredProxy | None = None, filter_id: str = "",
             forwarders: list[Any] | None = None, status_out: list[Any] | None = None,
             limits: Plan | None = None, limits_hit: list[str] | None = None,
             make_observer: Callable[[], Observer] | None = None) -> int:
    relay = _Relay()
    observer: Observer | None = None
    cgroup = limits.cgroup() if limits is not None else None
    tmp_watch: list[tuple[str, int]] = []
    status_r = status_w = -1
    bw_r = bw_w = -1
    args_fd = -1
    pid = -1
    handoff: tuple[Any, Any] | None = None
    sync: tuple[Any, Any] | None = None
    try:
        if rp.layers is Layers.BOTH and ((proxy is not None and rp.bridges) or forwarders):
            import _socket  # `socket` imports enum and selectors (~4 ms): not for one pair

            # The helper listens on the proxy ports inside and sends the
            # listeners back over this pair, then the published sockets
            # (helper/handoff.c, helper/publish.c).
            handoff = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_STREAM)
        elif make_observer is not None:
            import _socket  # `socket` imports enum and selectors: not for one pair

            # The helper hands the observing filter's listener over it (main.c).
            handoff = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_STREAM)

        def start_observer() -> None:
            nonlocal observer
            if make_observer is not None:
                observer = make_observer()
                observer.start(lambda path, argv, pass_fds: _spawn(path, argv, env, pass_fds=pass_fds, cwd="/",
                                                                  block_signals=True))

        status_r, status_w = os.pipe()
        if cgroup is not None:
            try:
                cgroup.create()
            except OSError as e:
                raise RunError(f"cannot set up the sandbox's cgroup {cgroup.name}: {e.strerror or e}",
                               hint="`safebox doctor` shows where safebox makes cgroups") from None
        started = time.monotonic()  # limits.wallTime counts from here
        if rp.layers is Layers.HELPER_ONLY:
            argv = [rp.helper_path, "--policy-file", rp.policy_path, "--status-fd", str(status_w)]
            fds: tuple[int, ...] = (status_w,)
            if handoff:
                argv += ["--handoff-fd", str(handoff[1].fileno())]
                fds += (handoff[1].fileno(),)
            argv += ["--", *req.command]
            relay.install()
            _become_subreaper()
            path, argv = cgroup.wrap(rp.helper_path, argv) if cgroup else (rp.helper_path, argv)
            pid = _spawn(path, argv, env, pass_fds=fds, cwd=rp.cwd)
            relay.spawned = pid
            relay.target_pgid = pid  # setpgroup=0: the helper (then the command) leads its group
            _test_pause("command")  # a signal now is queued for the command
            start_observer()
            if handoff:
                handoff[1].close()
                if observer is not None:
                    observer.forward(handoff[0])
        else:
            from safebox.builder.bwrap import command_args, mount_args, namespace_args

            assert bwrap is not None
            bw_r, bw_w = os.pipe()
            mounts, plan = bulk_plan(rp, bwrap)
            opts = mount_args(mounts) + namespace_args(rp, bwrap_status_fd=bw_w)
            # bwrap reads its options from a descriptor: thousands of deny
            # entries never hit E2BIG, and the argv stays short in `ps`.
            args_fd = os.memfd_create("safebox-bwrap-args")
            os.write(args_fd, b"\0".join(os.fsencode(a) for a in opts) + b"\0")
            os.lseek(args_fd, 0, os.SEEK_SET)
            handoff_fd = handoff[1].fileno() if handoff else None
            fds = (args_fd, bw_w) + ((status_w,) if status_w >= 0 else ()) + ((handoff_fd,) if handoff_fd else ())
            sync_fd = None
            if plan.ops:
                import socket

                # The sandbox's first program waits on this until the mounts
                # are made (mounter.py); a single-digit number for dash.
                sync = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
                sync_fd = next(n for n in range(3, 10) if n not in fds)
            tail = command_args(rp, list(req.command), status_fd=status_w if status_w >= 0 else None, socat=socat,
                                handoff_fd=handoff_fd, sync_fd=sync_fd)
            argv = ["bwrap", "--args", str(args_fd), *tail]
            _check_bwrap_limit(len(opts) + len(argv) - 1, mounts, moved=len(plan.ops))
            relay.install()
            path, argv = cgroup.wrap(bwrap, argv) if cgroup else (bwrap, argv)
            pid = _spawn(path, argv, env, pass_fds=fds, cwd="/",
                         dup_to=((sync[1].fileno(), sync_fd),) if sync and sync_fd else ())
            relay.spawned = pid
            _test_pause("command")  # a signal now is queued for the command
            start_observer()  # while bwrap builds the sandbox
            os.close(bw_w)
            bw_w = -1
            os.close(args_fd)
            args_fd = -1
            relay.bwrap_child = _read_bwrap_child(bw_r)
            if sync:
                sync[1].close()
                # Nothing (end of file): bubblewrap failed; its message and
                # exit status are reported below.
                if sync[0].recv(1) == b"R":
                    if relay.bwrap_child is None:
                        raise RunError("bubblewrap did not report its sandbox's pid; cannot make the mounts")
                    from safebox import mounter

                    mounter.apply(relay.bwrap_child, plan)
                    sync[0].sendall(b"G\n")
                sync[0].close()
            if handoff:
                handoff[1].close()  # only bwrap's copies remain: end of file once they are gone
                adopted = 1
                if proxy is not None and rp.bridges:
                    adopted = proxy.adopt(handoff[0], ports={b.port: b.scheme for b in rp.bridges})
                if forwarders and adopted:
                    from safebox.publish import receive_pinned

                    receive_pinned(handoff[0], forwarders)
                if observer is not None and adopted:
                    observer.forward(handoff[0])
        os.close(status_w)
        status_w = -1
        from safebox.helper import parse_status, read_status_line, status_ok

        line = read_status_line(status_r)
        if observer is not None:
            observer.status = line  # the feed reads the Landlock ABI from it
        relay.ready()
        if limits is not None and rp.layers is not Layers.HELPER_ONLY:
            tmp_watch = _limits.open_tmp_watch(relay.bwrap_child, rp.tmp_size)
        timed_out = False
        if limits is not None and limits.wall_time:
            sandbox_pid = pid
            got, timed_out = _limits.stop_at_deadline(
                pid, started + limits.wall_time, terminate=lambda: relay.handler(signal.SIGTERM),
                kill=lambda: _limits.kill_sandbox(ns_init=relay.bwrap_child, pgid=relay.target_pgid,
                                                  pid=sandbox_pid, cgroup=cgroup))
            wstatus = _wait(pid) if got is None else got
        else:
            wstatus = _wait(pid)
        if rp.layers is Layers.HELPER_ONLY:
            _reap_descendants(keep=observer.pid if observer is not None else -1)
        pid = -1
        rc = EXIT_TIMEOUT if timed_out else _exit_status(wstatus)
        if limits is not None:
            for key, msg in _limits.explain(limits, timed_out=timed_out, cgroup=cgroup,
                                            full=_limits.full_tmp(tmp_watch)):
                _say(msg)
                if limits_hit is not None:
                    limits_hit.append(key)
            tmp_watch = []
        status = None
        # A part that could not be enforced appears as `false` in the line;
        # only then (or with -v, or on failure) is the JSON parsed.
        if line is not None and (req.verbose or not status_ok(line) or status_out is not None
                                 or (b":false" in line and rp.layers is not Layers.BWRAP_ONLY)):
            status = parse_status(line)
            if status_out is not None:
                status_out.append(status)
            if not status.ok:
                raise HelperError(f"helper refused: {status.error}")
            missing = status.unenforced() if rp.layers is not Layers.BWRAP_ONLY else []
            if missing:
                _say("not enforced on this host: " + "; ".join(missing) + " (--strict refuses to run so)")
        if line is None and os.WIFSIGNALED(wstatus) and os.WTERMSIG(wstatus) in _signals.TERMINATING \
                and _signals.received(os.WTERMSIG(wstatus)):
            # posix_spawn moves the child into a group of its own only after
            # clone: for that instant it is in safebox's group, and the
            # group's signal, pending in it, kills it just before it execs
            # bwrap (or the helper). The command never existed: the start-up
            # ended by that signal, not by a failing bwrap.
            raise _signals.StartInterrupted(os.WTERMSIG(wstatus))
        if line is None and rp.layers is not Layers.HELPER_ONLY:
            raise RunError(f"bubblewrap could not create the sandbox (exit {rc}; its message is above)",
                           hint="run `safebox doctor`; on hosts without user namespaces use --without bwrap")
        if line is None:
            raise HelperError(f"the helper exited before reporting (exit {rc}; its message is above)")
        if req.verbose:
            summary = status.summary() if status else "helper not used"
            if status and status.seccomp and filter_id:
                summary += f" (filter {filter_id})"  # names the program in the cache and in docs/seccomp.md
            _say(f"layers: {rp.layers.value}; {summary}")
        return rc
    finally:
        if pid > 0:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            _wait(pid)
        for fd in (status_r, status_w, bw_r, bw_w, args_fd):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        for end in (*(handoff or ()), *(sync or ())):
            end.close()
        for _, fd in tmp_watch:
            os.close(fd)
        if cgroup is not None:
            cgroup.remove()
        # Still caught, only recorded: a signal arriving while safebox
        # cleans up must not kill it half-way (run dir, proxy, quarantine).
        _signals.stop_forwarding()


__all__ = ["ExecRequest", "Without", "run"]

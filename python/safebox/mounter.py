"""The mounts of a big policy, made inside the sandbox before the command starts.

``builder/bulk.py`` decides which mounts bubblewrap leaves to safebox (and
why: bubblewrap's cost per mount grows with the mount table). Here a forked
child of safebox enters the sandbox's user and mount namespaces, which
bubblewrap created as the same user (``setns``, as ``nsenter`` does), and
makes them with ``mount(2)`` and ``mount_setattr(2)``: one or two system
calls per entry, whatever the table holds.

The sandbox is held at a handshake while this runs: the first program inside
(a ``/bin/sh`` stanza in front of the helper or the command) writes ``R`` on
a socket and waits for ``G``; nothing of the command exists yet. A failure
ends the run (exit 125) before ``G``: the command never starts with a mount
missing.

Every entry is bound from a copy of the sandbox's tree (``open_tree``,
attached over the run dir meanwhile, then detached), not from the live tree:
a bind copies the mounts beneath its source, and a source that gained a child
with every entry would make the binds quadratic again (the kernel walks the
source's children). Write roots come first, from a copy taken before them;
pins, read-only entries and masks then come from a copy taken after the
write roots and before any of them (and read-only ones from a read-only copy
of it, one bind each). The plan lists ancestors first, so what a bind
carries is what bubblewrap mounted beneath it, as if bubblewrap had made this
mount itself.
"""

from __future__ import annotations

import os

from safebox.builder.bulk import BulkOp, BulkPlan
from safebox.errors import BuildError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

# Linux UAPI constants (include/uapi/linux/mount.h, sched.h, nsfs.h); the
# system-call numbers are the same on every architecture since 5.x.
_SYS_OPEN_TREE, _SYS_MOVE_MOUNT, _SYS_MOUNT_SETATTR = 428, 429, 442
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_BIND, _MS_REC = 1, 2, 4, 4096, 16384
_MNT_DETACH = 2
_AT_FDCWD, _AT_EMPTY_PATH, _AT_RECURSIVE = -100, 0x1000, 0x8000
_OPEN_TREE_CLONE, _OPEN_TREE_CLOEXEC = 1, os.O_CLOEXEC
_MOVE_MOUNT_F_EMPTY_PATH = 4
_MOUNT_ATTR_RDONLY, _MOUNT_ATTR_NOSUID, _MOUNT_ATTR_NODEV = 1, 2, 4
_CLONE_NEWNS, _CLONE_NEWUSER = 0x20000, 0x10000000
_NS_GET_USERNS = 0xB701


class _Libc:
    """The few libc entry points the mounter calls, bound once (ctypes is
    imported only when a policy is big enough to need the mounter)."""

    def __init__(self) -> None:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        self.ctypes = ctypes
        self.mount = libc.mount
        self.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
        self.umount2 = libc.umount2
        self.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
        self.setns = libc.setns
        self.setns.argtypes = [ctypes.c_int, ctypes.c_int]
        self.ioctl = libc.ioctl
        self.ioctl.argtypes = [ctypes.c_int, ctypes.c_ulong]
        self.syscall = libc.syscall
        self.syscall.restype = ctypes.c_long

        class MountAttr(ctypes.Structure):
            _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                        ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]

        self.MountAttr = MountAttr

    def errno(self) -> int:
        """errno of the last failed call."""
        return int(self.ctypes.get_errno())

    def setattr(self, path: bytes, flags: int, attr: object) -> int:
        """mount_setattr(AT_FDCWD, path, flags, attr, sizeof attr)."""
        c = self.ctypes
        return int(self.syscall(c.c_long(_SYS_MOUNT_SETATTR), c.c_int(_AT_FDCWD), c.c_char_p(path),
                                c.c_uint(flags), c.byref(attr), c.c_size_t(c.sizeof(attr))))


def supported() -> bool:
    """Whether this kernel has ``mount_setattr`` (5.12): without it bubblewrap
    makes every mount, as for a small policy."""
    lib = _Libc()
    c = lib.ctypes
    r = lib.syscall(c.c_long(_SYS_MOUNT_SETATTR), c.c_int(-1), c.c_char_p(b""), c.c_uint(0), c.c_void_p(0),
                    c.c_size_t(0))
    return not (r < 0 and lib.errno() == 38)  # ENOSYS


#: ``_Mounts._cwd`` while the working directory is the first mask's tmpfs.
_IN_MASK = b"\0mask"


class _Failed(Exception):
    pass


def _run(lib: _Libc, ns: int, plan: BulkPlan) -> None:
    """In the forked child: enter the sandbox (``ns``: its mount namespace)
    and make every mount."""
    m = _Mounts(lib, os.fsencode(plan.scratch))
    m.enter(ns)
    # The write roots first, from a copy of the tree taken before them.
    writes = [os.fsencode(p) for op, p in plan.ops if op is BulkOp.WRITE]
    if writes:
        m.write_roots(writes)
    others = [(op, os.fsencode(p)) for op, p in plan.ops if op is not BulkOp.WRITE]
    if others:
        m.others(others)


class _Mounts:
    """The mount calls of :func:`_run`, each failure a :class:`_Failed` naming it."""

    def __init__(self, lib: _Libc, scratch: bytes) -> None:
        self.lib = lib
        self.scratch = scratch
        self._cwd = b""
        self.ro = lib.MountAttr(_MOUNT_ATTR_RDONLY | _MOUNT_ATTR_NOSUID | _MOUNT_ATTR_NODEV, 0, 0, 0)
        self.rw = lib.MountAttr(_MOUNT_ATTR_NOSUID | _MOUNT_ATTR_NODEV, _MOUNT_ATTR_RDONLY, 0, 0)

    def check(self, r: int, what: str, path: bytes = b"") -> None:
        if r < 0:
            err = self.lib.errno()
            where = f" {os.fsdecode(path)}" if path else ""
            raise _Failed(f"{what}{where}: {os.strerror(err)}")

    def enter(self, mnt: int) -> None:
        """Enter the mount namespace ``mnt`` and the user namespace that owns it."""
        lib, check = self.lib, self.check
        # The user namespace that owns the mount namespace (bubblewrap's first;
        # the command's may be a second one inside it): mounting needs
        # CAP_SYS_ADMIN there, which its creator's user has from outside.
        user = lib.ioctl(mnt, _NS_GET_USERNS)
        check(user, "cannot find the sandbox's user namespace")
        check(lib.setns(user, _CLONE_NEWUSER), "cannot enter the sandbox's user namespace")
        check(lib.setns(mnt, _CLONE_NEWNS), "cannot enter the sandbox's mount namespace")

    def snapshot(self) -> int:
        c = self.lib.ctypes
        tree = int(self.lib.syscall(c.c_long(_SYS_OPEN_TREE), c.c_int(_AT_FDCWD), c.c_char_p(b"/"),
                                    c.c_uint(_OPEN_TREE_CLONE | _OPEN_TREE_CLOEXEC | _AT_RECURSIVE)))
        self.check(tree, "cannot copy the sandbox's mount tree")
        return tree

    def attach(self, tree: int, where: bytes) -> None:
        c = self.lib.ctypes
        self.check(int(self.lib.syscall(c.c_long(_SYS_MOVE_MOUNT), c.c_int(tree), c.c_char_p(b""), c.c_int(_AT_FDCWD),
                                        c.c_char_p(where), c.c_uint(_MOVE_MOUNT_F_EMPTY_PATH))),
                   "cannot attach a copy at", where)

    def write_roots(self, writes: list[bytes]) -> None:
        lib, check, scratch = self.lib, self.check, self.scratch
        self.attach(self.snapshot(), scratch)
        for path in writes:
            check(lib.mount(scratch + path, path, None, _MS_BIND | _MS_REC, None), "cannot bind write root", path)
            # As bubblewrap's --bind: the mount itself read-write, what lies
            # beneath it (masks, read-only re-binds) as it was.
            if lib.setattr(path, 0, self.rw) < 0 and lib.errno() != 1:  # EPERM: read-only on the host, stays so
                check(-1, "cannot make write root writable", path)
        check(lib.umount2(scratch, _MNT_DETACH), "cannot detach the copy from", scratch)

    def others(self, others: Sequence[tuple[BulkOp, bytes]]) -> None:
        """Pins, read-only binds and masks. Two copies that have the write
        roots, both taken before any other mount: as it is (pins), and
        read-only through and through, so a read-only entry is one bind (the
        copy carries the flags) instead of a bind and a mount_setattr."""
        lib, check, scratch, ro = self.lib, self.check, self.scratch, self.ro
        c = lib.ctypes
        tree = self.snapshot()
        ro_tree = self.snapshot() if any(op is BulkOp.READ_ONLY for op, _ in others) else -1
        if ro_tree >= 0:
            check(int(lib.syscall(c.c_long(_SYS_MOUNT_SETATTR), c.c_int(ro_tree), c.c_char_p(b""),
                                  c.c_uint(_AT_EMPTY_PATH | _AT_RECURSIVE), c.byref(ro), c.c_size_t(c.sizeof(ro)))),
                  "cannot make the copy read-only")
        self.attach(tree, scratch)
        ro_base = scratch + scratch  # the run dir inside the first copy: no entry lies beneath it
        if ro_tree >= 0:
            self.attach(ro_tree, ro_base)
        self._entries(others, ro_base)
        os.chdir(b"/")  # out of the copies before they are detached
        self._cwd = b""
        # Both copies go (the read-only one is mounted inside the other); the
        # mounts made from them are copies of their own.
        check(lib.umount2(scratch, _MNT_DETACH), "cannot detach the copies from", scratch)

    def _source(self, base: bytes, path: bytes) -> bytes:
        """``base + path`` as mount(2) should be given it: relative to a
        working directory in the copy when that is shorter. The kernel walks
        a source path component by component under the copy's two prefixes
        (the run dir's, twice for the read-only copy); from the entry's
        parent it walks one. About a fifth of a bind's cost goes (measured
        in docs/benchmarks.md, "Big policies"); the entries of one directory
        come together in the plan, so one chdir serves them all."""
        head, _, name = path.rpartition(b"/")
        if not name:
            return base + path
        where = base + head
        if where != self._cwd:
            try:
                os.chdir(where)
            except OSError:
                # mount(2) will report what is wrong with the path itself.
                self._cwd = b""
                return base + path
            self._cwd = where
        return name

    def _mask_source(self, first: bytes) -> bytes:
        """The first mask, as the source of the others: ``.`` from inside it
        (its tmpfs's root, whatever is mounted later on its path), which
        mount(2) looks up in one step."""
        if self._cwd != _IN_MASK:
            try:
                os.chdir(first)
            except OSError:
                self._cwd = b""
                return first
            self._cwd = _IN_MASK
        return b"."

    def _entries(self, others: Sequence[tuple[BulkOp, bytes]], ro_base: bytes) -> None:
        check, scratch, mount, src = self.check, self.scratch, self.lib.mount, self._source
        first_dir: bytes | None = None
        first_file: bytes | None = None
        for op, path in others:
            match op:
                case BulkOp.WRITE:
                    raise AssertionError("write roots are made above")
                case BulkOp.PIN:
                    check(mount(src(scratch, path), path, None, _MS_BIND | _MS_REC, None), "cannot pin", path)
                case BulkOp.READ_ONLY:
                    check(mount(src(ro_base, path), path, None, _MS_BIND | _MS_REC, None), "cannot bind read-only",
                          path)
                case BulkOp.MASK_DIR:
                    if first_dir is None:
                        check(mount(b"tmpfs", path, b"tmpfs", _MS_RDONLY | _MS_NOSUID | _MS_NODEV, b"mode=0755"),
                              "cannot mask", path)
                        first_dir = path
                    else:  # the same empty read-only tmpfs: it has no child mount to copy
                        check(mount(self._mask_source(first_dir), path, None, _MS_BIND, None), "cannot mask", path)
                case BulkOp.MASK_FILE:
                    if first_file is None:
                        check(mount(scratch + b"/dev/null", path, None, _MS_BIND, None), "cannot mask", path)
                        check(self.lib.setattr(path, 0, self.ro), "cannot make read-only", path)
                        first_file = path
                    else:
                        check(mount(first_file, path, None, _MS_BIND, None), "cannot mask", path)


class Pending:
    """A mounter at work in its forked child; ``wait`` collects it.

    ``namespace`` is a descriptor of the sandbox's mount namespace, the
    caller's to hand to :func:`hold` (which closes it)."""

    def __init__(self, child: int, r: int, ops: int, namespace: int) -> None:
        self._child, self._r, self._ops = child, r, ops
        self.namespace = namespace

    def wait(self) -> None:
        """Wait for the child. Raises BuildError naming the entry that could
        not be mounted. Safe to call once only."""
        try:
            chunks = []
            while chunk := os.read(self._r, 4096):
                chunks.append(chunk)
        finally:
            os.close(self._r)
            _, status = os.waitpid(self._child, 0)
        if status != 0:
            msg = b"".join(chunks).decode(errors="replace") or f"mounter exited with status {status}"
            raise BuildError(f"cannot make the policy's {self._ops} mounts inside the sandbox: {msg}",
                             hint="see docs/layers.md, \"Big policies\"; `safebox doctor` checks the kernel")


def start(pid: int, plan: BulkPlan) -> Pending:
    """Start making ``plan``'s mounts in the mount namespace of ``pid``
    (bubblewrap's sandbox) in a forked child, and return at once: the caller
    does its own work meanwhile (the violations table) and then ``wait``s."""
    if TYPE_CHECKING:
        import signal as _signal  # typeshed's view of the same C functions
    else:
        import _signal  # the C module: `signal` wraps it in enums (~4.5 ms of import)

    from safebox import _signals

    lib = _Libc()  # before the fork: the child only makes system calls
    try:
        # Opened here, not in the child: safebox keeps it (see release()).
        ns = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    except OSError as e:
        raise BuildError(f"cannot open the sandbox's mount namespace: {e.strerror}") from None
    r, w = os.pipe()
    # The child is in safebox's process group: a group's SIGINT or SIGTERM
    # must not run safebox's handlers (they forward to the sandbox) in it,
    # nor kill it half-way. Blocked across the fork, it stays blocked in the
    # child; safebox takes what came meanwhile when it unblocks, and its
    # relay hands it to the command once that exists (_signals).
    old = _signal.pthread_sigmask(_signal.SIG_BLOCK, _signals.FORWARDED)
    try:
        child = os.fork()
    except OSError as e:
        _signal.pthread_sigmask(_signal.SIG_SETMASK, old)
        for fd in (r, w, ns):
            os.close(fd)
        raise BuildError(f"cannot fork the mounter: {e.strerror}") from None
    if child != 0:
        _signal.pthread_sigmask(_signal.SIG_SETMASK, old)
    if child == 0:  # pragma: no cover - runs in the forked child, reported through the pipe
        code = 0
        try:
            os.close(r)
            _run(lib, ns, plan)
        except _Failed as e:
            os.write(w, str(e).encode(errors="replace")[:4000])
            code = 1
        except BaseException as e:  # noqa: BLE001 -- the child must never return into safebox
            os.write(w, f"{type(e).__name__}: {e}".encode(errors="replace")[:4000])
            code = 1
        os._exit(code)
    os.close(w)
    return Pending(child, r, len(plan.ops), ns)


def hold(ns: int) -> int:
    """Hand ``ns``, a descriptor of a sandbox's mount namespace, to a
    process that keeps it until the returned descriptor is closed; ``ns``
    itself is closed here.

    The last reference to a mount namespace takes its mounts down, one by
    one (``put_mnt_ns`` → ``umount_tree`` in fs/namespace.c): about 1.5 µs
    each, 15 ms for 10,000 entries. Without a holder the sandbox's last
    process pays that in its exit, which safebox waits for (the cgroup
    cannot be removed while a process in it is still exiting). The holder
    is a grandchild (its parent is reaped here, so it belongs to init and
    is nobody's zombie) that keeps nothing else open (no pipe of the
    caller's waits on it), holds no capability (it stays in safebox's own
    namespaces: it has a descriptor of the namespace, not a place in it),
    and waits for end of file on a pipe whose only write end is returned:
    closed by safebox once the sandbox has gone, or by the kernel if safebox
    dies first. Its exit pays the cost after safebox has returned. This runs
    while the mounter works, so the two forks cost the start nothing. A
    fork that fails leaves the namespace to the sandbox: slower, never
    wrong; so is a pipe that cannot be made (-1 is returned)."""
    if TYPE_CHECKING:
        import signal as _signal
    else:
        import _signal

    from safebox import _signals

    try:
        r, w = os.pipe()
    except OSError:
        os.close(ns)
        return -1
    # As in start(): no safebox handler may run in the children.
    old = _signal.pthread_sigmask(_signal.SIG_BLOCK, _signals.FORWARDED)
    try:
        child = os.fork()
    except OSError:
        child = -1
    if child == 0:  # pragma: no cover - runs in the forked child
        try:
            keep = sorted((r, ns))
            for lo, hi in zip([0, *(k + 1 for k in keep)], [*keep, 1 << 20], strict=True):
                os.closerange(lo, hi)
            if os.fork() == 0:
                os.read(r, 1)  # end of file: safebox has closed w
        finally:
            os._exit(0)
    _signal.pthread_sigmask(_signal.SIG_SETMASK, old)
    os.close(ns)
    os.close(r)
    if child > 0:
        os.waitpid(child, 0)
    return w

"""The start walks of a work tree that has not changed, replayed instead of run.

Every start walks the working directory twice (``_prescan``: ripgrep for the
protected files, find for the symlinks named like them and every directory
for the watch at any depth). In a 100,000-file tree that is most of a start,
and almost always finds what it found last time. So the two walks' output is
kept, in safebox's state dir, with the identity of every directory they
listed; a later start in the same root replays it when no directory changed.

**Why a directory's ctime is the key.** What both walks print is a function
of the names in each directory (and their types, and a directory's own mode
and owner). Creating, removing or renaming an entry changes its directory's
mtime and ctime; ``chmod``/``chown`` change its ctime. A sandboxed command can
forge the mtime (``touch -d``, ``os.utime``), but setting it sets the ctime to
now, and nothing but the clock sets the ctime (``CAP_SYS_TIME``, which no
sandbox has). So each directory is kept as (device, inode, ctime); one that
differs, vanished, or any new one (a new directory is an entry of a changed
one) means the walks run again, in full, and their output is kept anew.

**Granularity.** A change lands in the ctime at the file clock's tick (and on
some filesystems a coarser one), so a change just after a walk listed a
directory can leave the ctime it had. The output is kept only when every
directory's ctime is at least ``SLACK_NS`` before the walks began
(``deepwatch.SLACK_NS``, the same allowance): a tree changed in the last two
seconds is walked again next time, never trusted.

**Where it is believed.** Only on filesystems that keep directory times
themselves (``TRUSTED_FS``); a FUSE or network filesystem may not update
them for every change, so a tree holding one is always walked. The file
lives in the state dir, which no sandbox can write (it is read-only inside),
read and replaced through :mod:`safebox.hostio`. It records the walks' exact
argv and our uid: another safebox, another depth or other protected names
never replay it.

The check costs one ``lstat`` per directory (13,657 in the benchmark tree of
docs/benchmarks.md), against the two full walks. It runs on the helper
(:mod:`safebox.builder.dirkeys`), started here and answered when resolve first
collects a walk: beside safebox's imports and policy, not in front of them.
"""

from __future__ import annotations

import marshal
import operator
import os
import stat
import time

from safebox import hostio
from safebox._record import Spawned
from safebox.builder import dirkeys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

#: Changes in this window before the walks began make their output untrusted
#: (deepwatch.SLACK_NS: filesystems with coarser times than the clock's tick).
SLACK_NS = 2_000_000_000

#: Filesystems whose directory ctimes change with every entry change made
#: through this kernel (mountinfo's type names). FUSE, NFS, CIFS, 9p,
#: overlay and the rest are walked every time.
TRUSTED_FS = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "f2fs", "zfs", "bcachefs"})

#: The largest walk record kept (the two outputs and the keys: about 1 MiB
#: for the 100,000-file benchmark tree), and the bound on all of them: the
#: most recently kept first, the rest removed when one is written (docs/index.md).
MAX_BYTES = 16 << 20
MAX_FILES = 32
MAX_TOTAL = 64 << 20
VERSION = 3  # 3: the keys packed as the helper reads them (dirkeys.KEY)

# linux/time.h; what file times are taken from (see _prescan.start_find).
_CLOCK_REALTIME_COARSE = 5

_KEY = operator.attrgetter("st_dev", "st_ino", "st_ctime_ns")

#: The session's state dir (``bind``): where walks are looked up and kept.
_bound: str | None = None


def state_dir(environ: dict[str, str] | os._Environ[str]) -> str:
    """The state dir the session will use (``policy.load.state_dir`` of
    ``run.host.home``), computed without importing either: the launcher
    calls this before safebox is loaded. tests/unit/test_walkcache.py keeps
    the two equal."""
    home = environ.get("HOME")
    if not home or not home.startswith("/"):
        import pwd

        home = pwd.getpwuid(os.getuid()).pw_dir
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.normpath(home), ".cache")
    return os.path.join(base, "safebox")


def bind(state: str) -> None:
    """Use ``state`` (the session's state dir, kept read-only in the
    sandbox) from now on; a replay read from any other is walked again."""
    global _bound
    _bound = state


def _file(root: str, depth: int) -> str:
    import binascii

    raw = os.fsencode(root)
    return f"walks/{binascii.crc32(raw):08x}-{len(raw)}-{depth}"


def _dirs(root: str, find_out: bytes) -> list[bytes]:
    """Every directory the find walk listed (deepwatch.parse's records), the root first."""
    out = [os.fsencode(root)]
    for r in find_out.split(b"\0"):
        if not r:
            continue
        if b"//" in r:
            path, _, kind = r.partition(b"//")
            if kind in (b"d", b"o"):
                out.append(path)
        else:
            out.append(r)
    return out


def _fs_types() -> dict[int, str]:
    """Each mounted device's filesystem type, from /proc/self/mountinfo."""
    raw = hostio.read("/proc/self/mountinfo", max_size=4 << 20, missing_ok=True) or b""
    out = {}
    for line in raw.decode("utf-8", "replace").splitlines():
        fields = line.split()
        try:
            major, minor = fields[2].split(":")
            fstype = fields[fields.index("-") + 1]
        except (IndexError, ValueError):
            continue
        out[os.makedev(int(major), int(minor))] = fstype
    return out


def coarse_now() -> int:
    """The file clock (what ctimes are taken from)."""
    return time.clock_gettime_ns(_CLOCK_REALTIME_COARSE)


def lookup(state: str, root: str, depth: int, argvs: tuple[list[str], list[str]]
           ) -> tuple[bytes, bytes, dirkeys.Same] | None:
    """The (ripgrep, find) output kept for ``root`` at ``depth`` when the
    walks would be run with the same ``argvs``, and the check, started on
    the helper, that no directory under it changed since (its ``result()``
    must be True before the output is believed); else None."""
    try:
        with hostio.pin(state) as d:
            raw = d.read(_file(root, depth), max_size=MAX_BYTES, missing_ok=True)
    except hostio.HostFileError:
        return None
    if raw is None:
        return None
    try:
        kept = marshal.loads(raw)
    except (ValueError, EOFError, TypeError):
        return None
    if not (isinstance(kept, tuple) and len(kept) == 8 and kept[0] == VERSION):
        return None
    _, k_root, k_argvs, uid, dirs, keys, rg_out, find_out = kept
    if k_root != root or k_argvs != (tuple(argvs[0]), tuple(argvs[1])) or uid != os.geteuid():
        return None
    if not all(isinstance(x, bytes) for x in (rg_out, find_out, dirs, keys)):
        return None
    # The directories as listed when kept (those of find_out, the root
    # first): every one must be the same inode with the same ctime.
    return rg_out, find_out, dirkeys.Same(dirs, keys)


def store(state: str, root: str, depth: int, argvs: tuple[list[str], list[str]], since_ns: int,
          rg_out: bytes, find_out: bytes) -> bool:
    """Keep the output of walks begun at ``since_ns``, when it can be
    trusted next time: every directory unchanged for ``SLACK_NS`` before
    the walks began, on a ``TRUSTED_FS`` filesystem, none unlistable (their
    contents are not in the output). True when kept."""
    if any(r[:1] in (b"!", b"?") for r in find_out.split(b"\0")):
        return False
    dirs = _dirs(root, find_out)
    try:
        sts = list(map(os.lstat, dirs))
    except OSError:
        return False
    # A key names an inode, whose type cannot change: checked here once.
    if any(not stat.S_ISDIR(st.st_mode) or st.st_ctime_ns >= since_ns - SLACK_NS for st in sts):
        return False
    keys = list(map(_KEY, sts))
    types = _fs_types()
    if any(types.get(dev) not in TRUSTED_FS for dev in {dev for dev, _, _ in keys}):
        return False
    data = marshal.dumps((VERSION, root, (tuple(argvs[0]), tuple(argvs[1])), os.geteuid(), b"\0".join(dirs),
                          dirkeys.pack_keys(keys), rg_out, find_out))
    if len(data) > MAX_BYTES:
        return False
    try:
        os.makedirs(os.path.join(state, "walks"), mode=0o700, exist_ok=True)
        with hostio.pin(state) as d:
            d.replace(_file(root, depth), data)
        _bound_dir(os.path.join(state, "walks"))
    except (OSError, hostio.HostFileError):
        return False  # only an optimisation: the next start walks again
    return True


def _bound_dir(walks: str) -> None:
    """Remove the least recently kept walks beyond ``MAX_FILES`` and ``MAX_TOTAL``."""
    with hostio.pin(walks) as d:
        entries = []
        for name in os.listdir(d.path):
            try:
                st = os.stat(name, dir_fd=d.fd, follow_symlinks=False)
            except OSError:
                continue
            entries.append((st.st_mtime_ns, st.st_size, name))
        entries.sort(reverse=True)
        total = 0
        for i, (_, size, name) in enumerate(entries):
            total += size
            if i >= MAX_FILES or total > MAX_TOTAL:
                try:
                    os.unlink(name, dir_fd=d.fd)
                except OSError:
                    pass


class _Kept:
    """The kept output of both walks of one root, believed once the check
    says no directory changed; else both walks run for real (and are kept
    anew), from the moment that is known."""

    def __init__(self, out: tuple[bytes, bytes], same: dirkeys.Same, state: str,
                 start_real: Callable[[], tuple[Recording, Recording]]) -> None:
        self.out, self.same, self.state, self._start_real = out, same, state, start_real
        self.real: tuple[Recording, Recording] | None = None

    def believed(self) -> bool:
        return self.real is None and (_bound is None or _bound == self.state) and self.same.result()

    def walk(self, i: int) -> Recording:
        if self.real is None:
            self.real = self._start_real()
        return self.real[i]


class Replayed:
    """A walk's kept output in place of the walk (the part of ``Spawned``
    that resolve uses). Read from ``state``: when the session's state dir
    turns out to be another (``bind``), or a directory changed since it was
    kept (the check :func:`lookup` started), the walk is run for real
    instead."""

    def __init__(self, argv: list[str], kept: _Kept, index: int, *, since_ns: int) -> None:
        self.argv = argv
        self.since_ns = since_ns
        self.pid = -1
        self.replayed = False  # True once collect() gave the kept output
        self._kept = kept
        self._index = index

    def cancel(self) -> None:
        """Stop the check (and a real walk, if one was started)."""
        self._kept.same.cancel()
        if self._kept.real is not None:
            self._kept.real[self._index].cancel()

    def collect(self, *, timeout: float = 60.0) -> tuple[int, bytes, bytes]:
        """(0, the kept output, no errors), or the real walk's result."""
        if self._kept.believed():
            self.replayed = True
            return 0, self._kept.out[self._index], b""
        real = self._kept.walk(self._index)
        self.since_ns = real.since_ns
        return real.collect(timeout=timeout)


class _Pair:
    """The two real walks of one root; once both are collected cleanly,
    their output is kept (``store``)."""

    def __init__(self, state: str, root: str, depth: int, argvs: tuple[list[str], list[str]], since_ns: int) -> None:
        self.state, self.root, self.depth, self.argvs, self.since_ns = state, root, depth, argvs, since_ns
        self.results: list[tuple[int, bytes, bytes] | None] = [None, None]
        self.dropped = False

    def got(self, i: int, result: tuple[int, bytes, bytes]) -> None:
        self.results[i] = result
        rg, find = self.results
        if rg is None or find is None or self.dropped or _bound != self.state:
            return
        # ripgrep: 0 found, 1 nothing found; any message (an unreadable or
        # vanished entry) leaves the output unkept.
        if rg[0] in (0, 1) and not rg[2] and find[0] == 0 and not find[2]:
            store(self.state, self.root, self.depth, self.argvs, self.since_ns, rg[1], find[1])


class Recording:
    """A real walk whose output is kept for the next start (``_Pair``)."""

    replayed = False

    def __init__(self, proc: Spawned, pair: _Pair, index: int) -> None:
        self.proc, self._pair, self._index = proc, pair, index
        self.argv = proc.argv
        self.pid = proc.pid
        self.since_ns = getattr(proc, "since_ns", 0)

    def cancel(self) -> None:
        """Stop the walk; nothing is kept."""
        self._pair.dropped = True
        self.proc.cancel()

    def collect(self, *, timeout: float = 60.0) -> tuple[int, bytes, bytes]:
        """The walk's (exit status, output, errors)."""
        result = self.proc.collect(timeout=timeout)
        self._pair.got(self._index, result)
        return result


def start(root: str, depth: int, argvs: tuple[list[str], list[str]],
          spawn: tuple[Callable[[], Spawned], Callable[[], Spawned]],
          state: str | None = None) -> tuple[Replayed | Recording, Replayed | Recording]:
    """The (ripgrep, find) walks of ``root``: replayed when kept and still
    true, else started by ``spawn`` and kept once collected."""
    where = state if state is not None else _bound if _bound is not None else state_dir(os.environ)

    def real() -> tuple[Recording, Recording]:
        pair = _Pair(where, root, depth, argvs, coarse_now())
        rg = spawn[0]()
        try:
            find = spawn[1]()
        except BaseException:
            rg.cancel()
            raise
        return Recording(rg, pair, 0), Recording(find, pair, 1)

    since = coarse_now()  # before the look: a change from here on is after the replayed walk
    kept = lookup(where, root, depth, argvs)
    if kept is None:
        return real()
    both = _Kept((kept[0], kept[1]), kept[2], where, real)
    return Replayed(argvs[0], both, 0, since_ns=since), Replayed(argvs[1], both, 1, since_ns=since)

"""Putting a held run's changes on the host, file by file.

The layer is the command's work, so hostile input; the host tree is the
user's. Every step is a ``*at`` call beneath the write root pinned by a
descriptor, each directory on the way opened ``O_NOFOLLOW`` (safebox.hostio):
no symlink on the host is ever followed, whoever planted it.

* a file: moved, when the layer and the target share a file system and
  the layer's file has no other name: hard-linked from the layer to a new
  temporary name beside the target, checked there (a regular file of this
  user and group, two links: the layer's and ours), its extended
  attributes removed and its set-user-ID and set-group-ID bits dropped,
  renamed over the target, then its name in the layer unlinked (the host
  holds it now: the layer keeps only what is left to apply). Otherwise
  (another file system, a hard link inside the layer, an opaque directory,
  an attribute the list does not know): copied to a new temporary name
  beside the target (``O_EXCL``), its mode set (set-ID bits dropped), then
  renamed over the target. Either way a reader sees the old file or the
  new one, never half;
* a symlink: made beside, then renamed over the target (a link is placed,
  never followed);
* a deletion (a whiteout) or a replaced directory (opaque): removed by
  descriptors, without following a link;
* a conflict: the host's entry changed since the run started (its change
  time is not before the held run's start: Held.started_ns) and is not already
  what the layer holds: refused, named, unless ``force``;
* code-running names (safebox.review.layer.runs_code): listed, applied
  only when the caller names them;
* idempotent: what the host already holds is skipped, so an apply stopped
  half-way is finished by running it again (a move stopped between its
  rename and its unlink left the layer a second name of the host's file:
  the next apply unlinks it); two at once are refused (lock).
"""

from __future__ import annotations

import errno
import os
import re
import stat

from safebox._record import Frozen
from safebox.errors import RunError
from safebox.review import layer as _layer
from safebox.review import store as _store

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from safebox.hostio import PinnedDir
    from safebox.review.layer import Change
    from safebox.review.store import Held

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Outcome(Frozen):
    """What an apply did."""

    applied: tuple[str, ...] = ()
    already: tuple[str, ...] = ()  # the host held it already (an earlier apply)
    code: tuple[str, ...] = ()  # code-running names left out (name them to apply)
    conflicts: tuple[tuple[str, str], ...] = ()  # (path, why)
    refused: tuple[tuple[str, str], ...] = ()  # (path, why)


def select(cs: list[Change], paths: tuple[str, ...] | None) -> tuple[list[Change], list[Change]]:
    """(chosen, code-running left out). ``paths``: absolute host paths;
    each chooses the changes at or beneath it, code-running ones included
    (that is naming them). None: every change but the code-running ones."""
    if paths is None:
        return [c for c in cs if not c.runs_code], [c for c in cs if c.runs_code]
    norm = [os.path.normpath(p) for p in paths]
    chosen = [c for c in cs if any(c.path == p or c.path.startswith(p.rstrip("/") + "/") for p in norm)]
    return chosen, []


def _check_space(h: Held, chosen: list[Change]) -> None:
    """Refuse, before anything is written, an apply whose copies do not fit.
    A layer on its root's file system is moved, not copied (_Mover): its
    files need no room (the few it copies, hard links and opaque
    directories, stop with ENOSPC, whole, if the disk is that full); a run
    that has not recorded its end is copied whole (see apply)."""
    need: dict[str, int] = {}
    same: dict[int, bool] = {} if ended(h) else dict.fromkeys(range(len(h.roots)), False)
    for c in chosen:
        if c.kind != "deleted" and c.type == "file":
            if c.layer not in same:
                try:
                    same[c.layer] = os.stat(h.upper(c.layer)).st_dev == os.stat(c.root).st_dev
                except OSError:
                    same[c.layer] = False
            if not same[c.layer]:
                need[c.root] = need.get(c.root, 0) + c.size
    for root, n in need.items():
        try:
            sv = os.statvfs(root)
        except OSError:
            continue
        free = sv.f_bavail * sv.f_frsize
        if n > free:
            raise RunError(f"cannot apply: the changes need {n} bytes under {root} and its file system has {free} "
                           f"free ({os.strerror(errno.ENOSPC)}); nothing was applied",
                           hint="free some space, then run `safebox changes apply` again")


class _Dirs:
    """Directories beneath a pinned one, each opened once (``O_NOFOLLOW``,
    component by component from its cached parent) and kept for the
    apply: 10,000 files in 100 directories cost 100 walks, not 10,000."""

    def __init__(self, top: PinnedDir, *, where: str, sweep: Callable[[int, str], None] | None = None) -> None:
        self.top, self.where, self.sweep = top, where, sweep
        self.fds: dict[str, int] = {}
        self.groups: dict[str, int] = {}
        if sweep is not None:
            sweep(top.fd, "")

    def get(self, rel_dir: str, *, make: Callable[[str], int] | None = None) -> int | None:
        """The descriptor of ``rel_dir`` ("" the top); None when it does not
        exist (``make``: create it, with the mode make returns). A symlink
        on the way is HostFileError."""
        from safebox import hostio

        if rel_dir == "":
            return self.top.fd
        fd = self.fds.get(rel_dir)
        if fd is not None:
            return fd
        head, _, name = rel_dir.rpartition("/")
        parent = self.get(head, make=make)
        if parent is None:
            return None
        try:
            fd = os.open(name, _DIR, dir_fd=parent)
        except FileNotFoundError:
            if make is None:
                return None
            os.mkdir(name, make(rel_dir), dir_fd=parent)
            fd = os.open(name, _DIR, dir_fd=parent)
        except OSError as e:
            if e.errno in (errno.ENOTDIR, errno.ELOOP):
                try:
                    link = stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
                except OSError:
                    link = False
                if link:
                    raise hostio.HostFileError(os.path.join(self.where, rel_dir),
                                               f"{name!r} on the way is a symlink; safebox never follows one in a "
                                               "place a sandboxed command could write") from None
                if e.errno == errno.ENOTDIR and make is None:
                    return None
            raise
        self.fds[rel_dir] = fd
        if self.sweep is not None:
            self.sweep(fd, rel_dir)
        return fd

    def group(self, fd: int, rel_dir: str, egid: int) -> int:
        """The group a file made in ``rel_dir`` (open as ``fd``) gets: the
        directory's when it is set-group-ID, else ``egid``."""
        g = self.groups.get(rel_dir)
        if g is None:
            st = os.fstat(fd)
            g = self.groups[rel_dir] = st.st_gid if st.st_mode & stat.S_ISGID else egid
        return g

    def forget(self, rel: str) -> None:
        """Drop ``rel`` and what lies beneath it (removed or replaced)."""
        for k in [k for k in self.fds if k == rel or k.startswith(rel + "/")]:
            os.close(self.fds.pop(k))
        for k in [k for k in self.groups if k == rel or k.startswith(rel + "/")]:
            del self.groups[k]

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()
        self.top.close()


def _host_verdict(c: Change, hst: os.stat_result | None, started: int, *, force: bool,
                  uid: int) -> tuple[str, str] | None:
    """Why the host's entry stops change ``c``: ("conflict", why): the host
    changed it since the run started (``--force`` overrides); ("refused",
    why): it is another user's. None: apply it."""
    if hst is not None and not force and hst.st_ctime_ns >= started and c.kind != "added":
        return "conflict", "changed on the host since the run started"
    if c.kind == "modified" and hst is None and not force:
        return "conflict", "deleted on the host since the run started"
    if hst is not None and hst.st_uid != uid:
        return "refused", f"the host's is owned by uid {hst.st_uid}, not by this user"
    return None


def apply(h: Held, paths: tuple[str, ...] | None = None, *, force: bool = False) -> Outcome:
    """Apply the held run's changes (those ``paths`` choose; see select)."""
    from safebox import hostio

    with _store.Lock(h, "apply"):
        moved: list[tuple[int, str]] = []
        cs = _layer.changes(h, moved=moved)
        chosen, code = select(cs, paths)
        _check_space(h, chosen)
        started = h.started_ns()
        applied: list[str] = []
        conflicts: list[tuple[str, str]] = []
        refused: list[tuple[str, str]] = []
        pins: dict[int, tuple[_Dirs, _Dirs]] = {}
        # Moved only once the run recorded its end (finish: every process of the sandbox was gone): a
        # command still running (an apply from another terminal, the API's apply() before wait()), or
        # a run killed before it said so, would keep writing, chmod-ing and linking the moved inode,
        # the host's file by then, through what it holds open. Its files are copied: a snapshot.
        mover = _Mover(moves=ended(h))
        try:
            _open_layers(h, cs, chosen, pins)
            _finish_moves(moved, pins, mover)
            for c in chosen:
                host, up = pins[c.layer]
                if c.type == "other":
                    refused.append((c.path, "not a file, a directory or a symlink"))
                    continue
                try:
                    hst = _host_entry(host, c)
                except hostio.HostFileError as e:
                    refused.append((c.path, e.why))
                    continue
                verdict = _host_verdict(c, hst, started, force=force, uid=mover.uid)
                if verdict is not None:
                    (conflicts if verdict[0] == "conflict" else refused).append((c.path, verdict[1]))
                    continue
                try:
                    _one(c, host, up, hst, mover)
                except OSError as e:
                    if e.errno in (errno.ENOSPC, errno.EDQUOT):
                        raise RunError(f"cannot apply {c.path}: {e.strerror}; {len(applied)} change(s) applied "
                                       "before it, each whole", hint="free some space, then run `safebox changes "
                                       "apply` again: it finishes what is left") from None
                    refused.append((c.path, e.strerror or str(e)))
                    continue
                except hostio.HostFileError as e:
                    refused.append((c.path, e.why))
                    continue
                applied.append(c.path)
        finally:
            for a, b in pins.values():
                a.close()
                b.close()
        done = set(applied)
        left = [c for c in cs if not c.runs_code and c.path not in done]
        _store.update(h, applied=[*h.meta.get("applied", []), *applied],
                      status="applied" if not left else h.meta.get("status"))
        return Outcome(applied=tuple(applied), code=tuple(c.path for c in code), conflicts=tuple(conflicts),
                       refused=tuple(refused))


def _host_entry(host: _Dirs, c: Change) -> os.stat_result | None:
    """The host's ``lstat`` of ``c``, None when absent; a link on the way is
    HostFileError."""
    head, _, name = c.rel.rpartition("/")
    dfd = host.get(head)
    if dfd is None:
        return None
    try:
        return os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return None


#: Matched whole (fullmatch, DOTALL): a name may hold a newline.
#: Matched whole (fullmatch, DOTALL): a name may hold a newline.
_TMP = re.compile(r"\..+\.safebox-apply-[0-9a-f]{8}", re.DOTALL)


def _sweeper(layer: int, cs: list[Change]) -> Callable[[int, str], None]:
    """Removes, from each host directory the apply enters, the temporary
    files an earlier apply that was killed left (``.NAME.safebox-apply-
    XXXXXXXX``: regular files of this user), unless the layer itself holds
    that name."""
    ours = {c.rel for c in cs if c.layer == layer}

    def sweep(dfd: int, rel_dir: str) -> None:
        try:
            # Listed through a readable descriptor: the top is pinned O_PATH (listdir of it fails).
            lfd = os.open(".", _DIR, dir_fd=dfd)
            try:
                names = os.listdir(lfd)
            finally:
                os.close(lfd)
        except OSError:
            return
        for n in names:
            if _TMP.fullmatch(n) and (f"{rel_dir}/{n}" if rel_dir else n) not in ours:
                try:
                    st = os.stat(n, dir_fd=dfd, follow_symlinks=False)
                    if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
                        os.unlink(n, dir_fd=dfd)
                except OSError:
                    pass
    return sweep


def _open_layers(h: Held, cs: list[Change], chosen: list[Change], pins: dict[int, tuple[_Dirs, _Dirs]]) -> None:
    """Pin each write root and its layer into ``pins``, sweeping the
    temporary files of a killed apply from every directory the layer has.
    A root that is gone is an error only when a chosen change needs it."""
    from safebox import hostio

    for k, root in enumerate(h.roots):
        try:
            pins[k] = (_Dirs(hostio.pin(root), where=root, sweep=_sweeper(k, cs)),
                       _Dirs(hostio.pin(h.upper(k)), where=h.upper(k)))
        except hostio.HostFileError:
            if any(c.layer == k for c in chosen):
                raise
            continue
        _sweep_all(pins[k][0], h.upper(k))


def _sweep_all(host: _Dirs, upper: str) -> None:
    """Enter (and so sweep) every host directory the layer has one for:
    an apply killed after its last file in a directory left its temporary
    files there, and this apply may have nothing else to do there."""
    from safebox import hostio

    for top, _dirs, _files, _fd in os.fwalk(upper, follow_symlinks=False):
        rel = os.path.relpath(top, upper)
        try:
            host.get("" if rel == "." else rel)
        except (OSError, hostio.HostFileError):
            continue


def _remove(dfd: int, name: str) -> None:
    from safebox._record import _rmtree_at

    st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    if stat.S_ISDIR(st.st_mode):
        sub = os.open(name, _DIR, dir_fd=dfd)
        try:
            _rmtree_at(sub)
        finally:
            os.close(sub)
        os.rmdir(name, dir_fd=dfd)
    else:
        os.unlink(name, dir_fd=dfd)


def _one(c: Change, host: _Dirs, up: _Dirs, hst: os.stat_result | None, mover: _Mover) -> None:
    head, _, name = c.rel.rpartition("/")

    def mode_of(rel_dir: str) -> int:
        ufd = up.get(rel_dir.rpartition("/")[0])
        try:
            st = os.stat(rel_dir.rpartition("/")[2], dir_fd=ufd, follow_symlinks=False) if ufd is not None else None
        except OSError:
            st = None
        return stat.S_IMODE(st.st_mode) & 0o1777 if st is not None and stat.S_ISDIR(st.st_mode) else 0o755

    dfd = host.get(head, make=mode_of)
    assert dfd is not None
    if c.kind == "deleted":
        if hst is not None:
            host.forget(c.rel)
            _remove(dfd, name)
        return
    if c.type == "dir":
        if hst is not None and not stat.S_ISDIR(hst.st_mode):
            _remove(dfd, name)
        if hst is None or not stat.S_ISDIR(hst.st_mode):
            host.forget(c.rel)
            os.mkdir(name, c.mode & 0o1777, dir_fd=dfd)
        return
    tmp = mover.tmp(name)
    ufd = up.get(head)
    if ufd is None:
        raise OSError(errno.ENOENT, "gone from the layer")
    moved = False
    if c.type == "symlink":
        os.symlink(os.readlink(name, dir_fd=ufd), tmp, dir_fd=dfd)
    elif mover.move(c.layer, head, ufd, name, host, dfd, tmp):
        moved = True
    else:
        _copy(ufd, name, dfd, tmp, mover.uid)
    _rename_over(c, host, dfd, tmp, name, hst)
    if moved:
        try:
            os.unlink(name, dir_fd=ufd)  # the host's file now: the layer keeps no second name of it
        except OSError:
            pass  # the next apply unlinks it (_finish_moves)


def _rename_over(c: Change, host: _Dirs, dfd: int, tmp: str, name: str, hst: os.stat_result | None) -> None:
    """Put ``tmp`` in the place of ``name`` (a directory there is removed first)."""
    try:
        if hst is not None and stat.S_ISDIR(hst.st_mode):
            host.forget(c.rel)
            _remove(dfd, name)
        os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except BaseException:
        _unlink_quiet(tmp, dfd)
        raise


#: The extended attributes a moved file may carry, each removed before the
#: file reaches its name on the host (a copy carries none): overlayfs's own
#: marks (``user.overlay.origin`` of a copied-up file), the command's
#: ``user.*``, ACLs and file capabilities. A file with any other (an LSM's
#: label: ``security.selinux``...) is copied instead, as it always was.
_STRIPPED = ("user.", "trusted.", "security.capability", "system.posix_acl_access", "system.posix_acl_default")


def ended(h: Held) -> bool:
    """Whether the held run recorded its command's end: its exit status,
    which safebox.review.run.finish writes once the sandbox is gone (every
    process of its pid namespace with it); a run still going, or killed
    before it could say so, has none."""
    return type(h.meta.get("exit")) is int


class _Mover:
    """Moving a file from the layer to the host instead of copying its bytes
    (docs/review.md, "Moved, not copied"): one apply's state. ``moves``
    False: every file is copied."""

    def __init__(self, *, moves: bool = True) -> None:
        self.uid, self.gid = os.geteuid(), os.getegid()
        self.moves = moves
        self.off: set[int] = set()  # layers on another file system than their root (EXDEV)
        self.opaque: dict[tuple[int, str], bool] = {}
        self.n = int.from_bytes(os.urandom(4), "big")

    def tmp(self, name: str) -> str:
        """A temporary name beside ``name`` (the sweeper's pattern: _TMP)."""
        self.n = (self.n + 1) & 0xFFFFFFFF
        # 200 bytes of the name, not characters: 200 of "é" are 400 (a name is at most 255 bytes).
        return f".{os.fsdecode(os.fsencode(name)[:200])}.safebox-apply-{self.n:08x}"

    def is_opaque(self, layer: int, head: str, ufd: int) -> bool:
        k = (layer, head)
        v = self.opaque.get(k)
        if v is None:
            v = self.opaque[k] = _layer.is_opaque(ufd)
        return v

    def move(self, layer: int, head: str, ufd: int, name: str, host: _Dirs, dfd: int, tmp: str) -> bool:
        """Link the layer's ``name`` to ``tmp`` beside its target, checked and
        cleaned; False (nothing left behind): copy it instead.

        Not moved: a file in an opaque directory (taking it out of the
        layer would make the host's name look deleted by the run to the
        next apply), a layer on another file system, a file with another
        name in the layer (its link count), a file of another group than
        one made in the target's directory would get, or with an attribute
        _STRIPPED does not list."""
        if not self.moves or layer in self.off or self.is_opaque(layer, head, ufd):
            return False
        try:
            # No AT_SYMLINK_FOLLOW: the layer's entry itself, never where a link points.
            os.link(name, tmp, src_dir_fd=ufd, dst_dir_fd=dfd, follow_symlinks=False)
        except OSError as e:
            if e.errno == errno.EXDEV:
                self.off.add(layer)
                return False
            if e.errno in (errno.EPERM, errno.EMLINK, errno.EOPNOTSUPP, errno.ENOSYS):
                return False
            raise
        try:
            ok = self._cleaned(dfd, tmp, host.group(dfd, head, self.gid))
        except BaseException:
            _unlink_quiet(tmp, dfd)
            raise
        if not ok:
            _unlink_quiet(tmp, dfd)
        return ok

    def _cleaned(self, dfd: int, tmp: str, gid: int) -> bool:
        fd = os.open(tmp, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
        try:
            st = os.fstat(fd)
            # Two links: the layer's name and ours; a third is a hard link the command made (copied instead).
            if not stat.S_ISREG(st.st_mode) or st.st_uid != self.uid or st.st_gid != gid or st.st_nlink != 2:
                return False
            if not _plain_flags(fd):
                return False
            for x in os.listxattr(fd):
                if not x.startswith(_STRIPPED):
                    return False
                try:
                    os.removexattr(fd, x)
                except OSError as e:
                    if e.errno in (errno.EACCES, errno.EPERM):  # a read-only file's user.*: copied instead
                        return False
                    raise
            mode = stat.S_IMODE(st.st_mode)
            if mode & (stat.S_ISUID | stat.S_ISGID):
                # The set-ID bits are the command's wish, never kept on the host.
                os.fchmod(fd, mode & ~(stat.S_ISUID | stat.S_ISGID))
            return True
        finally:
            os.close(fd)


#: ``FS_IOC_GETFLAGS`` (``_IOR('f', 1, long)``) and the inode flags a moved
#: file may have: those a file system sets itself on any new file (ext4's
#: extents, huge file and inline data). Any other (``chattr``'s nodump,
#: sync, noatime..., the command's or inherited from the state dir's
#: directories) would stay with the inode: that file is copied instead.
_FS_IOC_GETFLAGS = 0x80086601
_FLAGS_KEPT = 0x00040000 | 0x00080000 | 0x10000000


def _plain_flags(fd: int) -> bool:
    """Whether the file open as ``fd`` has no inode flag but _FLAGS_KEPT
    (a file system without them has none)."""
    import fcntl
    import sys

    try:
        got = fcntl.ioctl(fd, _FS_IOC_GETFLAGS, bytes(8))
    except OSError as e:
        return e.errno in (errno.ENOTTY, errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS)
    return int.from_bytes(got[:4], sys.byteorder) & ~_FLAGS_KEPT == 0


def _unlink_quiet(name: str, dfd: int) -> None:
    try:
        os.unlink(name, dir_fd=dfd)
    except OSError:
        pass


def _finish_moves(moved: list[tuple[int, str]], pins: dict[int, tuple[_Dirs, _Dirs]], mover: _Mover) -> None:
    """Unlink the layer's names that are the host's very file: a move that
    an earlier apply renamed into place and was stopped before it unlinked
    the layer's (never in an opaque directory: no move comes from one)."""
    for k, rel in moved:
        if k not in pins:
            continue
        up = pins[k][1]
        head, _, name = rel.rpartition("/")
        try:
            ufd = up.get(head)
            if ufd is not None and not mover.is_opaque(k, head, ufd):
                os.unlink(name, dir_fd=ufd)
        except OSError:
            pass


def _copy(sdfd: int, sname: str, dfd: int, tmp: str, uid: int) -> None:
    src = os.open(sname, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=sdfd)
    try:
        st = os.fstat(src)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != uid:
            raise OSError(errno.EPERM, "the layer's file is not a regular file of this user")
        dst = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dfd)
        try:
            try:
                _copy_bytes(src, dst, st.st_size)
                # The set-ID bits are the command's wish, never kept on the host.
                os.fchmod(dst, stat.S_IMODE(st.st_mode) & ~(stat.S_ISUID | stat.S_ISGID))
            finally:
                os.close(dst)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=dfd)
            except OSError:
                pass
            raise
    finally:
        os.close(src)


def _copy_bytes(src: int, dst: int, size: int) -> None:
    left = size
    try:
        while left > 0:
            n = os.copy_file_range(src, dst, left)
            if n == 0:
                break
            left -= n
        return
    except OSError as e:
        if e.errno not in (errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            raise
    while chunk := os.read(src, 1 << 20):
        view = memoryview(chunk)
        while view:
            view = view[os.write(dst, view):]


def discard(h: Held) -> None:
    """Remove the held run (nothing of it reaches the host)."""
    with _store.Lock(h, "discard"):
        _store.remove(h)

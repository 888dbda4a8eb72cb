"""Putting a held run's changes on the host, file by file.

The layer is the command's work, so hostile input; the host tree is the
user's. Every step is a ``*at`` call beneath the write root pinned by a
descriptor, each directory on the way opened ``O_NOFOLLOW`` (safebox.hostio):
no symlink on the host is ever followed, whoever planted it.

* a file: copied to a new temporary name beside the target (``O_EXCL``),
  its mode set (set-user-ID and set-group-ID bits dropped), then renamed
  over the target: a reader sees the old file or the new one, never half;
* a symlink: made beside, then renamed over the target (a link is placed,
  never followed);
* a deletion (a whiteout) or a replaced directory (opaque): removed by
  descriptors, without following a link;
* a conflict: the host's entry changed since the run started (its change
  time is not before the held run's ``started`` marker) and is not already
  what the layer holds: refused, named, unless ``force``;
* code-running names (safebox.review.layer.runs_code): listed, applied
  only when the caller names them;
* idempotent: what the host already holds is skipped, so an apply stopped
  half-way is finished by running it again; two at once are refused (lock).
"""

from __future__ import annotations

import errno
import os
import stat

from safebox._record import Frozen
from safebox.errors import RunError
from safebox.review import layer as _layer
from safebox.review import store as _store

TYPE_CHECKING = False
if TYPE_CHECKING:
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


def _check_space(chosen: list[Change]) -> None:
    need: dict[str, int] = {}
    for c in chosen:
        if c.kind != "deleted" and c.type == "file":
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


def apply(h: Held, paths: tuple[str, ...] | None = None, *, force: bool = False) -> Outcome:
    """Apply the held run's changes (those ``paths`` choose; see select)."""
    from safebox import hostio

    with _store.Lock(h, "apply"):
        cs = _layer.changes(h)
        chosen, code = select(cs, paths)
        _check_space(chosen)
        started = h.started_ns()
        applied: list[str] = []
        conflicts: list[tuple[str, str]] = []
        refused: list[tuple[str, str]] = []
        pins: dict[int, tuple[PinnedDir, PinnedDir]] = {}
        try:
            for c in chosen:
                if c.layer not in pins:
                    os.makedirs(c.root, exist_ok=True) if not os.path.lexists(c.root) else None
                    pins[c.layer] = (hostio.pin(c.root), hostio.pin(h.upper(c.layer)))
                host, up = pins[c.layer]
                if c.type == "other":
                    refused.append((c.path, "not a file, a directory or a symlink"))
                    continue
                try:
                    hst = host.lstat(c.rel)
                except hostio.HostFileError as e:
                    refused.append((c.path, e.why))
                    continue
                if hst is not None and not force and hst.st_ctime_ns >= started and c.kind != "added":
                    conflicts.append((c.path, "changed on the host since the run started"))
                    continue
                if c.kind == "modified" and hst is None and not force:
                    conflicts.append((c.path, "deleted on the host since the run started"))
                    continue
                if hst is not None and hst.st_uid != os.geteuid():
                    refused.append((c.path, f"the host's is owned by uid {hst.st_uid}, not by this user"))
                    continue
                try:
                    _one(c, host, up, hst)
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
        left = [c for c in _layer.changes(h) if not c.runs_code] if applied else None
        _store.update(h, applied=[*h.meta.get("applied", []), *applied],
                      status="applied" if left == [] else h.meta.get("status"))
        return Outcome(applied=tuple(applied), code=tuple(c.path for c in code), conflicts=tuple(conflicts),
                       refused=tuple(refused))


def _parent(host: PinnedDir, up: PinnedDir, rel: str) -> tuple[int, str]:
    """The host directory of ``rel`` (made, with the layer's modes, where
    missing) and the last name. The caller closes the descriptor."""
    parts = rel.split("/")
    fd = os.open(".", _DIR, dir_fd=host.fd)
    try:
        for i, p in enumerate(parts[:-1]):
            try:
                nfd = os.open(p, _DIR, dir_fd=fd)
            except FileNotFoundError:
                mode = 0o755
                lst = up.lstat("/".join(parts[:i + 1]))
                if lst is not None and stat.S_ISDIR(lst.st_mode):
                    mode = stat.S_IMODE(lst.st_mode) & 0o1777
                os.mkdir(p, mode, dir_fd=fd)
                nfd = os.open(p, _DIR, dir_fd=fd)
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd, parts[-1]


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


def _one(c: Change, host: PinnedDir, up: PinnedDir, hst: os.stat_result | None) -> None:
    dfd, name = _parent(host, up, c.rel)
    try:
        if c.kind == "deleted":
            if hst is not None:
                _remove(dfd, name)
            return
        if c.type == "dir":
            if hst is not None and not stat.S_ISDIR(hst.st_mode):
                _remove(dfd, name)
            if hst is None or not stat.S_ISDIR(hst.st_mode):
                os.mkdir(name, c.mode & 0o1777, dir_fd=dfd)
            return
        tmp = f".{name[:200]}.safebox-apply-{os.urandom(4).hex()}"
        udfd, uname, owned = up.parent_of(c.rel)
        try:
            if c.type == "symlink":
                os.symlink(os.readlink(uname, dir_fd=udfd), tmp, dir_fd=dfd)
            else:
                _copy(udfd, uname, dfd, tmp)
        finally:
            if owned:
                os.close(udfd)
        try:
            if hst is not None and stat.S_ISDIR(hst.st_mode):
                _remove(dfd, name)
            os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=dfd)
            except OSError:
                pass
            raise
    finally:
        os.close(dfd)


def _copy(sdfd: int, sname: str, dfd: int, tmp: str) -> None:
    src = os.open(sname, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=sdfd)
    try:
        st = os.fstat(src)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
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

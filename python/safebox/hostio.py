"""Host-side handling of every path a sandboxed command could have touched.

The rule (docs/threat-model.md, "Host-side handling"): anything a sandboxed
command could have shaped — a file, a name, a directory on the way — is
hostile input to safebox's own host-side code. The runner's file commands,
the audit log, the summary, learn's output and ``policy suggest -o``, the
quarantine, safebox's state and memory files: every open, write and rename
of such a path goes through this module, and a test over the source
(tests/unit/test_hostio.py) fails the build when a bare ``open()``,
``os.rename`` or ``os.replace`` of a path appears elsewhere without a reason
on its list.

What the module guarantees:

* **No symlink is followed beneath a pinned directory.** A directory is
  pinned once (an ``O_PATH`` descriptor), before the command could change
  what its name leads to, or at the moment of use for a name the user gave.
  Everything beneath it is walked one component at a time with
  ``O_NOFOLLOW``: a symlink anywhere on the way is ``ELOOP``, ``..`` and
  absolute names are refused (what ``openat2(RESOLVE_BENEATH |
  RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`` gives, without a ``ctypes``
  import on the start path; the walk is a few ``openat`` calls for the
  short names used here).
* **What is opened is checked with fstat**, on the descriptor, never by a
  second look-up: a regular file, owned by safebox's user, one link (a hard
  link to a file the command could not read is refused), at most a bounded
  size.
* **A rename replaces only a regular file safebox's user owns with one
  link**, or nothing. A character device (``/dev/null``) is written in
  place, never replaced; anything else (a directory, a fifo, a socket, a
  symlink, a file of another user) is refused.
* ``/dev/*`` and ``/proc/self/fd/*`` name the caller's own descriptors and
  devices, which no sandbox can plant on the host: they are opened as given,
  never created, and must not be regular files under ``/dev``.

Errors are :class:`HostFileError` (a :class:`~safebox.errors.SafeboxError`):
the message names the path and what was wrong with it.
"""

from __future__ import annotations

import errno
import os
import stat

from safebox.errors import SafeboxError

__all__ = ["HostFileError", "PinnedDir", "append", "check_regular", "open_append", "open_read", "pin", "read", "replace",
           "write_exclusive"]

_DIR = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: The bound on a file this module reads unless the caller sets one.
DEFAULT_MAX = 16 << 20


class HostFileError(SafeboxError):
    """A path a sandboxed command could have shaped is not what safebox may use."""

    def __init__(self, path: str, why: str, *, hint: str | None = None) -> None:
        super().__init__(f"{path}: {why}", hint=hint)
        self.path = path
        self.why = why


def _parts(rel: str, *, where: str) -> list[str]:
    """The components of ``rel``: relative, no ``.``/``..``/empty ones."""
    if rel.startswith("/"):
        raise HostFileError(where, "an absolute name where a name beneath a pinned directory was expected")
    parts = rel.split("/")
    for p in parts:
        if p in ("", ".", ".."):
            raise HostFileError(where, f"the name {rel!r} has an empty, '.' or '..' component")
    return parts


def _why(e: OSError) -> str:
    if e.errno == errno.ELOOP:  # O_NOFOLLOW met a symlink at the last component
        return "a symlink; safebox never follows one in a place a sandboxed command could write"
    if e.errno == errno.ENOTDIR:
        return "a component on the way is not a directory"
    return e.strerror or str(e)


def _is_link(name: str, dir_fd: int) -> bool:
    """Whether ``name`` beneath ``dir_fd`` is a symlink (O_DIRECTORY|O_NOFOLLOW
    on one fails with ENOTDIR, not ELOOP)."""
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


class PinnedDir:
    """A directory held by an ``O_PATH`` descriptor; names beneath it are
    resolved without following any symlink. Close it (or use ``with``)."""

    def __init__(self, fd: int, path: str) -> None:
        self.fd = fd
        self.path = path

    def __enter__(self) -> PinnedDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the descriptor; idempotent."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def _name(self, rel: str) -> str:
        return os.path.join(self.path, rel)

    def parent_of(self, rel: str) -> tuple[int, str, bool]:
        """(descriptor of ``rel``'s directory, its last name, whether the
        descriptor is a new one the caller must close)."""
        parts = _parts(rel, where=self._name(rel))
        fd, owned = self.fd, False
        try:
            for p in parts[:-1]:
                nfd = os.open(p, _DIR, dir_fd=fd)
                if owned:
                    os.close(fd)
                fd, owned = nfd, True
        except OSError as e:
            why = _why(e)
            if e.errno == errno.ENOTDIR and _is_link(p, fd):
                why = f"{p!r} on the way is a symlink; safebox never follows one in a place a sandboxed command could write"
            if owned:
                os.close(fd)
            raise HostFileError(self._name(rel), why) from None
        return fd, parts[-1], owned

    def open(self, rel: str, flags: int, mode: int = 0o600) -> int:
        """``open(2)`` of ``rel`` beneath this directory with ``O_NOFOLLOW``
        on every component. OSError of the last step propagates (ENOENT,
        ELOOP, EEXIST) so the caller can decide; a bad way is HostFileError."""
        dfd, name, owned = self.parent_of(rel)
        try:
            return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dfd)
        finally:
            if owned:
                os.close(dfd)

    def lstat(self, rel: str) -> os.stat_result | None:
        """``lstat`` of ``rel`` beneath this directory, or None when absent."""
        dfd, name, owned = self.parent_of(rel)
        try:
            return os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        finally:
            if owned:
                os.close(dfd)

    def read(self, rel: str, *, max_size: int = DEFAULT_MAX, missing_ok: bool = True) -> bytes | None:
        """The bytes of the regular file ``rel`` (checked: regular, ours,
        one link, at most ``max_size``); None when it does not exist and
        ``missing_ok``."""
        try:
            fd = self.open(rel, os.O_RDONLY | os.O_NONBLOCK)
        except FileNotFoundError:
            if missing_ok:
                return None
            raise HostFileError(self._name(rel), "does not exist") from None
        except OSError as e:
            raise HostFileError(self._name(rel), _why(e)) from None
        try:
            st = os.fstat(fd)
            check_regular(self._name(rel), st, max_size=max_size)
            return _read_all(fd, max_size)
        finally:
            os.close(fd)

    def open_read(self, rel: str, *, max_size: int | None = None) -> int:
        """A checked read-only descriptor of the regular file ``rel`` (see
        :meth:`read`), for a caller that streams it."""
        try:
            fd = self.open(rel, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as e:
            raise HostFileError(self._name(rel), _why(e)) from None
        try:
            check_regular(self._name(rel), os.fstat(fd), max_size=max_size)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def append(self, rel: str, data: bytes, *, mode: int = 0o600) -> None:
        """Append ``data`` in one ``write(2)`` to ``rel``, created ``mode``
        when missing; an existing one must be a regular file of ours with
        one link."""
        fd = self.open_append(rel, mode=mode)
        try:
            _write_all(fd, data)
        finally:
            os.close(fd)

    def open_append(self, rel: str, *, mode: int = 0o600) -> int:
        """A checked ``O_APPEND`` descriptor of ``rel`` (see :meth:`append`)."""
        try:
            fd = self.open(rel, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK, mode)
        except OSError as e:
            raise HostFileError(self._name(rel), _why(e)) from None
        try:
            check_regular(self._name(rel), os.fstat(fd), max_size=None)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def replace(self, rel: str, data: bytes, *, mode: int = 0o600) -> None:
        """Make ``rel`` hold exactly ``data``: a temporary file beside it,
        then ``renameat`` over it. The target must be absent or a regular
        file of ours with one link; a character device is written in place
        (``--learn /dev/null``); anything else is refused."""
        dfd, name, owned = self.parent_of(rel)
        try:
            try:
                st: os.stat_result | None = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            except FileNotFoundError:
                st = None
            if st is not None and stat.S_ISCHR(st.st_mode):
                fd = os.open(name, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
                try:
                    if not stat.S_ISCHR(os.fstat(fd).st_mode):
                        raise HostFileError(self._name(rel), "changed while it was opened")
                    _write_all(fd, data)
                finally:
                    os.close(fd)
                return
            if st is not None:
                check_regular(self._name(rel), st, max_size=None, what="replace")
            tmp = f".{name}.safebox-{os.getpid()}-{os.urandom(4).hex()}"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode,
                         dir_fd=dfd)
            try:
                try:
                    _write_all(fd, data)
                    os.fchmod(fd, mode)
                finally:
                    os.close(fd)
                os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            except BaseException:
                try:
                    os.unlink(tmp, dir_fd=dfd)
                except OSError:
                    pass
                raise
        except OSError as e:
            raise HostFileError(self._name(rel), _why(e)) from None
        finally:
            if owned:
                os.close(dfd)

    def write_exclusive(self, rel: str, data: bytes, *, mode: int = 0o600) -> None:
        """Create ``rel`` (it must not exist: ``O_EXCL``) holding ``data``."""
        try:
            fd = self.open(rel, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        except OSError as e:
            raise HostFileError(self._name(rel), _why(e)) from None
        try:
            _write_all(fd, data)
        finally:
            os.close(fd)

    def rename_to(self, rel: str, dest: PinnedDir, dest_rel: str) -> None:
        """Move ``rel`` (whatever it is: a symlink moves as a link) to
        ``dest_rel`` beneath ``dest``, which must not exist. Neither way
        follows a symlink; the source's last component is never followed."""
        sfd, sname, sowned = self.parent_of(rel)
        try:
            dfd, dname, downed = dest.parent_of(dest_rel)
            try:
                try:
                    os.stat(dname, dir_fd=dfd, follow_symlinks=False)
                except FileNotFoundError:
                    pass
                else:
                    raise HostFileError(dest._name(dest_rel), "already exists")
                os.rename(sname, dname, src_dir_fd=sfd, dst_dir_fd=dfd)
            except OSError as e:
                raise HostFileError(self._name(rel), _why(e)) from None
            finally:
                if downed:
                    os.close(dfd)
        finally:
            if sowned:
                os.close(sfd)


def check_regular(path: str, st: os.stat_result, *, max_size: int | None, what: str = "use") -> None:
    """Raise HostFileError unless ``st`` is a regular file of this user with
    one link (and at most ``max_size`` bytes)."""
    if not stat.S_ISREG(st.st_mode):
        raise HostFileError(path, f"not a regular file; safebox will not {what} it")
    if st.st_uid != os.geteuid():
        raise HostFileError(path, f"owned by uid {st.st_uid}, not by this user ({os.geteuid()})")
    if st.st_nlink != 1:
        raise HostFileError(path, f"has {st.st_nlink} hard links; safebox will not {what} a file linked elsewhere")
    if max_size is not None and st.st_size > max_size:
        raise HostFileError(path, f"{st.st_size} bytes, more than the {max_size} safebox reads")


def _read_all(fd: int, max_size: int) -> bytes:
    chunks = []
    left = max_size + 1
    while left > 0:
        b = os.read(fd, min(left, 1 << 20))
        if not b:
            break
        chunks.append(b)
        left -= len(b)
    data = b"".join(chunks)
    if len(data) > max_size:
        raise OSError(27, f"grew past {max_size} bytes while read")  # EFBIG
    return data


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def pin(path: str) -> PinnedDir:
    """Pin the directory ``path``, following symlinks in it: use it for a
    directory whose name the command could not have shaped (safebox's own
    state, a runner directory, taken before the command starts; the
    directory of a name the user gave)."""
    try:
        fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise HostFileError(path, e.strerror or str(e)) from None
    return PinnedDir(fd, path)


def _is_callers(path: str) -> bool:
    """``/dev/...`` and ``/proc/self/fd/...``: the caller's own descriptors
    and the host's devices, which no sandbox writes; only as a plain path
    (``/proc/self/fd/../../../home/u/.bashrc`` is none of them: review)."""
    return path.startswith(("/dev/", "/proc/self/fd/")) and os.path.normpath(path) == path


def _split(path: str) -> tuple[str, str]:
    path = os.path.abspath(path)
    parent, name = os.path.split(path)
    if not name:
        raise HostFileError(path, "names a directory, not a file")
    return parent or "/", name


def read(path: str, *, max_size: int = DEFAULT_MAX, missing_ok: bool = True) -> bytes | None:
    """:meth:`PinnedDir.read` of ``path``'s last component, its directory
    pinned now."""
    parent, name = _split(path)
    with pin(parent) as d:
        return d.read(name, max_size=max_size, missing_ok=missing_ok)


def open_read(path: str, *, max_size: int | None = None) -> int:
    """:meth:`PinnedDir.open_read` of ``path``'s last component, its
    directory pinned now."""
    parent, name = _split(path)
    with pin(parent) as d:
        return d.open_read(name, max_size=max_size)


def append(path: str, data: bytes, *, mode: int = 0o600) -> None:
    """:meth:`PinnedDir.append` of ``path``, or a plain append to the
    caller's own ``/dev/stderr``-like name."""
    fd = open_append(path, mode=mode)
    try:
        _write_all(fd, data)
    finally:
        os.close(fd)


def open_append(path: str, *, mode: int = 0o600) -> int:
    """A checked ``O_APPEND`` descriptor of ``path`` (:meth:`PinnedDir.open_append`);
    ``/dev/*`` and ``/proc/self/fd/*`` are opened as given, never created."""
    if _is_callers(path):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        except OSError as e:
            raise HostFileError(path, e.strerror or str(e)) from None
        if path.startswith("/dev/") and stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise HostFileError(path, "a regular file under /dev; safebox writes only devices there")
        return fd
    parent, name = _split(path)
    with pin(parent) as d:
        return d.open_append(name, mode=mode)


def replace(path: str, data: bytes, *, mode: int = 0o600) -> None:
    """:meth:`PinnedDir.replace` of ``path``; ``/dev/*`` and
    ``/proc/self/fd/*`` are written in place."""
    if _is_callers(path):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        except OSError as e:
            raise HostFileError(path, e.strerror or str(e)) from None
        try:
            if path.startswith("/dev/") and stat.S_ISREG(os.fstat(fd).st_mode):
                raise HostFileError(path, "a regular file under /dev; safebox writes only devices there")
            _write_all(fd, data)
        finally:
            os.close(fd)
        return
    parent, name = _split(path)
    with pin(parent) as d:
        d.replace(name, data, mode=mode)


def write_exclusive(path: str, data: bytes, *, mode: int = 0o600) -> None:
    """Create ``path`` (absent before) holding ``data``, without following a link."""
    parent, name = _split(path)
    with pin(parent) as d:
        d.write_exclusive(name, data, mode=mode)

"""An lstat of every directory of a big work tree, in the helper's C and on
its own cores (``safebox-helper --dir-keys``; helper/dirkeys.h has the
request format).

Two passes over every directory of the work tree cost a warm start most of
its time in a big tree (docs/benchmarks.md, "Start-up in a big work tree"):
the check that the kept start walks still hold (:mod:`safebox.builder.walkcache`)
and the watch's look after the run (:mod:`safebox.builder.deepwatch`). Here each is
one helper that lstats on up to four cores (forked workers); the first runs beside
safebox's imports and policy instead of in front of them.

The helper only ever finds the same answer faster. Its answer is checked
for shape (exit status, length, indexes ascending and in range), and
anything else (no helper, a failed start, a wrong shape) means the same
lstats here, in Python: never a skipped check.
"""

from __future__ import annotations

import os
import struct

from safebox._record import Spawned

#: helper/dirkeys.h: magic, operation, path count, floor.
_HEADER = struct.Struct("=8sIIq")
#: helper/dirkeys.h, struct dk_key: device, inode, ctime in ns.
KEY = struct.Struct("=QQq")
_SAME, _SINCE = 1, 2
#: Fewer directories than this are lstat'ed here: the helper's start (about
#: a millisecond) would cost more than it saves.
MIN_HELPED = 2048


def helper_path() -> str | None:
    """The helper (``SAFEBOX_HELPER`` or the package's), computed without
    importing :mod:`safebox.run.helper_binary`: :mod:`.walkcache` runs before safebox is loaded."""
    path = os.environ.get("SAFEBOX_HELPER") or os.path.join(  # safebox/_bin/, beside builder/
        os.path.dirname(os.path.dirname(os.path.realpath(__file__))), "_bin", "safebox-helper")
    return path if path.startswith("/") and os.access(path, os.X_OK) else None


def pack_keys(keys: list[tuple[int, int, int]]) -> bytes:
    """(device, inode, ctime) of each directory as the helper reads them."""
    pack = KEY.pack
    return b"".join([pack(*k) for k in keys])


def _request(op: int, n: int, floor_ns: int, keys: bytes, paths: bytes) -> int | None:
    """A memfd holding the request, at offset 0; None when it cannot be made."""
    try:
        fd = os.memfd_create("safebox-dir-keys", os.MFD_CLOEXEC)
    except OSError:
        return None
    try:
        os.write(fd, b"".join((_HEADER.pack(b"sbdkeys1", op, n, floor_ns), keys, paths, b"\0")))
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError:
        os.close(fd)
        return None
    return fd


def _start(op: int, n: int, floor_ns: int, keys: bytes, paths: bytes) -> Spawned | None:
    helper = helper_path() if n >= MIN_HELPED else None
    fd = _request(op, n, floor_ns, keys, paths) if helper is not None else None
    if helper is None or fd is None:
        return None
    try:
        return Spawned([helper, "--dir-keys"], stdin_fd=fd, env={})
    except OSError:
        return None
    finally:
        os.close(fd)


def _python_keys(paths: list[bytes]) -> list[tuple[int, int, int]] | None:
    try:
        return [(st.st_dev, st.st_ino, st.st_ctime_ns) for st in map(os.lstat, paths)]
    except OSError:
        return None


class Same:
    """Whether every directory still has its key: started at once on the
    helper, answered by :meth:`result` (here, in Python, when the helper
    cannot)."""

    def __init__(self, paths: bytes, keys: bytes) -> None:
        # paths: NUL-separated (no NUL after the last); keys: pack_keys of them.
        self._paths = paths
        self._keys = keys
        self._n = paths.count(b"\0") + 1
        self._answer: bool | None = None
        self._proc = (_start(_SAME, self._n, 0, keys, paths)
                      if len(keys) == self._n * KEY.size and b"\0\0" not in paths and paths else None)

    def result(self) -> bool:
        """True when every directory is the same inode with the same ctime."""
        if self._answer is None:
            self._answer = self._ask()
        return self._answer

    def cancel(self) -> None:
        """Stop the helper if it still runs."""
        if self._proc is not None:
            self._proc.cancel()

    def _ask(self) -> bool:
        if self._proc is not None:
            try:
                rc, out, _ = self._proc.collect(timeout=60)
            except (OSError, TimeoutError):
                rc, out = -1, b""
            if rc in (0, 1) and not out:
                return rc == 0
        if len(self._keys) != self._n * KEY.size:
            return False
        keys = _python_keys(self._paths.split(b"\0"))
        return keys is not None and keys == list(KEY.iter_unpack(self._keys))


def changed_since(paths: list[bytes], floor_ns: int) -> list[bytes] | None:
    """The ``paths`` that are directories whose ctime is at or after
    ``floor_ns``, in their order (those gone left out), from the helper;
    None when it could not say, and the caller lstats them itself."""
    if len(paths) < MIN_HELPED:
        return None
    # A path holding a NUL or an empty one makes the helper count the paths
    # differently: it refuses the request (exit 2) and the caller lstats.
    proc = _start(_SINCE, len(paths), floor_ns, b"", b"\0".join(paths))
    if proc is None:
        return None
    try:
        rc, out, _ = proc.collect(timeout=60)
    except (OSError, TimeoutError):
        return None
    if rc != 0 or len(out) % 4:
        return None
    idx = [i for (i,) in struct.iter_unpack("=I", out)]
    if any(b <= a for a, b in zip(idx, idx[1:], strict=False)) or (idx and idx[-1] >= len(paths)):
        return None
    return [paths[i] for i in idx]

"""What a held run's layers hold, as changes to the host, and their diffs.

An overlayfs upper layer (``userxattr``: Documentation/filesystems/
overlayfs.rst) holds: regular files and symlinks the command created or
changed (a changed file is copied up whole), directories, *whiteouts* (a
character device 0/0: the name was deleted) and *opaque* directories
(``user.overlay.opaque`` = ``y``: the directory was replaced, nothing of the
host's beneath it shows). Everything in it was made by the command: it is
walked by directory descriptors without following a link, and a file is
read only after ``fstat`` says it is a regular file of this user.
"""

from __future__ import annotations

import os
import stat

from safebox._record import Frozen

TYPE_CHECKING = False
if TYPE_CHECKING:
    from safebox.hostio import PinnedDir
    from safebox.review.store import Held

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
OPAQUE = "user.overlay.opaque"


class Change(Frozen):
    """One path the run changed."""

    root: str  # the write root (host path)
    layer: int  # its layer's number
    rel: str  # beneath the root
    kind: str  # "added", "modified", "deleted"
    type: str  # "file", "dir", "symlink", "other" (what the layer holds; the host's for "deleted")
    size: int = 0
    mode: int = 0
    runs_code: bool = False  # a protected or quarantined name: applied only when named

    @property
    def path(self) -> str:
        return os.path.join(self.root, self.rel)

    def as_json(self) -> dict[str, object]:
        return {"path": self.path, "kind": self.kind, "type": self.type, "size": self.size,
                "mode": f"{self.mode:04o}", "runs_code": self.runs_code}


class _Names:
    """The lists runs_code checks, built once (it is asked for every path
    of a layer: 10,000 files are 10,000 questions)."""

    def __init__(self) -> None:
        from safebox.policy.defaults import PROTECTED_DIRS, PROTECTED_FILES, PROTECTED_IN_GIT_DIR

        self.files = frozenset(PROTECTED_FILES)
        self.in_git = frozenset(PROTECTED_IN_GIT_DIR)
        self.dirs = tuple(tuple(d.strip("/").split("/")) for d in PROTECTED_DIRS)
        # Every answer but "no" needs one of these names among the parts.
        self.any = self.files | {seq[0] for seq in self.dirs} | {".git"}


_NAMES: list[_Names] = []


def runs_code(rel: str, typ: str = "file") -> bool:
    """Whether ``rel`` is a name that runs code on the host once there: one
    of the protected files (``.bashrc``, ``.envrc``...), anything beneath a
    protected directory (``.git/hooks``, ``.vscode``...), or what git reads
    in a ``.git`` directory (``config``, ``hooks``...): the same lists as the
    normal run's protection (policy/defaults.py)."""
    if not _NAMES:
        _NAMES.append(_Names())
    names = _NAMES[0]
    parts = rel.split("/")
    if names.any.isdisjoint(parts):
        return False
    if not names.files.isdisjoint(parts):
        return True
    if parts[-1] == ".git" and typ != "dir":
        return True  # a gitdir file: points git at a directory of the command's, hooks and all
    for i, p in enumerate(parts[:-1]):
        if p == ".git" and parts[i + 1] in names.in_git:
            return True
    for seq in names.dirs:
        n = len(seq)
        for i in range(len(parts) - n + 1):
            if tuple(parts[i:i + n]) == seq:
                return True
    return False


def _type(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "symlink"
    return "other"


def _whiteout(st: os.stat_result) -> bool:
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


def is_opaque(fd: int) -> bool:
    try:
        return os.getxattr(fd, OPAQUE) == b"y"
    except OSError:
        return False


def same_file(layer_dfd: int, name: str, lst: os.stat_result, host: PinnedDir, rel: str,
              hst: os.stat_result | None) -> bool:
    """Whether the host already holds what the layer has at ``rel`` (a
    copy-up that changed nothing, or a change applied before)."""
    if hst is None or _type(hst.st_mode) != _type(lst.st_mode):
        return False
    if stat.S_ISLNK(lst.st_mode):
        try:
            hd, hn, owned = host.parent_of(rel)
            try:
                return os.readlink(name, dir_fd=layer_dfd) == os.readlink(hn, dir_fd=hd)
            finally:
                if owned:
                    os.close(hd)
        except OSError:
            return False
    if stat.S_ISDIR(lst.st_mode):
        return True
    if not stat.S_ISREG(lst.st_mode) or hst.st_size != lst.st_size or \
            stat.S_IMODE(hst.st_mode) != stat.S_IMODE(lst.st_mode) & ~(stat.S_ISUID | stat.S_ISGID):
        return False
    try:
        a = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=layer_dfd)
    except OSError:
        return False
    try:
        b = host.open(rel, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        os.close(a)
        return False
    try:
        if not stat.S_ISREG(os.fstat(b).st_mode):
            return False
        while True:
            x, y = os.read(a, 1 << 20), os.read(b, 1 << 20)
            if x != y:
                return False
            if not x:
                return True
    finally:
        os.close(a)
        os.close(b)


def changes(h: Held, *, moved: list[tuple[int, str]] | None = None) -> list[Change]:
    """Every change the held run's layers hold, by path. ``moved`` gets
    (layer, rel) of each layer file that is the host's very file (an apply
    moved it there and was stopped before unlinking the layer's name:
    safebox.review.apply): no change."""
    from safebox import hostio

    out: list[Change] = []
    for k, root in enumerate(h.roots):
        try:
            top = os.open(h.upper(k), _DIR)
        except FileNotFoundError:
            continue
        try:
            try:
                host: PinnedDir | None = hostio.pin(root)
            except hostio.HostFileError:
                host = None  # the root is gone: everything is "added"
            try:
                _walk(top, "", k, root, host, out, moved)
            finally:
                if host is not None:
                    host.close()
        finally:
            os.close(top)
    return sorted(out, key=lambda c: c.path)


def _host_lstat(host: PinnedDir | None, rel: str) -> os.stat_result | None:
    if host is None:
        return None
    try:
        return host.lstat(rel)
    except Exception:  # noqa: BLE001 — a link on the way: nothing of the host's is there for us
        return None


def _walk(dfd: int, prefix: str, k: int, root: str, host: PinnedDir | None, out: list[Change],
          moved: list[tuple[int, str]] | None) -> None:
    for name in sorted(os.listdir(dfd)):
        rel = prefix + name
        lst = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        hst = _host_lstat(host, rel)
        code = runs_code(rel, _type(lst.st_mode))
        if _whiteout(lst):
            if hst is not None:
                out.append(Change(root=root, layer=k, rel=rel, kind="deleted", type=_type(hst.st_mode),
                                  size=hst.st_size, mode=stat.S_IMODE(hst.st_mode), runs_code=code))
            continue
        typ = _type(lst.st_mode)
        if typ == "dir":
            sub = os.open(name, _DIR, dir_fd=dfd)
            try:
                if hst is None or not stat.S_ISDIR(hst.st_mode):
                    out.append(Change(root=root, layer=k, rel=rel, kind="added" if hst is None else "modified",
                                      type="dir", mode=stat.S_IMODE(lst.st_mode), runs_code=code))
                elif is_opaque(sub) and host is not None:
                    # Replaced: what the host has there and the layer not is deleted.
                    keep = set(os.listdir(sub))
                    try:
                        hfd = host.open(rel, _DIR)
                    except OSError:
                        hfd = -1
                    if hfd >= 0:
                        try:
                            for n in sorted(set(os.listdir(hfd)) - keep):
                                st = os.stat(n, dir_fd=hfd, follow_symlinks=False)
                                out.append(Change(root=root, layer=k, rel=f"{rel}/{n}", kind="deleted",
                                                  type=_type(st.st_mode), size=st.st_size,
                                                  mode=stat.S_IMODE(st.st_mode), runs_code=runs_code(f"{rel}/{n}")))
                        finally:
                            os.close(hfd)
                _walk(sub, rel + "/", k, root, host if hst is not None and stat.S_ISDIR(hst.st_mode) else None, out,
                      moved)
            finally:
                os.close(sub)
            continue
        if hst is not None and (hst.st_ino, hst.st_dev) == (lst.st_ino, lst.st_dev) and stat.S_ISREG(lst.st_mode):
            if moved is not None:
                moved.append((k, rel))
            continue  # one file, two names: a move an apply did not finish
        if hst is not None and host is not None and same_file(dfd, name, lst, host, rel, hst):
            continue  # copied up, nothing changed (or applied already)
        out.append(Change(root=root, layer=k, rel=rel, kind="added" if hst is None else "modified", type=typ,
                          size=lst.st_size, mode=stat.S_IMODE(lst.st_mode), runs_code=code))


def _read_layer(h: Held, c: Change, limit: int) -> bytes | None:
    """The layer's bytes of ``c`` (a regular file of this user), at most ``limit``."""
    from safebox import hostio

    with hostio.pin(h.upper(c.layer)) as up:
        try:
            fd = up.open(c.rel, os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                return None
            return os.read(fd, limit)
        finally:
            os.close(fd)


def _read_host(c: Change, limit: int) -> bytes | None:
    from safebox import hostio

    try:
        with hostio.pin(c.root) as hp:
            fd = hp.open(c.rel, os.O_RDONLY | os.O_NONBLOCK)
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    return None
                return os.read(fd, limit)
            finally:
                os.close(fd)
    except (OSError, hostio.HostFileError):
        return None


#: Text diffs of files up to this size; larger ones get the binary line.
DIFF_MAX = 4 << 20


def _binary(data: bytes | None) -> bool:
    if data is None:
        return False
    if b"\0" in data[:8192]:
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def diff(h: Held, c: Change) -> str:
    """A unified diff for text, a size/mode/hash line for a binary, the
    target for a symlink."""
    import difflib
    import hashlib

    a, b = f"a{c.path}", f"b{c.path}"
    if c.type == "symlink" and c.kind != "deleted":
        from safebox import hostio

        with hostio.pin(h.upper(c.layer)) as up:
            dfd, name, owned = up.parent_of(c.rel)
            try:
                target = os.readlink(name, dir_fd=dfd)
            finally:
                if owned:
                    os.close(dfd)
        return f"{c.kind} symlink {c.path} -> {target}\n"
    if c.type == "dir":
        return f"{c.kind} directory {c.path} (mode {c.mode:04o})\n"
    if c.type == "other":
        return f"{c.kind} {c.path}: not a file, a directory or a symlink; not applied\n"
    old = _read_host(c, DIFF_MAX + 1) if c.kind != "added" else b""
    new = _read_layer(h, c, DIFF_MAX + 1) if c.kind != "deleted" else b""
    if c.kind == "deleted" and c.type != "file":
        return f"deleted {c.type} {c.path}\n"
    if old is None or new is None or _binary(old) or _binary(new) or len(old) > DIFF_MAX or len(new) > DIFF_MAX:
        def line(d: bytes | None) -> str:
            return "absent" if d is None or (d == b"" and c.kind in ("added", "deleted")) else \
                f"{len(d)} bytes sha256 {hashlib.sha256(d).hexdigest()[:16]}"
        return f"binary {c.path}: {line(old)} -> {line(new)}, mode {c.mode:04o}\n"
    lines = difflib.unified_diff(old.decode().splitlines(keepends=True), new.decode().splitlines(keepends=True),
                                 fromfile="/dev/null" if c.kind == "added" else a,
                                 tofile="/dev/null" if c.kind == "deleted" else b)
    text = "".join(ln if ln.endswith("\n") else ln + "\n\\ No newline at end of file\n" for ln in lines)
    return text or f"{c.kind} {c.path}: mode {c.mode:04o}\n"


def counts(cs: list[Change]) -> tuple[int, int, int]:
    return (sum(c.kind == "added" for c in cs), sum(c.kind == "modified" for c in cs),
            sum(c.kind == "deleted" for c in cs))

"""A minimal frozen record, and small replacements for stdlib helpers whose
import is expensive, for the ``safebox exec`` hot path.

Why not dataclasses: importing ``dataclasses`` (and ``inspect`` with it) costs
about 15 ms and each class about 0.7 ms of code generation, measured on the
CI machine with ``python -X importtime``; the whole start-up budget is about
30 ms (docs/benchmarks.md). ``typing``, ``json``/``re``, ``pathlib``,
``shutil`` and ``subprocess`` are avoided on the hot path for the same reason.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, ClassVar, Self, dataclass_transform
else:
    # The decorator only informs type checkers; at run time it would cost
    # importing ``typing`` (~6 ms), so it is a no-op here.
    def dataclass_transform(**_kw):
        return lambda cls: cls


# Type checkers treat every subclass as ``@dataclass(frozen=True, kw_only=True)``:
# a synthesized keyword-only ``__init__`` over the annotated fields and no
# assignment. tests/unit/test_record_parity.py holds the run-time side to that.
@dataclass_transform(kw_only_default=True, frozen_default=True, eq_default=True)
class Frozen:
    """Immutable record: fields are the annotated class attributes (a default
    is the class attribute's value); construction is keyword-only."""

    __fields__: ClassVar[tuple[str, ...]] = ()
    __defaults__: ClassVar[dict[str, Any]] = {}

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        names: list[str] = []
        for klass in reversed(cls.__mro__):
            for n in klass.__dict__.get("__annotations__", {}):
                if not n.startswith("_") and n not in names:
                    names.append(n)
        cls.__fields__ = tuple(names)
        # Once per class: `n in dir(cls)` per construction cost 0.1 ms a call.
        cls.__defaults__ = {n: getattr(cls, n) for n in names if hasattr(cls, n)}

    def __init__(self, **kw: Any) -> None:
        cls = type(self)
        defaults = cls.__defaults__
        for n in cls.__fields__:
            if n in kw:
                v = kw.pop(n)
            elif n in defaults:
                v = defaults[n]
            else:
                raise TypeError(f"{cls.__name__}: missing field {n!r}")
            object.__setattr__(self, n, v)
        if kw:
            raise TypeError(f"{cls.__name__}: unknown field(s) {sorted(kw)}")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen")

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, n) for n in self.__fields__)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self._values() == other._values()

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._values()))

    def __repr__(self) -> str:
        inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__fields__)
        return f"{type(self).__name__}({inner})"

    def replace(self, **changes: Any) -> Self:
        """A copy with ``changes`` applied."""
        values = {n: getattr(self, n) for n in self.__fields__}
        values.update(changes)
        return type(self)(**values)

    def asdict(self) -> dict[str, Any]:
        """Fields as a dict (shallow)."""
        return {n: getattr(self, n) for n in self.__fields__}


class _StrEnumMeta(type):  # (the run-time side of StrEnum below)
    """Turns each upper-case class attribute into an instance of the class."""

    _members: dict[str, Any]

    def __new__(mcs, name: str, bases: tuple[type, ...], ns: dict[str, Any]) -> Any:
        cls = super().__new__(mcs, name, bases, ns)
        members: dict[str, Any] = {}
        for key, value in list(ns.items()):
            if key.isupper() and isinstance(value, str):
                # cls derives from str (StrEnum's base), which a metaclass cannot declare.
                member: str = str.__new__(cls, value)  # type: ignore[arg-type]
                object.__setattr__(member, "_name", key)
                setattr(cls, key, member)
                members[value] = member
        cls._members = members
        return cls

    def __call__(cls, value: Any) -> Any:
        try:
            return cls._members[value]
        except KeyError:
            raise ValueError(f"{value!r} is not a valid {cls.__name__}") from None

    def __iter__(cls) -> Any:
        return iter(cls._members.values())


if TYPE_CHECKING:
    # Type checkers see the real enum (members, exhaustiveness, ``Literal``
    # members); the run-time class below behaves the same for every way the
    # package uses it (tests/unit/test_record_parity.py compares the two).
    from enum import StrEnum as StrEnum
else:

    class StrEnum(str, metaclass=_StrEnumMeta):
        """``enum.StrEnum`` for the hot path: members are str instances with
        ``.value`` and ``.name``; ``Cls("value")`` looks one up; iteration lists
        them. Importing ``enum`` (with functools and collections) costs ~4.5 ms,
        measured with ``python -X importtime`` — an eighth of the start-up budget."""

        _name: str

        @property
        def value(self) -> str:
            """The member's string."""
            return str.__str__(self)

        @property
        def name(self) -> str:
            """The attribute name."""
            return self._name

        def __repr__(self) -> str:
            return f"<{type(self).__name__}.{self._name}: {str.__repr__(self)}>"

        def __str__(self) -> str:
            return str.__str__(self)


def which(name: str, path: str | None = None) -> str | None:
    """``shutil.which`` for a bare command name."""
    if "/" in name:
        return name if os.access(name, os.X_OK) and not os.path.isdir(name) else None
    search = path if path is not None else os.environ.get("PATH", os.defpath)
    if not search:
        # As shutil.which: an empty search path finds nothing. "".split(":")
        # is [""], which would have searched the working directory, a write
        # root, when path_outside() had dropped every entry of $PATH.
        return None
    for d in search.split(os.pathsep):
        p = os.path.join(d or ".", name)
        if os.access(p, os.X_OK) and not os.path.isdir(p):
            return p
    return None


def path_outside(roots: list[str] | tuple[str, ...]) -> str:
    """$PATH without the entries a sandboxed command could have written to:
    relative or empty ones (the working directory) and any that lie in one
    of ``roots`` (an activated project venv, ~/.local/bin under a writable
    home). safebox runs bwrap, ripgrep, find and socat on the host, before
    and outside any sandbox: one planted in a write root would run there at
    the next start (found in review)."""
    key = (os.environ.get("PATH", os.defpath), tuple(roots))
    hit = _path_outside_memo.get(key)
    if hit is not None:
        return hit
    real_roots = {realpath_cached(r) for r in roots}
    keep = []
    for d in key[0].split(os.pathsep):
        if not d.startswith("/"):
            continue
        # Up from the entry, not across the roots: thousands of write roots.
        a = realpath_cached(d)
        while a not in real_roots and a != "/":
            a = os.path.dirname(a)
        if a in real_roots:
            continue
        keep.append(d)
    _path_outside_memo[key] = out = os.pathsep.join(keep)
    return out


# One exec resolves the same PATH entries for several tools; realpath costs
# an lstat per component, ~15 µs an entry (on the start-up path).
_path_outside_memo: dict[tuple[str, tuple[str, ...]], str] = {}
_realpath_memo: dict[str, str] = {}


def realpath_cached(p: str, memo: dict[str, str] | None = None) -> str:
    """``os.path.realpath(p)`` for a normalised absolute ``p``, resolving each
    parent once: thousands of write roots under one directory cost one lstat
    each, not one per component. ``memo``: a fresh one to see changes made
    since the process-wide one was filled (after the run)."""
    memo = _realpath_memo if memo is None else memo
    real = memo.get(p)
    if real is None:
        head, name = os.path.split(p)
        if not name or name in (".", "..") or head == p:
            real = os.path.realpath(p)
        else:
            real = os.path.join(realpath_cached(head, memo), name)
            if os.path.islink(real):
                real = os.path.realpath(p)
        memo[p] = real
    return real


_DIR_NOFOLLOW = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def rmtree(path: str) -> None:
    """Remove ``path`` recursively; ignore errors. A symlink is removed, never
    followed, ``path`` itself included (``os.scandir`` of a link to a
    directory would have emptied the directory). Like ``shutil.rmtree``, it
    walks through directory descriptors opened with O_NOFOLLOW, so a
    directory swapped for a link during the walk is not followed either."""
    try:
        fd = os.open(path, _DIR_NOFOLLOW)
    except OSError:  # not a directory (a file, a symlink), gone, or unreadable
        try:
            os.unlink(path)
        except OSError:
            pass
        return
    try:
        _rmtree_at(fd)
    finally:
        os.close(fd)
    try:
        os.rmdir(path)
    except OSError:
        pass


def _rmtree_at(dir_fd: int) -> None:
    """Remove everything in the directory open at ``dir_fd``; ignore errors."""
    try:
        with os.scandir(dir_fd) as it:
            entries = [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
    except OSError:
        return
    for name, is_dir in entries:
        try:
            if is_dir:
                fd = os.open(name, _DIR_NOFOLLOW, dir_fd=dir_fd)
                try:
                    _rmtree_at(fd)
                finally:
                    os.close(fd)
                os.rmdir(name, dir_fd=dir_fd)
            else:
                os.unlink(name, dir_fd=dir_fd)
        except OSError:
            pass


def glob_match(name: str, pattern: str) -> bool:
    """Case-sensitive match with ``*`` and ``?`` only (``fnmatch`` compiles a regex per pattern)."""
    if "?" not in pattern:
        # The common case (``*_TOKEN``, ``*_SECRET_*``, literals): string methods.
        parts = pattern.split("*")
        if len(parts) == 1:
            return name == pattern
        head, tail = parts[0], parts[-1]
        if len(name) < len(head) + len(tail) or not name.startswith(head) or not name.endswith(tail):
            return False
        pos, end = len(head), len(name) - len(tail)
        for mid in parts[1:-1]:
            at = name.find(mid, pos, end)
            if at < 0:
                return False
            pos = at + len(mid)
        return True
    n, p = 0, 0
    star_p, star_n = -1, 0
    while n < len(name):
        if p < len(pattern) and (pattern[p] == "?" or pattern[p] == name[n]):
            n += 1
            p += 1
        elif p < len(pattern) and pattern[p] == "*":
            star_p, star_n = p, n
            p += 1
        elif star_p >= 0:
            p = star_p + 1
            star_n += 1
            n = star_n
        else:
            return False
    while p < len(pattern) and pattern[p] == "*":
        p += 1
    return p == len(pattern)


def read_until(fd: int, marker: bytes, *, limit: int = 65536) -> bytes:
    """Read from ``fd`` until ``marker`` was seen, EOF, or ``limit`` bytes."""
    buf = b""
    while marker not in buf and len(buf) < limit:
        try:
            chunk = os.read(fd, 4096)
        except InterruptedError:
            continue
        if not chunk:
            break
        buf += chunk
    return buf


def open_to_owner(d: str | bytes) -> int | None:
    """Give the owner read, write and search on ``d`` when it is a directory
    of ours (the command, running as us, made it unreadable to hide what it
    put there); returns the mode it had, or None when nothing was changed.
    Through a descriptor opened without following a link: the mode lands on
    that directory only. :func:`set_mode` puts it back after the check, so
    the next start sees the directory as the command left it (and keeps it
    read-only, or refuses, as for any unlistable one)."""
    try:
        fd = os.open(d, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if (st.st_mode & 0o170000) != 0o040000 or st.st_uid != os.geteuid():  # S_ISDIR, ours
            return None
        os.chmod(f"/proc/self/fd/{fd}", (st.st_mode & 0o7777) | 0o700)
        return st.st_mode & 0o7777
    except OSError:
        return None
    finally:
        os.close(fd)


def set_mode(d: str | bytes, mode: int) -> None:
    """Put back the mode :func:`open_to_owner` changed (same descriptor rule)."""
    try:
        fd = os.open(d, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.chmod(f"/proc/self/fd/{fd}", mode)
    except OSError:
        pass
    finally:
        os.close(fd)


def listdir_as_owner(path: str) -> list[str] | None:
    """``os.listdir(path)``; None when it cannot be listed. A directory of
    ours that the command made unlistable (``chmod 0311``) to hide what it
    created in it is opened to its owner for the listing (:func:`open_to_owner`),
    then its mode put back (review: a new ``~/.bash_aliases`` or ``.pth``
    survived a ``chmod`` of its directory)."""
    try:
        return os.listdir(path)
    except PermissionError:
        pass
    except OSError:
        return None
    mode = open_to_owner(path)
    if mode is None:
        return None
    try:
        return os.listdir(path)
    except OSError:
        return None
    finally:
        set_mode(path, mode)


def read_small(path: str, limit: int) -> bytes | None:
    """The first ``limit`` bytes of a regular file, or None when there is
    none to read (missing, not a regular file, unreadable). Sized by fstat:
    ``read(limit)`` would allocate the whole limit for a file of a few lines."""
    try:
        # O_NONBLOCK: a fifo planted as a nested repository's .git/config
        # would otherwise hold every later start in open() (found in review).
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if (st.st_mode & 0o170000) != 0o100000:  # S_ISREG without importing stat
            return None
        chunks: list[bytes] = []
        want = min(st.st_size, limit)
        while want > 0:
            chunk = os.read(fd, want)
            if not chunk:
                break
            chunks.append(chunk)
            want -= len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def sha256_hex(data: bytes) -> str:
    """sha256 without importing hashlib (its import pulls in more than the digest)."""
    if TYPE_CHECKING:
        from hashlib import sha256  # the same constructor, as typeshed describes it
    else:
        try:
            from _sha256 import sha256  # CPython 3.11
        except ImportError:  # pragma: no cover - 3.12+ renamed it
            try:
                from _sha2 import sha256
            except ImportError:
                from hashlib import sha256
    return sha256(data).hexdigest()


class Spawned:
    """A child started with its stdout and stderr on pipes; ``collect`` reads
    both and reaps it. Lets the caller overlap the child with other work."""

    # Set by whoever needs it: the file clock when the walk began (_prescan.start_find).
    since_ns: int = 0

    def __init__(self, argv: list[str], *, env: dict[str, str] | None = None, memfd_out: bool = False,
                 stdin_fd: int | None = None) -> None:
        # memfd_out: stdout goes to an anonymous memory file instead of a
        # pipe. A walk that prints a megabyte (every directory of a large
        # tree) would fill a pipe's 64 KiB and stop until ``collect`` reads
        # it: the walk meant to run beside safebox's start-up would then run
        # after it.
        if memfd_out:
            out_r = os.memfd_create("safebox-walk", os.MFD_CLOEXEC)
            out_w = os.dup(out_r)
        else:
            out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            # stdin_fd: the caller's (a request in a memfd), else /dev/null.
            stdin: tuple[Any, ...] = ((os.POSIX_SPAWN_DUP2, stdin_fd, 0) if stdin_fd is not None
                                      else (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0))
            fa = [(os.POSIX_SPAWN_DUP2, out_w, 1), (os.POSIX_SPAWN_DUP2, err_w, 2), stdin]
            self.pid = os.posix_spawn(argv[0], argv, os.environ if env is None else env, file_actions=fa)
        except OSError:
            for fd in (out_r, out_w, err_r, err_w):
                os.close(fd)
            raise
        os.close(out_w)
        os.close(err_w)
        self.argv = argv
        self._memfd = memfd_out
        self._out, self._err = out_r, err_r
        self._result: tuple[int, bytes, bytes] | None = None

    def cancel(self) -> None:
        """Kill the child (if still running) and reap it."""
        if self._result is None:
            try:
                os.kill(self.pid, 9)
            except ProcessLookupError:
                pass
            try:
                self.collect(timeout=10)
            except (OSError, TimeoutError):
                pass

    def collect(self, *, timeout: float = 60.0) -> tuple[int, bytes, bytes]:
        """(exit status, stdout, stderr); kills the child after ``timeout`` seconds.
        Idempotent: a second call returns the first result."""
        if self._result is not None:
            return self._result
        import select
        import time

        bufs: dict[int, list[bytes]] = {self._out: [], self._err: []}
        # poll, not select: select() refuses descriptors above 1023, which a
        # big policy's many walks once reached.
        poller = select.poll()
        for fd in bufs:
            if not (self._memfd and fd == self._out):  # read whole once the child is gone
                poller.register(fd, select.POLLIN)
        open_fds = len(bufs) - self._memfd
        deadline = time.monotonic() + timeout
        try:
            while open_fds:
                left = deadline - time.monotonic()
                if left <= 0:
                    os.kill(self.pid, 9)
                    raise TimeoutError(f"{self.argv[0]} did not finish in {timeout:.0f} s")
                for fd, _ in poller.poll(left * 1000):
                    chunk = os.read(fd, 1 << 16)
                    if chunk:
                        bufs[fd].append(chunk)
                    else:
                        poller.unregister(fd)
                        open_fds -= 1
            if self._memfd:
                # stderr at its end: the child has exited or closed it; the
                # output is complete once it is reaped.
                _, status = os.waitpid(self.pid, 0)
                self.pid = -1
                size = os.fstat(self._out).st_size
                bufs[self._out].append(os.pread(self._out, size, 0) if size else b"")
        finally:
            os.close(self._out)
            os.close(self._err)
            if self.pid != -1:
                _, status = os.waitpid(self.pid, 0)
        self._result = (os.waitstatus_to_exitcode(status), b"".join(bufs[self._out]), b"".join(bufs[self._err]))
        return self._result


def run_capture(argv: list[str], *, timeout: float = 60.0) -> tuple[int, bytes, bytes]:
    """Run ``argv`` (absolute path) and return (exit status, stdout, stderr).

    ``subprocess`` costs ~8 ms to import; this is posix_spawn with two pipes.
    """
    return Spawned(argv).collect(timeout=timeout)

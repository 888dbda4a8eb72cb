"""The run dir: a private 0700 directory under the state dir, locked for as
long as the process that owns it lives, and the sweep that settles and
removes those whose owner died.

One run dir per :class:`~safebox.run.session.Session` (one ``safebox exec``,
or one :class:`safebox.Sandbox`); each command run in it gets a numbered
subdirectory (its helper policy, seccomp programs, watch list), so that a
Sandbox running many commands creates and locks one directory, not one per
command. The sweep settles every watch list it finds in a dead run dir.
"""

from __future__ import annotations

import fcntl
import itertools
import os
import time

from safebox._record import rmtree
from safebox.builder.resolved import EMPTY_FILE
from safebox.errors import RunError
from safebox.run.protect import settle_watch

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable


def private_dir(path: str) -> None:
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


def _settle_dead(run_dir: str, state: str) -> list[str]:
    """Settle the watch lists of a dead run dir: its own and its commands'."""
    out = settle_watch(run_dir, state)
    try:
        subdirs = sorted(n for n in os.listdir(run_dir) if n.startswith("cmd-"))
    except OSError:
        subdirs = []
    for name in subdirs:
        out += settle_watch(os.path.join(run_dir, name), state)
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
            done += _settle_dead(d, os.path.dirname(run_base))
        except OSError as e:  # keep the run dir: the next start tries again
            os.close(fd)
            done.append(f"cannot settle the killed run {d}: {e.strerror or e}")
            continue
        rmtree(d)
        os.close(fd)
    return done


TMP_PREFIX = "safebox-tmp-"


def sweep_stale_tmp(base: str) -> None:
    """Remove helper-only TMPDIRs (``safebox-tmp-UID-PID-RANDOM``) of ours whose run died."""
    prefix = f"{TMP_PREFIX}{os.getuid()}-"
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


def make_run_tmp(base: str) -> str:
    """A private TMPDIR for a helper-only command (no private /tmp without
    bwrap), named so that :func:`sweep_stale_tmp` removes it once we die."""
    sweep_stale_tmp(base)
    path = os.path.join(base, f"{TMP_PREFIX}{os.getuid()}-{os.getpid()}-{os.urandom(4).hex()}")
    os.mkdir(path, 0o700)
    return path


class RunDir:
    """A private run dir under the state dir, locked for this process's lifetime."""

    def __init__(self, base: str, *, say: Callable[[str], None]) -> None:
        private_dir(base)
        for note in sweep_stale(base):  # runs killed since the session's first sweep
            say(note)
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
        # The file bound over every masked file (ResolvedPolicy.empty_file):
        # empty, and mode 0200 (write only) so that reading it fails with
        # EACCES as the nodev /dev/null did, and connect() to a hidden
        # socket still fails with ECONNREFUSED (connect needs write
        # permission, then a socket); a write fails with EROFS, the bind
        # being read-only. No capability inside overrides the mode, and the
        # read-only bind keeps it from being changed.
        fd = os.open(os.path.join(self.path, EMPTY_FILE),
                     os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o200)
        try:
            os.fchmod(fd, 0o200)  # whatever the umask
        finally:
            os.close(fd)
        self._numbers = itertools.count(1)

    def command_dir(self) -> str:
        """A fresh 0700 subdirectory for one command's files (thread-safe:
        ``next`` on an ``itertools.count`` is atomic in CPython)."""
        path = os.path.join(self.path, f"cmd-{next(self._numbers)}")
        os.mkdir(path, 0o700)
        return path

    def remove(self) -> None:
        """Delete the run dir (idempotent)."""
        rmtree(self.path)
        if self._lock >= 0:
            os.close(self._lock)
            self._lock = -1


__all__ = ["TMP_PREFIX", "RunDir", "make_run_tmp", "private_dir", "sweep_stale", "sweep_stale_tmp"]

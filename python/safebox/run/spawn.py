"""Starting a child process: ``posix_spawn`` in a process group of its
own, with exactly the descriptors it is given (run/supervise.py starts bwrap,
the helper and the supervisor through it; run/mounter.py the helper's --mount).
A module of its own, below both, so that neither imports the other."""

from __future__ import annotations

import os

from safebox import _signals
from safebox.errors import RunError

TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal  # the same functions and constants, as typeshed describes them
else:
    import _signal as signal  # the C module: `signal` wraps it in enums (~4.5 ms of import)

__all__ = ["FORWARDED_SIGNALS", "spawn"]

FORWARDED_SIGNALS = _signals.FORWARDED


def _close_actions(keep: set[int]) -> list[tuple[int, int]]:
    """``posix_spawn`` actions closing, in the child only, every inheritable
    descriptor above 2 that is not in ``keep``: the caller's descriptors stay
    as they are in the caller (no close-on-exec marking), and the sandbox
    gets none of them. A descriptor another thread makes inheritable after
    this listing reaches bwrap at most; the helper closes everything but
    its own before the command runs (``close_range``)."""
    try:
        fds = [int(n) for n in os.listdir("/proc/self/fd")]
    except OSError:
        fds = list(range(3, 1024))
    out = []
    for fd in fds:
        if fd > 2 and fd not in keep:
            try:
                if os.get_inheritable(fd):
                    out.append((os.POSIX_SPAWN_CLOSE, fd))
            except OSError:
                pass  # closed meanwhile (the listing's own descriptor among them)
    return out


def spawn(path: str, argv: list[str], env: dict[str, str], *, pass_fds: tuple[int, ...] = (),
          dup_to: tuple[tuple[int, int], ...] = (), cwd: str | None = None, block_signals: bool = False) -> int:
    """posix_spawn ``path`` in a process group of its own; ``pass_fds`` are
    inherited as they are, each (fd, number) of ``dup_to`` as that number.

    Thread-safe: nothing process-wide changes. Descriptors are passed with
    ``dup2(fd, fd)`` actions, which clear close-on-exec in the child only
    (POSIX 2018; glibc 2.29), instead of marking them inheritable in the
    parent, where another thread's spawn would inherit them too. ``cwd``,
    when it is not the process's own, is entered by ``/bin/sh`` before it
    execs ``path`` (``posix_spawn`` has no chdir action in Python; a chdir
    in the parent would move every thread)."""
    # Python ignores SIGPIPE; the command must get the default dispositions back.
    sigdef = (signal.SIGPIPE, signal.SIGXFSZ, *FORWARDED_SIGNALS)
    # block_signals: the child starts with every signal blocked (the
    # violations supervisor): a signal sent to safebox's process group while
    # the child is still in it (before setpgid) stays pending, and the
    # supervisor discards it (helper/supervise.c) instead of dying of it.
    mask = signal.valid_signals() if block_signals else ()
    actions: list[tuple[int, ...]] = [(os.POSIX_SPAWN_DUP2, fd, fd) for fd in pass_fds]
    actions += [(os.POSIX_SPAWN_DUP2, fd, n) for fd, n in dup_to]
    actions += _close_actions({*pass_fds, *(n for _, n in dup_to)})
    if cwd is not None and os.path.realpath(os.getcwd()) != cwd:
        argv = ["/bin/sh", "-c", 'cd -- "$0" && exec "$@"', cwd, path, *argv[1:]]
        path = "/bin/sh"
    try:
        return os.posix_spawn(path, argv, env, setpgroup=0, setsigdef=sigdef, setsigmask=mask,
                              file_actions=actions)
    except OSError as e:
        raise RunError(f"cannot start {path}: {e.strerror}") from None

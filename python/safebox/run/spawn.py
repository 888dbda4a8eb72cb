"""Child processes: started with ``posix_spawn`` in a process group of
their own, with exactly the descriptors they are given (:func:`spawn`:
run/supervise.py starts bwrap, the helper and the supervisor through it;
run/mounter.py the helper's --mount), and reached afterwards: signals relayed
to the command's process group (:class:`Relay`: those ``safebox exec``
receives, those the API's ``send_signal`` asks for), and without
bubblewrap's pid namespace safebox as the child subreaper that ends what
the command left behind (:func:`reap_descendants`). A module of its own,
below both, so that neither imports the other; one module, so that the
start imports one.
"""

from __future__ import annotations

import os

from safebox import _signals
from safebox.errors import RunError

TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal  # the same functions and constants, as typeshed describes them
else:
    import _signal as signal  # the C module: `signal` wraps it in enums (~4.5 ms of import)

__all__ = ["FORWARDED_SIGNALS", "Relay", "become_subreaper", "reap_descendants", "spawn"]

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


# -- reaching the command: the signal relay, the subreaper -------------------

def become_subreaper() -> None:
    """Without bwrap there is no pid namespace: make safebox the child
    subreaper (prctl(2), PR_SET_CHILD_SUBREAPER), so descendants that detach
    (``setsid cmd &``) are re-parented to safebox instead of init, and
    ``reap_descendants`` can end them when the command has exited. Only
    under ``safebox exec``: in a harness it would re-parent the harness's
    own orphans to it, and the reap would kill its other children."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    PR_SET_CHILD_SUBREAPER = 36
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise RunError(f"prctl(PR_SET_CHILD_SUBREAPER) failed: {os.strerror(ctypes.get_errno())}")


def _children() -> list[int]:
    out: list[int] = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/children") as f:
                out += [int(x) for x in f.read().split()]
        except OSError:
            pass
    return out


def reap_descendants(keep: int = -1) -> None:
    """SIGKILL and reap every remaining child (orphans re-parented to us), until
    none is left but ``keep`` (the violations supervisor, which exits by itself
    once no sandboxed task is left)."""
    for _ in range(100):
        kids = [k for k in _children() if k != keep]
        if not kids:
            return
        for k in kids:
            try:
                os.kill(k, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for k in kids:
            try:
                os.waitpid(k, 0)
            except ChildProcessError:
                pass


def _group_members(pgid: int) -> list[int]:
    """Host pids whose process group is ``pgid`` (from /proc/*/stat field 5)."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 2 and int(fields[2]) == pgid:
            out.append(int(name))
    return out


class Relay:
    """Delivers signals to the command's process group: those safebox
    receives (``cli``), and those the API's ``send_signal`` asks for."""

    def __init__(self, *, cli: bool) -> None:
        self.cli = cli
        self.target_pgid: int | None = None
        self.bwrap_child: int | None = None
        self.spawned: int | None = None
        self.got: list[int] = []
        # Until the helper has reported (it is about to exec), there is no
        # command to signal: signals are queued and replayed by ``ready``,
        # never dropped, and never turned into a kill of bwrap.
        self.is_ready = False
        self.pending: list[int] = []

    def ready(self) -> None:
        """The command exists now: deliver what arrived before it did."""
        self.is_ready = True
        if self.cli:
            _signals.command_started()
        pending, self.pending = self.pending, []
        for signum in pending:
            self.handler(signum)

    def _command_pgid(self) -> int | None:
        if self.target_pgid:
            return self.target_pgid
        if self.bwrap_child:
            # bwrap's pid 1 (reaper) has one child: the helper, which became the
            # command; it leads its own session (--new-session), so its pid is its pgid.
            try:
                with open(f"/proc/{self.bwrap_child}/task/{self.bwrap_child}/children") as f:
                    kids = f.read().split()
                if kids:
                    return int(kids[0])
            except OSError:
                return None
        return None

    def handler(self, signum: int) -> None:
        """Deliver ``signum`` to the command (queued until it exists)."""
        self.got.append(signum)
        if not self.is_ready:
            self.pending.append(signum)
            return
        pid = self._command_pgid()
        try:
            if pid is None:
                if self.bwrap_child is None and self.spawned:
                    # bwrap never said where the sandbox is: no way to reach
                    # the command but through the whole sandbox.
                    os.kill(self.spawned, signal.SIGKILL if signum != signal.SIGWINCH else 0)
                # Otherwise bwrap's pid 1 has no child left: the command has
                # ended and its status is on its way. A second signal (a
                # SIGCONT after the SIGTERM, Ctrl-C twice) used to SIGKILL
                # bwrap here and turn the command's 143 into 137.
                return
            pgid = os.getpgid(pid)
            if self.bwrap_child and pgid == os.getpgid(self.bwrap_child):
                # bwrap's --new-session puts its pid-1 reaper and the command in
                # one group; signalling the group would kill the reaper and with
                # it the whole namespace (SIGKILL instead of the signal). So the
                # group's members other than the reaper are signalled one by one.
                for member in _group_members(pgid):
                    if member != self.bwrap_child:
                        os.kill(member, signum)
            else:
                os.killpg(pgid, signum)
        except ProcessLookupError:
            pass

    def install(self) -> None:
        """Under ``safebox exec``, take the signals over just before the
        sandbox is spawned: the last point where a terminating signal still
        ends the start-up (:class:`_signals.StartInterrupted`); from here on
        the command gets it. Nothing under the API."""
        if not self.cli:
            return
        _signals.catch()
        _signals.check()
        self.pending = _signals.forward_to(self.handler) + self.pending

"""The command's processes, reached from the host: signals relayed to its
process group (:class:`Relay`: those ``safebox exec`` receives, those the
API's ``send_signal`` asks for), and, without bubblewrap's pid namespace,
safebox as the child subreaper that ends what the command left behind
(:func:`reap_descendants`). run/supervise.py's :class:`Launch` holds one
relay per command.
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


__all__ = ["Relay", "become_subreaper", "reap_descendants"]

"""Signals sent to ``safebox exec``: caught from its first line, never lost.

The rule (docs/index.md, "Signals"): a signal that ends a process by default
(SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2), arriving while the run
starts, means the command either never starts (safebox cleans up and exits
128+N: no proxy, no run dir, no bubblewrap left) or receives it once it
exists. Nothing in between; never lost.

How, and why each part is needed:

* :func:`catch` installs one handler before anything is spawned (the
  launcher calls it through ``_prescan.early``). Until then the default
  action would kill safebox half-way (SIGTERM leaving its run dir, SIGINT
  raising KeyboardInterrupt anywhere). The handler only records; start-up
  polls :func:`check` at fixed points and unwinds through its ``finally``
  blocks, so cleanup runs whole.
* The runner's relay takes over with :func:`forward_to` just before it
  spawns; what arrives before the command reports ready is queued and
  replayed to it (``run.supervise.Relay``). Only under ``safebox exec``: the
  API (``safebox.Sandbox``) installs no handler and relays what it is asked.
* :func:`start_thread` starts every thread of safebox's with these signals
  blocked. Python runs handlers in the main thread only; a process-directed
  signal the kernel hands to another thread (the proxy's event loop) sets a
  flag, but does not interrupt the main thread's ``waitpid``, so the command
  ran on until it ended by itself (issue 11 item 6: a quarter to a half of the
  runs with a network, where the proxy thread exists). ``timeout`` sends
  SIGTERM then SIGCONT; the kernel wakes another thread for the SIGCONT
  while the main thread has not yet taken the SIGTERM, and that thread takes
  both.

Imports nothing beyond the C signal module: it is on the exec hot path.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal  # the same functions and constants, as typeshed describes them
    import threading
    from collections.abc import Callable
else:
    import _signal as signal  # the C module: `signal` wraps it in enums (~4.5 ms of import)

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT,
             signal.SIGUSR1, signal.SIGUSR2, signal.SIGWINCH, signal.SIGCONT)
#: Signals whose default action ends a process (signal(7)): they abort a
#: start-up that has not spawned the sandbox yet. SIGWINCH and SIGCONT do not.
TERMINATING = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT,
                         signal.SIGUSR1, signal.SIGUSR2})

_caught = False
_pending: list[int] = []
_forward: Callable[[int], None] | None = None
#: The first terminating signal received while no command existed (0: none).
_before_command = 0
_command_started = False
_received: set[int] = set()


class StartInterrupted(Exception):
    """A terminating signal arrived before the sandbox was spawned: the
    command never starts, and ``safebox exec`` exits 128+N after cleaning up."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"signal {signum} during start-up")
        self.signum = signum


def _handler(signum: int, _frame: object) -> None:
    """The one handler: runs in the main thread, between bytecodes; records or forwards."""
    global _before_command
    _received.add(signum)
    if signum in TERMINATING and not _command_started and not _before_command:
        _before_command = signum
    if _forward is not None:
        _forward(signum)
    else:
        _pending.append(signum)


def catch() -> None:
    """Record every forwarded signal from now on (idempotent)."""
    global _caught
    if not _caught:
        _caught = True
        for s in FORWARDED:
            signal.signal(s, _handler)


def check() -> None:
    """Raise :class:`StartInterrupted` if a terminating signal is waiting;
    called at the points of start-up where stopping leaves nothing behind."""
    for s in _pending:
        if s in TERMINATING:
            raise StartInterrupted(s)


def forward_to(fn: Callable[[int], None]) -> list[int]:
    """From now on hand each signal to ``fn``; returns those that arrived
    before (the caller replays them once the command exists)."""
    global _forward
    _forward = fn  # first: a signal arriving from here on goes to fn, none to a list nobody reads
    got = _pending[:]
    del _pending[: len(got)]
    return got


def command_started() -> None:
    """The command exists: from now on a signal is the command's to handle."""
    global _command_started
    _command_started = True


def stop_forwarding() -> None:
    """The command has ended: record (and so ignore) signals while safebox
    cleans up, instead of dying half-way by their default action."""
    global _forward
    _forward = None


def interrupted_before_command() -> int:
    """The first terminating signal that arrived while no command existed,
    if there still is none (0: no such signal, or the command was started
    and got it).

    A start-up failure after such a signal is reported as that signal
    (128+N), not as safebox failing: the same process-group signal may have
    killed a tool safebox was running (ripgrep, find), whose failure would
    otherwise be reported as the cause. Once the helper has reported, an
    error is the error (125 and its message)."""
    return 0 if _command_started else _before_command


def received(signum: int) -> bool:
    """Whether safebox itself received ``signum`` (caught since :func:`catch`)."""
    return signum in _received


def start_new_thread(fn: Callable[[], object]) -> int:
    """:func:`_thread.start_new_thread` with the forwarded signals blocked in
    the new thread, as :func:`start_thread`; returns at once, without waiting
    for it to run (``threading.Thread.start`` waits)."""
    import _thread

    old = signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
    try:
        return _thread.start_new_thread(fn, ())
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def start_thread(thread: threading.Thread) -> None:
    """Start ``thread`` with the forwarded signals blocked in it (and in the
    threads it starts: the mask is inherited), so that the kernel delivers
    them to the main thread, the only one where Python runs handlers."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
    try:
        thread.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


__all__ = ["FORWARDED", "TERMINATING", "StartInterrupted", "catch", "check", "command_started",
           "forward_to", "interrupted_before_command", "start_new_thread", "start_thread", "stop_forwarding"]

"""``safebox exec --ask``: a host no entry allows is put to the user on the
controlling terminal, ``/dev/tty`` (allow once, for this run, or deny).

* Never without a terminal: where ``/dev/tty`` cannot be opened (CI, a
  service, a pipe) the host is denied, and one line says so.
* The sandboxed command cannot answer: it runs in a session of its own
  (bwrap ``--new-session``), and seccomp refuses ``TIOCSTI``/``TIOCLINUX``,
  so it cannot push input into the terminal; input typed before the question
  (typeahead meant for the command) is discarded (``tcflush``) before it is
  asked. What the command reads from the terminal can at most take the
  answer away (it reads it first): then no answer comes and the host is
  denied. What it writes can mislead: it shares the terminal's output and can
  redraw the question over safebox's (docs/threat-model.md, "Out of scope").
* The host shown is canonical (normalize_host): no escape sequence reaches
  the terminal from it.
* No answer within the timeout denies.

Runs in the asker's worker thread (runtime/decisions.py): one question at a time.
"""

from __future__ import annotations

import os
import select
import termios
import time
from collections.abc import Callable

from safebox.errors import SafeboxError
from safebox.runtime.decisions import Answer, Request, Runtime

__all__ = ["DEFAULT_ASK_TIMEOUT", "TerminalPrompt", "exec_runtime"]

#: Seconds a question waits at the terminal.
DEFAULT_ASK_TIMEOUT = 60.0
_PROTOCOL = {"connect": "HTTPS/CONNECT", "http": "HTTP", "socks5": "SOCKS5"}


class TerminalPrompt:
    """The ``on_request`` callback of ``safebox exec --ask``."""

    def __init__(self, *, timeout: float = DEFAULT_ASK_TIMEOUT, say: Callable[[str], None],
                 tty: str = "/dev/tty") -> None:
        self.timeout = timeout
        self.say = say
        self.tty = tty
        self._no_terminal_said = False

    def __call__(self, request: Request) -> object:
        shown = f"[{request.host}]" if ":" in request.host else request.host
        try:
            fd = os.open(self.tty, os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
        except OSError as exc:
            if not self._no_terminal_said:
                self._no_terminal_said = True
                self.say(f"--ask: no terminal to ask on ({self.tty}: {exc.strerror}): {shown}:{request.port} and "
                         "every other host no entry allows are denied")
            return Answer(allow=False, remember=True, by="no-terminal",
                          reason="denied: safebox exec --ask has no terminal to ask on")
        try:
            return self._ask(fd, shown, request)
        finally:
            os.close(fd)

    def _ask(self, fd: int, shown: str, request: Request) -> object:
        try:
            termios.tcflush(fd, termios.TCIFLUSH)  # typeahead was meant for the command, not for us
        except termios.error:
            pass
        proto = _PROTOCOL.get(request.protocol, request.protocol)
        question = (f"\r\nsafebox: the command wants {shown} port {request.port} ({proto}), which the policy does "
                    f"not allow.\r\nsafebox: allow [o]nce, for this [r]un, or [d]eny? (denied in "
                    f"{self.timeout:g} s) ")
        _write(fd, question)
        line = _read_answer(fd, time.monotonic() + self.timeout)
        if line is None:
            _write(fd, f"\r\nsafebox: no answer: {shown}:{request.port} denied\r\n")
            return Answer(allow=False, remember=False, by="timeout",
                          reason=f"denied: no answer at the terminal within {self.timeout:g} s")
        choice = line.strip()[:1].lower()
        if choice == "o":
            _write(fd, f"safebox: {shown}:{request.port} allowed once\r\n")
            return Answer(allow=True, remember=False, by="terminal", reason="allowed once at the terminal")
        if choice == "r":
            _write(fd, f"safebox: {shown}:{request.port} allowed for this run\r\n")
            return Answer(allow=True, remember=True, by="terminal", reason="allowed for this run at the terminal")
        _write(fd, f"safebox: {shown}:{request.port} denied for this run\r\n")
        return Answer(allow=False, remember=True, by="terminal", reason="denied at the terminal")


def _write(fd: int, text: str) -> None:
    data = text.encode("ascii", "replace")
    while data:
        try:
            data = data[os.write(fd, data):]
        except InterruptedError:
            continue
        except OSError:
            return


def _read_answer(fd: int, deadline: float) -> str | None:
    """One line (or, in raw mode, one key) from the terminal; None past ``deadline``."""
    buf = b""
    poll = select.poll()
    poll.register(fd, select.POLLIN)
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        if not poll.poll(int(left * 1000) + 1):
            continue
        try:
            chunk = os.read(fd, 64)
        except (BlockingIOError, InterruptedError):
            continue
        except OSError:
            return None  # the terminal went away: no answer
        if not chunk:
            return None
        buf += chunk
        text = buf.decode("ascii", "replace")
        if "\n" in text or "\r" in text or text.strip()[:1].lower() in ("o", "r", "d", "n"):
            return text
        if len(buf) > 256:
            return text


def exec_runtime(*, ask: bool, ask_timeout: str | None, control_fd: str | None,
                 say: Callable[[str], None]) -> Runtime:
    """The runtime decisions of ``safebox exec``: ``--ask`` (this module),
    ``--control-fd`` (runtime/control_fd.py). Raises SafeboxError for a bad value."""
    timeout = DEFAULT_ASK_TIMEOUT
    if ask_timeout is not None:
        if not ask:
            raise SafeboxError("--ask-timeout without --ask", hint="add --ask, or drop --ask-timeout")
        try:
            timeout = float(ask_timeout.removesuffix("s"))
        except ValueError:
            timeout = -1.0
        if not 0 < timeout <= 86400:
            raise SafeboxError(f"--ask-timeout {ask_timeout}: not a number of seconds between 0 and 86400",
                               hint="e.g. --ask-timeout 30")
    # The asker's own limit is longer than the prompt's: the prompt says "no answer" itself.
    runtime = Runtime(TerminalPrompt(timeout=timeout, say=say) if ask else None, timeout=timeout + 5, say=say,
                      networked=True)
    if control_fd is not None:
        from safebox.runtime.control_fd import ControlChannel, open_control_fd

        channel = ControlChannel(open_control_fd(control_fd), say=say)
        runtime.on_live.append(channel.attach)
        runtime.control_fd = channel.fd
    return runtime

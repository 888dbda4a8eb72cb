"""``safebox exec --control-fd N``: network lists updated while the command
runs, in srt's format (``srt --control-fd``, sandbox-runtime's README).

The caller opens descriptor N (3 or above, readable: the read end of a
pipe, a socket, a file) and writes one JSON object per line, shaped like a
settings file. Each line replaces the whole network config, as in srt: its
``network.allowedDomains`` and ``network.deniedDomains`` (with
``deniedDomainReasons``: host -> the reason its refusals give) become the
lists from the next connection on; a list the line leaves out becomes
empty. Nothing else changes while the command runs (filesystem rules are in
the sandbox already). A line that is not such a config is refused with one
line on stderr and dropped; the lists in force stay. End of input is not an
error: the lists last applied stay.

The channel is the caller's, never the command's: safebox takes the
descriptor before anything is spawned and marks it close-on-exec, and the
spawn closes every other inherited descriptor (run/spawn.py), so nothing in
the sandbox can read the updates or write one of its own; and a named FIFO or
file the command could open again by its path (under a write root, another
link, or any under ``--without helper``) is refused before the run
(:func:`check_unreachable`).
"""

from __future__ import annotations

import json
import os
import stat
import threading
from collections.abc import Callable

from safebox.errors import SafeboxError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from safebox.proxy.live import LiveLists

__all__ = ["MAX_LINE", "ControlChannel", "apply_line", "check_unreachable", "open_control_fd", "reopenable"]

#: A longer line is refused (and skipped up to its end): the reader's memory is bounded.
MAX_LINE = 4 * 1024 * 1024


def open_control_fd(text: str) -> int:
    """Check ``--control-fd``'s value and the descriptor it names; mark it
    close-on-exec. Raises SafeboxError (exit 125) naming what is wrong."""
    hint = "open the descriptor for reading in the shell that runs safebox, e.g. 3< FIFO or a pipe, and pass its number"
    if not text.isdigit() or int(text) < 3:
        raise SafeboxError(f"--control-fd {text}: must be an integer file descriptor >= 3 (0-2 are stdin, stdout "
                           "and stderr)", hint=hint)
    fd = int(text)
    try:
        st = os.fstat(fd)
        import fcntl

        mode = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE
    except OSError as exc:
        raise SafeboxError(f"--control-fd {fd} is not usable: {exc.strerror}; refusing to run the command without "
                           "the control channel it asks for", hint=hint) from None
    if mode == os.O_WRONLY:
        raise SafeboxError(f"--control-fd {fd} is open for writing only; refusing to run the command without the "
                           "control channel it asks for", hint=hint)
    if stat.S_ISDIR(st.st_mode):
        raise SafeboxError(f"--control-fd {fd} is a directory; refusing to run the command without the control "
                           "channel it asks for", hint=hint)
    os.set_inheritable(fd, False)  # never the command's (the spawn closes the rest)
    return fd


def reopenable(fd: int) -> tuple[str, int] | None:
    """The path descriptor ``fd`` can be opened again by (a named FIFO, a
    file) and its link count; None for an anonymous pipe or a socket."""
    try:
        st = os.fstat(fd)
        target = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None
    if not (stat.S_ISFIFO(st.st_mode) or stat.S_ISREG(st.st_mode) or stat.S_ISCHR(st.st_mode)):
        return None
    if not target.startswith("/"):
        return None  # pipe:[N], socket:[N], anon_inode:...
    return target.removesuffix(" (deleted)"), st.st_nlink


def check_unreachable(fd: int, *, roots: tuple[str, ...], landlock: bool, private_tmp: bool) -> None:
    """Refuse (SafeboxError, 125) a control descriptor the sandboxed command
    could open again by its path and write lines of its own into: a named
    FIFO or file with another link, under a directory it may write (the
    working directory, ``allowWrite``; ``/tmp`` only where it is the host's,
    without bubblewrap), or, without Landlock (``--without helper``),
    anywhere: a FIFO it sees on a read-only mount opens for writing all the
    same. Found in review: ``mkfifo ctl`` in the project, and the command
    allowed itself every host by writing to ``./ctl``."""
    found = reopenable(fd)
    if found is None:
        return
    path, links = found
    hint = ("pass a pipe (--control-fd 3 3< <(producer)), or a FIFO in a directory of its own outside every "
            "directory the command may write (with the helper; without it, only a pipe)")
    if not landlock:
        raise SafeboxError(f"--control-fd {fd} is {path}: without the helper (Landlock) the command can open it "
                           "again for writing wherever it sees it, and write updates of its own", hint=hint)
    if links > 1:
        raise SafeboxError(f"--control-fd {fd} ({path}) has {links} links: the command could write updates of its "
                           "own through another", hint=hint)
    real = os.path.realpath(path)
    for root in roots:
        r = os.path.realpath(root)
        if private_tmp and r == "/tmp":
            continue  # bubblewrap's /tmp is a tmpfs of the sandbox's own: the host's is not in it
        if real == r or real.startswith(r.rstrip("/") + "/"):
            raise SafeboxError(f"--control-fd {fd} is {path}, inside {root}, which the command may write: it could "
                               "write updates of its own into it", hint=hint)


def apply_line(line: bytes, live: LiveLists) -> str | None:
    """Apply one line to ``live``; None when applied (or blank), else why it was refused."""
    text = line.strip()
    if not text:
        return None
    try:
        doc = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        return f"not JSON ({exc})"
    if not isinstance(doc, dict):
        return "not a JSON object"
    net = doc.get("network")
    if not isinstance(net, dict):
        return "no \"network\" object (a line is a whole config, as srt's settings file)"
    lists: list[tuple[str, ...]] = []
    for key in ("allowedDomains", "deniedDomains"):
        value = net.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            return f"network.{key} must be a list of strings"
        lists.append(tuple(value))
    reasons = net.get("deniedDomainReasons", {})
    if not isinstance(reasons, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in reasons.items()):
        return "network.deniedDomainReasons must map host names to reason strings"
    try:
        live.replace(lists[0], lists[1], reasons)
    except ValueError as exc:
        return str(exc)
    return None


class ControlChannel:
    """Reads the lines of descriptor ``fd`` in a thread of its own and
    applies each to the live lists, once they exist (:meth:`attach`)."""

    def __init__(self, fd: int, *, say: Callable[[str], None]) -> None:
        self.fd = fd
        self.say = say
        self.applied = 0

    def attach(self, live: LiveLists) -> None:
        from safebox import _signals

        thread = threading.Thread(target=self._read, args=(live,), name="safebox-control-fd", daemon=True)
        _signals.start_thread(thread)

    def _read(self, live: LiveLists) -> None:
        buf = b""
        skipping = False
        while True:
            try:
                chunk = os.read(self.fd, 65536)
            except InterruptedError:
                continue
            except BlockingIOError:
                import select

                select.select([self.fd], [], [])
                continue
            except OSError as exc:
                self.say(f"reading --control-fd {self.fd}: {exc.strerror}; no further update is applied, the lists "
                         "last applied stay in force")
                return
            if not chunk:
                return  # the writer closed its end: the lists last applied stay
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if skipping:
                    skipping = False
                    continue
                self._one(line, live)
            if len(buf) > MAX_LINE:
                self.say(f"invalid config on --control-fd {self.fd}: a line longer than {MAX_LINE} bytes; ignored, "
                         "the lists in force stay")
                buf, skipping = b"", True

    def _one(self, line: bytes, live: LiveLists) -> None:
        why = apply_line(line, live)
        if why is None:
            if line.strip():
                self.applied += 1
            return
        self.say(f"invalid config on --control-fd {self.fd}: {why}; ignored, the lists in force stay")

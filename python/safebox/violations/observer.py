"""The supervisor's life cycle: start it next to the sandbox, hand it the
listener, collect its records (docs/violations.md, "Mechanism").

1. ``Observer()`` writes the table (0600) and creates the events file: a
   file without a name (``O_TMPFILE`` in the run dir), so the sandbox, which
   sees the run dir read-only, can neither read nor write it. Nothing in
   the sandbox needs the records, and they name what every process of the
   sandbox was refused (issue 22, item 11).
2. ``start`` spawns ``safebox-helper --supervise`` on the host, in its own
   process group (the command's signals never reach it), before bwrap, so
   that its start-up overlaps the sandbox's.
3. ``forward`` reads the helper's observation message from the handoff
   socket: the listener (tag ``N``), passed on to the supervisor, or why
   there is none (``n ERRNO``).
4. ``finish``, once the command has exited, waits for the supervisor (it
   exits when no sandboxed task is left) and returns its records, read
   through safebox's own descriptor of the file.

On the exec hot path, and imported while bwrap builds the sandbox (so its
cost overlaps bwrap's): ``_socket`` rather than ``socket`` (which imports
enum and selectors), no ``struct``.
"""

from __future__ import annotations

import _socket
import os
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from safebox.violations.table import Table

TABLE = "observe.table"
#: How long ``finish`` waits for the supervisor after the command is gone.
FINISH_TIMEOUT = 5.0

#: What the helper's errno means, for the one line that says observation is off.
WHY_OFF = {
    "EBUSY": "an enclosing sandbox already observes this process (one seccomp listener per process; nested safebox?)",
    "EINVAL": "the kernel has no seccomp user notification (Linux 5.0 or later)",
    "ENOSYS": "the kernel has no seccomp user notification (Linux 5.0 or later)",
}


class Observer:
    """One run's supervisor."""

    def __init__(self, *, helper: str, run_dir: str, table: Table, capture_port: int | None = None,
                 capture_keys: tuple[str, str] | None = None) -> None:
        from safebox.builder.helper_policy import write_policy_file

        self.helper = helper
        #: The proxy's capture front end (proxy/capture.py): TCP connects go there.
        self.capture_port = capture_port
        #: (the key the supervisor shows the proxy, the key the proxy answers with): proxy/capture.py.
        self.capture_keys = capture_keys
        self.table = table
        self.table_path = os.path.join(run_dir, TABLE)
        write_policy_file(self.table_path, table.render())
        #: The events file: safebox's descriptor (it reads the records
        #: through it); the supervisor gets a copy to append to.
        self.events_fd = _unnamed_file(run_dir)
        self._ours, self._theirs = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_STREAM)
        self.pid = -1
        #: Why nothing is observed (the helper's errno name), or None.
        self.off: str | None = None
        self.listening = False
        self.timed_out = False
        #: The helper's status line (bytes), once read.
        self.status: bytes | None = None

    def start(self, spawn: Callable[..., int]) -> None:
        """Spawn the supervisor with ``spawn(path, argv, pass_fds=...)``."""
        theirs = self._theirs.fileno()
        argv = [self.helper, "--supervise", "--table", self.table_path, "--events-fd", str(self.events_fd),
                "--listener-sock", str(theirs)]
        fds: tuple[int, ...] = (self.events_fd, theirs)
        key_r = -1
        if self.capture_port and self.capture_keys:
            # The keys go through a pipe, never argv (readable by every user in /proc).
            key_r, key_w = os.pipe()
            os.write(key_w, f"{self.capture_keys[0]} {self.capture_keys[1]}\n".encode())
            os.close(key_w)
            argv += ["--capture-port", str(self.capture_port), "--capture-key-fd", str(key_r)]
            fds += (key_r,)
        try:
            self.pid = spawn(self.helper, argv, pass_fds=fds)
        finally:
            self._theirs.close()
            if key_r >= 0:
                os.close(key_r)

    def forward(self, handoff: Any) -> None:
        """Read the helper's observation message from ``handoff`` and pass the
        listener to the supervisor. End of file (the helper died first: its
        status says why) leaves ``listening`` False and ``off`` None."""
        fds: list[int] = []
        try:
            msg, anc, _flags, _addr = handoff.recvmsg(64, _socket.CMSG_SPACE(4 * 4))
        except OSError:
            msg, anc = b"", []
        for level, kind, data in anc:
            if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
                fds += [int.from_bytes(data[i:i + 4], sys.byteorder, signed=True)
                        for i in range(0, len(data) - 3, 4)]
        try:
            if msg[:1] == b"N" and len(fds) == 1:
                self._ours.sendmsg([b"N"], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, fds[0].to_bytes(4, sys.byteorder, signed=True))])
                self.listening = True
            elif msg.startswith(b"n "):
                self.off = msg[2:].decode("ascii", "replace").strip() or "?"
        except OSError:
            pass  # the supervisor died: the listener is closed with our copy, calls get ENOSYS
        finally:
            for fd in fds:
                os.close(fd)
            self._ours.close()

    def finish(self) -> list[bytes]:
        """Wait for the supervisor and return its record lines."""
        self._ours.close()  # idempotent: the supervisor sees end of file if no listener came
        if self.pid > 0:
            deadline = time.monotonic() + FINISH_TIMEOUT
            pause = 0.0001
            while True:
                # The supervisor waits in a blocking RECV, which only a
                # signal ends; sent again until it exits (one could arrive
                # just before it enters the call).
                try:
                    os.kill(self.pid, 15)
                except ProcessLookupError:
                    pass
                try:
                    done, _ = os.waitpid(self.pid, os.WNOHANG)
                except ChildProcessError:
                    break
                if done:
                    break
                if time.monotonic() > deadline:
                    # A sandboxed task outlived the command (a helper-only
                    # orphan the reaper missed): its records so far are kept.
                    self.timed_out = True
                    os.kill(self.pid, 9)
                    os.waitpid(self.pid, 0)
                    break
                time.sleep(pause)
                pause = min(pause * 2, 0.01)
            self.pid = -1
        if self.events_fd < 0:
            return []
        try:
            chunks = []
            at = 0
            while chunk := os.pread(self.events_fd, 1 << 20, at):
                chunks.append(chunk)
                at += len(chunk)
            return b"".join(chunks).splitlines()
        except OSError:
            return []
        finally:
            os.close(self.events_fd)
            self.events_fd = -1


def _unnamed_file(directory: str) -> int:
    """A new 0600 file in ``directory`` that has no name: ``O_TMPFILE``, or
    on a file system without it (EOPNOTSUPP, EISDIR) a name removed at once.
    Either way no name exists once the supervisor starts, before the
    sandboxed command runs anything: its first exec waits for the
    supervisor, which gets the listener only after this."""
    flags = os.O_RDWR | os.O_APPEND | os.O_CLOEXEC
    try:
        return os.open(directory, flags | os.O_TMPFILE, 0o600)
    except OSError:
        pass
    path = os.path.join(directory, f"events-{os.getpid()}-{time.monotonic_ns()}")
    fd = os.open(path, flags | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    os.unlink(path)
    return fd

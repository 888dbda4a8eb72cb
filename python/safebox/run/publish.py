"""``--publish PORT``: the host's 127.0.0.1:PORT reaches 127.0.0.1:PORT inside.

The sandbox has its own network namespace, so nothing on the host can reach a
server the command runs. Inside, the helper starts a reverse bridge (socat,
before any restriction) that listens on a unix socket in the run dir's
``pub/`` directory and connects to 127.0.0.1:PORT in the sandbox. This module
is the host half: a listener on the host's 127.0.0.1:PORT whose connections
are relayed to that unix socket. Threads, not processes: they die with safebox,
even when it is SIGKILLed, so nothing is left listening.

The socket is never connected to by name. ``pub/`` is writable inside (socat
creates the socket there), so a command could replace it with a symlink to a
host socket (ssh-agent, docker.sock) and the relay would follow it (found in
review). The helper, before the command exists, hands over an ``O_PATH``
descriptor of each socket socat created (:func:`receive_pinned`); the relay
connects through ``/proc/self/fd/N``, which names that inode and nothing else,
and refuses every connection until it has one.

When the command ends, a relayed connection may still hold the last of what
it sent (a server that answers and exits at once): :meth:`PublishForwarder.close`
lets each connection deliver that, up to :data:`DRAIN_S` in all, before it
cuts them; cutting at once dropped the answer and the client saw the
connection closed empty (found in CI under load).
"""

from __future__ import annotations

import array
import os
import socket
import stat
import threading
import time

from safebox import _signals
from safebox.errors import RunError

_CHUNK = 262144
# How long close() waits, for all connections together, for the sandbox's
# last bytes to reach the clients: the bridge inside is gone by then, so a
# client that reads gets them in milliseconds; one that does not read keeps
# safebox no longer than this.
DRAIN_S = 2.0


class PublishForwarder:
    """Listen on 127.0.0.1:``port`` and relay each connection to ``sock_path``."""

    def __init__(self, port: int, sock_path: str) -> None:
        self.port = port
        self.sock_path = sock_path
        # Each relayed connection: (client, bridge, the thread relaying bridge -> client).
        self._relays: set[tuple[socket.socket, socket.socket, threading.Thread]] = set()
        self._lock = threading.Lock()
        self._closed = False
        self._pinned = -1  # O_PATH descriptor of the socket socat created inside
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._listener.bind(("127.0.0.1", port))
            self._listener.listen(64)
        except OSError as e:
            self._listener.close()
            raise RunError(f"--publish {port}: cannot listen on the host's 127.0.0.1:{port}: {e.strerror}") from None
        # Relayed signals blocked here and in the threads it starts (_signals.start_thread).
        _signals.start_thread(threading.Thread(target=self._accept_loop, name=f"publish-{port}", daemon=True))

    def _accept_loop(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _track(self, relay: tuple[socket.socket, socket.socket, threading.Thread]) -> bool:
        """Record ``relay`` and start its bridge -> client thread, unless closed."""
        with self._lock:
            if self._closed:
                return False
            relay[2].start()  # under the lock: close() joins only started threads
            self._relays.add(relay)
            return True

    def pin(self, fd: int) -> None:
        """Connect only through ``fd`` from now on (takes ownership)."""
        self._pinned = fd

    def _serve(self, conn: socket.socket) -> None:
        if self._pinned < 0:
            conn.close()  # not handed over yet: the command has not started
            return
        up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            up.connect(f"/proc/self/fd/{self._pinned}")
        except OSError:
            # The bridge inside is not there (yet, or any more): refuse cleanly.
            conn.close()
            up.close()
            return
        back = threading.Thread(target=self._pump, args=(up, conn), daemon=True)
        relay = (conn, up, back)
        if not self._track(relay):
            conn.close()
            up.close()
            return
        self._pump(conn, up)
        back.join()
        with self._lock:
            self._relays.discard(relay)
        conn.close()
        up.close()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(_CHUNK)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def close(self) -> None:
        """Stop listening, let every relayed connection deliver what the
        sandbox sent it (up to :data:`DRAIN_S` in all), then cut them all
        (idempotent). Called once the command has ended: the bridge inside
        is gone, so each bridge -> client relay ends at the end of what it
        had, unless its client does not read."""
        with self._lock:
            self._closed = True
            relays, self._relays = self._relays, set()
        try:
            # close() alone leaves it listening while the accept thread is
            # blocked in accept(2) on it (the call holds the file): the next
            # connection would still be taken. shutdown() stops it and wakes
            # the thread.
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        if self._pinned >= 0:
            os.close(self._pinned)
            self._pinned = -1
        deadline = time.monotonic() + DRAIN_S
        for _, _, back in relays:
            back.join(max(0.0, deadline - time.monotonic()))
        for conn, up, _ in relays:
            for c in (conn, up):
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def receive_pinned(handoff: socket.socket, forwarders: list[PublishForwarder], *, timeout: float = 30.0) -> None:
    """Take the helper's message 'P' (one O_PATH descriptor per published
    port, in policy order), pin each forwarder to its socket, and answer 'k'.
    Raises RunError, closing what it received, on anything else: the helper,
    left without an answer, never starts the command."""
    handoff.settimeout(timeout)
    fds: list[int] = []
    try:
        msg, anc, flags, _ = handoff.recvmsg(16, socket.CMSG_SPACE(16 * 4), socket.MSG_CMSG_CLOEXEC)
        for level, kind, data in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds += array.array("i", data[: len(data) - len(data) % 4]).tolist()
        if not msg and not fds:
            return  # the helper failed first; its status line says why
        if msg != b"P" or flags & (socket.MSG_CTRUNC | socket.MSG_TRUNC) or len(fds) != len(forwarders):
            raise RunError(f"--publish: unexpected message from the helper ({msg!r}, {len(fds)} descriptors)")
        for fd in fds:
            if not stat.S_ISSOCK(os.fstat(fd).st_mode):
                raise RunError("--publish: the helper handed over something that is not a socket")
    except (OSError, RunError) as e:
        for fd in fds:
            os.close(fd)
        if isinstance(e, RunError):
            raise
        raise RunError(f"--publish: cannot receive the published sockets from the helper: {e}") from None
    for fw, fd in zip(forwarders, fds, strict=True):
        fw.pin(fd)
    try:
        handoff.sendall(b"k")
    except OSError:
        pass  # the helper is gone: its status line says why

"""``--publish PORT``: the host's 127.0.0.1:PORT reaches 127.0.0.1:PORT inside.

The sandbox has its own network namespace, so nothing on the host can reach a
server the command runs. Inside, the helper starts a reverse bridge (socat,
before any restriction) that listens on a unix socket in the run dir's
``pub/`` directory and connects to 127.0.0.1:PORT in the sandbox. This module
is the host half: a listener on the host's 127.0.0.1:PORT whose connections
are relayed to that unix socket. Threads, not processes: they die with safebox,
even when it is SIGKILLed, so nothing is left listening.
"""

from __future__ import annotations

import socket
import threading

from safebox.errors import RunError

_CHUNK = 262144


class PublishForwarder:
    """Listen on 127.0.0.1:``port`` and relay each connection to ``sock_path``."""

    def __init__(self, port: int, sock_path: str) -> None:
        self.port = port
        self.sock_path = sock_path
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._listener.bind(("127.0.0.1", port))
            self._listener.listen(64)
        except OSError as e:
            self._listener.close()
            raise RunError(f"--publish {port}: cannot listen on the host's 127.0.0.1:{port}: {e.strerror}") from None
        threading.Thread(target=self._accept_loop, name=f"publish-{port}", daemon=True).start()

    def _accept_loop(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _track(self, *socks: socket.socket) -> bool:
        with self._lock:
            if self._closed:
                return False
            self._conns.update(socks)
            return True

    def _serve(self, conn: socket.socket) -> None:
        up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            up.connect(self.sock_path)
        except OSError:
            # The bridge inside is not there (yet, or any more): refuse cleanly.
            conn.close()
            up.close()
            return
        if not self._track(conn, up):
            conn.close()
            up.close()
            return
        back = threading.Thread(target=self._pump, args=(up, conn), daemon=True)
        back.start()
        self._pump(conn, up)
        back.join()
        with self._lock:
            self._conns.discard(conn)
            self._conns.discard(up)
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
        """Stop listening and cut every relayed connection (idempotent)."""
        with self._lock:
            self._closed = True
            conns, self._conns = self._conns, set()
        self._listener.close()
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

"""The proxy's front doors, open before the command runs; the proxy behind
them loaded when the first client knocks.

Why (issue 12, start-up): the proxy is an asyncio server, and importing
asyncio and the proxy's modules cost about 35 ms of CPU, more than the rest of
a ``safebox exec -- true`` (docs/benchmarks.md, "Start-up"). Most commands
that may use the network either make no connection at all (``git status``
with a remote allowed, ``true``) or make their first one well after start.
So the listening sockets are made (or received from the helper) here,
synchronously and with nothing but ``_socket``, ``select`` and ``_thread``;
a small watcher thread polls them, and only when one has a client waiting in
its backlog does it import :mod:`safebox.proxy.server`, start the real
:class:`~safebox.proxy.server.ProxyServer` and give it every listener.

What this keeps, and how:

* The filtering is the server's, unchanged: the same ``ProxyConfig``, rules,
  gate and front ends serve every connection. Nothing is accepted here: a
  connection made before the server is up waits in the listener's backlog
  (4096) and is then served (not refused, not passed unfiltered) -- the
  kernel's accept queue is the only buffer.
* Errors that must stop the command before it runs still do: the audit log
  is opened and the sockets are bound in :meth:`DeferredProxy.start` and
  :meth:`DeferredProxy.adopt`. The domain patterns were validated when the
  policy was loaded (``policy/model.py`` and the proxy share
  ``domains.check_pattern``).
* Fail closed: if the server cannot start when a client arrives, every
  listener is closed (the command's connections are refused, not left
  hanging) and one ``safebox:`` line says why.
* Signals: the watcher is started with the relayed signals blocked
  (``_signals.start_new_thread``); the server's threads inherit the mask.
* Overlap: with the helper's handed-over ports (the default), the watcher is
  started in :meth:`DeferredProxy.adopt`, after bwrap was spawned and while
  it builds the sandbox, not before. It is a bare ``_thread``, whose start
  does not wait for the new thread to run (``threading.Thread.start`` does:
  a context switch, milliseconds on a busy host).
* ``threading`` is still imported on the caller's thread, never first on the
  watcher: a ``threading`` first imported elsewhere than the main thread
  takes that thread for the main one (and the server needs it).

The interface, for ``run/main.py`` and ``safebox.Sandbox`` (one proxy for many
commands): :meth:`~DeferredProxy.start`, :meth:`~DeferredProxy.adopt` (once
per command) and :meth:`~DeferredProxy.release` (when that command's sandbox
is gone, so that its listeners, and the network namespace they hold, do not
pile up), :meth:`~DeferredProxy.ready` (bring the server up now, e.g. to
warm it before a burst of commands), :meth:`~DeferredProxy.stop` (alias
``close``), :meth:`~DeferredProxy.destinations`. ``tests/integration/test_import_budget.py``
pins what the start-up path imports, ``tests/integration/test_proxy_deferred.py``
races a real client against the start.
"""

from __future__ import annotations

import _socket
import _thread
import os
import select
import sys

from safebox import _signals
from safebox.errors import ProxyError
from safebox.proxy.listeners import (
    HANDOFF_TIMEOUT,
    _tcp_listener,
    _unix_listener,
    check_listeners,
    receive_fds,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from safebox.audit import AuditLog
    from safebox.proxy.config import ProxyConfig
    from safebox.proxy.server import ProxyServer

__all__ = ["HANDOFF_TIMEOUT", "DeferredProxy", "check_listeners", "receive_fds", "start_deferred"]

#: How long :meth:`DeferredProxy.ready` and :meth:`DeferredProxy.stop` wait
#: for the server to come up (it takes some 35 ms).
START_TIMEOUT = 10.0


class DeferredProxy:
    """The proxy, started on its first client (module docstring).

    Attributes as :class:`~safebox.proxy.server.ProxyServer`'s:
    :attr:`http_socket`, :attr:`socks_socket` (with ``unix=True``, the
    socat bridges of ``--without helper``), :attr:`http_port`,
    :attr:`socks_port` (with ``tcp=True``: ``--without bwrap``).
    """

    def __init__(self, config: ProxyConfig, *, run_dir: str | os.PathLike[str], tcp: bool = False,
                 unix: bool = True, capture: bool = False) -> None:
        self.config = config
        #: The capture front end's port on the host's 127.0.0.1 (proxy/capture.py), or None.
        self.capture_port: int | None = None
        #: The capture handshake's keys (proxy/capture.py): one per direction, per proxy.
        self.capture_keys = (os.urandom(16).hex(), os.urandom(16).hex()) if capture else None
        self._capture = capture
        self.run_dir = os.fspath(run_dir)
        self.http_socket = os.path.join(self.run_dir, "http-proxy.sock")
        self.socks_socket = os.path.join(self.run_dir, "socks-proxy.sock")
        self.http_port: int | None = None
        self.socks_port: int | None = None
        self._tcp = tcp
        self._unix = unix
        self._lock = _thread.allocate_lock()
        #: Listeners not yet served, with their front end ("http", "socks5h").
        self._pending: list[tuple[_socket.socket, str]] = []
        #: The descriptors each adopt() took, by the caller's key (release()).
        self._adopted: dict[object, list[int]] = {}
        #: Guards _adopted alone, for current_owner(): it is called on the
        #: proxy's loop (a refusal), which must never wait for _lock, held
        #: by _upgrade while it waits for that loop to serve the listeners
        #: (a refusal by the DNS's UDP socket, served first, deadlocked it).
        self._owners = _thread.allocate_lock()
        self._server: ProxyServer | None = None
        self._failure: BaseException | None = None
        self._audit: AuditLog | None = None  # ours until the server takes it
        self._want_up = False
        self._started = False
        self._stopped = False
        # Held until the server serves or failed to start; then until the watcher has ended.
        self._up = _thread.allocate_lock()
        self._up.acquire()
        self._done = _thread.allocate_lock()
        self._done.acquire()
        self._watching = False
        #: The watcher's thread id (gettid), for tests of its signal mask.
        self.watcher_tid = 0
        self._wake_r = self._wake_w = -1

    # -- the caller's side -------------------------------------------------

    def start(self) -> None:
        """Open the audit log and the listeners of ``unix``/``tcp``, start the
        watcher. Raises :class:`ProxyError` (nothing left open)."""
        if self._started:
            raise ProxyError("proxy already started")
        self._started = True
        try:
            if self.config.audit_log is not None:
                from safebox.audit import AuditLog  # json, datetime: only with --audit-log
                from safebox.hostio import HostFileError

                try:
                    self._audit = AuditLog(os.fspath(self.config.audit_log), run=self.config.run_id)
                except (OSError, HostFileError) as exc:
                    why = exc.why if isinstance(exc, HostFileError) else exc.strerror
                    raise ProxyError(f"cannot open audit log {self.config.audit_log}: {why}") from None
            if self._unix:
                self._pending.append((_unix_listener(self.http_socket), "http"))
                self._pending.append((_unix_listener(self.socks_socket), "socks5h"))
            if self._tcp:
                for attr, kind in (("http_port", "http"), ("socks_port", "socks5h")):
                    sock = _tcp_listener()
                    self._pending.append((sock, kind))
                    setattr(self, attr, sock.getsockname()[1])
            if self._capture:
                sock, udp = _capture_sockets()
                self._pending += [(sock, "capture"), (udp, "dns-udp")]
                self.capture_port = sock.getsockname()[1]
            self._wake_r, self._wake_w = os.pipe()  # close-on-exec, as every descriptor Python makes
            os.set_blocking(self._wake_r, False)
            # Else at the first adopt(), after bwrap was spawned. The capture
            # listener and the DNS's socket wait for it too: nothing can
            # reach them before the helper's ports are adopted and the
            # command runs. (Counting the DNS's socket as a listener to serve
            # at once started this thread beside every networked start-up:
            # +5.8 ms, docs/benchmarks.md "Capture".)
            if any(kind not in ("capture", "dns-udp") for _, kind in self._pending):
                self._start_watcher()
        except BaseException:
            self.stop()
            raise

    def adopt(self, handoff: _socket.socket, *, ports: dict[int, str], timeout: float = HANDOFF_TIMEOUT,
              key: object = None) -> int:
        """Receive the proxy ports the helper listens on inside the sandbox
        (``helper/handoff.c``), check them, take them into service and
        acknowledge, which lets the helper go on to the command.

        ``ports`` maps each port to its front end (``"http"`` or
        ``"socks5h"``). ``key``: names these listeners for :meth:`release`
        (None: kept until :meth:`stop`). Returns how many listeners were adopted, or 0 when
        the helper closed the socket without sending (it failed; its status
        line says why). Raises :class:`ProxyError` on anything else: the
        runner then refuses to start the command."""
        if not self._started or self._stopped:
            raise ProxyError("proxy not started")
        self._start_watcher()  # while the helper makes the listeners
        handoff.settimeout(timeout)
        try:
            tag, fds = receive_fds(handoff)
        except TimeoutError:
            raise ProxyError(f"the helper did not hand over the proxy ports within {timeout:.0f} s") from None
        except OSError as exc:
            raise ProxyError(f"cannot receive the proxy ports from the helper: {exc.strerror or exc}") from None
        if not tag and not fds:
            return 0
        socks = check_listeners(tag, fds, ports)  # closes every fd on failure
        batch = [(s, ports[s.getsockname()[1]]) for s in socks]
        with self._lock:
            server, failure = self._server, self._failure
            if server is None and failure is None:
                self._pending += batch
            if failure is None and key is not None:
                with self._owners:
                    self._adopted.setdefault(key, []).extend(s.fileno() for s in socks)
        if failure is not None:
            for s, _ in batch:
                s.close()
            raise ProxyError(f"the network proxy could not start: {failure}")
        if server is not None:
            server.serve_listeners(batch)  # closes them on failure
        else:
            self._wake()
        try:
            handoff.sendall(b"k")
        except OSError:
            pass  # the helper gone: its status line tells why
        return len(socks)

    def release(self, key: object) -> None:
        """Close the listeners adopted under ``key`` (the command's sandbox
        is gone); connections already accepted on them run to their end."""
        with self._lock:
            with self._owners:
                fds = set(self._adopted.pop(key, ()))
            server = self._server
            mine = [p for p in self._pending if p[0].fileno() in fds]
            self._pending = [p for p in self._pending if p[0].fileno() not in fds]
            for s, _ in mine:  # under the lock: the watcher re-reads the list before it polls again
                # shutdown() first: the watcher thread may be inside poll()
                # on this socket, and that reference keeps a closed listener
                # accepting into its backlog until poll returns (a flake:
                # "released listener still accepted"). shutdown() takes the
                # socket out of LISTEN at once, whoever still holds it.
                try:
                    s.shutdown(_socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
        self._wake()
        if server is not None and fds:
            server.close_listeners(fds)

    def current_owner(self) -> object:
        """The ``key`` of :meth:`adopt` whose listener accepted the connection
        being served; None when not known (the proxy's own listeners). Only
        meaningful from the proxy's thread, inside a connection's task (the
        gate's ``denied`` callback)."""
        from safebox.proxy.server import LISTENER  # loaded: the proxy is serving

        fd = LISTENER.get()
        with self._owners:
            return next((key for key, fds in self._adopted.items() if fd in fds), None)

    def ready(self, timeout: float = START_TIMEOUT) -> None:
        """Bring the server up now instead of at the first client, and wait
        for it. Raises :class:`ProxyError` if it cannot start."""
        if not self._started or self._stopped:
            raise ProxyError("proxy not started")
        self._want_up = True
        self._start_watcher()
        self._wake()
        if not self._up.acquire(timeout=timeout):
            raise ProxyError(f"the network proxy did not start within {timeout:.0f} s")
        self._up.release()  # stays free: later calls return at once
        if self._failure is not None:
            raise ProxyError(f"the network proxy could not start: {self._failure}")

    @property
    def serving(self) -> bool:
        """Whether the server is up (for tests and ``-v``)."""
        return self._server is not None

    def destinations(self) -> list[dict[str, object]]:
        """Every destination decided so far (``Gate.destinations``); none if
        no client ever came."""
        return self._server.destinations() if self._server is not None else []

    def stop(self) -> None:
        """Close every listener and connection, remove the socket files; idempotent.

        Returns at once when no client came (the watcher only polls); when
        one did, waits for the server it started, then stops it."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        self._wake()
        if self._watching:
            self._done.acquire(timeout=START_TIMEOUT)
        with self._lock:
            server, pending, self._pending = self._server, self._pending, []
        if server is not None:
            server.stop()  # and the audit log it took
        for s, _ in pending:
            s.close()
        if self._audit is not None:
            self._audit.close()
        for fd in (self._wake_r, self._wake_w):
            if fd >= 0:
                os.close(fd)
        self._wake_r = self._wake_w = -1
        for path in (self.http_socket, self.socks_socket) if self._unix else ():
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    close = stop

    def __enter__(self) -> DeferredProxy:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _start_watcher(self) -> None:
        if self._watching:
            return
        import threading  # noqa: F401  # first on this thread, not on the watcher (module docstring)

        self._watching = True
        _signals.start_new_thread(self._watch)

    def _wake(self) -> None:
        if self._wake_w >= 0:
            try:
                os.write(self._wake_w, b"w")
            except OSError:  # full (already woken) or closed
                pass

    # -- the watcher thread ------------------------------------------------

    def _watch(self) -> None:
        self.watcher_tid = _thread.get_native_id()
        try:
            if self._wait_for_client():
                self._upgrade()
        except BaseException as exc:  # fail closed: no listener left for a client to wait on
            with self._lock:
                self._failure = exc
                pending, self._pending = self._pending, []
            for s, _ in pending:
                s.close()
            if not self._stopped:
                _say(f"the network proxy could not start ({exc}); the command's connections are refused")
        finally:
            self._up.release()
            self._done.release()

    def _wait_for_client(self) -> bool:
        """Block until a listener has a client waiting (True), or the proxy
        is asked up (True) or stopped (False)."""
        poll = select.poll()
        poll.register(self._wake_r, select.POLLIN)
        watched: set[int] = set()
        while True:
            with self._lock:
                if self._stopped:
                    return False
                current = {s.fileno() for s, _ in self._pending}
                # poll(2) takes the numbers afresh on every call: a released
                # listener's number is dropped here, a reused one is the new socket.
                for fd in watched - current:
                    poll.unregister(fd)
                for fd in current - watched:
                    poll.register(fd, select.POLLIN)
                watched = current
            if self._want_up:
                return True
            events = poll.poll()
            # Only a listener still pending has a client: release() shuts a
            # listener down (POLLHUP here) before it closes it, and takes it
            # off the list first, under the lock (the unprivileged flake of
            # test_released_listeners_refuse_before_and_after_the_server_is_up).
            with self._lock:
                current = {s.fileno() for s, _ in self._pending}
            if any(fd in watched and fd in current and not ev & select.POLLNVAL for fd, ev in events):
                return True  # a client (or an error, which the server then meets)
            try:
                os.read(self._wake_r, 64)
            except BlockingIOError:
                pass

    def _upgrade(self) -> None:
        from safebox.proxy.server import ProxyServer

        server = ProxyServer(self.config, run_dir=self.run_dir, tcp=False, unix=False)
        server.capture_keys = self.capture_keys
        audit, self._audit = self._audit, None  # the server closes it from now on, even if start fails
        server.start(audit=audit)
        with self._lock:  # held while serving: release() must find each listener pending or served
            late = self._stopped
            batch, self._pending = self._pending, []
            if not late:
                try:
                    server.serve_listeners(batch)  # the waiting clients are accepted from here
                except BaseException:
                    server.stop()
                    raise
                self._server = server
        if late:  # stop() came while the server started: nobody is left to serve
            for s, _ in batch:
                s.close()
            server.stop()


def _capture_sockets() -> tuple[_socket.socket, _socket.socket]:
    """The capture listener (TCP) and the DNS's UDP socket, on one port
    number of the host's 127.0.0.1 (the supervisor is told only the one)."""
    for _ in range(50):
        tcp = _tcp_listener()
        udp = _socket.socket(_socket.AF_INET, _socket.SOCK_DGRAM)
        try:
            udp.bind(("127.0.0.1", tcp.getsockname()[1]))
        except OSError:
            tcp.close()
            udp.close()
            continue
        return tcp, udp
    raise ProxyError("cannot find a 127.0.0.1 port free for both TCP and UDP (capture)")


def _say(message: str) -> None:
    try:
        sys.stderr.write(f"safebox: {message}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def start_deferred(config: ProxyConfig, *, run_dir: str | os.PathLike[str], tcp: bool = False,
                   unix: bool = True) -> DeferredProxy:
    """A started :class:`DeferredProxy` (see there)."""
    proxy = DeferredProxy(config, run_dir=run_dir, tcp=tcp, unix=unix)
    proxy.start()
    return proxy

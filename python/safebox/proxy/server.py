"""Proxy lifecycle: the HTTP and SOCKS5 front ends on an asyncio loop in a
daemon thread, serving on unix sockets, loopback TCP ports, or listeners the
helper created inside the sandbox and handed over (:meth:`ProxyServer.adopt`)."""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import socket
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

from safebox import _signals
from safebox.errors import ProxyError
from safebox.proxy import http, socks5
from safebox.proxy._asyncio import asyncio
from safebox.proxy.config import ProxyConfig
from safebox.proxy.listeners import HANDOFF_TIMEOUT, check_listeners, receive_fds
from safebox.proxy.rawconn import Acceptor, RawConn, streams
from safebox.proxy.rules import Decision, HostError, NetworkRules
from safebox.proxy.upstream import Gate

if TYPE_CHECKING:
    from safebox.audit import AuditLog

__all__ = ["ProxyConfig", "ProxyServer"]

log = logging.getLogger("safebox.proxy")

#: Listen backlog; the kernel clamps it to net.core.somaxconn (4096 by default).
BACKLOG = 4096
START_TIMEOUT = 10.0

#: The descriptor of the listener that accepted the connection being served
#: (set in each connection's task; -1 on the proxy's own listeners), so that
#: a refusal can be told to the command whose listeners it came through
#: (``DeferredProxy.current_owner``).
LISTENER: contextvars.ContextVar[int] = contextvars.ContextVar("safebox_proxy_listener", default=-1)

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, Gate], Awaitable[None]]


def _explain_on_first_refusal() -> Callable[[str, int, str, Decision], None]:
    """The gate's ``explain`` callback; proxy/explain.py is imported at the
    first refusal, not on every networked run's start-up."""
    box: list[Callable[[str, int, str, Decision], None]] = []

    def explain(host: str, port: int, protocol: str, decision: Decision) -> None:
        if not box:
            from safebox.proxy.explain import Explainer

            box.append(Explainer())
        box[0](host, port, protocol, decision)

    return explain


def _report_once(say: Callable[[str], None] | None = None) -> Callable[[str], None]:
    """One ``safebox:`` line on stderr per distinct message (a client that
    retries must not flood the terminal); to ``say`` instead when given (the
    API: a ``message`` event)."""
    import sys

    seen: set[str] = set()

    def report(message: str) -> None:
        if message in seen or len(seen) > 256:
            return
        seen.add(message)
        if say is not None:
            say(message)
            return
        try:
            sys.stderr.write(f"safebox: {message}\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass

    return report


class ProxyServer:
    """The filtering proxy: HTTP (CONNECT + plain) on :attr:`http_socket`,
    SOCKS5 on :attr:`socks_socket`, both unix sockets in ``run_dir``.

    With ``tcp=True`` it also listens on ``127.0.0.1`` ports
    (:attr:`http_port`, :attr:`socks_port`), for hosts that run the helper
    without bwrap and so have no bridge.  With ``unix=False`` it creates no
    unix sockets: inside bwrap with the helper, its only front doors are the
    listeners the helper hands over (:meth:`adopt`).
    """

    def __init__(self, config: ProxyConfig, *, run_dir: str | os.PathLike[str], tcp: bool = False,
                 unix: bool = True) -> None:
        from safebox.proxy.netkeys import OwnAddresses

        keys = config.keys
        own = OwnAddresses()
        own()  # read at the proxy's start; again when stale (docs/network.md)
        try:
            # allowedAddresses rides with them: a sandbox whose lists change
            # keeps its address grants (live.py rebuilds with these keywords).
            extra: dict[str, Any] = {"reasons": keys.reasons if keys else (),
                                     "denied_resolved": keys.denied_resolved if keys else (), "own": own,
                                     "allowed_addresses": config.allowed_addresses}
            if config.live is not None:  # lists that change keep the same checks
                config.live.add_checks(**extra)
            self.rules = config.live.rules if config.live is not None else NetworkRules.from_policy(
                config.allowed_domains,
                config.denied_domains,
                allow_local_destinations=config.allow_local_destinations,
                learn=config.learn,
                **extra,
            )
        except HostError as exc:
            raise ProxyError(f"invalid network domain pattern: {exc}") from None
        self.config = config
        # Plain strings, not pathlib: pathlib costs about 0.7 MiB per
        # networked sandbox (docs/benchmarks.md, memory).
        self.run_dir = os.fspath(run_dir)
        self.http_socket = os.path.join(self.run_dir, "http-proxy.sock")
        self.socks_socket = os.path.join(self.run_dir, "socks-proxy.sock")
        self.http_port: int | None = None
        self.socks_port: int | None = None
        self._tcp = tcp
        self._unix = unix
        self._gate: Gate | None = None
        self._audit: AuditLog | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._servers: list[Any] = []  # asyncio.Server, or rawconn.Acceptor (close, wait_closed)
        #: The server of each listener given to serve_listeners, by descriptor.
        self._by_fd: dict[int, Any] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._stopped = False
        self._capturer: Any = None
        self._datagrams: list[asyncio.BaseTransport] = []
        #: (the supervisor's key, the proxy's answer key) of the capture handshake, or None.
        self.capture_keys: tuple[str, str] | None = None

    # -- lifecycle ---------------------------------------------------------

    def start(self, *, audit: AuditLog | None = None) -> None:
        """Start listening; returns once both listeners accept connections.

        ``audit``: the audit log already opened (``proxy/deferred.py`` opens it
        before the command runs); the server closes it on :meth:`stop`.
        Raises :class:`ProxyError` if a socket cannot be created or the loop fails.
        """
        if self._thread is not None:
            raise ProxyError("proxy already started")
        # 1. The audit log: the one given, or opened here for --audit-log.
        path = self.config.audit_log
        self._audit = self._open_audit_log(path) if path is not None and audit is None else audit
        # 2. The gate every connection passes.
        gate = self._gate = self._make_gate()
        # 3. The loop in its thread, serving once the listeners accept.
        self._run_loop(gate)

    def _open_audit_log(self, path: str | os.PathLike[str]) -> AuditLog:
        from safebox.audit import AuditLog  # json, datetime: only with --audit-log
        from safebox.hostio import HostFileError

        try:
            return AuditLog(path, run=self.config.run_id)
        except (OSError, HostFileError) as exc:
            why = exc.why if isinstance(exc, HostFileError) else exc.strerror
            raise ProxyError(f"cannot open audit log {path}: {why}") from None

    def _make_gate(self) -> Gate:
        explain = _explain_on_first_refusal() if self.config.explain else None
        # TLS failures are said on stderr like refusals (not with --quiet).
        tls = self.config.mitm or self.config.injector
        report = (_report_once(self.config.say) if tls and (self.config.explain or self.config.say is not None)
                  else None)
        return Gate(self.rules, audit=self._audit.event if self._audit else None, explain=explain,
                    parent=self.config.parent, mitm=self.config.mitm, injector=self.config.injector,
                    report=report, denied=self.config.denied, live=self.config.live,
                    ask=self.config.ask, keys=self.config.keys)

    def _run_loop(self, gate: Gate) -> None:
        """Start the loop's thread; return once the listeners accept
        connections, or stop and raise :class:`ProxyError`."""
        ready = threading.Event()
        failure: list[BaseException] = []
        loop = asyncio.new_event_loop()
        self._loop = loop

        async def listen() -> None:
            try:
                await self._listen(gate)
            except BaseException as exc:  # reported to start() below
                failure.append(exc)
            finally:
                ready.set()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.create_task(listen())
            try:
                loop.run_forever()
            finally:
                # Stopped without stop() (a crash of the loop): close the
                # listeners and every connection, so the command's next
                # connect is refused at once instead of waiting in a backlog
                # nobody accepts from (fail closed, never hang).
                if not self._stopped:
                    with contextlib.suppress(Exception):
                        loop.run_until_complete(asyncio.wait_for(self._shutdown(), START_TIMEOUT))
                loop.close()

        self._thread = threading.Thread(target=run, name="safebox-proxy", daemon=True)
        # With the relayed signals blocked in it (and in the resolver threads
        # it starts): one the kernel handed to this thread would never wake
        # the main thread's waitpid, and the command would not get it.
        _signals.start_thread(self._thread)
        if not ready.wait(START_TIMEOUT) or failure:
            self.stop()
            err = failure[0] if failure else TimeoutError("listeners not ready")
            if isinstance(err, ProxyError):
                raise err
            raise ProxyError(f"cannot start the network proxy: {err}") from err

    def destinations(self) -> list[dict[str, object]]:
        """Every destination decided so far, with connections and bytes (``Gate.destinations``)."""
        return self._gate.destinations() if self._gate is not None else []

    def stop(self) -> None:
        """Close listeners and every connection, remove the socket files; idempotent."""
        if self._stopped:
            return
        self._stopped = True
        loop, thread = self._loop, self._thread
        if loop is not None and thread is not None and thread.is_alive():
            fut = asyncio.run_coroutine_threadsafe(self._shutdown(), loop)
            with contextlib.suppress(Exception):
                fut.result(START_TIMEOUT)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(START_TIMEOUT)
        for path in (self.http_socket, self.socks_socket) if self._unix else ():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        if self._audit is not None:
            self._audit.close()

    def __enter__(self) -> ProxyServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- inside the loop ---------------------------------------------------

    async def _listen(self, gate: Gate) -> None:
        """Create the listeners (called on the proxy loop)."""
        for path, handler in ((self.http_socket, http.handle), (self.socks_socket, socks5.handle)) if self._unix else ():
            self._servers.append(Acceptor(self._unix_socket(path), self._raw_client(handler, gate), backlog=BACKLOG))
        if self._tcp:
            for attr, handler in (("http_port", http.handle), ("socks_port", socks5.handle)):
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
                try:
                    sock.bind(("127.0.0.1", 0))
                    sock.listen(BACKLOG)
                except OSError:
                    sock.close()
                    raise
                self._servers.append(Acceptor(sock, self._raw_client(handler, gate), backlog=BACKLOG))
                setattr(self, attr, sock.getsockname()[1])

    def adopt(self, handoff: socket.socket, *, ports: dict[int, str], timeout: float = HANDOFF_TIMEOUT) -> int:
        """Receive the helper's listeners over ``handoff`` and serve on them.

        ``ports`` maps each proxy port to its front end (``"http"`` or
        ``"socks5h"``).  The helper sends, in one message tagged ``L``, a
        listening TCP socket on 127.0.0.1 for every port (and on ::1 where
        the sandbox has it); each is checked before the proxy accepts on it,
        then one byte ``k`` tells the helper to go on.  Returns the number of
        listeners adopted; 0 when the other end closed without sending (bwrap
        or the helper failed first, and says so on its status descriptor).

        Raises :class:`ProxyError` for a timeout or anything else received:
        every descriptor is closed, and the helper, left without an answer,
        refuses to start the command.
        """
        if self._loop is None or self._gate is None:
            raise ProxyError("proxy not started")
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
        self.serve_listeners([(s, ports[s.getsockname()[1]]) for s in socks])
        with contextlib.suppress(OSError):  # the helper gone: its status line tells why
            handoff.sendall(b"k")
        return len(socks)

    def serve_listeners(self, listeners: list[tuple[Any, str]]) -> None:
        """Serve on listening sockets made elsewhere (``proxy/deferred.py``,
        the helper's handed-over ports): each with its front end, ``"http"``
        or ``"socks5h"``. Connections already waiting in their backlogs are
        served like any later one. Takes ownership of the sockets (closed on
        failure); raises :class:`ProxyError`."""
        if self._loop is None or self._gate is None:
            for s, _ in listeners:
                s.close()
            raise ProxyError("proxy not started")
        handlers: dict[str, Handler] = {"http": http.handle, "socks5h": socks5.handle, "capture": self._capture,
                                        "dns-udp": self._capture}
        # asyncio needs socket.socket (accept()); deferred.py keeps to _socket.
        socks = [(s if isinstance(s, socket.socket) else socket.socket(fileno=s.detach()), handlers[kind])
                 for s, kind in listeners]
        try:
            fut = asyncio.run_coroutine_threadsafe(self._serve_on(socks, self._gate), self._loop)
            fut.result(START_TIMEOUT)
        except BaseException as exc:
            for s, _ in socks:
                s.close()
            raise ProxyError(f"cannot serve on the proxy ports: {exc}") from None

    async def _capture(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, gate: Gate) -> None:
        """The capture front end (proxy/capture.py), made at its first connection."""
        await self._capturer_for(gate).handle(reader, writer, gate)

    def _capturer_for(self, gate: Gate) -> Any:
        if self._capturer is None:
            from safebox.proxy.capture import Capture

            self._capturer = Capture(gate, keys=self.capture_keys)
        return self._capturer

    async def _serve_on(self, socks: list[tuple[socket.socket, Handler]], gate: Gate) -> None:
        for sock, handler in socks:
            fd = sock.fileno()
            if sock.type == socket.SOCK_DGRAM:  # the sandbox's DNS over UDP (proxy/capture.py)
                self._capturer_for(gate)
                transport, _ = await asyncio.get_running_loop().create_datagram_endpoint(
                    lambda: self._capturer.datagrams(), sock=sock)
                self._datagrams.append(transport)
                continue
            server: Any
            if handler in (http.handle, socks5.handle):
                context = contextvars.copy_context()
                context.run(LISTENER.set, fd)
                server = Acceptor(sock, self._raw_client(handler, gate), context, backlog=BACKLOG)
            else:
                server = await asyncio.start_server(self._client(handler, gate, listener=fd), sock=sock,
                                                    limit=http.MAX_HEAD, backlog=BACKLOG)
            self._servers.append(server)
            self._by_fd[fd] = server

    def close_listeners(self, fds: set[int]) -> None:
        """Stop accepting on the listeners with these descriptors (given to
        :meth:`serve_listeners`) and close them; their connections go on."""
        if self._loop is None or self._stopped or self._loop.is_closed():
            return  # a crashed loop closed every listener already

        async def close() -> None:
            for fd in fds:
                server = self._by_fd.pop(fd, None)
                if server is not None:
                    server.close()
                    self._servers.remove(server)

        fut = asyncio.run_coroutine_threadsafe(close(), self._loop)
        with contextlib.suppress(Exception):
            fut.result(START_TIMEOUT)

    @staticmethod
    def _unix_socket(path: str) -> socket.socket:
        """Bind and listen on a unix socket at ``path``, mode 0600 before
        anyone can connect (proxy/listeners.py's, the one implementation);
        as the ``socket.socket`` asyncio needs."""
        from safebox.proxy.listeners import _unix_listener

        return socket.socket(fileno=_unix_listener(path).detach())

    def _client(self, handler: Handler, gate: Gate, *, listener: int = -1
                ) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
        """Wrap a front-end handler: track the task, contain every error, always close."""

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            LISTENER.set(listener)  # this task's context only
            self._tasks.add(task)
            try:
                await handler(reader, writer, gate)
            except (OSError, asyncio.IncompleteReadError, TimeoutError):
                pass  # the client or upstream went away: nothing to tell anyone
            except asyncio.CancelledError:
                # Only _shutdown cancels; finishing normally keeps asyncio's
                # stream callback from logging the cancellation as an error.
                writer.transport.abort()
            except Exception:  # keep serving; a bug in one connection must not stop the proxy
                log.exception("proxy connection failed")
            finally:
                self._tasks.discard(task)
                writer.transport.close()

        return serve

    def _raw_client(self, handler: Handler, gate: Gate) -> Callable[[socket.socket], Coroutine[Any, Any, None]]:
        """:meth:`_client` for a socket an :class:`Acceptor` accepted: the
        front end gets a :class:`RawConn` (no asyncio transport or stream on
        the way to the relay), or streams on the socket when the gate needs
        them (proxy/rawconn.py)."""
        raw = (gate.parent is None and gate.mitm is None and gate.injector is None and gate.keys is None
               and hasattr(os, "splice"))
        loop = asyncio.get_running_loop()

        async def serve(sock: socket.socket) -> None:
            task = asyncio.current_task()
            assert task is not None
            self._tasks.add(task)
            transport: asyncio.WriteTransport | None = None
            try:
                if raw:
                    conn = RawConn(sock, loop, http.MAX_HEAD)
                    await handler(conn, conn, gate)  # type: ignore[arg-type]  # what handle() uses of streams
                else:
                    reader, writer = await streams(sock, http.MAX_HEAD)
                    transport = writer.transport
                    await handler(reader, writer, gate)
            except (OSError, asyncio.IncompleteReadError, TimeoutError):
                pass  # the client or upstream went away: nothing to tell anyone
            except asyncio.CancelledError:
                if transport is not None:
                    transport.abort()
            except Exception:  # keep serving; a bug in one connection must not stop the proxy
                log.exception("proxy connection failed")
            finally:
                self._tasks.discard(task)
                if transport is not None:
                    transport.close()
                else:
                    sock.close()  # nothing when the relay took it

        return serve

    async def _shutdown(self) -> None:
        """Stop accepting, cancel every connection, wait for them to finish."""
        for server in self._servers:
            server.close()
        for transport in self._datagrams:
            transport.close()
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5)
        for server in self._servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 5)

    @property
    def active_connections(self) -> int:
        """Client connections currently being served (for tests and diagnostics)."""
        return len(self._tasks)

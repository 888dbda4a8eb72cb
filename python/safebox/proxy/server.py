"""Proxy lifecycle: unix-socket (and optionally loopback TCP) listeners for
the HTTP and SOCKS5 front ends, on an asyncio loop in a daemon thread."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import stat
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from safebox.errors import ProxyError
from safebox.proxy import http, socks5
from safebox.proxy.rules import HostError, NetworkRules
from safebox.proxy.upstream import Gate

if TYPE_CHECKING:
    from safebox.audit import AuditLog

__all__ = ["ProxyConfig", "ProxyServer"]

log = logging.getLogger("safebox.proxy")

#: Listen backlog; the kernel clamps it to net.core.somaxconn (4096 by default).
BACKLOG = 4096
START_TIMEOUT = 10.0

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, Gate], Awaitable[None]]


@dataclass(frozen=True)
class ProxyConfig:
    """The network part of a policy, as the proxy needs it."""

    allowed_domains: tuple[str, ...]
    denied_domains: tuple[str, ...] = ()
    allow_local_destinations: bool = False
    audit_log: str | os.PathLike[str] | None = None


class ProxyServer:
    """The filtering proxy: HTTP (CONNECT + plain) on :attr:`http_socket`,
    SOCKS5 on :attr:`socks_socket`, both unix sockets in ``run_dir``.

    With ``tcp=True`` it also listens on ``127.0.0.1`` ports
    (:attr:`http_port`, :attr:`socks_port`), for hosts that run the helper
    without bwrap and so have no socat bridge.
    """

    def __init__(self, config: ProxyConfig, *, run_dir: str | os.PathLike[str], tcp: bool = False) -> None:
        try:
            self.rules = NetworkRules.from_policy(
                config.allowed_domains,
                config.denied_domains,
                allow_local_destinations=config.allow_local_destinations,
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
        self._audit: AuditLog | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._servers: list[asyncio.AbstractServer] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._stopped = False

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> None:
        """Start listening; returns once both listeners accept connections.

        Raises :class:`ProxyError` if a socket cannot be created or the loop fails.
        """
        if self._thread is not None:
            raise ProxyError("proxy already started")
        try:
            if self.config.audit_log is not None:
                from safebox.audit import AuditLog  # json, datetime: only with --audit-log

                self._audit = AuditLog(self.config.audit_log)
        except OSError as exc:
            raise ProxyError(f"cannot open audit log {self.config.audit_log}: {exc.strerror}") from None
        gate = Gate(self.rules, audit=self._audit.event if self._audit else None)
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
                loop.close()

        self._thread = threading.Thread(target=run, name="safebox-proxy", daemon=True)
        self._thread.start()
        if not ready.wait(START_TIMEOUT) or failure:
            self.stop()
            err = failure[0] if failure else TimeoutError("listeners not ready")
            if isinstance(err, ProxyError):
                raise err
            raise ProxyError(f"cannot start the network proxy: {err}") from err

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
        for path in (self.http_socket, self.socks_socket):
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
        for path, handler in ((self.http_socket, http.handle), (self.socks_socket, socks5.handle)):
            sock = self._unix_socket(path)
            self._servers.append(
                await asyncio.start_unix_server(
                    self._client(handler, gate), sock=sock, limit=http.MAX_HEAD, backlog=BACKLOG
                )
            )
        if self._tcp:
            for attr, handler in (("http_port", http.handle), ("socks_port", socks5.handle)):
                server = await asyncio.start_server(
                    self._client(handler, gate), host="127.0.0.1", port=0,
                    limit=http.MAX_HEAD, backlog=BACKLOG,
                )
                self._servers.append(server)
                setattr(self, attr, server.sockets[0].getsockname()[1])

    @staticmethod
    def _unix_socket(path: str) -> socket.socket:
        """Bind a unix socket at ``path``, mode 0600 before anyone can connect.

        A stale socket file (a killed earlier run) is replaced; any other
        existing file is an error, never overwritten.
        """
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            pass
        else:
            if not stat.S_ISSOCK(st.st_mode):
                raise ProxyError(f"{path} exists and is not a socket")
            os.unlink(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(path)
            # Not yet listening: nobody can connect before the mode is 0600.
            os.chmod(path, 0o600)
        except OSError as exc:
            sock.close()
            raise ProxyError(f"cannot create proxy socket {path}: {exc.strerror}") from None
        return sock

    def _client(self, handler: Handler, gate: Gate) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
        """Wrap a front-end handler: track the task, contain every error, always close."""

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            self._tasks.add(task)  # type: ignore[arg-type]
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
                self._tasks.discard(task)  # type: ignore[arg-type]
                writer.transport.close()

        return serve

    async def _shutdown(self) -> None:
        """Stop accepting, cancel every connection, wait for them to finish."""
        for server in self._servers:
            server.close()
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

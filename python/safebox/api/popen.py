""":class:`Popen`: a command running in a :class:`~safebox.api.Sandbox`
(subprocess.Popen's vocabulary), and :class:`AsyncPopen` for asyncio."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from typing import IO, TYPE_CHECKING, Any

from safebox.api.common import DEVNULL, PIPE, STDOUT, Event
from safebox.errors import SafeboxError
from safebox.review.api import held_id, prepare
from safebox.run.supervise import Stdio

if TYPE_CHECKING:
    from safebox.api.sandbox import Sandbox
    from safebox.run.session import Command


def _text_encoding() -> str:
    """subprocess's default for text mode (PEP 597)."""
    import locale
    import sys

    return "utf-8" if sys.flags.utf8_mode else locale.getencoding()


def _stdio_fd(spec: int | IO[Any] | None, *, mode: str, opened: list[int]) -> tuple[int | None, int | None]:
    """(the descriptor the command gets, our end of a pipe) for one of
    stdin/stdout/stderr."""
    if spec is None:
        return None, None
    if spec == PIPE:
        r, w = os.pipe()
        opened.append(r if mode == "r" else w)  # the command's end: closed once it has it
        return (r, w) if mode == "r" else (w, r)
    if spec == DEVNULL:
        fd = os.open(os.devnull, os.O_RDONLY if mode == "r" else os.O_WRONLY)
        opened.append(fd)
        return fd, None
    if isinstance(spec, int):
        return spec, None
    return spec.fileno(), None


class Popen:
    """A command running in a :class:`Sandbox` (subprocess.Popen's vocabulary).

    :meth:`terminate` sends SIGTERM to every process in the sandbox,
    :meth:`kill` SIGKILLs the whole sandbox at once (bwrap's pid namespace
    init, or without bwrap the command's process group and cgroup): nothing
    the command started outlives it."""

    def __init__(self, sandbox: Sandbox, args: tuple[str, ...], *, stdin: int | IO[Any] | None,
                 stdout: int | IO[Any] | None, stderr: int | IO[Any] | None, env: Mapping[str, str] | None,
                 cwd: str | None, cmd: str | bytes | list[Any] | None = None, text: bool = False,
                 encoding: str | None = None, errors: str | None = None) -> None:
        self.args = args
        #: The command as it was given (subprocess's exceptions carry it as ``cmd``).
        self.cmd: str | bytes | list[Any] = list(args) if cmd is None else cmd
        self.text_mode = text
        self.encoding = (encoding or _text_encoding()) if text else None
        self.errors = errors
        self.returncode: int | None = None
        # communicate()'s threads and what they read, kept across calls: a
        # call that timed out, then kill() and communicate(), loses nothing.
        self._comm_lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._chunks: dict[str, list[bytes]] = {}
        self.events: list[Event] = []
        self.duration = 0.0
        self._sandbox = sandbox
        self._lock = threading.Lock()
        command = sandbox._session.command(args, env=env if env is not None else sandbox._env, cwd=cwd)
        in_ours, out_ours, err_ours = self._start(command, stdin=stdin, stdout=stdout, stderr=stderr)
        self._command: Command | None = command
        self.pid = self._launch.pid
        self._t0 = time.monotonic()
        self._open_ends(in_ours, out_ours, err_ours)
        self.events.append(sandbox._emit("start", args=args, pid=self.pid, layers=sandbox.layers))
        with sandbox._lock:
            sandbox._running.add(self)

    def _start(self, command: Command, *, stdin: int | IO[Any] | None, stdout: int | IO[Any] | None,
               stderr: int | IO[Any] | None) -> tuple[int | None, int | None, int | None]:
        """Start ``command`` with its stdin, stdout and stderr; returns our
        ends of the pipes (None where it has none). The command's ends, and
        on a failure ours too, are closed here."""
        sandbox = self._sandbox
        opened: list[int] = []
        sandbox._local.sink = self.events
        try:
            in_fd, in_ours = _stdio_fd(stdin, mode="r", opened=opened)
            out_fd, out_ours = _stdio_fd(stdout, mode="w", opened=opened)
            err_fd: int | None
            err_ours: int | None
            if stderr == STDOUT:
                err_fd, err_ours = (out_fd if out_fd is not None else 1), None
            else:
                err_fd, err_ours = _stdio_fd(stderr, mode="w", opened=opened)
            sandbox._held = prepare(command, sandbox._review, sandbox._held)
            self._launch = command.start(stdio=Stdio(in_fd, out_fd, err_fd))
        except BaseException:
            for fd in opened + [f for f in (locals().get("in_ours"), locals().get("out_ours"),
                                            locals().get("err_ours")) if f is not None]:
                os.close(fd)
            raise
        finally:
            sandbox._local.sink = None
        for fd in opened:
            os.close(fd)
        return in_ours, out_ours, err_ours

    def _open_ends(self, in_ours: int | None, out_ours: int | None, err_ours: int | None) -> None:
        """Our ends of the pipes as file objects (``stdin``, ``stdout``, ``stderr``)."""
        # The binary ends; with text mode, self.stdin/stdout/stderr wrap them
        # as subprocess's do (communicate() reads the binary ones).
        self._stdin_bin: IO[bytes] | None = open(in_ours, "wb") if in_ours is not None else None  # noqa: SIM115
        self._bin: dict[str, IO[bytes]] = {}
        if out_ours is not None:
            self._bin["stdout"] = open(out_ours, "rb")  # noqa: SIM115
        if err_ours is not None:
            self._bin["stderr"] = open(err_ours, "rb")  # noqa: SIM115
        self.stdin: IO[Any] | None = self._stdin_bin
        self.stdout: IO[Any] | None = self._bin.get("stdout")
        self.stderr: IO[Any] | None = self._bin.get("stderr")
        if self.text_mode:
            import io

            if self._stdin_bin is not None:
                self.stdin = io.TextIOWrapper(self._stdin_bin, write_through=True,
                                              encoding=self.encoding, errors=self.errors)
            if self.stdout is not None:
                self.stdout = io.TextIOWrapper(self._bin["stdout"], encoding=self.encoding, errors=self.errors)
            if self.stderr is not None:
                self.stderr = io.TextIOWrapper(self._bin["stderr"], encoding=self.encoding, errors=self.errors)

    def poll(self) -> int | None:
        """The exit status if the command has ended, else None."""
        try:
            return self.wait(timeout=0)
        except subprocess.TimeoutExpired:
            return None

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the command (raises subprocess.TimeoutExpired after
        ``timeout`` seconds; the command keeps running), then settle it:
        explain refusals, quarantine protected files it created."""
        with self._lock:
            if self.returncode is not None:
                return self.returncode
            command = self._command
            assert command is not None
            self._sandbox._local.sink = self.events
            try:
                got = self._launch.wait(timeout)
                if got is None:
                    raise subprocess.TimeoutExpired(self.cmd, timeout or 0.0)
                rc = got
                self.duration = time.monotonic() - self._t0
                violations = command.finish(rc)
                if getattr(command, "held", None) is not None and held_id(command, finished=True) is None:
                    self._sandbox._held = None  # nothing changed: nothing held
                self.returncode = rc
                self._command = None
                with self._sandbox._lock:
                    self._sandbox._running.discard(self)
                for ev in violations:
                    self._sandbox._emit("violation", args=self.args, pid=self.pid,
                                        data={**ev.fields, "rule": ev.rule, "fix": ev.fix})
                self._sandbox._emit("stop", args=self.args, pid=self.pid, returncode=rc,
                                    duration=round(self.duration, 6))
            except SafeboxError:
                command.cleanup()
                self._command = None
                with self._sandbox._lock:
                    self._sandbox._running.discard(self)
                raise
            finally:
                self._sandbox._local.sink = None
            return rc

    def communicate(self, input: bytes | str | None = None, timeout: float | None = None) -> tuple[Any, Any]:
        """Send ``input``, read stdout and stderr to their end, wait (subprocess's
        ``communicate``: str in text mode). On ``timeout``,
        subprocess.TimeoutExpired carries what was read so far; the command
        keeps running, and a later call (after :meth:`kill`, say) returns all
        of its output, that part included."""
        if isinstance(input, str):
            if not self.text_mode:
                raise TypeError("input is a str: pass bytes, or text=True")
            input = input.encode(self.encoding or "utf-8", self.errors or "strict")
        with self._comm_lock:
            if not self._threads:
                self._start_communicating(input)
            elif input:
                raise ValueError("Cannot send input after starting communication")
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            for t in self._threads:
                t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
                if t.is_alive():
                    raise subprocess.TimeoutExpired(self.cmd, timeout or 0.0)
            self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise subprocess.TimeoutExpired(self.cmd, timeout or 0.0, self._partial("stdout"),
                                            self._partial("stderr")) from None
        return self._output("stdout"), self._output("stderr")

    def _start_communicating(self, input: bytes | None) -> None:
        def writer(f: IO[bytes], data: bytes) -> None:
            # Never a traceback: the command may have closed its stdin, or
            # the caller ours (OSError: EPIPE; ValueError: closed file).
            with contextlib.suppress(OSError, ValueError):
                if data:
                    f.write(data)
            with contextlib.suppress(OSError, ValueError):
                f.close()

        def reader(f: IO[bytes], chunks: list[bytes]) -> None:
            try:
                while True:
                    data = f.read1(65536)  # type: ignore[attr-defined]  # a BufferedReader
                    if not data:
                        break
                    chunks.append(data)  # seen at once by a TimeoutExpired
            except (OSError, ValueError):
                pass  # closed under us (the caller closed it): what was read is kept
            finally:
                with contextlib.suppress(OSError, ValueError):
                    f.close()

        threads = []
        if self._stdin_bin is not None and not self._stdin_bin.closed:
            threads.append(threading.Thread(target=writer, args=(self._stdin_bin, input or b""), daemon=True))
        for name, f in self._bin.items():
            chunks = self._chunks[name] = []
            if not f.closed:
                threads.append(threading.Thread(target=reader, args=(f, chunks), daemon=True))
        self._threads = threads or [threading.Thread(target=lambda: None)]
        for t in self._threads:
            t.start()

    def _read(self, name: str) -> bytes | None:
        """What communicate() has read from ``name`` so far (None: not a pipe)."""
        chunks = self._chunks.get(name)
        return None if chunks is None else b"".join(chunks)

    def _partial(self, name: str) -> bytes | None:
        """What a TimeoutExpired carries, as subprocess's: the bytes read,
        None when nothing was (or ``name`` is not a pipe)."""
        return self._read(name) or None

    def _output(self, name: str) -> Any:
        data = self._read(name)
        if data is None or not self.text_mode:
            return data
        # subprocess's text mode: decoded, universal newlines.
        text = data.decode(self.encoding or "utf-8", self.errors or "strict")
        return text.replace("\r\n", "\n").replace("\r", "\n")

    def send_signal(self, sig: int) -> None:
        """Deliver ``sig`` to the command (its process group), as safebox exec relays."""
        if self.returncode is None:
            self._launch.send_signal(int(sig))

    def terminate(self) -> None:
        """SIGTERM to every process in the sandbox."""
        if self.returncode is None:
            self._launch.signal_all(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL the whole sandbox at once."""
        if self.returncode is None:
            self._launch.kill_tree()

    def __enter__(self) -> Popen:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.returncode is None and exc and exc[0] is not None:
            self.kill()
        # A pipe communicate() reads is closed by its reader when the
        # command ends; closing it here would race that read.
        reading = bool(self._threads)
        for f in (self.stdin, None if reading else self.stdout, None if reading else self.stderr):
            if f is not None:
                with contextlib.suppress(OSError, ValueError):
                    f.close()
        if self.returncode is None:
            self.wait()


class AsyncPopen:
    """:class:`Popen` for asyncio: ``await p.wait()``, ``await p.communicate()``
    (each in a worker thread); :meth:`terminate`, :meth:`kill` and
    :meth:`send_signal` return at once."""

    def __init__(self, popen: Popen) -> None:
        self.popen = popen
        self.pid = popen.pid
        self.args = popen.args

    @property
    def returncode(self) -> int | None:
        """The exit status once the command has ended."""
        return self.popen.returncode

    async def wait(self) -> int:
        """Wait for the command."""
        import asyncio

        return await asyncio.to_thread(self.popen.wait)

    async def communicate(self, input: bytes | str | None = None, timeout: float | None = None) -> tuple[Any, Any]:
        """Send ``input``, read the output, wait (see :meth:`Popen.communicate`)."""
        import asyncio

        return await asyncio.to_thread(self.popen.communicate, input, timeout)

    def send_signal(self, sig: int) -> None:
        """See :meth:`Popen.send_signal`."""
        self.popen.send_signal(sig)

    def terminate(self) -> None:
        """See :meth:`Popen.terminate`."""
        self.popen.terminate()

    def kill(self) -> None:
        """See :meth:`Popen.kill`."""
        self.popen.kill()

"""The public API: :class:`Sandbox`, :class:`Policy`, :func:`check_host`
(docs/api.md; semantic versioning from 0.1.0 on).

A :class:`Sandbox` is one session of the run path (safebox/run/session.py)
that ``safebox exec`` uses too: one merged policy, one run dir, one proxy,
for every command run in it. Unlike ``safebox exec``, it touches nothing
process-wide: no signal handler, no close-on-exec marking of the caller's
descriptors, no change of working directory or environment, no child
subreaper. So it is safe from any thread, with any number of sandboxes at
once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

from safebox.decide import DEFAULT_TIMEOUT, Decision, Request, Runtime
from safebox.errors import SafeboxError
from safebox.review.api import Reviewing, held_id, prepare
from safebox.run.plan import Without
from safebox.run.session import Command, Options, Session
from safebox.run.supervise import Stdio

if TYPE_CHECKING:
    from safebox.doctor import Check
    from safebox.policy.effective import EffectivePolicy
    from safebox.policy.load import Context
    from safebox.proxy.live import LiveLists

def _running_loop() -> Any:
    """The event loop running in this thread, if any (asyncio is not
    imported for it)."""
    import sys

    asyncio = sys.modules.get("asyncio")
    if asyncio is None:
        return None
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


#: How long run() reads what is left after a timeout killed the sandbox.
_DRAIN = 5.0

PIPE = subprocess.PIPE
DEVNULL = subprocess.DEVNULL
STDOUT = subprocess.STDOUT


class TimeoutExpired(subprocess.TimeoutExpired):
    """``timeout`` passed: the whole sandbox was killed (as subprocess.run does).
    ``output`` and ``stderr`` hold what was read (bytes, as subprocess's)."""


class CalledProcessError(subprocess.CalledProcessError):
    """``check=True`` and the command's exit status was not 0 (subprocess's attributes)."""


#: What a command may be: a sequence of arguments, or with ``shell=True`` a
#: string for ``/bin/sh -c``.
Args = Sequence[str | bytes | os.PathLike[str]] | str | bytes


def _argv(args: Args, shell: bool) -> tuple[str, ...]:
    """The argv to run: a str is never split on spaces (``"echo hi"`` is one
    program's name to subprocess, a shell line to a person: refused unless
    ``shell=True`` says which)."""
    if isinstance(args, (str, bytes)):
        if not shell:
            raise TypeError(f"the command is a string ({args!r}): pass a list of arguments, "
                            "or shell=True to run it with /bin/sh -c")
        return ("/bin/sh", "-c", os.fsdecode(args))
    argv = tuple(os.fsdecode(a) for a in args)
    if shell:  # subprocess's meaning: the first item is the script, the rest its $0, $1...
        if not argv:
            raise ValueError("shell=True with an empty list: nothing to run")
        return ("/bin/sh", "-c", *argv)
    if not argv:
        raise ValueError("an empty command: nothing to run")
    return argv


def _cmd(args: Args) -> str | bytes | list[Any]:
    """The command as subprocess's exceptions name it: as it was given."""
    return args if isinstance(args, (str, bytes)) else list(args)


def _text_encoding() -> str:
    """subprocess's default for text mode (PEP 597)."""
    import locale
    import sys

    return "utf-8" if sys.flags.utf8_mode else locale.getencoding()


# ---------------------------------------------------------------- policies
# Policy, in its own module (safebox/api_policy.py), re-exported here.
from safebox.api_policy import Policy, PolicyLike, _as_policy  # noqa: E402


def _as_policies(policy: PolicyLike | Sequence[PolicyLike] | None) -> Policy:
    """A Sandbox's ``policy`` argument as one Policy: none, one, or layers
    first to last (as `safebox exec -p base.json -p more.json`)."""
    if policy is None:
        return Policy()
    if isinstance(policy, (Policy, Mapping, str, os.PathLike)):
        return _as_policy(policy)
    return Policy().merge(*(_as_policy(p) for p in policy))


# ------------------------------------------------------------------ events


@dataclass(frozen=True)
class Event:
    """Something that happened in a sandbox.

    ``kind``: ``start`` (``data``: layers), ``stop`` (``returncode``,
    ``duration``), ``network`` (a refused connection: ``host``, ``port``,
    ``protocol``, ``decision``, ``rule``, ``message``: the line the client
    was answered with), ``violation`` (a refusal the violations
    feed explained: the ``denied`` audit event's fields with ``rule`` and
    ``fix``; docs/violations.md), ``message`` (a line ``safebox exec``
    would print on stderr: ``text``)."""

    kind: str
    time: float
    args: tuple[str, ...] | None = None
    pid: int | None = None
    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CompletedRun:
    """What :meth:`Sandbox.run` returns (subprocess.CompletedProcess's vocabulary)."""

    args: tuple[str, ...]
    returncode: int
    stdout: Any  # bytes, str in text mode, None when not captured
    stderr: Any
    duration: float
    events: tuple[Event, ...]

    def check_returncode(self) -> None:
        """Raise :class:`CalledProcessError` when ``returncode`` is not 0."""
        if self.returncode:
            raise CalledProcessError(self.returncode, list(self.args), self.stdout, self.stderr)


# ------------------------------------------------------------------ sandbox


class Sandbox(Reviewing):
    """One sandbox for many commands: one policy, one run dir, one proxy.

    ``policy``: a :class:`Policy`, a dict shaped like a policy file, a
    policy file's path, or a list of these: layers, first to last, merged
    as ``safebox exec -p A -p B`` merges files (lists add up, other values
    are replaced); None: the built-in defaults. ``cwd``: the work dir
    (a write root, ``.`` in the policy); default: the process's.
    ``presets``: toolchain presets (docs/toolchains.md). ``audit_log``: the
    JSON-lines log (docs/audit-log.md). ``processes``, ``memory``,
    ``tmp_size``, ``wall_time``: the ``limits.*`` keys, as strings in their
    format (``"4096"``, ``"2g"``, ``"90s"``). ``on_event``: called with each
    :class:`Event`, from the thread that caused it (the proxy's thread for
    network events). ``env``: the base environment of the commands
    (default: the process's, read at each run; never modified).
    ``allow_import_roots``: the caller's ``sys.path`` may hold the work dir
    (a harness started from its own repo); docs/api.md says what it costs.
    ``quiet``: refusals reach the harness as events only, never as lines on
    the process's stderr (False: the proxy prints ``safebox exec``'s lines).
    ``review``: each command's writes are held (docs/review.md): see
    :meth:`changes`, :meth:`apply`, :meth:`discard`; ``keep``: the held run
    survives :meth:`close`.
    ``on_request``: asked about each host no entry allows (a
    :class:`~safebox.decide.Request`); returns True (allow once), False
    (deny) or a :class:`~safebox.decide.Decision`; calls are serialised, and
    one unanswered after ``request_timeout`` seconds is denied
    (docs/api.md, "Runtime decisions"). A coroutine function runs on the
    event loop the sandbox was made or last awaited on.
    """

    def __init__(self, policy: PolicyLike | Sequence[PolicyLike] | None = None, *,
                 cwd: str | os.PathLike[str] | None = None, presets: Sequence[str] = (),
                 audit_log: str | os.PathLike[str] | None = None, processes: str | int | None = None,
                 memory: str | None = None, tmp_size: str | None = None, wall_time: str | None = None,
                 strict: bool = False, without: str | None = None,
                 on_event: Callable[[Event], None] | None = None, env: Mapping[str, str] | None = None,
                 allow_import_roots: bool = True, quiet: bool = True,
                 on_request: Callable[[Request], Any] | None = None,
                 request_timeout: float = DEFAULT_TIMEOUT, review: bool = False, keep: bool = False) -> None:
        pol = _as_policies(policy)
        limits = {"processes": None if processes is None else str(processes), "memory": memory,
                  "tmpSize": tmp_size, "wallTime": wall_time}
        self._on_event = on_event
        self._subscribers: list[Any] = []
        self._running: set[Popen] = set()  # killed and waited for by close()
        self._lock = threading.Lock()
        self._local = threading.local()
        self._env = env
        # review=True: the held run of the last command (docs/review.md), kept after close() only with keep=True.
        self._review, self._keep, self._held = review, keep, None
        self._loop: Any = _running_loop()
        self._runtime = Runtime(on_request, timeout=request_timeout, loop=lambda: self._loop, say=self._say)

        def load(ctx: Context, _cache_dir: str) -> EffectivePolicy:  # no policy cache: loaded once per Sandbox
            return pol._effective(ctx, presets=presets, limits=limits, strict=strict)

        opts = Options(strict=strict, without=Without(without) if without else None,
                       audit_log=os.fspath(audit_log) if audit_log is not None else None,
                       cli=False, allow_import_roots=allow_import_roots, proxy_stderr=not quiet,
                       runtime=self._runtime, review=review)
        self._session = Session(load, opts=opts, say=self._say, cwd=os.fspath(cwd) if cwd is not None else None,
                                environ=env, network_event=self._network)
        self._closed = False

    # -- events ------------------------------------------------------------------

    def _emit(self, kind: str, *, args: tuple[str, ...] | None = None, pid: int | None = None,
              data: Mapping[str, Any] | None = None, sink: list[Event] | None = None, **more: Any) -> Event:
        ev = Event(kind=kind, time=time.time(), args=args, pid=pid, data={**(data or {}), **more})
        if sink is None:
            sink = getattr(self._local, "sink", None)
        if sink is not None:
            sink.append(ev)
        if self._on_event is not None:
            self._on_event(ev)
        with self._lock:
            subscribers = list(self._subscribers)
        for q in subscribers:
            q.put(ev)
        return ev

    def _say(self, text: str) -> None:
        self._emit("message", text=text)

    def _network(self, refusal: tuple[Any, ...], owner: object) -> None:
        """A refusal, from the proxy's thread: the event goes to the command
        whose listeners the connection came through (``owner``, its launch),
        or, where the proxy cannot tell (listeners shared by the sandbox's
        commands: without the helper), to the one command running."""
        from safebox.proxy.explain import refusal_message

        host, port, protocol, decision = refusal[:4]
        popen = self._refused_command(owner)
        self._emit("network", args=popen.args if popen else None, pid=popen.pid if popen else None,
                   sink=popen.events if popen else None,
                   data={"host": host, "port": port, "protocol": protocol, "decision": str(decision),
                         "rule": decision.rule, "message": refusal_message(host, port, decision)})

    def _refused_command(self, owner: object) -> Popen | None:
        """The running command a refusal belongs to (see :meth:`_network`).
        A command joins ``_running`` once its start returns, and a fast client
        can be refused before that: with none that matches, wait for it a
        little (the proxy's thread, only while no command matches)."""
        deadline = time.monotonic() + 0.5
        while True:
            with self._lock:
                running = list(self._running)
            by_owner = [p for p in running if p._launch is owner]
            popen = by_owner[0] if by_owner else running[0] if owner is None and len(running) == 1 else None
            if popen is not None or self._closed or time.monotonic() > deadline or (owner is None and running):
                return popen
            time.sleep(0.005)

    def events(self) -> Iterator[Event]:
        """Every event from now on, until the sandbox is closed (a blocking
        iterator: read it from a thread of its own)."""
        import queue

        q: queue.SimpleQueue[Event | None] = queue.SimpleQueue()
        with self._lock:
            if self._closed:
                return
            self._subscribers.append(q)
        while True:
            ev = q.get()
            if ev is None:
                return
            yield ev

    # -- commands ------------------------------------------------------------------

    @property
    def policy(self) -> EffectivePolicy:
        """The merged policy every command of this sandbox runs under."""
        return self._session.policy

    @property
    def layers(self) -> str:
        """The layers in force: ``both``, ``helper-only`` or ``bwrap-only``."""
        return self._session.layers.value

    def popen(self, args: Args, *, stdin: int | IO[Any] | None = None, stdout: int | IO[Any] | None = None,
              stderr: int | IO[Any] | None = None, env: Mapping[str, str] | None = None,
              cwd: str | os.PathLike[str] | None = None, text: bool | None = None, encoding: str | None = None,
              errors: str | None = None, universal_newlines: bool | None = None, shell: bool = False) -> Popen:
        """Start ``args`` in the sandbox; returns once it runs (subprocess.Popen's
        vocabulary; ``stdin``/``stdout``/``stderr``: None, PIPE, DEVNULL,
        STDOUT for stderr, a descriptor or a file object; ``text``,
        ``encoding``, ``errors``: text mode; ``shell``: through ``/bin/sh -c``).
        A str command is refused (TypeError) unless ``shell=True``."""
        if self._closed:
            raise ValueError("the sandbox is closed")
        argv = _argv(args, shell)
        return Popen(self, argv, stdin=stdin, stdout=stdout, stderr=stderr, env=env,
                     cwd=os.fspath(cwd) if cwd is not None else None, cmd=_cmd(args),
                     text=bool(text or universal_newlines or encoding or errors), encoding=encoding, errors=errors)

    def run(self, args: Args, *, stdin: int | IO[Any] | None = None, input: bytes | str | None = None,
            capture_output: bool = False, timeout: float | None = None, check: bool = False,
            env: Mapping[str, str] | None = None, cwd: str | os.PathLike[str] | None = None,
            stdout: int | IO[Any] | None = None, stderr: int | IO[Any] | None = None, text: bool | None = None,
            encoding: str | None = None, errors: str | None = None, universal_newlines: bool | None = None,
            shell: bool = False) -> CompletedRun:
        """Run ``args`` to completion (subprocess.run's vocabulary and
        errors). With ``timeout``, the whole sandbox is killed when it passes
        and :class:`TimeoutExpired` raised with what was read; with
        ``check``, :class:`CalledProcessError` when the status is not 0."""
        if input is not None:
            if stdin is not None:
                raise ValueError("stdin and input arguments may not both be used.")
            stdin = PIPE
        if capture_output:
            if stdout is not None or stderr is not None:
                raise ValueError("stdout and stderr arguments may not be used with capture_output.")
            stdout = stderr = PIPE
        with self.popen(args, stdin=stdin, stdout=stdout, stderr=stderr, env=env, cwd=cwd, text=text,
                        encoding=encoding, errors=errors, universal_newlines=universal_newlines,
                        shell=shell) as p:
            try:
                out, err = p.communicate(input, timeout=timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                # The rest of the output, now that the whole sandbox is gone
                # (bounded: without bwrap, a process that left the group may
                # hold a pipe open).
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.communicate(timeout=_DRAIN)
                p.wait()
                raise TimeoutExpired(p.cmd, timeout or 0.0, p._partial("stdout"), p._partial("stderr")) from None
        assert p.returncode is not None
        if check and p.returncode:
            raise CalledProcessError(p.returncode, p.cmd, out, err)
        return CompletedRun(args=p.args, returncode=p.returncode, stdout=out, stderr=err,
                            duration=p.duration, events=tuple(p.events))

    async def run_async(self, args: Args, **kw: Any) -> CompletedRun:

        """:meth:`run` for asyncio: runs in a worker thread, the loop stays free."""
        import asyncio

        self._loop = asyncio.get_running_loop()  # an async on_request runs here
        return await asyncio.to_thread(self.run, args, **kw)

    async def popen_async(self, args: Args, **kw: Any) -> AsyncPopen:
        """:meth:`popen` for asyncio: the start-up in a worker thread."""
        import asyncio

        self._loop = asyncio.get_running_loop()
        return AsyncPopen(await asyncio.to_thread(self.popen, args, **kw))

    # -- runtime decisions ------------------------------------------------------

    def allow_domain(self, entry: str) -> str:
        """Allow ``entry`` (``example.com``, ``*.example.com``,
        ``example.com:443``) from the next connection on, in every command
        of this sandbox; returns it in canonical form. A same entry in the
        denied list is dropped; other denied entries still win."""
        return self._live().allow(entry)

    def deny_domain(self, entry: str, *, reason: str | None = None) -> str:
        """Refuse ``entry`` from the next connection on (open connections go
        on); ``reason`` is said in the refusal (the 403, the event). Returns
        the canonical entry."""
        return self._live().deny(entry, reason)

    def _live(self) -> LiveLists:
        if self._closed:
            raise ValueError("the sandbox is closed")
        live = self._runtime.live
        if live is None:
            raise SafeboxError("this sandbox has no network to change: its policy allows no domain",
                               hint="create it with on_request= (a callback; `lambda r: False` denies every "
                                    "question) or with an allowed domain, then allow_domain() works")
        return live

    # -- lifetime ----------------------------------------------------------------

    def close(self) -> None:
        """Kill the commands still running (their whole sandbox) and wait for
        them, stop the proxy, remove the run dir (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            subscribers, self._subscribers = self._subscribers, []
            running, self._running = list(self._running), set()
        for p in running:
            p.kill()
            with contextlib.suppress(SafeboxError):
                p.wait()
        self._session.close()
        self._runtime.close()
        if self._held is not None and not self._keep:
            with contextlib.suppress(SafeboxError):
                self.discard()
        for q in subscribers:
            q.put(None)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
        opened: list[int] = []
        session = sandbox._session
        command = session.command(args, env=env if env is not None else sandbox._env, cwd=cwd)
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
        self._command: Command | None = command
        self.pid = self._launch.pid
        self._t0 = time.monotonic()
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
        if text:
            import io

            if self._stdin_bin is not None:
                self.stdin = io.TextIOWrapper(self._stdin_bin, write_through=True,
                                              encoding=self.encoding, errors=errors)
            if self.stdout is not None:
                self.stdout = io.TextIOWrapper(self._bin["stdout"], encoding=self.encoding, errors=errors)
            if self.stderr is not None:
                self.stderr = io.TextIOWrapper(self._bin["stderr"], encoding=self.encoding, errors=errors)
        self.events.append(sandbox._emit("start", args=args, pid=self.pid, layers=sandbox.layers))
        with sandbox._lock:
            sandbox._running.add(self)

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


# ------------------------------------------------------------------ host


@dataclass(frozen=True)
class HostCheck:
    """``safebox doctor``'s result: every check, and whether a required one failed."""

    checks: tuple[Check, ...]
    ok: bool

    def __getitem__(self, name: str) -> Check:
        return next(c for c in self.checks if c.name == name)


def check_host() -> HostCheck:
    """Run ``safebox doctor``'s checks (docs/doctor.md) and return them, so
    that a harness can degrade knowingly (``check_host()["bwrap"].status``)."""
    from pathlib import Path

    from safebox import doctor
    from safebox.run.helper_binary import find_helper

    checks = doctor.run_checks(helper_path=Path(find_helper()))
    return HostCheck(checks=tuple(checks), ok=doctor.exit_code(checks) == 0)


__all__ = ["DEVNULL", "PIPE", "STDOUT", "AsyncPopen", "CalledProcessError", "CompletedRun", "Decision", "Event", "HostCheck", "Policy", "Popen",
           "Sandbox", "TimeoutExpired", "check_host"]

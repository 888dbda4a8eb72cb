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

from safebox.errors import PolicyError, SafeboxError
from safebox.run.plan import Without
from safebox.run.session import Command, Options, Session
from safebox.run.supervise import Stdio

if TYPE_CHECKING:
    from safebox.doctor import Check
    from safebox.policy.effective import EffectivePolicy
    from safebox.policy.load import Context, Layer

PIPE = subprocess.PIPE
DEVNULL = subprocess.DEVNULL
STDOUT = subprocess.STDOUT


class TimeoutExpired(subprocess.TimeoutExpired):
    """``timeout`` passed: the whole sandbox was killed (as subprocess.run does)."""


# ---------------------------------------------------------------- policies


class Policy:
    """A policy built in code: layers in the policy file format
    (docs/policy-reference.md), validated when made. A :class:`Sandbox`
    merges the built-in defaults, then these layers in order, then its own
    arguments (presets, limits). The user's and the project's policy files
    are not read: a harness states its policy (add them with
    :meth:`from_file` if wanted)."""

    def __init__(self, layers: Sequence[Layer] = ()) -> None:
        self.layers: tuple[Layer, ...] = tuple(layers)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, name: str = "<dict>") -> Policy:
        """A policy from a dict shaped like a policy file. Raises
        :class:`PolicyError` naming the key (``key_path``), in the CLI's words."""
        from safebox.policy.load import Layer, validate_layer

        layer = Layer(name=name, data=dict(data))
        validate_layer(layer)
        return cls((layer,))

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Policy:
        """A policy from a JSON or TOML policy file."""
        from safebox.policy.load import Layer, _read_file, parse_document, validate_layer

        p = os.path.abspath(os.fspath(path))
        try:
            raw = _read_file(p)
        except FileNotFoundError:
            raise PolicyError(f"{p}: policy file not found") from None
        layer = Layer(name=p, data=parse_document(p, raw))
        validate_layer(layer)
        return cls((layer,))

    def merge(self, *others: Policy) -> Policy:
        """This policy, then ``others`` on top (lists add up, scalars are
        replaced, as policy files layer)."""
        return Policy((*self.layers, *(layer for o in others for layer in o.layers)))

    def _effective(self, ctx: Context, *, presets: Sequence[str], limits: Mapping[str, str | None],
                   strict: bool) -> EffectivePolicy:
        from safebox.policy.load import Flags, credential_env_layers, default_layer, flags_layer, merge, validate_layer

        flags = Flags(presets=tuple(presets), strict=strict, limit_processes=limits.get("processes"),
                      limit_memory=limits.get("memory"), limit_tmp_size=limits.get("tmpSize"),
                      timeout=limits.get("wallTime"))
        first = default_layer()
        validated = [(first, validate_layer(first))]
        validated += [(layer, layer.data) for layer in credential_env_layers(ctx)]
        validated += [(layer, validate_layer(layer)) for layer in (*self.layers, flags_layer(flags))]
        return merge(validated, ctx)


PolicyLike = Policy | Mapping[str, Any] | str | os.PathLike[str]


def _as_policy(policy: PolicyLike) -> Policy:
    if isinstance(policy, Policy):
        return policy
    if isinstance(policy, Mapping):
        return Policy.from_dict(policy)
    return Policy.from_file(policy)


# ------------------------------------------------------------------ events


@dataclass(frozen=True)
class Event:
    """Something that happened in a sandbox.

    ``kind``: ``start`` (``data``: layers), ``stop`` (``returncode``,
    ``duration``), ``network`` (a refused connection: ``host``, ``port``,
    ``protocol``, ``decision``), ``violation`` (a refusal the violations
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
    stdout: bytes | None
    stderr: bytes | None
    duration: float
    events: tuple[Event, ...]

    def check_returncode(self) -> None:
        """Raise subprocess.CalledProcessError when ``returncode`` is not 0."""
        if self.returncode:
            raise subprocess.CalledProcessError(self.returncode, list(self.args), self.stdout, self.stderr)


# ------------------------------------------------------------------ sandbox


class Sandbox:
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
    """

    def __init__(self, policy: PolicyLike | Sequence[PolicyLike] | None = None, *,
                 cwd: str | os.PathLike[str] | None = None, presets: Sequence[str] = (),
                 audit_log: str | os.PathLike[str] | None = None, processes: str | int | None = None,
                 memory: str | None = None, tmp_size: str | None = None, wall_time: str | None = None,
                 strict: bool = False, without: str | None = None,
                 on_event: Callable[[Event], None] | None = None, env: Mapping[str, str] | None = None,
                 allow_import_roots: bool = True) -> None:
        if policy is None:
            pol = Policy()
        elif isinstance(policy, (Policy, Mapping, str, os.PathLike)):
            pol = _as_policy(policy)
        else:
            # Layers, first to last, as `safebox exec -p base.json -p more.json`.
            pol = Policy().merge(*(_as_policy(p) for p in policy))
        limits = {"processes": None if processes is None else str(processes), "memory": memory,
                  "tmpSize": tmp_size, "wallTime": wall_time}
        self._on_event = on_event
        self._subscribers: list[Any] = []
        self._running: set[Popen] = set()  # killed and waited for by close()
        self._lock = threading.Lock()
        self._local = threading.local()
        self._env = env

        def load(ctx: Context, _cache_dir: str) -> EffectivePolicy:  # no policy cache: loaded once per Sandbox
            return pol._effective(ctx, presets=presets, limits=limits, strict=strict)

        opts = Options(strict=strict, without=Without(without) if without else None,
                       audit_log=os.fspath(audit_log) if audit_log is not None else None,
                       cli=False, allow_import_roots=allow_import_roots)
        self._session = Session(load, opts=opts, say=self._say, cwd=os.fspath(cwd) if cwd is not None else None,
                                environ=env, network_event=self._network)
        self._closed = False

    # -- events ------------------------------------------------------------------

    def _emit(self, kind: str, *, args: tuple[str, ...] | None = None, pid: int | None = None,
              data: Mapping[str, Any] | None = None, **more: Any) -> Event:
        ev = Event(kind=kind, time=time.time(), args=args, pid=pid, data={**(data or {}), **more})
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

    def _network(self, refusal: tuple[Any, ...]) -> None:
        names = ("host", "port", "protocol", "decision")
        self._emit("network", data={n: str(v) if n == "decision" else v for n, v in zip(names, refusal, strict=False)})

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

    def popen(self, args: Sequence[str], *, stdin: int | IO[Any] | None = None, stdout: int | IO[Any] | None = None,
              stderr: int | IO[Any] | None = None, env: Mapping[str, str] | None = None,
              cwd: str | os.PathLike[str] | None = None) -> Popen:
        """Start ``args`` in the sandbox; returns once it runs (subprocess.Popen's
        vocabulary; ``stdin``/``stdout``/``stderr``: None, PIPE, DEVNULL,
        STDOUT for stderr, a descriptor or a file object)."""
        if self._closed:
            raise ValueError("the sandbox is closed")
        return Popen(self, tuple(os.fspath(a) for a in args), stdin=stdin, stdout=stdout, stderr=stderr,
                     env=env, cwd=os.fspath(cwd) if cwd is not None else None)

    def run(self, args: Sequence[str], *, input: bytes | None = None, capture_output: bool = False,
            timeout: float | None = None, env: Mapping[str, str] | None = None,
            cwd: str | os.PathLike[str] | None = None, stdout: int | IO[Any] | None = None,
            stderr: int | IO[Any] | None = None) -> CompletedRun:
        """Run ``args`` to completion (subprocess.run's vocabulary). With
        ``timeout``, the whole sandbox is killed when it passes and
        :class:`TimeoutExpired` raised."""
        if capture_output:
            stdout = stderr = PIPE
        with self.popen(args, stdin=PIPE if input is not None else None, stdout=stdout, stderr=stderr,
                        env=env, cwd=cwd) as p:
            try:
                out, err = p.communicate(input, timeout=timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                out, err = p.communicate()
                raise TimeoutExpired(list(p.args), timeout or 0.0, out, err) from None
        assert p.returncode is not None
        return CompletedRun(args=p.args, returncode=p.returncode, stdout=out, stderr=err,
                            duration=p.duration, events=tuple(p.events))

    async def run_async(self, args: Sequence[str], **kw: Any) -> CompletedRun:
        """:meth:`run` for asyncio: runs in a worker thread, the loop stays free."""
        import asyncio

        return await asyncio.to_thread(self.run, args, **kw)

    async def popen_async(self, args: Sequence[str], **kw: Any) -> AsyncPopen:
        """:meth:`popen` for asyncio: the start-up in a worker thread."""
        import asyncio

        return AsyncPopen(await asyncio.to_thread(self.popen, args, **kw))

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
                 cwd: str | None) -> None:
        self.args = args
        self.returncode: int | None = None
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
            command.prepare()
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
        self.stdin: IO[bytes] | None = open(in_ours, "wb") if in_ours is not None else None  # noqa: SIM115
        self.stdout: IO[bytes] | None = open(out_ours, "rb") if out_ours is not None else None  # noqa: SIM115
        self.stderr: IO[bytes] | None = open(err_ours, "rb") if err_ours is not None else None  # noqa: SIM115
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
                    raise subprocess.TimeoutExpired(list(self.args), timeout or 0.0)
                rc = got
                self.duration = time.monotonic() - self._t0
                violations = command.finish(rc)
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

    def communicate(self, input: bytes | None = None, timeout: float | None = None) -> tuple[bytes | None, bytes | None]:
        """Send ``input``, read stdout and stderr to their end, wait."""
        results: dict[str, bytes] = {}
        threads = []

        def reader(name: str, f: IO[bytes]) -> None:
            results[name] = f.read()
            f.close()

        def writer(f: IO[bytes], data: bytes) -> None:
            try:
                f.write(data)
            except BrokenPipeError:
                pass
            finally:
                try:
                    f.close()
                except BrokenPipeError:
                    pass

        if self.stdin is not None and not self.stdin.closed:
            threads.append(threading.Thread(target=writer, args=(self.stdin, input or b""), daemon=True))
        for name in ("stdout", "stderr"):
            f = getattr(self, name)
            if f is not None and not f.closed:
                threads.append(threading.Thread(target=reader, args=(name, f), daemon=True))
        for t in threads:
            t.start()
        deadline = None if timeout is None else time.monotonic() + timeout
        for t in threads:
            t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if t.is_alive():
                raise subprocess.TimeoutExpired(list(self.args), timeout or 0.0)
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return (results.get("stdout") if self.stdout is not None else None,
                results.get("stderr") if self.stderr is not None else None)

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
        for f in (self.stdin, self.stdout, self.stderr):
            if f is not None:
                try:
                    f.close()
                except OSError:
                    pass
        if self.returncode is None:
            if exc and exc[0] is not None:
                self.kill()
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

    async def communicate(self, input: bytes | None = None) -> tuple[bytes | None, bytes | None]:
        """Send ``input``, read the output, wait."""
        import asyncio

        return await asyncio.to_thread(self.popen.communicate, input)

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
    from safebox.helper import find_helper

    checks = doctor.run_checks(helper_path=Path(find_helper()))
    return HostCheck(checks=tuple(checks), ok=doctor.exit_code(checks) == 0)


__all__ = ["DEVNULL", "PIPE", "STDOUT", "AsyncPopen", "CompletedRun", "Event", "HostCheck", "Policy", "Popen",
           "Sandbox", "TimeoutExpired", "check_host"]

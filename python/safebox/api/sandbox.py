""":class:`Sandbox`: one session of the run path for many commands (see
safebox/api/__init__.py): its events, its commands, its runtime decisions
and its lifetime."""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import IO, TYPE_CHECKING, Any

from safebox.api.common import PIPE, Args, CalledProcessError, CompletedRun, Event, TimeoutExpired, argv_of, cmd_of
from safebox.api.policy import Policy, PolicyLike, _as_policy
from safebox.api.popen import AsyncPopen, Popen
from safebox.errors import SafeboxError
from safebox.review.api import Reviewing
from safebox.run.plan import Without
from safebox.run.session import Options, Session
from safebox.runtime.decisions import DEFAULT_TIMEOUT, Request, Runtime

if TYPE_CHECKING:
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


def _as_policies(policy: PolicyLike | Sequence[PolicyLike] | None) -> Policy:
    """A Sandbox's ``policy`` argument as one Policy: none, one, or layers
    first to last (as `safebox exec -p base.json -p more.json`)."""
    if policy is None:
        return Policy()
    if isinstance(policy, (Policy, Mapping, str, os.PathLike)):
        return _as_policy(policy)
    return Policy().merge(*(_as_policy(p) for p in policy))


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
    :class:`~safebox.runtime.decisions.Request`); returns True (allow once), False
    (deny) or a :class:`~safebox.runtime.decisions.Decision`; calls are serialised, and
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
        argv = argv_of(args, shell)
        return Popen(self, argv, stdin=stdin, stdout=stdout, stderr=stderr, env=env,
                     cwd=os.fspath(cwd) if cwd is not None else None, cmd=cmd_of(args),
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

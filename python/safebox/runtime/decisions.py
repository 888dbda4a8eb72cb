"""Runtime decisions: a host no rule allows is put to whoever runs the
sandbox (docs/api.md, "Runtime decisions").

``Sandbox(on_request=callback)`` and ``safebox exec --ask`` both end here. The
proxy's gate (proxy/upstream.py) calls :meth:`Asker.decide` for a destination
that ``allowedDomains`` does not list and ``deniedDomains`` does not refuse;
the answer is one of

* ``True``: allow this connection only;
* :class:`Decision` ``(allow=True)``: allow the host and port for the
  sandbox's lifetime (added to its live lists, proxy/live.py);
* ``False``, or :class:`Decision` ``(allow=False, reason=...)``: deny, with
  the reason in the refusal line, the 403 and the event; a Decision is
  remembered for the lifetime, ``False`` decides this connection only.

Anything else denies, as srt's ask callback does: only ``True`` or a Decision
with ``allow=True`` allows. Calls are serialised per sandbox (one worker
thread: a callback never runs twice at once); one with no answer within
``timeout`` seconds is denied, and so is one that raises.

The trust boundary: the question travels from the proxy's thread to the
callback inside safebox's own process (or to safebox's controlling terminal,
runtime/terminal.py); the sandboxed command only ever sends a connection request. It
holds no descriptor of this channel, and what it controls, the host name, is
canonical (normalize_host) before anyone sees it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from safebox._record import Frozen

TYPE_CHECKING = False
if TYPE_CHECKING:
    import asyncio
    import concurrent.futures

    from safebox.proxy.live import LiveLists
    from safebox.proxy.rules import Decision as Verdict

__all__ = ["DEFAULT_TIMEOUT", "RULE_ASK", "Asker", "Decision", "Request", "Runtime"]

#: Seconds a question waits for its answer before it is denied.
DEFAULT_TIMEOUT = 30.0
#: Questions that may wait for their turn at once; past this, a new one is
#: denied at once (a command asking about 10,000 hosts must not queue 10,000
#: questions for a person, or hold 10,000 connections open).
MAX_WAITING = 32
#: The rule of a decision made by asking (audit log, events, refusal lines).
RULE_ASK = "ask"  # proxy/rules.py's, without importing the proxy here


class Request(Frozen):
    """What the sandbox asks for. ``kind``: ``"network"`` (later
    ``"filesystem"``); ``host``: the canonical name or IP literal; ``port``;
    ``protocol``: ``"connect"``, ``"http"``, ``"socks5"`` or ``"capture"`` (a
    program that ignores the proxy variables; docs/network.md, "Capture")."""

    kind: str
    host: str
    port: int
    protocol: str = "connect"


class Decision(Frozen):
    """An answer that says more than ``True``/``False``: ``allow`` for the
    sandbox's lifetime, or deny with a ``reason`` (one line, for the model
    that reads the refusal). ``once=True`` decides this request only."""

    allow: bool
    reason: str | None = None
    once: bool = False

    def __init__(self, allow: bool, reason: str | None = None, *, once: bool = False) -> None:
        super().__init__(allow=allow, reason=reason, once=once)


class Answer(Frozen):
    """The answer as the proxy applies it."""

    allow: bool
    remember: bool
    reason: str
    by: str  # "callback", "terminal", "timeout", "error", "no-terminal"


def interpret(value: object, *, by: str = "callback") -> Answer:
    """The callback's return value as an :class:`Answer` (module docstring)."""
    from safebox.proxy.live import clean_reason

    if isinstance(value, Answer):  # safebox's own callbacks (runtime/terminal.py) say who answered
        return value
    if value is True:
        return Answer(allow=True, remember=False, reason="allowed once when asked", by=by)
    if isinstance(value, Decision):
        if value.allow is True:
            return Answer(allow=True, remember=not value.once,
                          reason="allowed when asked" + ("" if value.once else ", for the sandbox's lifetime"), by=by)
        return Answer(allow=False, remember=not value.once,
                      reason=clean_reason(value.reason, default="denied when asked"), by=by)
    if value is False or value is None:
        return Answer(allow=False, remember=False, reason="denied when asked", by=by)
    return Answer(allow=False, remember=False,
                  reason=f"denied: the answer was {type(value).__name__}, not True, False or safebox.Decision", by=by)


class Asker:
    """Puts refused destinations to ``callback``, one at a time.

    ``callback(request)`` runs in one worker thread of its own (so a slow
    answer never stalls the proxy's other connections, and two questions
    never overlap). A coroutine function runs on ``loop()``'s event loop when
    that returns one (the harness's loop), else in a loop of the worker's.
    """

    def __init__(self, callback: Callable[[Request], Any], live: LiveLists, *, timeout: float = DEFAULT_TIMEOUT,
                 loop: Callable[[], asyncio.AbstractEventLoop | None] | None = None,
                 say: Callable[[str], None] | None = None) -> None:
        if not callable(callback):
            raise TypeError("on_request must be callable")
        if not timeout > 0:
            raise ValueError(f"the request timeout must be a positive number of seconds, not {timeout!r}")
        self.callback = callback
        self.live = live
        self.timeout = float(timeout)
        self._loop = loop
        self._say = say
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        self._lock: Any = None  # an asyncio.Lock, made on the proxy's loop
        self._waiting = 0  # questions waiting for their turn or their answer (the proxy's loop only)

    def _worker(self) -> concurrent.futures.ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                import concurrent.futures

                self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1,
                                                                   thread_name_prefix="safebox-on-request")
            return self._pool

    def _call(self, request: Request) -> object:
        """In the worker thread: the callback's answer (awaited if it is a coroutine)."""
        import inspect

        value = self.callback(request)
        if inspect.isawaitable(value):
            import asyncio

            owner = self._loop() if self._loop is not None else None
            if owner is not None and owner.is_running() and not owner.is_closed():
                return asyncio.run_coroutine_threadsafe(_awaited(value), owner).result()
            return asyncio.run(_awaited(value))
        return value

    async def decide(self, name: str, port: int, protocol: str, *,
                     audit: Callable[..., None] | None = None) -> Verdict:
        """The verdict on ``name:port`` (canonical ``name``), asking when the
        live lists still do not decide it once this question's turn comes."""
        import asyncio

        from safebox.proxy.rules import Decision as Verdict

        if self._lock is None:
            self._lock = asyncio.Lock()
        if self._waiting >= MAX_WAITING:
            reason = f"denied: {MAX_WAITING} questions are already waiting for an answer"
            if audit is not None:
                audit("ask", host=name, port=port, protocol=protocol, by="limit", answer="deny-once", reason=reason)
            return Verdict(False, RULE_ASK, reason)
        self._waiting += 1
        try:
            return await self._decide(name, port, protocol, audit)
        finally:
            self._waiting -= 1

    async def _decide(self, name: str, port: int, protocol: str, audit: Callable[..., None] | None) -> Verdict:
        import asyncio

        from safebox.proxy.rules import RULE_ALLOWED
        from safebox.proxy.rules import Decision as Verdict

        async with self._lock:
            # An earlier answer (or allow_domain) may have decided it meanwhile.
            current = self.live.rules.check_host(name, port)
            if current.allowed or current.rule != RULE_ALLOWED:
                return self.live.explained(name, port, current)
            request = Request(kind="network", host=name, port=port, protocol=protocol)
            loop = asyncio.get_running_loop()
            future = loop.run_in_executor(self._worker(), self._call, request)
            try:
                answer = interpret(await asyncio.wait_for(future, self.timeout))
            except TimeoutError:
                answer = Answer(allow=False, remember=False, by="timeout",
                                reason=f"denied: no answer within {self.timeout:g} s")
            except Exception as exc:  # noqa: BLE001 — a harness bug denies, it does not open the sandbox
                answer = Answer(allow=False, remember=False, by="error",
                                reason=f"denied: on_request raised {type(exc).__name__}")
                if self._say is not None:
                    self._say(f"on_request raised {type(exc).__name__}: {exc}; {name}:{port} is denied")
            if answer.remember:
                entry = f"[{name}]:{port}" if ":" in name else f"{name}:{port}"
                if answer.allow:
                    self.live.allow(entry)
                else:
                    self.live.deny(entry, answer.reason, rule=RULE_ASK)
            if audit is not None:
                audit("ask", host=name, port=port, protocol=protocol, by=answer.by,
                      answer=("allow" if answer.allow else "deny") + ("" if answer.remember else "-once"),
                      reason=answer.reason)
            return Verdict(answer.allow, RULE_ASK, answer.reason)

    def close(self) -> None:
        """Stop the worker (a callback still running finishes on its own)."""
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)


class Runtime:
    """What a sandbox decides while it runs, handed to the session
    (run/session.py ``Options.runtime``): its live lists, made from the
    policy when the proxy starts, and the asker when there is a callback.

    ``networked``: the sandbox gets the proxy even when its policy allows no
    domain, so that a host can be asked about or allowed later.
    """

    def __init__(self, callback: Callable[[Request], Any] | None = None, *, timeout: float = DEFAULT_TIMEOUT,
                 loop: Callable[[], asyncio.AbstractEventLoop | None] | None = None,
                 say: Callable[[str], None] | None = None, networked: bool | None = None) -> None:
        if callback is not None and not callable(callback):
            raise TypeError("on_request must be callable")
        if not timeout > 0:
            raise ValueError(f"the request timeout must be a positive number of seconds, not {timeout!r}")
        self.callback = callback
        self.timeout = float(timeout)
        self.loop = loop
        self.say = say
        self.networked = callback is not None if networked is None else networked
        self.live: LiveLists | None = None
        self.asker: Asker | None = None
        #: Called with the live lists once they exist (``--control-fd``'s reader).
        self.on_live: list[Callable[[LiveLists], None]] = []
        #: ``--control-fd``'s descriptor: checked once the write roots are known
        #: (runtime/control_fd.py check_unreachable).
        self.control_fd: int | None = None

    def attach(self, allowed: tuple[str, ...], denied: tuple[str, ...], *, allow_local_destinations: bool,
               learn: bool) -> tuple[LiveLists, Asker | None]:
        """The live lists (and asker) of the proxy being started. With a
        callback, ``learn`` no longer lets every host through: the answers
        decide, and the run's suggested policy holds the hosts allowed."""
        from safebox.proxy.live import LiveLists

        if self.live is None:
            self.live = LiveLists(allowed, denied, allow_local_destinations=allow_local_destinations,
                                  learn=learn and self.callback is None)
            if self.callback is not None:
                self.asker = Asker(self.callback, self.live, timeout=self.timeout, loop=self.loop, say=self.say)
            for hook in self.on_live:
                hook(self.live)
        return self.live, self.asker

    def close(self) -> None:
        if self.asker is not None:
            self.asker.close()


async def _awaited(value: Any) -> object:
    return await value

"""``safebox exec``: one session, one command, on the API's run path.

The sequence (``run``), each step in its own module (docs/layers.md, "The
run path"):

1. Take the process's signals over (``_signals``), before anything is
   spawned.
2. Open the session (run/session.py): sweep dead runs' dirs, load the
   policy (cached; pydantic only on a miss), pick the layers, plan the
   limits, check the helper, create the run dir, start the proxy, load the
   seccomp programs.
3. Prepare the command: check the write roots, start the scan of the work
   tree (adopting the cli's prescan), resolve, build the helper policy and
   the environment. ``--dry-run`` prints the plan and stops here.
4. Start it (run/supervise.py): spawn bwrap (or the helper alone) in its
   own process group, read the helper's status line, relay signals. A
   terminating signal that arrives before the spawn ends the start-up
   (128+N, everything above undone); one that arrives after it is queued
   until the command exists, then relayed.
5. Wait; map the exit status (own; 128+N on signal N; 124 at limits.wallTime;
   125 when safebox or bwrap failed before the command ran).
6. Finish: explain refusals, quarantine protected files the command
   created (run/protect.py), run records; stop the proxy; remove the run dir.
"""

from __future__ import annotations

import os
import sys

from safebox import _signals
from safebox._record import Frozen
from safebox.errors import RunError
from safebox.policy.load import Flags, load_cached
from safebox.run.plan import Without
from safebox.run.session import Options, Session

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from safebox.policy.effective import EffectivePolicy
    from safebox.policy.load import Context


class ExecRequest(Frozen):
    """Everything ``safebox exec`` was asked to do."""

    command: tuple[str, ...]
    policy_files: tuple[str, ...] = ()  # -p FILE..., layered in order
    flags: Flags = Flags()
    without: Without | None = None
    strict: bool = False
    dry_run: bool = False
    audit_log: str | None = None
    verbose: bool = False
    publish: tuple[str, ...] = ()  # ports as given on the command line
    quiet: bool = False  # no refused-host lines, no hints
    learn: str | None = None  # --learn OUT: any public host; the suggested policy goes to OUT
    summary: str | None = None  # --summary FILE: append this run's Markdown report
    observe: str | None = None  # --observe: off, calls, writes, all; None: calls, or all with --audit-log
    review: bool = False  # --review: writes held in a layer (safebox.review)
    ask: bool = False  # --ask: put hosts no entry allows to the user on /dev/tty (prompt.py)
    ask_timeout: str | None = None  # --ask-timeout SECONDS
    control_fd: str | None = None  # --control-fd N: live network lists (control.py)


#: The request's fields a session takes as they are: every one both records
#: name (written once, in each record, not a third time here).
_PASSED_ON = tuple(f for f in Options.__fields__ if f in ExecRequest.__fields__)


def say(msg: str) -> None:
    """One ``safebox:`` line on stderr."""
    sys.stderr.write(f"safebox: {msg}\n")
    sys.stderr.flush()


def enforce_argv(req: ExecRequest) -> tuple[str, ...]:
    """The ``safebox exec`` command line that enforces what ``req --learn
    OUT`` writes: ``-p OUT``, then the options that shape the run but are not
    policy (``--without``, ``--publish``), then the command. OUT holds every
    policy layer and flag of the run, so none is repeated. ``safebox`` is
    named as it was run unless that is the one on PATH."""
    assert req.learn is not None
    argv = [*_program(), "exec", "-p", req.learn]
    if req.without is not None:
        argv += ["--without", req.without.value]
    for port in req.publish:
        argv += ["--publish", port]
    return (*argv, "--", *req.command)


def _program() -> list[str]:
    """How to run this safebox again: ``safebox`` when PATH finds this one,
    else its path (``python -m safebox``: the interpreter and ``-m``)."""
    import shutil

    me = sys.argv[0] if sys.argv and sys.argv[0] else "safebox"
    if os.path.basename(me) == "__main__.py":
        return [sys.executable, "-m", "safebox"]
    found = shutil.which("safebox")
    if found is not None and os.path.realpath(found) == os.path.realpath(me):
        return ["safebox"]
    return [os.path.abspath(me)]


def run(req: ExecRequest, *, prescan: dict[tuple[str, int], Any] | None = None) -> int:
    """Run ``req.command`` sandboxed; return the exit status for ``safebox exec``.

    Raises :class:`_signals.StartInterrupted` when a terminating signal
    arrived before the sandbox was spawned, after undoing the start-up."""
    if not req.command:
        raise RunError("no command given (usage: safebox exec [OPTIONS] -- COMMAND [ARGS]...)")
    # The cli caught them already; run() called otherwise must not lose one either.
    _signals.catch()  # 1.
    flags = req.flags.replace(strict=True) if req.strict and not req.flags.strict else req.flags

    ran_under: list[dict[str, Any]] = []  # --learn: the policy the run ran under, as one document

    def load(ctx: Context, cache_dir: str) -> EffectivePolicy:
        if req.learn:
            # Not from the cache: the learned policy is written from the
            # same bytes the run's policy was merged from.
            from safebox.policy.load import load_with_document

            policy, doc = load_with_document(ctx, policy_files=req.policy_files, flags=flags)
            ran_under.append(doc)
            return policy
        return load_cached(ctx, policy_files=req.policy_files, flags=flags, cache_dir=cache_dir)

    runtime = None
    if req.ask or req.control_fd is not None or req.ask_timeout is not None:
        from safebox.prompt import exec_runtime

        runtime = exec_runtime(ask=req.ask, ask_timeout=req.ask_timeout, control_fd=req.control_fd, say=say)
    opts = Options(**{f: getattr(req, f) for f in _PASSED_ON}, cli=True,
                   learn_base=(lambda: ran_under[-1]) if req.learn else None,
                   enforce_argv=enforce_argv(req) if req.learn else (), runtime=runtime)
    with Session(load, opts=opts, say=say) as session:  # 2.
        command = session.command(req.command, prescan=prescan)
        text = command.prepare()  # 3.
        if text is not None:
            sys.stdout.write(text)
            return 0
        try:
            rc = command.start().wait()  # 4. and 5.
        except BaseException:
            command.cleanup()
            raise
        assert rc is not None  # no timeout given
        command.finish(rc)  # 6.
        return rc


__all__ = ["ExecRequest", "Without", "run", "say"]

"""``safebox exec``: one session, one command, on the API's run path.

The sequence (``run``), each step in its own module (docs/layers.md, "The
run path"):

1. Take the process's signals over (``_signals``), before anything is
   spawned.
2. Open the session (run/session.py): sweep dead runs' dirs, load the
   policy (cached; pydantic only on a miss), pick the layers, plan the
   limits, check the helper, create the run dir, start the proxy, load the
   seccomp programs.
3. Prepare the command (run/command.py), each step returning the value
   the next takes: check the write roots, start the scan of the work tree
   (adopting the cli's prescan), observe (resolve: the host's paths looked
   up, as ``Facts``), write what the run leaves before it starts, decide
   (pure: the helper policy and the environment, as the frozen
   ``Decision``). ``--dry-run`` prints the plan and stops here.
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
from safebox.exec_options import EXEC_OPTIONS
from safebox.policy.load import Flags, load_cached
from safebox.run.plan import Without
from safebox.run.session import Options, Session

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

    from safebox.policy.effective import EffectivePolicy
    from safebox.policy.load import Context


class ExecRequest(Frozen):
    """Everything ``safebox exec`` was asked to do: the command, the
    policy's last layer (``flags``), how the session runs (``options``),
    and the runtime decisions. Made from a parsed command line by
    :func:`request`, each option put where exec_options.EXEC_OPTIONS says."""

    command: tuple[str, ...]
    flags: Flags = Flags()
    options: Options = Options()
    ask: bool = False  # --ask: put hosts no entry allows to the user on /dev/tty (runtime/terminal.py)
    ask_timeout: str | None = None  # --ask-timeout SECONDS
    control_fd: str | None = None  # --control-fd N: live network lists (runtime/control_fd.py)


#: An option's value as the record's field holds it, where that is not the
#: string typed (a flag is a bool, a repeatable option a tuple).
_PARSE: dict[str, Callable[[str], Any]] = {"without": Without}


def request(parsed: Mapping[str, Any]) -> ExecRequest:
    """The request a parsed ``exec`` command line (cli.fast_parse_exec, or
    click's keywords) makes: each option's value goes to the records its
    row of EXEC_OPTIONS names (``into``)."""
    into: dict[str, dict[str, Any]] = {"flags": {}, "options": {}, "request": {}}
    for o in EXEC_OPTIONS:
        value = parsed[o.dest]
        if o.multiple:
            value = tuple(value)
        elif o.value is None:
            value = bool(value)
        elif o.dest in _PARSE:
            value = _PARSE[o.dest](value) if value else None
        for record in o.into:
            into[record][o.dest] = value
    return ExecRequest(command=tuple(parsed["command"]), flags=Flags(**into["flags"]),
                       options=Options(**into["options"]), **into["request"])


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
    opts = req.options
    assert opts.learn is not None
    argv = [*_program(), "exec", "-p", opts.learn]
    if opts.without is not None:
        argv += ["--without", opts.without.value]
    for port in opts.publish:
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
    opts = req.options
    flags = req.flags.replace(strict=True) if opts.strict and not req.flags.strict else req.flags

    ran_under: list[dict[str, Any]] = []  # --learn: the policy the run ran under, as one document

    def load(ctx: Context, cache_dir: str) -> EffectivePolicy:
        if opts.learn:
            # Not from the cache: the learned policy is written from the
            # same bytes the run's policy was merged from.
            from safebox.policy.load import load_with_document

            policy, doc = load_with_document(ctx, policy_files=opts.policy_files, flags=flags)
            ran_under.append(doc)
            return policy
        return load_cached(ctx, policy_files=opts.policy_files, flags=flags, cache_dir=cache_dir)

    runtime = None
    if req.ask or req.control_fd is not None or req.ask_timeout is not None:
        from safebox.runtime.terminal import exec_runtime

        runtime = exec_runtime(ask=req.ask, ask_timeout=req.ask_timeout, control_fd=req.control_fd, say=say)
    opts = opts.replace(cli=True, learn_base=(lambda: ran_under[-1]) if opts.learn else None,
                        enforce_argv=enforce_argv(req) if opts.learn else (), runtime=runtime)
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


__all__ = ["ExecRequest", "Without", "request", "run", "say"]

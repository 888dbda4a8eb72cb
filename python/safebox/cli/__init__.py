"""The ``safebox`` command. The only place where errors become messages and exit statuses.

``safebox exec`` is on a hot path: its command line is parsed by a small
parser generated from the same option table as the click command, so neither
click nor pydantic is imported when the policy cache is warm. The fast parser
also owns exec's usage errors (a typo, a missing value or command), each one
``safebox:`` line and exit 125 like every other safebox error; only
``--help`` goes to click.

The command groups of their own (``safebox policy``, ``safebox mcp``) are
cli/policy.py and cli/mcp.py (``safebox changes`` is review/cli.py's, by the
same pattern): loaded only when the click application is built (any command
but a plain ``exec``), each gets :func:`_guarded`, the error mapping, passed
in (``add_commands(app, guarded)``) rather than importing it back, so only
this module maps errors to exit codes.
"""

from __future__ import annotations

import os
import sys

from safebox.errors import EXIT_SAFEBOX_FAILED, SafeboxError

# The option table lives in its own module, so that code reading exec lines
# back (mcpwrap) needs no import of the CLI, which imports it.
from safebox.exec_options import EXEC_OPTIONS

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, NoReturn

    import click

    from safebox.run.main import ExecRequest


_BY_NAME = {o.long: o for o in EXEC_OPTIONS} | {o.short: o for o in EXEC_OPTIONS if o.short}


class UnknownOption(Exception):
    """An ``exec`` option that does not exist (before ``--`` and the command)."""


class ExecUsageError(Exception):
    """A malformed ``exec`` command line: a missing value or command, a bad choice."""


NO_COMMAND = "no command given (usage: safebox exec [OPTIONS] -- COMMAND [ARGS]...)"


def fast_parse_exec(args: list[str]) -> dict[str, Any] | None:
    """Parse ``exec`` arguments; None for ``--help`` (click prints it).

    Raises :class:`UnknownOption` or :class:`ExecUsageError` naming the flag."""
    out: dict[str, Any] = {o.dest: ([] if o.multiple else (None if o.value else False)) for o in EXEC_OPTIONS}
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            i += 1
            break
        if not a.startswith("-") or a == "-":
            break
        name, eq, inline = a.partition("=") if a.startswith("--") else (a, "", "")
        opt = _BY_NAME.get(name)
        if opt is None:
            if name not in ("-h", "--help"):
                # Without this, click (ignore_unknown_options, so that the
                # command's own options pass through) would run a typo such
                # as --allow-writ as the command.
                raise UnknownOption(name)
            return None
        if opt.value is None:
            if eq:
                raise ExecUsageError(f"{name} takes no value")
            out[opt.dest] = True
            i += 1
            continue
        if eq:
            val = inline
            i += 1
        elif opt.optional is not None:
            val = opt.optional
            i += 1
        else:
            if i + 1 >= len(args):
                raise ExecUsageError(f"{name} needs a value ({opt.value})")
            val = args[i + 1]
            i += 2
        if opt.choices and val not in opt.choices:
            raise ExecUsageError(f"{name}: {val!r} is not one of {', '.join(opt.choices)}")
        if opt.multiple:
            out[opt.dest].append(val)
        elif out[opt.dest] is not None:
            # Never "the last one wins": `-p strict.toml -p other.toml` would
            # silently drop the first file's denies.
            raise ExecUsageError(f"{name} given twice (it takes one {opt.value})")
        else:
            out[opt.dest] = val
    command = args[i:]
    if not command:
        raise ExecUsageError(NO_COMMAND)
    out["command"] = command
    return out


def _request(parsed: dict[str, Any]) -> ExecRequest:
    from safebox.run.main import request  # each option where EXEC_OPTIONS puts it

    return request(parsed)


def fail(err: SafeboxError) -> NoReturn:
    """Print ``safebox: <message>`` (and one ``hint:`` line) and exit with the error's status."""
    msg = " ".join(err.message.split("\n"))
    sys.stderr.write(f"safebox: {msg}\n")
    if err.hint:
        sys.stderr.write(f"hint: {err.hint}\n")
    sys.stderr.flush()
    sys.exit(err.exit_code)


def _guarded(fn: Callable[..., int], *args: Any) -> int:
    from safebox import _signals

    try:
        return int(fn(*args))
    except _signals.StartInterrupted as e:
        return 128 + e.signum  # the command never started; everything undone (docs/index.md, Signals)
    except SafeboxError as e:
        signum = _signals.interrupted_before_command()
        if signum:
            # A start-up failing after SIGTERM & co. reached safebox fails
            # because of it (the group's signal killed ripgrep, bwrap never
            # reported): report the signal, as a killed process would.
            return 128 + signum
        fail(e)
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # noqa: BLE001 — fail closed with one line, never a traceback
        if os.environ.get("SAFEBOX_DEBUG"):
            raise
        sys.stderr.write(f"safebox: internal error: {type(e).__name__}: {e}\n")
        return EXIT_SAFEBOX_FAILED


def _exit_now(rc: int) -> None:
    """End the exec fast path without the interpreter's teardown (module
    finalisation costs about 1.4 ms, a tenth of safebox's own start-up:
    docs/benchmarks.md). Nothing is left to finalise: run() has removed the
    run dir, stopped the proxy and its thread, cancelled the walks and waited
    for the command, and audit events are single write(2)s. Only Python's
    own stdio buffers need flushing."""
    from safebox.builder import prescan as _prescan
    _prescan.cancel_all()  # walks begun for a run that ended before adopting them
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass  # a closed pipe (`safebox exec -- cmd | head`): nothing more to say
    os._exit(rc)


def _chdir(path: str) -> None:
    """``exec --chdir DIR``: DIR becomes the working directory, before anything
    is resolved against it (it is the work dir, a write root)."""
    try:
        os.chdir(path)
    except OSError as e:
        raise SafeboxError(f"exec: --chdir {path}: {e.strerror}",
                           hint="give an existing directory (safebox mcp wrap creates each server's)") from None


def _run_exec(parsed: dict[str, Any]) -> int:
    # ripgrep's walk of the working directory starts before the runner (and
    # everything it imports) is loaded; the runner adopts it.
    from safebox.builder import prescan as _prescan
    from safebox.builder.resolve import prestart

    if parsed.get("chdir"):
        _chdir(parsed["chdir"])
    prescan: dict[tuple[str, int], Any] = {}
    if not parsed["dry_run"]:
        try:
            prescan = prestart(cwd=os.path.realpath(os.getcwd()), rg=_prescan.safe_tool("rg"))
        except Exception:  # noqa: BLE001 — only an optimisation; the runner starts its own
            prescan = {}
    try:
        from safebox.run.main import run

        return run(_request(parsed), prescan=prescan)
    finally:
        for proc in prescan.values():  # not adopted (another root or depth): stop it
            proc.cancel()


# ------------------------------------------------------------------ click


def _report(logs: tuple[str, ...], fmt: str) -> int:
    """``safebox report``: each run in the audit logs."""
    from safebox.report import render, runs_from_logs

    text = render(runs_from_logs(logs), fmt)
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def _click_app() -> click.Group:
    """The click application: every command (``exec`` here for ``--help``
    and what the fast parser hands over). The groups of their own get the
    error mapping passed in (the note below)."""
    import click

    from safebox import __version__
    from safebox.cli import mcp, policy
    from safebox.review.cli import add_commands as add_changes_commands

    @click.group(context_settings={"help_option_names": ["-h", "--help"]})
    @click.version_option(__version__, prog_name="safebox")
    def app() -> None:
        """Run untrusted commands in a Linux sandbox.

        Two layers from one policy: bubblewrap (namespaces, read-only root,
        masked credentials) and a helper that applies Landlock, drops every
        capability and installs a seccomp filter. Network goes only through a
        filtering proxy to the allowed domains.
        """

    _add_exec_command(app)
    _add_doctor_command(app)
    policy.add_commands(app, _guarded)
    add_changes_commands(app, _guarded)  # safebox changes (docs/review.md)
    mcp.add_commands(app, _guarded)
    _add_report_command(app)
    return app


def _exec_options(f: Callable[..., None]) -> Callable[..., None]:
    """The click options of ``exec``, from the same table as the fast parser."""
    import click

    for o in reversed(EXEC_OPTIONS):
        names = [n for n in (o.short, o.long) if n]
        if o.value is None:
            f = click.option(*names, o.dest, is_flag=True, help=o.help)(f)
        else:
            typ = click.Choice(o.choices) if o.choices else click.STRING
            extra: dict[str, Any] = {"is_flag": False, "flag_value": o.optional} if o.optional else {}
            f = click.option(*names, o.dest, metavar=o.value, type=typ, multiple=o.multiple, help=o.help,
                             **extra)(f)
    return f


def _add_exec_command(app: click.Group) -> None:
    """``safebox exec`` as click has it."""
    import click

    @app.command("exec", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
    @_exec_options
    @click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
    def exec_cmd(command: tuple[str, ...], **kw: Any) -> None:
        """Run COMMAND inside the sandbox.

        Exit status: the command's own; 128+N if it died of signal N; 124 it
        ran past --timeout (limits.wallTime); 125 when safebox fails (bad
        policy, bwrap missing, helper refused); 126 the command is not
        executable; 127 it was not found.
        """
        if command and command[0] == "--":
            command = command[1:]
        if not command:
            raise click.UsageError(NO_COMMAND)
        kw["command"] = list(command)
        sys.exit(_guarded(_run_exec, kw))


def _add_doctor_command(app: click.Group) -> None:
    """``safebox doctor`` (safebox/doctor/)."""
    import click

    @app.command("doctor")
    @click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON (schema in docs/doctor.md).")
    def doctor_cmd(as_json: bool) -> None:
        """Check bwrap, socat, ripgrep, the helper and the kernel; exit 1 if a required check fails."""
        from pathlib import Path

        from safebox import doctor
        from safebox.run.helper_binary import find_helper

        sys.exit(doctor.main(["--json"] if as_json else [], helper_path=Path(find_helper()), standalone=False))


def _add_report_command(app: click.Group) -> None:
    """``safebox report`` (safebox/report.py)."""
    import click

    @app.command("report")
    @click.argument("logs", nargs=-1, required=True, type=click.Path(dir_okay=False))
    @click.option("--format", "fmt", type=click.Choice(["markdown", "json", "text"]), default="text",
                  show_default=True, help="Output format (markdown: as the GitHub step summary shows it).")
    def report_cmd(logs: tuple[str, ...], fmt: str) -> None:
        """Report each run in the audit LOGS: command, layers enforced, exit status and
        duration; hosts allowed and refused (rule, connections, bytes); refused writes,
        reads and system calls; quarantined files."""
        sys.exit(_guarded(_report, logs, fmt))


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``safebox`` console script."""
    args = sys.argv[1:] if argv is None else list(argv)
    if args and args[0] == "exec":
        from safebox import _signals
        from safebox.builder import prescan as _prescan

        _signals.catch()  # before anything is spawned (idempotent: the launcher's early() did it)
        _prescan.early(args)  # build.py's launcher did it already; pip's arrives here first
        try:
            _main_exec(args)
        finally:
            _prescan.cancel_all()  # whatever a failing or slow path did not adopt
    _click_app()(args=args, prog_name="safebox")


def _main_exec(args: list[str]) -> None:
    """``safebox exec``: the fast parser, or click for what it does not handle."""
    try:
        parsed = fast_parse_exec(args[1:])
    except UnknownOption as e:
        import difflib

        near = difflib.get_close_matches(str(e), [o.long for o in EXEC_OPTIONS], n=1)
        fail(SafeboxError(f"exec: no such option {e}" + (f" (did you mean {near[0]}?)" if near else ""),
                          hint="put the command after --, e.g. safebox exec -- cmd --its-options"))
    except ExecUsageError as e:
        fail(SafeboxError(f"exec: {e}", hint="see safebox exec --help"))
    if parsed is not None:
        _exit_now(_guarded(_run_exec, parsed))
    import click

    try:
        _click_app().main(args=args, prog_name="safebox", standalone_mode=False)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except click.ClickException as e:
        # Like `docker run`: a usage error of exec is safebox failing: 125,
        # in safebox's one-line form (click's own is usage, blank, "Error:").
        fail(SafeboxError(f"exec: {e.format_message()}", hint="see safebox exec --help"))
    sys.exit(0)

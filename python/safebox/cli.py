"""The ``safebox`` command. The only place where errors become messages and exit statuses.

``safebox exec`` is on a hot path: its command line is parsed by a small
parser generated from the same option table as the click command, so neither
click nor pydantic is imported when the policy cache is warm. The fast parser
also owns exec's usage errors (a typo, a missing value or command), each one
``safebox:`` line and exit 125 like every other safebox error; only
``--help`` goes to click.
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

    from safebox.runner import ExecRequest


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
    from safebox.policy.load import Flags
    from safebox.runner import ExecRequest, Without

    return ExecRequest(
        command=tuple(parsed["command"]),
        policy_files=tuple(parsed["policy_files"]),
        flags=Flags(allow_write=tuple(parsed["allow_write"]), deny_read=tuple(parsed["deny_read"]),
                    allow_read=tuple(parsed["allow_read"]),
                    deny_write=tuple(parsed["deny_write"]), allow_domains=tuple(parsed["allow_domains"]),
                    deny_domains=tuple(parsed["deny_domains"]), strict=bool(parsed["strict"]),
                    presets=tuple(parsed["presets"]), limit_processes=parsed["limit_processes"],
                    limit_memory=parsed["limit_memory"], limit_tmp_size=parsed["limit_tmp_size"],
                    timeout=parsed["timeout"], allow_gpu=parsed["allow_gpu"]),
        without=Without(parsed["without"]) if parsed["without"] else None,
        strict=bool(parsed["strict"]), dry_run=bool(parsed["dry_run"]),
        publish=tuple(parsed["publish"]),
        audit_log=parsed["audit_log"], verbose=bool(parsed["verbose"]), quiet=bool(parsed["quiet"]),
        summary=parsed["summary"], learn=parsed["learn"], observe=parsed["observe"],
        ask=bool(parsed["ask"]), ask_timeout=parsed["ask_timeout"], control_fd=parsed["control_fd"],
        review=bool(parsed["review"]))


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
        from safebox.runner import run

        return run(_request(parsed), prescan=prescan)
    finally:
        for proc in prescan.values():  # not adopted (another root or depth): stop it
            proc.cancel()


# ------------------------------------------------------------------ click

def _policy_show(policy_files: tuple[str, ...], presets: tuple[str, ...], as_json: bool) -> int:
    """``safebox policy show``: the merged policy, where each entry came from, the presets."""
    import json

    import click

    from safebox.policy.defaults import credential_env
    from safebox.policy.document import policy_document
    from safebox.policy.layers import replaced_values
    from safebox.policy.load import Context, Flags, read_layers, state_dir
    from safebox.policy.merge import merge
    from safebox.policy.presets import describe
    from safebox.run.host import home as _host_home

    home = _host_home(os.environ)
    cwd = os.path.realpath(os.getcwd())
    ctx = Context(cwd=cwd, home=home, credential_env=credential_env(os.environ))
    layers = read_layers(ctx, policy_files=policy_files, flags=Flags(presets=presets))
    eff = merge(layers, ctx)
    expanded = describe(eff.presets, eff.cache_presets, state=state_dir(home), home=home, work_dir=cwd)
    sources = eff.sources or ()
    named = [layer.name for layer, doc in layers if doc]
    try:
        if as_json:
            click.echo(json.dumps({
                "policy": policy_document(eff),
                "layers": named,
                "sources": [{"key": k, "value": v, "source": src} for k, v, src in sources],
                "replaced": [{"key": k, "value": v, "source": src, "by": by}
                             for k, (v, src, by) in replaced_values([(layer.name, doc) for layer, doc in layers])],
                "presets": expanded,
            }, indent=2))
            return 0
        _show_sources(sources, patterns={*eff.deny_read_globs, *eff.allow_read_globs, *eff.deny_write_globs},
                      replaced=dict(replaced_values([(layer.name, doc) for layer, doc in layers])))
        click.echo(f"layers, first to last (a later one adds list entries and replaces other values): "
                   f"{' < '.join(named)}")
        _show_presets(expanded)
        if eff.allowed_domains:
            click.echo(f"network: on, through safebox's proxy, to the {len(eff.allowed_domains)} "
                       "allowed domain pattern(s) only")
        else:
            click.echo("network: off (no allowed domain: the command has no network at all; "
                       "allow one with --allow-domain or network.allowedDomains)")
    except BrokenPipeError:
        # `safebox policy show | head`: the reader had enough. Quiet,
        # as cat is; stdout goes to /dev/null so the exit flush cannot fail.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def _show_sources(sources: tuple[tuple[str, Any, str], ...] | list[tuple[str, Any, str]], *,
                  patterns: set[str], replaced: dict[str, tuple[Any, str, str]]) -> None:
    """Each key, then each of its entries with the layer it came from; a
    value that replaced an earlier layer's different one says so."""
    import json

    import click

    by_key: dict[str, list[tuple[object, str]]] = {}
    for key, value, src in sources:
        by_key.setdefault(key, []).append((value, src))
    for key, entries in by_key.items():
        click.echo(f"{key}:")
        for value, src in entries:
            # Values as a policy file spells them (true, 6), paths and names bare;
            # a path with a glob character says whether it is a pattern.
            shown = value if isinstance(value, str) else json.dumps(value)
            if isinstance(value, str) and key.startswith("filesystem.") and any(c in value for c in "*?[]"):
                shown += " (glob pattern)" if value in patterns else " (literal path)"
            was = replaced.get(key)
            if was is not None and was[2] == src:
                shown_was = was[0] if isinstance(was[0], str) else json.dumps(was[0])
                src += f" (replaces {shown_was} from {was[1]})"
            click.echo(f"  {shown}  <- {src}")


def _show_presets(expanded: dict[str, Any]) -> None:
    """What each preset expanded to: its domains and caches."""
    import click

    for name, info in expanded.items():
        click.echo(f"preset {name} ({info['why']}):")
        click.echo(f"  domains: {', '.join(info['domains'])}")
        for cache in info["caches"]:
            click.echo(f"  cache {cache['dir']}")
            for var, value in cache["env"].items():
                click.echo(f"    {var}={value}")
            if cache["hostPaths"]:
                click.echo(f"    read-only inside: {', '.join(cache['hostPaths'])}")


def _policy_check(file: str) -> int:
    """``safebox policy check``: validate one policy file."""
    import click

    from safebox.policy.load import Layer, _read_file, parse_document
    from safebox.policy.validate import validate_layer

    try:
        raw = _read_file(file)
    except FileNotFoundError:
        from safebox.errors import PolicyError

        raise PolicyError(f"{file}: policy file not found") from None
    validate_layer(Layer(name=file, data=parse_document(file, raw)))
    click.echo(f"{file}: ok")
    return 0


def _read_policy(file: str) -> dict[str, Any]:
    """One policy file, validated, as its document (defaults left out)."""
    from safebox.errors import PolicyError
    from safebox.policy.load import Layer, _read_file, parse_document
    from safebox.policy.validate import validate_layer

    try:
        raw = _read_file(file)
    except FileNotFoundError:
        raise PolicyError(f"{file}: policy file not found") from None
    return validate_layer(Layer(name=file, data=parse_document(file, raw)))


def _policy_merge(files: tuple[str, ...], output: str | None) -> int:
    """``safebox policy merge``: the files layered in order (as ``-p a -p b``
    layers them: lists add up, other values take the last file's) into one
    policy document, JSON, to stdout or ``-o``."""
    import json

    import click

    from safebox.learn import write_policy
    from safebox.policy.layers import merge_documents

    doc = merge_documents(_read_policy(f) for f in files)
    if output:
        from safebox.builder.resolve import WRITE_ROOTS, read_write_roots
        from safebox.hostio import refuse_planted_links
        from safebox.policy.load import state_dir
        from safebox.run.host import home as _host_home

        earlier = tuple(read_write_roots(os.path.join(state_dir(_host_home(os.environ)), WRITE_ROOTS)))
        refuse_planted_links(os.path.abspath(output), (*earlier, os.getcwd()), what="policy merge -o")
        write_policy(output, doc)
    else:
        click.echo(json.dumps(doc, indent=2))
    return 0


def _policy_diff(old: str, new: str, as_json: bool) -> int:
    """``safebox policy diff``: exit 0 when OLD and NEW are the same policy, 1 when not."""
    import json

    from safebox.policy.diff import diff, render_text

    changes = diff(_read_policy(old), _read_policy(new))
    try:
        if as_json:
            sys.stdout.write(json.dumps({"old": old, "new": new, "equal": not changes,
                                         "changes": [c.as_json() for c in changes]}, indent=2) + "\n")
        else:
            sys.stdout.write(render_text(changes, old_name=old, new_name=new))
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 1 if changes else 0


def _policy_suggest(logs: tuple[str, ...], output: str | None) -> int:
    """``safebox policy suggest``: one policy from the runs in audit logs."""
    import json

    import click

    from safebox.learn import suggest, write_policy
    from safebox.report import runs_from_logs
    from safebox.run.host import home as _host_home

    runs = runs_from_logs(logs)
    doc, notes = suggest(runs, home=_host_home(os.environ))
    for note in notes:
        click.echo(f"safebox: {note}", err=True)
    if output:
        from safebox.builder.resolve import WRITE_ROOTS, read_write_roots
        from safebox.hostio import refuse_planted_links
        from safebox.policy.load import state_dir

        earlier = tuple(read_write_roots(os.path.join(state_dir(_host_home(os.environ)), WRITE_ROOTS)))
        refuse_planted_links(os.path.abspath(output), (*earlier, os.getcwd()), what="policy suggest -o")
        write_policy(output, doc)
        click.echo(f"safebox: {len(runs)} run(s) merged; policy written to {output}", err=True)
    else:
        click.echo(json.dumps(doc, indent=2))
    return 0


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


def _add_policy_commands(app: click.Group) -> None:
    """``safebox policy check|suggest|show|merge|diff``."""
    import click

    @app.group("policy")
    def policy_grp() -> None:
        """Validate and inspect policies."""

    @policy_grp.command("check")
    @click.argument("file", type=click.Path(dir_okay=False))
    def policy_check(file: str) -> None:
        """Validate FILE (JSON or TOML); exit 125 naming the key on error."""
        sys.exit(_guarded(_policy_check, file))

    @policy_grp.command("suggest")
    @click.argument("logs", nargs=-1, required=True, type=click.Path(dir_okay=False))
    @click.option("-o", "--output", metavar="FILE", help="Write the policy to FILE instead of stdout.")
    def policy_suggest(logs: tuple[str, ...], output: str | None) -> None:
        """Merge the runs in audit LOGS into one suggested policy (JSON, srt-compatible):
        the hosts they reached (siblings collapsed to *.parent only when several were seen)
        and, with the violations feed, directories of refused writes."""
        sys.exit(_guarded(_policy_suggest, logs, output))

    @policy_grp.command("show")
    @click.option("-p", "--policy", "policy_files", metavar="FILE", multiple=True,
                  help="Also layer FILE, as exec --policy does (repeatable, in order).")
    @click.option("--preset", "presets", metavar="NAME", multiple=True,
                  help="Also apply preset NAME, as exec --preset does (repeatable).")
    @click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
    def policy_show(policy_files: tuple[str, ...], presets: tuple[str, ...], as_json: bool) -> None:
        """Print the effective merged policy, each entry with the layer it came from
        (and the value a later layer replaced), the layers in order, and what each
        preset expanded to."""
        sys.exit(_guarded(_policy_show, policy_files, presets, as_json))

    @policy_grp.command("merge")
    @click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
    @click.option("-o", "--output", metavar="FILE", help="Write the policy to FILE instead of stdout.")
    def policy_merge(files: tuple[str, ...], output: str | None) -> None:
        """Layer policy FILES in order into one (JSON): lists add up, other
        values take the last file's, as `exec -p a -p b` layers them."""
        sys.exit(_guarded(_policy_merge, files, output))

    @policy_grp.command("diff")
    @click.argument("old", type=click.Path(dir_okay=False))
    @click.argument("new", type=click.Path(dir_okay=False))
    @click.option("--json", "as_json", is_flag=True, help="Print the changes as JSON.")
    def policy_diff(old: str, new: str, as_json: bool) -> None:
        """What changes from policy file OLD to NEW (JSON or TOML), key by key:
        list entries added (+) and removed (-), other values old -> new, each
        change that widens the sandbox marked. Exit 0 when they are the same
        policy, 1 when they differ, 125 when one is not a valid policy."""
        sys.exit(_guarded(_policy_diff, old, new, as_json))


def _mcp(file: str, *, unwrap: bool, dry_run: bool, servers: tuple[str, ...], **kw: Any) -> int:
    """``safebox mcp wrap|unwrap``: rewrite an MCP client config (safebox/mcpwrap.py)."""
    from safebox import mcpwrap
    from safebox.policy.load import user_config_dir
    from safebox.run.host import home as _host_home

    path = os.path.abspath(file)
    if not dry_run:
        from safebox.builder.resolve import WRITE_ROOTS, read_write_roots
        from safebox.hostio import refuse_planted_links
        from safebox.policy.load import state_dir

        # A project's .mcp.json may lie where earlier sandboxed commands wrote (as `policy merge -o` checks);
        # not the current directory as such: a client's config under a dotfile manager's ~/.config link is
        # no sandbox's doing unless a run had it as a write root.
        earlier = tuple(read_write_roots(os.path.join(state_dir(_host_home(os.environ)), WRITE_ROOTS)))
        refuse_planted_links(path, earlier, what=f"mcp {'unwrap' if unwrap else 'wrap'}")
    text, mode = mcpwrap.read(path)
    if unwrap:
        new, outcomes = mcpwrap.unwrap_text(text, only=servers, name=file)
    else:
        home = _host_home(os.environ)

        def absolute(p: str) -> str:  # the client starts safebox elsewhere: no path relative to here
            return p if p.startswith(("/", "~")) else os.path.abspath(p)

        opts = mcpwrap.WrapOptions(
            safebox=kw["safebox"] or _this_safebox(), state=mcpwrap.state_dir(os.environ, home),
            config=os.path.join(user_config_dir(home), "mcp"),
            policy_files=tuple(map(absolute, kw["policy_files"])), presets=kw["presets"],
            allow_read=tuple(map(absolute, kw["allow_read"])), allow_write=tuple(map(absolute, kw["allow_write"])),
            deny_read=tuple(map(absolute, kw["deny_read"])), allow_domains=kw["allow_domains"],
            deny_domains=kw["deny_domains"], work_dir=absolute(kw["work_dir"]) if kw["work_dir"] else None,
            audit_log=absolute(kw["audit_log"]) if kw["audit_log"] else None, auto_presets=not kw["no_auto_preset"])
        _check_wrap_policy(opts, home)
        new, outcomes = mcpwrap.wrap_text(text, opts, only=servers, name=file)
    out = sys.stderr if dry_run else sys.stdout
    for o in outcomes:
        out.write(mcpwrap.report(o) + "\n")
    if dry_run:
        sys.stdout.write(mcpwrap.diff(file, text, new))
        return 0
    mcpwrap.prepare(outcomes)
    if new != text:
        mcpwrap.write(path, new, mode)
        out.write(f"{mcpwrap.shown(file)}: written ({sum(o.action in ('wrapped', 'unwrapped') for o in outcomes)} server(s) "
                  f"changed); restart the client to apply\n")
    else:
        out.write(f"{mcpwrap.shown(file)}: nothing to change\n")
    sys.stdout.flush()
    return 0


def _check_wrap_policy(opts: Any, home: str) -> None:
    """Refuse now what each wrapped server's ``safebox exec`` would refuse at
    every start (an unknown preset, a bad domain, a policy file that does not
    validate): a client shows a server that exits 125 only in its logs."""
    from safebox.policy.defaults import credential_env
    from safebox.policy.load import Context, Flags, read_layers
    from safebox.policy.merge import merge

    ctx = Context(cwd=os.path.realpath(os.getcwd()), home=home, credential_env=credential_env(os.environ))
    flags = Flags(allow_write=opts.allow_write, deny_read=opts.deny_read, allow_read=opts.allow_read,
                  allow_domains=opts.allow_domains, deny_domains=opts.deny_domains,
                  presets=(*opts.presets, "npm", "pip") if opts.auto_presets else opts.presets)
    merge(read_layers(ctx, policy_files=opts.policy_files, flags=flags), ctx)


def _this_safebox() -> str:
    """The absolute path of this safebox, for a client whose PATH may not find it."""
    import shutil

    me = os.path.abspath(sys.argv[0]) if os.path.basename(sys.argv[0]) == "safebox" else None
    return me if me and os.access(me, os.X_OK) else (shutil.which("safebox") or "safebox")


def _add_changes_commands(app: Any) -> None:
    """``safebox changes``, from the review package (docs/review.md)."""
    from safebox.review.cli import add_commands

    add_commands(app, _guarded)


def _add_mcp_commands(app: click.Group) -> None:
    """``safebox mcp wrap|unwrap``."""
    import click

    @app.group("mcp")
    def mcp_grp() -> None:
        """Run the MCP servers of a client config (Claude Desktop, Claude Code, Cursor, VS Code)
        under safebox exec (docs/agents.md)."""

    server_opt = click.option("--server", "servers", metavar="NAME", multiple=True,
                              help="Only the server NAME (repeatable; default: every server in FILE).")
    dry_opt = click.option("--dry-run", is_flag=True, help="Print the change as a unified diff; write nothing.")

    @mcp_grp.command("wrap")
    @click.argument("file", type=click.Path(dir_okay=False))
    @server_opt
    @dry_opt
    @click.option("-p", "--policy", "policy_files", metavar="FILE", multiple=True,
                  help="A policy file for the servers, as exec --policy (repeatable).")
    @click.option("--preset", "presets", metavar="NAME", multiple=True,
                  help="Also this preset (npx servers get npm and uvx ones pip by themselves).")
    @click.option("--allow-read", metavar="PATH", multiple=True, help="As exec --allow-read (repeatable).")
    @click.option("--allow-write", metavar="PATH", multiple=True,
                  help="As exec --allow-write: e.g. the directories a filesystem server serves (repeatable).")
    @click.option("--deny-read", metavar="PATH", multiple=True, help="As exec --deny-read (repeatable).")
    @click.option("--allow-domain", "allow_domains", metavar="DOMAIN", multiple=True,
                  help="As exec --allow-domain: a host the servers may reach (repeatable).")
    @click.option("--deny-domain", "deny_domains", metavar="DOMAIN", multiple=True,
                  help="As exec --deny-domain (repeatable).")
    @click.option("--work-dir", metavar="DIR",
                  help="The servers' work dir (writable) instead of one of their own under "
                       "$XDG_STATE_HOME/safebox/mcp/NAME/work.")
    @click.option("--audit-log", metavar="FILE",
                  help="Their audit log instead of $XDG_STATE_HOME/safebox/mcp/NAME/audit.jsonl.")
    @click.option("--no-auto-preset", is_flag=True, help="Do not add --preset npm to npx servers, pip to uvx ones.")
    @click.option("--safebox", metavar="PATH", help="The safebox the client runs (default: this one).")
    def mcp_wrap(file: str, servers: tuple[str, ...], dry_run: bool, **kw: Any) -> None:
        """Rewrite FILE so that each stdio MCP server runs under safebox exec, in a work dir
        of its own, with an audit log. Remote (http) servers are left alone and reported.
        A server already wrapped is left as it is unless --server names it (its options are
        then replaced). Only each server's command and args change; unwrap undoes it."""
        sys.exit(_guarded(lambda: _mcp(file, unwrap=False, dry_run=dry_run, servers=servers, **kw)))

    @mcp_grp.command("unwrap")
    @click.argument("file", type=click.Path(dir_okay=False))
    @server_opt
    @dry_opt
    def mcp_unwrap(file: str, servers: tuple[str, ...], dry_run: bool) -> None:
        """Give each wrapped server in FILE its own command line back, as it was before wrap."""
        sys.exit(_guarded(lambda: _mcp(file, unwrap=True, dry_run=dry_run, servers=servers)))


def _click_app() -> click.Group:
    import click

    from safebox import __version__

    @click.group(context_settings={"help_option_names": ["-h", "--help"]})
    @click.version_option(__version__, prog_name="safebox")
    def app() -> None:
        """Run untrusted commands in a Linux sandbox.

        Two layers from one policy: bubblewrap (namespaces, read-only root,
        masked credentials) and a helper that applies Landlock, drops every
        capability and installs a seccomp filter. Network goes only through a
        filtering proxy to the allowed domains.
        """

    def exec_options(f: Callable[..., None]) -> Callable[..., None]:
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

    @app.command("exec", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
    @exec_options
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

    @app.command("doctor")
    @click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON (schema in docs/doctor.md).")
    def doctor_cmd(as_json: bool) -> None:
        """Check bwrap, socat, ripgrep, the helper and the kernel; exit 1 if a required check fails."""
        from pathlib import Path

        from safebox import doctor
        from safebox.run.helper_binary import find_helper

        sys.exit(doctor.main(["--json"] if as_json else [], helper_path=Path(find_helper()), standalone=False))

    _add_policy_commands(app)
    _add_changes_commands(app)
    _add_mcp_commands(app)

    @app.command("report")
    @click.argument("logs", nargs=-1, required=True, type=click.Path(dir_okay=False))
    @click.option("--format", "fmt", type=click.Choice(["markdown", "json", "text"]), default="text",
                  show_default=True, help="Output format (markdown: as the GitHub step summary shows it).")
    def report_cmd(logs: tuple[str, ...], fmt: str) -> None:
        """Report each run in the audit LOGS: command, layers enforced, exit status and
        duration; hosts allowed and refused (rule, connections, bytes); refused writes,
        reads and system calls; quarantined files."""
        sys.exit(_guarded(_report, logs, fmt))

    return app


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

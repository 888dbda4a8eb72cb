"""``safebox mcp wrap|unwrap``: run the MCP servers of a client config under
``safebox exec`` (safebox/mcpwrap.py, docs/agents.md)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    import click


def add_commands(app: click.Group, guarded: Callable[..., int]) -> None:
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
        sys.exit(guarded(lambda: _mcp(file, unwrap=False, dry_run=dry_run, servers=servers, **kw)))

    @mcp_grp.command("unwrap")
    @click.argument("file", type=click.Path(dir_okay=False))
    @server_opt
    @dry_opt
    def mcp_unwrap(file: str, servers: tuple[str, ...], dry_run: bool) -> None:
        """Give each wrapped server in FILE its own command line back, as it was before wrap."""
        sys.exit(guarded(lambda: _mcp(file, unwrap=True, dry_run=dry_run, servers=servers)))


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

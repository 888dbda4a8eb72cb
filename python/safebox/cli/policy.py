"""``safebox policy check|suggest|show|merge|diff`` (docs/policy-reference.md, docs/index.md)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    import click


def add_commands(app: click.Group, guarded: Callable[..., int]) -> None:
    """``safebox policy check|suggest|show|merge|diff``."""
    import click

    @app.group("policy")
    def policy_grp() -> None:
        """Validate and inspect policies."""

    @policy_grp.command("check")
    @click.argument("file", type=click.Path(dir_okay=False))
    def policy_check(file: str) -> None:
        """Validate FILE (JSON or TOML); exit 125 naming the key on error."""
        sys.exit(guarded(_policy_check, file))

    @policy_grp.command("suggest")
    @click.argument("logs", nargs=-1, required=True, type=click.Path(dir_okay=False))
    @click.option("-o", "--output", metavar="FILE", help="Write the policy to FILE instead of stdout.")
    def policy_suggest(logs: tuple[str, ...], output: str | None) -> None:
        """Merge the runs in audit LOGS into one suggested policy (JSON, srt-compatible):
        the hosts they reached (siblings collapsed to *.parent only when several were seen)
        and, with the violations feed, directories of refused writes."""
        sys.exit(guarded(_policy_suggest, logs, output))

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
        sys.exit(guarded(_policy_show, policy_files, presets, as_json))

    @policy_grp.command("merge")
    @click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
    @click.option("-o", "--output", metavar="FILE", help="Write the policy to FILE instead of stdout.")
    def policy_merge(files: tuple[str, ...], output: str | None) -> None:
        """Layer policy FILES in order into one (JSON): lists add up, other
        values take the last file's, as `exec -p a -p b` layers them."""
        sys.exit(guarded(_policy_merge, files, output))

    @policy_grp.command("diff")
    @click.argument("old", type=click.Path(dir_okay=False))
    @click.argument("new", type=click.Path(dir_okay=False))
    @click.option("--json", "as_json", is_flag=True, help="Print the changes as JSON.")
    def policy_diff(old: str, new: str, as_json: bool) -> None:
        """What changes from policy file OLD to NEW (JSON or TOML), key by key:
        list entries added (+) and removed (-), other values old -> new, each
        change that widens the sandbox marked. Exit 0 when they are the same
        policy, 1 when they differ, 125 when one is not a valid policy."""
        sys.exit(guarded(_policy_diff, old, new, as_json))


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

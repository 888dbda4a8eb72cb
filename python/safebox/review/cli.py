"""``safebox changes list|show|diff|apply|discard`` (docs/review.md)."""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable

from safebox.errors import RunError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from safebox.review.layer import Change
    from safebox.review.store import Held


def _state() -> str:
    from safebox.policy.load import state_dir
    from safebox.run.host import home

    return state_dir(home(os.environ))


_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _shown(text: str) -> str:
    """``text`` with control characters but tab and newline written as
    ``\\xNN``: file names and contents are the command's, and must not
    drive the terminal (colours, cursor moves, a title change)."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _out(text: str) -> None:
    text = _shown(text)
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _age(t: float) -> str:
    s = max(0, int(time.time() - t))
    for unit, n in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= n:
            return f"{s // n}{unit}"
    return f"{s}s"


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n //= 1024
    return f"{n}"


def cmd_list(as_json: bool) -> int:
    import json

    from safebox.review import store

    held = store.list_held(_state())
    rows: list[dict[str, Any]] = []
    for h in held:
        status = h.meta.get("status")
        if status == "running":
            status = "interrupted"  # the run never said it ended: killed (its layer is kept)
        rows.append({"id": h.id, "age": _age(float(h.meta.get("created", 0))), "size": store.size_of(h),
                     "status": status, "exit": h.meta.get("exit"), "command": h.meta.get("command"),
                     "roots": h.roots})
    if as_json:
        _out(json.dumps(rows, indent=2) + "\n")
        return 0
    if not rows:
        _out("no held runs (run a command with `safebox exec --review -- CMD`)\n")
        return 0
    lines = [f"{'ID':22} {'AGE':>5} {'SIZE':>9}  {'STATUS':11} COMMAND"]
    for r in rows:
        lines.append(f"{r['id']:22} {r['age']:>5} {_size(r['size']):>9}  {r['status']!s:11} "
                     f"{' '.join(r['command'] or [])}")
    _out("\n".join(lines) + "\n")
    return 0


def _open(rid: str) -> Held:
    from safebox.review import store

    return store.open_held(_state(), rid)


def _paths(paths: tuple[str, ...]) -> tuple[str, ...] | None:
    return tuple(os.path.abspath(p) for p in paths) if paths else None


def cmd_show(rid: str, as_json: bool) -> int:
    import json

    from safebox.review import layer

    h = _open(rid)
    cs = layer.changes(h)
    if as_json:
        _out(json.dumps({"id": h.id, "command": h.meta.get("command"), "roots": h.roots,
                         "changes": [c.as_json() for c in cs]}, indent=2) + "\n")
        return 0
    lines = [f"held run {h.id}: {' '.join(h.meta.get('command') or [])}"]
    mark = {"added": "A", "modified": "M", "deleted": "D"}
    plain = [c for c in cs if not c.runs_code]
    code = [c for c in cs if c.runs_code]
    lines += [_row(mark, c) for c in plain]
    if code:
        lines.append("would run code on the host (applied only when named: `safebox changes apply "
                     f"{h.id} PATH`):")
        lines += [_row(mark, c) for c in code]
    a, m, d = layer.counts(cs)
    lines.append(f"{a} added, {m} modified, {d} deleted")
    _out("\n".join(lines) + "\n")
    return 0


def _row(mark: dict[str, str], c: Change) -> str:
    extra = "/" if c.type == "dir" else " (symlink)" if c.type == "symlink" else ""
    return f"  {mark[c.kind]} {c.path}{extra}"


def cmd_diff(rid: str, paths: tuple[str, ...]) -> int:
    from safebox.review import apply, layer

    h = _open(rid)
    chosen, _ = apply.select(layer.changes(h), _paths(paths) or ("/",))
    _out("".join(layer.diff(h, c) for c in chosen))
    return 0


def cmd_apply(rid: str, paths: tuple[str, ...], force: bool) -> int:
    from safebox.review import apply

    h = _open(rid)
    out = apply.apply(h, _paths(paths), force=force)
    def say(text: str) -> None:
        sys.stderr.write(_shown(text))
    _out("".join(f"applied {p}\n" for p in out.applied))  # one write: 10,000 lines are not 10,000 flushes
    for p, why in out.conflicts:
        say(f"safebox: conflict: {p}: {why}; not applied (look, then `--force` to apply over it)\n")
    for p, why in out.refused:
        say(f"safebox: refused: {p}: {why}; not applied\n")
    if out.code:
        say(f"safebox: {len(out.code)} change(s) that would run code on the host were not applied; name each "
            f"to apply it: `safebox changes apply {h.id} PATH`:\n")
        for p in out.code:
            say(f"  {p}\n")
    _audit(h, "review_applied", applied=list(out.applied), conflicts=[p for p, _ in out.conflicts],
           refused=[p for p, _ in out.refused], code=list(out.code))
    return 1 if out.conflicts or out.refused else 0


def cmd_discard(rid: str) -> int:
    from safebox.review import apply

    h = _open(rid)
    apply.discard(h)
    _audit(h, "review_discarded")
    sys.stderr.write(f"safebox: held run {h.id} discarded\n")
    return 0


def _audit(h: Held, kind: str, **fields: object) -> None:
    """Into the run's --audit-log, when it had one (meta.json names it)."""
    import json

    from safebox import hostio

    log = h.meta.get("audit_log")
    if not isinstance(log, str) or not log:
        return
    import datetime

    rec = {"time": datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds"), "event": kind,
           "review": h.id, **fields}
    try:
        hostio.append(log, (json.dumps(rec, separators=(",", ":")) + "\n").encode())
    except (OSError, RunError, hostio.HostFileError) as e:
        sys.stderr.write(f"safebox: cannot record {kind} in {log}: {e}\n")


def add_commands(app: object, _guarded: Callable[..., int]) -> None:
    """``safebox changes ...`` on the click group ``app``; ``_guarded`` is the
    CLI's error mapping (passed in: only the CLI maps errors to exit codes,
    and this module must not import it back)."""
    import click

    assert isinstance(app, click.Group)

    @app.group("changes")
    def changes_grp() -> None:
        """Held runs of `safebox exec --review`: list, show, diff, apply, discard."""

    @changes_grp.command("list")
    @click.option("--json", "as_json", is_flag=True, help="Print JSON.")
    def changes_list(as_json: bool) -> None:
        """The held runs, with their age, size and status."""
        sys.exit(_guarded(cmd_list, as_json))

    @changes_grp.command("show")
    @click.argument("run")
    @click.option("--json", "as_json", is_flag=True, help="Print JSON.")
    def changes_show(run: str, as_json: bool) -> None:
        """What RUN changed: each path added (A), modified (M) or deleted (D)."""
        sys.exit(_guarded(cmd_show, run, as_json))

    @changes_grp.command("diff")
    @click.argument("run")
    @click.argument("paths", nargs=-1)
    def changes_diff(run: str, paths: tuple[str, ...]) -> None:
        """A unified diff of RUN's changes (those at or beneath PATHS)."""
        sys.exit(_guarded(cmd_diff, run, paths))

    @changes_grp.command("apply")
    @click.argument("run")
    @click.argument("paths", nargs=-1)
    @click.option("--force", is_flag=True, help="Apply over files the host changed since the run started.")
    def changes_apply(run: str, paths: tuple[str, ...], force: bool) -> None:
        """Put RUN's changes (or those at or beneath PATHS) on the host, file by file."""
        sys.exit(_guarded(cmd_apply, run, paths, force))

    @changes_grp.command("discard")
    @click.argument("run")
    def changes_discard(run: str) -> None:
        """Remove RUN: nothing of it reaches the host."""
        sys.exit(_guarded(cmd_discard, run))

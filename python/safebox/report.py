"""``safebox report``: what each run did, for people (and the step summary).

Input: audit-log events (docs/audit-log.md), from one or several files, or
the records of the run that just ended (``safebox exec --summary FILE`` and
``$GITHUB_STEP_SUMMARY``). Output, per run: the command, the layers that were
enforced, exit status and duration; the destinations allowed and refused,
with the rule, connections and bytes; the refused writes, reads and system
calls (``denied`` events of the violations feed, when the log has them);
protected files quarantined; runner file-command entries refused.

Everything shown comes partly from the sandboxed command (host names it
asked for, paths it wrote, its own command line): it is escaped for the
format, so a host name cannot break a Markdown table or smuggle a link.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from safebox.errors import SafeboxError

if TYPE_CHECKING:
    from safebox.hostio import PinnedDir

__all__ = ["FORMATS", "MemoryLog", "Recorder", "ReportError", "Run", "Tee", "append_summary", "read_events",
           "render", "runs_from_events"]

FORMATS = ("markdown", "json", "text")
#: Longest audit-log line read; a longer one is skipped and counted.
MAX_LINE = 1 << 20


class ReportError(SafeboxError):
    """An audit log cannot be read."""


@dataclass
class Run:
    """One ``safebox exec`` run, assembled from its events."""

    run: str | None = None
    time: str | None = None
    command: list[str] = field(default_factory=list)
    cwd: str | None = None
    layers: str | None = None
    enforced: dict[str, Any] | None = None
    mode: str = "enforce"
    policy: str | None = None
    #: Every ``--policy`` file, in layer order (``policy`` is the last).
    policies: list[str] = field(default_factory=list)
    presets: list[str] = field(default_factory=list)
    ci: str | None = None
    exit: int | None = None
    duration: float | None = None
    #: One per (host, port, verdict): count, bytes_out, bytes_in, rule, reason.
    hosts: list[dict[str, Any]] = field(default_factory=list)
    #: Whether ``hosts`` came from the stop record (with bytes) or was
    #: counted from ``network`` events (no bytes).
    hosts_from_stop: bool = False
    denied: list[dict[str, Any]] = field(default_factory=list)
    quarantined: list[str] = field(default_factory=list)
    restored_links: list[str] = field(default_factory=list)
    refused_entries: list[dict[str, Any]] = field(default_factory=list)
    learn_out: str | None = None

    def refused_hosts(self) -> list[dict[str, Any]]:
        """The destinations refused in this run."""
        return [h for h in self.hosts if h.get("verdict") == "deny"]

    def as_json(self) -> dict[str, Any]:
        """The run as the JSON format shows it."""
        return {
            "run": self.run, "time": self.time, "command": self.command, "cwd": self.cwd,
            "layers": self.layers, "enforced": self.enforced, "mode": self.mode, "policy": self.policy,
            "policies": self.policies, "presets": self.presets, "ci": self.ci, "exit": self.exit, "duration": self.duration,
            "hosts": self.hosts, "denied": self.denied, "quarantined": self.quarantined,
            "restoredLinks": self.restored_links, "refusedEntries": self.refused_entries,
            **({"learnOut": self.learn_out} if self.learn_out else {}),
        }


def read_events(paths: Iterable[str]) -> Iterator[dict[str, Any]]:
    """The events of each JSON-lines file, in order. A line that is not a
    JSON object (a torn line of a killed writer) is skipped; a file that
    cannot be opened raises :class:`ReportError` naming it. Opened through
    :mod:`safebox.hostio`: a log in a write root may have been swapped for
    a link to a file the run could not read (the report may go to a public
    step summary), so only a regular file of this user with one link is
    read, never through a symlink."""
    from safebox.hostio import HostFileError, open_read

    for path in paths:
        try:
            fd = open_read(path)
        except HostFileError as e:
            raise ReportError(f"{path}: cannot read the audit log: {e.why}") from None
        with os.fdopen(fd, "rb") as f:
            for raw in f:
                if len(raw) > MAX_LINE:
                    continue
                try:
                    ev = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(ev, dict) and isinstance(ev.get("event"), str):
                    yield ev


def _hosts_from_network(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Count ``network`` decisions per destination (logs without a stop record's ``hosts``)."""
    out: dict[tuple[str, int, str], dict[str, Any]] = {}
    for ev in events:
        key = (str(ev.get("host", "")).lower(), _int(ev.get("port")), str(ev.get("verdict", "")))
        entry = out.get(key)
        if entry is None:
            out[key] = {"host": key[0], "port": key[1], "verdict": key[2], "count": 1, "bytes_out": None,
                        "bytes_in": None, "rule": ev.get("rule"), "reason": ev.get("reason")}
        else:
            entry["count"] += 1
    return list(out.values())


def _int(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def _list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def _apply_start(run: Run, ev: dict[str, Any]) -> None:
    run.time = ev.get("time")
    run.command = [str(a) for a in _list(ev.get("command"))]
    run.cwd = ev.get("cwd")
    run.layers = ev.get("layers")
    run.mode = str(ev.get("mode") or "enforce")
    run.policy = ev.get("policy")
    run.policies = [str(p) for p in _list(ev.get("policies"))] or ([str(run.policy)] if run.policy else [])
    run.presets = [str(p) for p in _list(ev.get("presets"))]
    run.ci = ev.get("ci")


def _apply_stop(run: Run, ev: dict[str, Any]) -> None:
    run.exit = ev.get("exit") if isinstance(ev.get("exit"), int) else None
    d = ev.get("duration")
    run.duration = float(d) if isinstance(d, (int, float)) else None
    enforced = ev.get("enforced")
    run.enforced = enforced if isinstance(enforced, dict) else None
    hosts = ev.get("hosts")
    if isinstance(hosts, list):
        run.hosts = [h for h in hosts if isinstance(h, dict)]
        run.hosts_from_stop = True
    run.quarantined = [str(p) for p in _list(ev.get("quarantined"))]
    run.restored_links = [str(p) for p in _list(ev.get("restored_links"))]
    run.refused_entries = [e for e in _list(ev.get("refused_entries")) if isinstance(e, dict)]
    if isinstance(ev.get("learn_out"), str):
        run.learn_out = ev["learn_out"]


def runs_from_logs(logs: Iterable[str]) -> list[Run]:
    """The runs in the audit logs ``logs``; :class:`ReportError` when there
    is none (a file that is not an audit log, or an empty one): `report` and
    `policy suggest` then exit 125 with one line, never print nothing."""
    logs = list(logs)
    runs = runs_from_events(read_events(logs))
    if not runs:
        raise ReportError(f"no run found in {', '.join(logs)} (was it written by safebox exec --audit-log?)")
    return runs


def runs_from_events(events: Iterable[dict[str, Any]]) -> list[Run]:
    """Group events into runs: by their ``run`` id (schema 2); events
    without one (schema 1) belong to the run their ``start`` opened."""
    runs: list[Run] = []
    by_id: dict[str, Run] = {}
    network: dict[int, list[dict[str, Any]]] = {}
    current: Run | None = None  # schema 1: the run being read
    for ev in events:
        kind = ev["event"]
        rid = ev.get("run") if isinstance(ev.get("run"), str) else None
        if rid is not None:
            run = by_id.get(rid)
            if run is None:
                run = by_id[rid] = Run(run=rid)
                runs.append(run)
        elif kind == "start" or current is None:
            run = current = Run()
            runs.append(run)
        else:
            run = current
        if kind == "start":
            _apply_start(run, ev)
        elif kind == "stop":
            _apply_stop(run, ev)
            if rid is None:
                current = None
        elif kind == "network":
            network.setdefault(id(run), []).append(ev)
        elif kind == "denied":
            run.denied.append(ev)
    for run in runs:
        if not run.hosts_from_stop:
            run.hosts = _hosts_from_network(network.get(id(run), []))
    return runs


# ------------------------------------------------------------------ render

def _printable(text: Any, limit: int = 300) -> str:
    s = str(text)
    s = "".join(c if c.isprintable() else "?" for c in s)
    return s if len(s) <= limit else s[: limit - 1] + "…"


# Characters with a meaning in GitHub Markdown mid-line: emphasis, code,
# links and images ([ ] and ! — with brackets escaped, "(" cannot open a
# link target), tables, strikethrough, math; < > & become entities (no HTML).
_MD_SPECIAL = set("\\`*_[]|~$")


def _md(text: Any, limit: int = 300) -> str:
    """Escape for Markdown text and table cells (never at a line start):
    every character Markdown or HTML gives a meaning there is
    backslash-escaped or an entity."""
    out = []
    for c in _printable(text, limit):
        if c == "<":
            out.append("&lt;")
        elif c == ">":
            out.append("&gt;")
        elif c == "&":
            out.append("&amp;")
        elif c in _MD_SPECIAL:
            out.append("\\" + c)
        else:
            out.append(c)
    return "".join(out)


def _size(n: Any) -> str:
    if not isinstance(n, int) or isinstance(n, bool):
        return "–"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def _command(run: Run) -> str:
    import shlex

    return shlex.join(run.command) if run.command else "(unknown command)"


def enforced_text(run: Run) -> str:
    """One line naming the layers that held in this run."""
    parts: list[str] = []
    layers = run.layers or "?"
    if layers in ("both", "bwrap-only"):
        parts.append("bubblewrap (namespaces, mounts)")
    e = run.enforced or {}
    if layers in ("both", "helper-only"):
        ll = e.get("landlock")
        if isinstance(ll, dict):
            held = [k for k in ("fs", "net", "scope") if ll.get(k)]
            parts.append(f"Landlock ABI {ll.get('abi')} ({', '.join(held) or 'nothing'})")
        elif e:
            parts.append("Landlock: none")
        for key, name in (("seccomp", "seccomp"), ("caps", "capabilities dropped"), ("nnp", "no_new_privs")):
            if e.get(key):
                parts.append(name)
        if not e:
            parts.append("the helper (Landlock, seccomp, capabilities)")
    if layers == "helper-only":
        parts.append("no bubblewrap: no mount or pid isolation")
    return ", ".join(parts) if parts else f"layers {layers}"


def _fix(h: dict[str, Any]) -> str:
    from safebox.proxy.explain import fix_for
    from safebox.proxy.rules import Decision

    try:
        return fix_for(str(h.get("host", "")), Decision(False, str(h.get("rule", "")), str(h.get("reason", ""))))
    except ValueError:  # HostError: a host no policy entry can name
        return "the host is malformed; no policy change allows it"


def _denied_rows(run: Run) -> list[dict[str, Any]]:
    """Violation events, without the proxy's refusals (the hosts table has those)."""
    rows = []
    for ev in run.denied:
        if ev.get("kind") == "network" and ev.get("protocol") and run.hosts:
            continue
        rows.append(ev)
    return rows


def _what(ev: dict[str, Any]) -> str:
    if ev.get("path"):
        return str(ev["path"])
    if ev.get("host"):
        return f"{ev['host']}:{ev.get('port')}"
    return str(ev.get("syscall") or "?")


def _status(run: Run) -> str:
    if run.exit is None:
        return "did not finish (no stop record)"
    if run.exit > 128 and run.exit < 128 + 65:
        return f"exit {run.exit} (signal {run.exit - 128})"
    return f"exit {run.exit}"


def _duration(run: Run) -> str:
    return f"{run.duration:.1f} s" if run.duration is not None else "?"


def render_markdown(runs: list[Run]) -> str:
    """The report as GitHub-flavoured Markdown (the step summary's format)."""
    out: list[str] = []
    for run in runs:
        out.append(f"### safebox: `{_printable(_command(run)).replace('`', chr(39))}` — "
                   f"{_md(_status(run))} in {_md(_duration(run))}")
        out.append("")
        meta = [f"**layers**: {_md(enforced_text(run))}", f"**mode**: {_md(run.mode)}"]
        if run.policies:
            meta.append(f"**policy**: {_md(' + '.join(run.policies))}")
        if run.presets:
            meta.append(f"**presets**: {_md(', '.join(run.presets))}")
        out.append(" · ".join(meta))
        out.append("")
        refused = run.refused_hosts()
        if refused:
            names = ", ".join(f"{h.get('host')}:{h.get('port')}" for h in refused)
            out.append(f"**Refused hosts**: {_md(names, 2000)}")
            out.append("")
        if run.hosts:
            out.append("| host | port | verdict | connections | sent | received | rule |")
            out.append("|---|---|---|---|---|---|---|")
            for h in sorted(run.hosts, key=lambda h: (h.get("verdict") != "deny", str(h.get("host")))):
                verdict = "**refused**" if h.get("verdict") == "deny" else "allowed"
                rule = _md(h.get("rule", ""))
                if h.get("verdict") == "deny":
                    rule += f": {_md(h.get('reason', ''))}; fix: {_md(_fix(h))}"
                sent, got = ((h.get("bytes_out"), h.get("bytes_in")) if h.get("verdict") != "deny" else (None, None))
                out.append(f"| {_md(h.get('host', ''))} | {_int(h.get('port'))} | {verdict} | "
                           f"{_int(h.get('count'))} | {_size(sent)} | {_size(got)} | {rule} |")
            out.append("")
        else:
            out.append("No network connection was attempted through the proxy.")
            out.append("")
        rows = _denied_rows(run)
        if rows:
            out.append("| refused | what | errno | rule | process |")
            out.append("|---|---|---|---|---|")
            for ev in rows:
                who = f"{ev.get('comm')}[{ev.get('pid')}]" if ev.get("comm") else ""
                out.append(f"| {_md(ev.get('kind', '?'))} | {_md(_what(ev))} | {_md(ev.get('errno') or '')} | "
                           f"{_md(ev.get('rule', ''))} | {_md(who)} |")
            out.append("")
        for p in run.quarantined:
            out.append(f"- quarantined protected file the command created: {_md(p)}")
        for p in run.restored_links:
            out.append(f"- restored protected symlink: {_md(p)}")
        for e in run.refused_entries:
            out.append(f"- refused {_md(e.get('file', '?'))} entry {_md(e.get('name', '?'))}: {_md(e.get('reason', ''))}")
        if run.quarantined or run.restored_links or run.refused_entries:
            out.append("")
        if run.learn_out:
            out.append(f"Suggested policy written to {_md(run.learn_out)} (`safebox exec -p` it to enforce).")
            out.append("")
    return "\n".join(out) + ("\n" if out else "")


def render_text(runs: list[Run]) -> str:
    """The report as plain text, one block per run."""
    out: list[str] = []
    for run in runs:
        out.append(f"run {run.run or '?'}: {_printable(_command(run))}")
        out.append(f"  {_status(run)} in {_duration(run)}; mode {run.mode}; layers: {enforced_text(run)}")
        if run.policies or run.presets:
            out.append(f"  policy {_printable(' + '.join(run.policies) or '-')}; presets {', '.join(run.presets) or '-'}")
        for h in sorted(run.hosts, key=lambda h: (h.get("verdict") != "deny", str(h.get("host")))):
            if h.get("verdict") == "deny":
                out.append(f"  refused {_printable(h.get('host'))}:{_int(h.get('port'))} x{_int(h.get('count'))} "
                           f"({_printable(h.get('reason', ''))}); fix: {_printable(_fix(h))}")
            else:
                out.append(f"  allowed {_printable(h.get('host'))}:{_int(h.get('port'))} x{_int(h.get('count'))}, "
                           f"sent {_size(h.get('bytes_out'))}, received {_size(h.get('bytes_in'))} "
                           f"({_printable(h.get('rule', ''))})")
        for ev in _denied_rows(run):
            who = f" by {_printable(ev.get('comm'))}[{ev.get('pid')}]" if ev.get("comm") else ""
            out.append(f"  denied {_printable(ev.get('kind'))} {_printable(_what(ev))}{who}: "
                       f"{_printable(ev.get('errno') or 'refused')} ({_printable(ev.get('rule', ''))})")
        for p in run.quarantined:
            out.append(f"  quarantined {_printable(p)}")
        for p in run.restored_links:
            out.append(f"  restored symlink {_printable(p)}")
        for e in run.refused_entries:
            out.append(f"  refused {_printable(e.get('file'))} entry {_printable(e.get('name'))}: "
                       f"{_printable(e.get('reason'))}")
        if run.learn_out:
            out.append(f"  suggested policy: {_printable(run.learn_out)}")
    return "\n".join(out) + ("\n" if out else "")


def render(runs: list[Run], fmt: str) -> str:
    """``runs`` in ``fmt``: markdown, json or text."""
    if fmt == "markdown":
        return render_markdown(runs)
    if fmt == "text":
        return render_text(runs)
    if fmt == "json":
        from safebox.audit import SCHEMA

        return json.dumps({"schema": SCHEMA, "runs": [r.as_json() for r in runs]}, indent=2) + "\n"
    raise ReportError(f"--format: unknown format {fmt!r} (one of {', '.join(FORMATS)})")


def append_summary(path: str, text: str, *, pinned: PinnedDir | None = None) -> None:
    """Append ``text`` to ``path`` (the step summary, or --summary FILE),
    creating it 0644 if missing; one write. Never through a symlink, and only
    to a regular file of this user with one link (a runner file swapped for
    a link to ``~/.ssh/id_*`` must not publish the key). With ``pinned``,
    the name is taken beneath that directory, pinned before the run. Raises
    ReportError naming it."""
    from safebox.hostio import HostFileError, append

    data = text.encode("utf-8", "replace")
    try:
        if pinned is not None:
            pinned.append(os.path.basename(path), data, mode=0o644)
        else:
            append(path, data, mode=0o644)
    except HostFileError as e:
        raise ReportError(f"cannot write the summary to {path}: {e.why}") from None


# ------------------------------------------------------- the run being run

class MemoryLog:
    """An in-memory event sink with :class:`~safebox.audit.AuditLog`'s
    ``event`` signature: the records of the run that is going on."""

    def __init__(self, run: str) -> None:
        self.run = run
        self.events: list[dict[str, Any]] = []

    def event(self, kind: str, /, **fields: Any) -> None:
        """Keep one event."""
        self.events.append({"event": kind, "run": self.run, **fields})


class Tee:
    """Events to the audit log file and to memory."""

    def __init__(self, *sinks: Any) -> None:
        self.sinks = sinks

    def event(self, kind: str, /, **fields: Any) -> None:
        """Write one event to every sink."""
        for s in self.sinks:
            s.event(kind, **fields)


def _pinned_parent(path: str, flag: str) -> tuple[str, PinnedDir]:
    """(path, its directory pinned now, before the run): the file is written
    after the run beneath that very directory, never through a name the
    sandboxed command could have replaced with a symlink on the way."""
    from safebox.hostio import HostFileError, pin

    path = os.path.abspath(path)
    try:
        return path, pin(os.path.dirname(path))
    except HostFileError as e:
        raise ReportError(f"{flag}: cannot use the directory of {path}: {e.why}") from None


class Recorder:
    """A run's records when ``--audit-log``, ``--summary`` /
    ``$GITHUB_STEP_SUMMARY`` or ``--learn`` want them: the ``start`` and
    ``stop`` events, and at the end the step summary and the learned policy.
    The runner creates one only when one of those is asked for."""

    def __init__(self, *, audit_log: str | None, summary: str | None, learn: str | None,
                 run: str | None = None, learn_base: Callable[[], dict[str, Any]] | None = None,
                 enforce_argv: tuple[str, ...] = ()) -> None:
        #: ``--learn``: the policy the run ran under (one document), and the
        #: command line that enforces the file written.
        self.learn_base = learn_base
        self.enforce_argv = enforce_argv
        # The session's run id: the proxy's events carry the same one.
        self.run = run or os.urandom(8).hex()
        self.t0 = 0.0
        self.summary = _pinned_parent(summary, "--summary") if summary else None
        if self.summary is not None:
            # Created now (never through a symlink), so that it exists to be
            # kept read-only inside (the runner's run_files): the command can
            # neither forge the report nor swap the file for a link.
            append_summary(self.summary[0], "", pinned=self.summary[1])
        self.learn = _pinned_parent(learn, "--learn") if learn else None
        self.memory = MemoryLog(self.run) if (summary or learn) else None
        file_log = None
        if audit_log:
            from safebox.audit import AuditLog
            from safebox.hostio import HostFileError

            try:
                file_log = AuditLog(audit_log, run=self.run)
            except HostFileError as e:
                raise ReportError(f"cannot open audit log {audit_log}: {e.why}") from None
        sinks = [s for s in (file_log, self.memory) if s is not None]
        self.audit: Any = sinks[0] if len(sinks) == 1 else Tee(*sinks)

    def start(self, **fields: Any) -> None:
        """The ``start`` run record (schema, command, layers, cwd, mode, ...)."""
        import time

        from safebox.audit import SCHEMA

        self.t0 = time.monotonic()
        self.audit.event("start", schema=SCHEMA, **fields)

    def stop(self, **fields: Any) -> None:
        """The ``stop`` run record (exit, duration, hosts, quarantined, ...)."""
        import time

        duration = round(time.monotonic() - self.t0, 3) if self.t0 else None
        self.audit.event("stop", duration=duration, **fields)

    def finish(self, *, home: str) -> list[str]:
        """Write the learned policy and append the run's Markdown report to the
        summary file; returns what to tell the user."""
        said: list[str] = []
        if self.memory is None:
            return said
        runs = runs_from_events(self.memory.events)
        if self.learn is not None:
            import shlex

            from safebox.learn import complete, shell_line, suggest, write_policy

            path, pinned = self.learn
            learned, notes = suggest(runs, home=home)
            said += notes
            # The policy the run ran under (every layer and flag), then what
            # it learned: `safebox exec -p OUT` alone enforces both.
            doc = complete(self.learn_base() if self.learn_base is not None else {}, learned)
            write_policy(path, doc, pinned=pinned)
            n = len(learned["network"]["allowedDomains"])
            enforce = shell_line(self.enforce_argv) if self.enforce_argv else f"safebox exec -p {shlex.quote(path)} -- ..."
            said.append(f"learned {n} host pattern{'s' if n != 1 else ''}; suggested policy written to {path} "
                        "(the policy this run ran under, every layer and flag, plus what it learned)")
            said.append(f"enforce it with: {enforce}")
        if self.summary is not None:
            path, pinned = self.summary
            append_summary(path, render_markdown(runs), pinned=pinned)
        return said

    def close(self) -> None:
        """Release the pinned directories; idempotent."""
        for pair in (self.summary, self.learn):
            if pair is not None:
                pair[1].close()

"""``safebox exec``'s options: one table, read by the click command and the
fast parser (cli/__init__.py), the request the run takes (run/main.py, request: each value
put where its row says, ``into``), the docs test, and code that reads exec
lines back (mcpwrap.py). An option added here is complete once its field
exists where ``into`` names (tests/unit/test_exec_option_table.py). On the
exec hot path: standard library and ``_record`` only.
"""

from __future__ import annotations

from safebox._record import Frozen


class Opt(Frozen):
    """One ``exec`` option, shared by the click command and the fast parser."""

    long: str
    dest: str
    help: str
    short: str | None = None
    value: str | None = None  # metavar when the option takes a value
    multiple: bool = False
    choices: tuple[str, ...] = ()
    # The value when the option is given bare (--allow-gpu); a value then
    # only comes inline (--allow-gpu=0,2), never from the next argument.
    optional: str | None = None
    #: Where the value goes (run/main.py, request): "flags", a field of
    #: ``policy.sources.Flags``, the policy's last layer (keys.POLICY_FLAGS
    #: names its key); "options", a field of ``run.session.Options``, how the
    #: session runs; "request", a field of ``run.main.ExecRequest`` itself (the
    #: runtime decisions: --ask, --control-fd). Empty: the cli's alone (--chdir).
    into: tuple[str, ...] = ("options",)
    #: For a "flags" row: the policy key its value adds to (or sets), as
    #: files spell it. policy/keys.py derives ``POLICY_FLAGS`` from these
    #: rows: the flags' layer and the errors naming a flag come from here.
    key: tuple[str, ...] = ()


EXEC_OPTIONS: tuple[Opt, ...] = (
    Opt(long="--policy", dest="policy_files",
        help="Policy file (JSON or TOML), layered after the user and project files; repeatable: each later "
             "file adds to the lists and replaces the other values of the ones before "
             "(docs/policy-reference.md#layers).", short="-p", value="FILE", multiple=True),
    Opt(long="--chdir", dest="chdir", into=(), short="-C",
        help="Run in DIR instead of the current directory: DIR is the work dir, and so a write root "
             "(safebox mcp wrap gives each server one of its own).", value="DIR"),
    Opt(long="--allow-write", dest="allow_write", into=("flags",), key=("filesystem", "allowWrite"),
        help="Also allow writing beneath PATH (repeatable).",
        value="PATH", multiple=True),
    Opt(long="--deny-read", dest="deny_read", into=("flags",), key=("filesystem", "denyRead"),
        help="Also make PATH unreadable (repeatable; a glob pattern such as '**/.env' denies every match).",
        value="PATH", multiple=True),
    Opt(long="--allow-read", dest="allow_read", into=("flags",), key=("filesystem", "allowRead"),
        help="Make PATH readable again inside a denyRead region (repeatable; patterns too).",
        value="PATH", multiple=True),
    Opt(long="--deny-write", dest="deny_write", into=("flags",), key=("filesystem", "denyWrite"),
        help="Keep PATH read-only even beneath a write root (repeatable; patterns too).",
        value="PATH", multiple=True),
    Opt(long="--allow-domain", dest="allow_domains", into=("flags",), key=("network", "allowedDomains"),
        help="Allow DOMAIN through the proxy; *.example.com = subdomains (repeatable).",
        value="DOMAIN", multiple=True),
    Opt(long="--deny-domain", dest="deny_domains", into=("flags",), key=("network", "deniedDomains"),
        help="Refuse DOMAIN even if allowed (repeatable).",
        value="DOMAIN", multiple=True),
    Opt(long="--preset", dest="presets", into=("flags",), key=("presets",),
        help="A toolchain's registry domains and sandbox-private caches: npm, pip, cargo, go, maven, github "
             "(repeatable; docs/toolchains.md).", value="NAME", multiple=True),
    Opt(long="--publish", dest="publish",
        help="Make 127.0.0.1:PORT on the host reach 127.0.0.1:PORT inside (needs network.allowLocalBinding; "
             "repeatable).", value="PORT", multiple=True),
    Opt(long="--limit-processes", dest="limit_processes", into=("flags",), key=("limits", "processes"),
        help="At most N processes and threads in the sandbox, or 'unlimited' (limits.processes; default 4096).",
        value="N"),
    Opt(long="--limit-memory", dest="limit_memory", into=("flags",), key=("limits", "memory"),
        help="Memory of the sandbox, e.g. 2GiB, or 'unlimited' (limits.memory; default unlimited).", value="SIZE"),
    Opt(long="--limit-tmp", dest="limit_tmp_size", into=("flags",), key=("limits", "tmpSize"),
        help="Size of the private /tmp and of /dev/shm, each, e.g. 1GiB (limits.tmpSize; default RAM/4, at most 4GiB).",
        value="SIZE"),
    Opt(long="--timeout", dest="timeout", into=("flags",), key=("limits", "wallTime"),
        help="Stop the whole sandbox after DURATION (90s, 30m, 1h30m; limits.wallTime) and exit 124.",
        value="DURATION"),
    Opt(long="--allow-gpu", dest="allow_gpu", into=("flags",), key=("devices", "gpu"),
        help="Bind the GPU device nodes (NVIDIA's, DRI render nodes) and allow exactly them; --allow-gpu=0,2 "
             "selects GPUs (devices.gpu; docs/gpu.md).", value="LIST", optional="all"),
    Opt(long="--strict", dest="strict", into=("flags", "options"), key=("strict",),
        help="Refuse to run unless every layer is fully enforced."),
    Opt(long="--without", dest="without", help="Run one layer alone: 'bwrap' (helper only) or 'helper' (bubblewrap only).",
        value="LAYER", choices=("bwrap", "helper")),
    Opt(long="--dry-run", dest="dry_run", help="Print the bwrap argv and the helper policy; run nothing."),
    Opt(long="--audit-log", dest="audit_log",
        help="Append JSON-lines events (start, stop, network decisions, every refusal) to FILE.", value="FILE"),
    Opt(long="--summary", dest="summary",
        help="Append this run's Markdown report to FILE (done with $GITHUB_STEP_SUMMARY when that is set).",
        value="FILE"),
    Opt(long="--learn", dest="learn",
        help="Let the command reach any public host through the proxy, record what it used, and write a "
             "suggested policy (JSON) to OUT; file rules and local-address refusals still hold.", value="OUT"),
    Opt(long="--ask", dest="ask", into=("request",),
        help="Ask on the terminal (/dev/tty) about each host the policy does not allow: once, for this run, or "
             "deny; without a terminal every such host is denied and one line says so (docs/index.md)."),
    Opt(long="--ask-timeout", dest="ask_timeout", into=("request",),
        help="Seconds --ask waits for an answer before it denies (default 60).", value="SECONDS"),
    Opt(long="--control-fd", dest="control_fd", into=("request",),
        help="Read network list updates from descriptor N (3 or more) while the command runs: one JSON config per "
             "line, srt's --control-fd format; the command never gets N.", value="N"),
    Opt(long="--observe", dest="observe",
        help="Which refusals to report: 'calls' (denied system calls, sockets, exec, connections; no file "
             "call, which costs nothing per file), 'writes' (the default: also refused file writes), 'all' (also "
             "reads of denied paths; the default with --audit-log) or 'off'.",
        value="MODE", choices=("off", "calls", "writes", "all")),
    Opt(long="--review", dest="review",
        help="Hold every write in a layer instead of the host; then `safebox changes diff|apply|discard` "
             "(docs/review.md)."),
    Opt(long="--verbose", dest="verbose", help="Say which layers were enforced and what was adjusted; list every refusal.",
        short="-v"),
    Opt(long="--quiet", dest="quiet", help="Do not print refusals (a line per refused host, the end-of-run summary), "
        "nor hints (errors still print; the audit log keeps every refusal).", short="-q"),
)

"""``safebox mcp wrap`` / ``unwrap``: MCP client configs whose stdio servers run under ``safebox exec``.

An MCP client (Claude Desktop, Claude Code, Cursor, VS Code) starts each
stdio server it is configured with as a child process, with the user's
rights: a server from ``npx -y`` or ``uvx`` reads ``~/.ssh``, writes
anywhere in ``$HOME`` and reaches any host. ``wrap`` rewrites each such
entry so that the client starts ``safebox exec`` instead, which starts the
server in a sandbox of its own:

* its work dir (the write root ``safebox exec`` always gives) is a
  directory of its own, ``$XDG_STATE_HOME/safebox/mcp/NAME/work``
  (``--chdir``): the client's working directory (``$HOME`` for some) is
  never made writable;
* its refusals go to stderr, which clients keep in their server logs, and
  to the audit log ``$XDG_STATE_HOME/safebox/mcp/NAME/audit.jsonl``;
* a policy file of its own, ``$XDG_CONFIG_HOME/safebox/mcp/NAME.json``,
  which keeps the variables its entry's ``env`` gives it;
* ``npx``/``npm``/``pnpm``/``yarn``/``bunx`` servers get ``--preset npm``,
  ``uvx``/``uv``/``pipx`` ones ``--preset pip`` (registry and private cache),
  plus whatever policy files and flags the user gave.

The file is edited in place (:mod:`safebox.jsonc`): only each wrapped
server's ``command`` and ``args`` change, the rest of the text (comments,
key order, indentation) stays byte for byte, and ``unwrap`` gives back the
original. The original command line is kept verbatim after the exec options,
so the wrapped entry itself is the record of what to restore: an entry that
had ``args`` gets ``-- COMMAND ARGS...`` (``--`` ends exec's options), one
that had none gets ``COMMAND`` without ``--`` and its ``args`` member is
removed again by ``unwrap``.

Where the servers live in each client's file:

* ``mcpServers``: Claude Desktop (``claude_desktop_config.json``), Claude
  Code (``.mcp.json``; ``~/.claude.json`` also per project, under
  ``projects.PATH.mcpServers``), Cursor (``.cursor/mcp.json``), Windsurf;
* ``servers``: VS Code's ``.vscode/mcp.json``; ``mcp.servers`` in its
  ``settings.json``.

A server with ``url`` (or ``type`` ``http``/``sse``) is remote: nothing of
it runs here, and it is left alone and reported as such.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import stat
from collections.abc import Iterator, Sequence

from safebox import hostio, jsonc
from safebox._record import Frozen
from safebox.errors import SafeboxError

__all__ = ["McpConfigError", "Outcome", "WrapOptions", "auto_preset", "report", "shown", "unwrap_text", "wrap_text",
           "write"]

#: Commands whose servers come from a registry, and the preset that lets them reach it.
AUTO_PRESETS: dict[str, str] = {
    "npx": "npm", "npm": "npm", "pnpm": "npm", "pnpx": "npm", "yarn": "npm", "bunx": "npm",
    "uvx": "pip", "uv": "pip", "pipx": "pip",
}
#: The ``type`` of a server that runs elsewhere (Claude Code: http, sse; VS Code: http, sse).
REMOTE_TYPES = ("http", "sse", "streamable-http", "streamableHttp", "ws")
#: The largest config read (~/.claude.json keeps history and grows to megabytes).
MAX_CONFIG = 8 << 20


class McpConfigError(SafeboxError):
    """An MCP config cannot be read, understood or written."""


class WrapOptions(Frozen):
    """The policy every wrapped server gets (on top of its automatic preset)."""

    safebox: str  # the safebox program the client will run (absolute)
    state: str  # $XDG_STATE_HOME/safebox/mcp: a work dir and an audit log per server
    config: str  # $XDG_CONFIG_HOME/safebox/mcp: a policy file per server, masked in every sandbox
    policy_files: tuple[str, ...] = ()
    presets: tuple[str, ...] = ()
    allow_read: tuple[str, ...] = ()
    allow_write: tuple[str, ...] = ()
    deny_read: tuple[str, ...] = ()
    allow_domains: tuple[str, ...] = ()
    deny_domains: tuple[str, ...] = ()
    work_dir: str | None = None  # instead of STATE/NAME/work
    audit_log: str | None = None  # instead of STATE/NAME/audit.jsonl
    auto_presets: bool = True


class Outcome(Frozen):
    """What happened to one server: ``action`` is ``wrapped``, ``unwrapped``,
    ``already-wrapped``, ``not-wrapped``, ``remote`` or ``skipped``."""

    name: str
    action: str
    detail: str = ""
    work_dir: str | None = None
    audit_log: str | None = None
    policy_file: str | None = None  # the server's own policy file
    env_allow: tuple[str, ...] = ()  # the variables its entry gives it, which it keeps (env.allow)


#: Variables an entry's ``env`` may not set: the client starts safebox itself
#: with them, on the host, before any sandbox exists. The dynamic loader runs
#: ``LD_PRELOAD`` in safebox's process; ``PYTHON*`` runs code in a console
#: script without ``-I``; OpenSSL loads providers named by ``OPENSSL_CONF``;
#: ``SAFEBOX_HELPER``, ``HOME`` and ``XDG_*`` pick safebox's helper, its user
#: policy, state and caches; the resolver variables re-point allowed names
#: (found in review: ``"env": {"LD_PRELOAD": "./evil.so"}`` ran on the host).
LAUNCHER_ENV_PREFIXES = ("LD_", "PYTHON", "SAFEBOX_", "OPENSSL_", "GCONV_", "GLIBC_", "MALLOC_", "XDG_", "BASH_FUNC_")
LAUNCHER_ENV_NAMES = frozenset({"HOME", "TMPDIR", "BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "HOSTALIASES",
                                "LOCALDOMAIN", "RES_OPTIONS", "LOCPATH", "NLSPATH", "SSL_CERT_FILE", "SSL_CERT_DIR",
                                "LANGUAGE_PATH", "TZDIR"})


def launcher_env(entry: jsonc.Node) -> list[str]:
    """The names in an entry's ``env`` that would act on safebox itself
    (:data:`LAUNCHER_ENV_NAMES`), a ``PATH`` with a relative, empty or
    ``$``-expanded entry (safebox looks up bwrap, socat and the command
    there), and ``envFile`` (VS Code's: variables wrap cannot see)."""
    bad = []
    if entry.get("envFile") is not None:
        bad.append("envFile")  # VS Code reads it and gives its variables to safebox: wrap cannot see which
    env = entry.get("env")
    if env is None or env.value.kind != "object":
        return bad
    for m in env.value.members:
        name = m.key
        if name in LAUNCHER_ENV_NAMES or name.startswith(LAUNCHER_ENV_PREFIXES):
            bad.append(name)
        elif name == "PATH":
            value = m.value.value if m.value.kind == "string" else ""
            if not isinstance(value, str) or any(not d.startswith("/") or "$" in d for d in value.split(":")):
                bad.append(name)
    return bad


def auto_preset(command: str) -> str | None:
    """The preset a server started by ``command`` needs to fetch itself (npx: npm, uvx: pip)."""
    return AUTO_PRESETS.get(os.path.basename(command))


def state_dir(environ: dict[str, str] | os._Environ[str], home: str) -> str:
    """``$XDG_STATE_HOME/safebox/mcp`` or ``~/.local/state/safebox/mcp``: outside
    safebox's cache (``~/.cache/safebox``), where no write root may lie."""
    base = environ.get("XDG_STATE_HOME") or os.path.join(home, ".local", "state")
    return os.path.join(base, "safebox", "mcp")


def dir_name(server: str) -> str:
    """A file name for ``server``: its name where that is one, else a readable
    form with a digest (two names never share a directory)."""
    if re.fullmatch(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,100}", server):
        return server
    import hashlib

    digest = hashlib.sha256(server.encode()).hexdigest()[:8]
    return re.sub(r"[^A-Za-z0-9._-]", "_", server)[:60].lstrip(".") + "-" + digest


# ------------------------------------------------------------ finding servers

def server_maps(root: jsonc.Node) -> Iterator[tuple[str, jsonc.Node]]:
    """Each object of servers in a client config, with where it was found."""
    if root.kind != "object":
        return
    for key in ("mcpServers", "servers"):
        m = root.get(key)
        if m is not None and m.value.kind == "object":
            yield key, m.value
    mcp = root.get("mcp")  # VS Code settings.json
    if mcp is not None and mcp.value.kind == "object":
        m = mcp.value.get("servers")
        if m is not None and m.value.kind == "object":
            yield "mcp.servers", m.value
    projects = root.get("projects")  # ~/.claude.json: per-project servers
    if projects is not None and projects.value.kind == "object":
        for p in projects.value.members:
            if p.value.kind == "object":
                m = p.value.get("mcpServers")
                if m is not None and m.value.kind == "object":
                    yield f"projects.{p.key}.mcpServers", m.value


def _str(entry: jsonc.Node, key: str) -> str | None:
    m = entry.get(key)
    return m.value.value if m is not None and m.value.kind == "string" else None


def _exec_split(items: Sequence[str]) -> tuple[int, bool] | None:
    """Where the server's own command begins in the args of a wrapped entry
    (``exec OPTS [--] COMMAND ARGS``), and whether ``--`` came before it
    (the entry had ``args``); None when ``items`` is not an exec line."""
    from safebox.exec_options import EXEC_OPTIONS

    by_name = {o.long: o for o in EXEC_OPTIONS} | {o.short: o for o in EXEC_OPTIONS if o.short}
    if not items or items[0] != "exec":
        return None
    i = 1
    while i < len(items):
        a = items[i]
        if a == "--":
            return (i + 1, True) if i + 1 < len(items) else None
        if not a.startswith("-") or a == "-":
            return i, False
        name, eq, _ = a.partition("=")
        opt = by_name.get(name)
        if opt is None:
            return None
        i += 1 if (opt.value is None or eq or opt.optional is not None) else 2
    return None


def _is_safebox(command: str) -> bool:
    return os.path.basename(command) == "safebox"


def wrapped_split(entry: jsonc.Node) -> tuple[jsonc.Node, int, bool] | None:
    """For a wrapped entry: its args array, where the server's command is in
    it, and whether the original had ``args``; None for any other entry."""
    command = _str(entry, "command")
    args = entry.get("args")
    if command is None or not _is_safebox(command) or args is None or args.value.kind != "array":
        return None
    items = args.value.items
    if any(i.kind != "string" for i in items):
        return None
    split = _exec_split([i.value for i in items])
    if split is None:
        return None
    return args.value, split[0], split[1]


def _wrapped_detail(entry: jsonc.Node, opts: WrapOptions) -> str:
    """What a wrapped entry runs, shown whole: a config from elsewhere (a
    cloned project's ``.mcp.json``) may come "wrapped" with wide options, or
    with a program named safebox that is not this one."""
    split = wrapped_split(entry)
    command = _str(entry, "command")
    assert split is not None and command is not None
    arr, k, _ = split
    options = " ".join(str(i.value) for i in arr.items[1:k] if i.value != "--")
    detail = f"left as it is: safebox exec {options} (name it with --server to replace its options)"
    if command != opts.safebox:
        detail += f"; note: it runs {command}, not this safebox ({opts.safebox})"
    return detail


def _is_remote(entry: jsonc.Node) -> bool:
    kind = _str(entry, "type")
    return entry.get("url") is not None or kind in REMOTE_TYPES


# ------------------------------------------------------------ the exec line

def exec_items(name: str, command: str, opts: WrapOptions, *, had_args: bool) -> tuple[list[str], str, str, str]:
    """The args of the wrapped entry up to and including the server's command,
    its work dir, its audit log and its own policy file."""
    d = os.path.join(opts.state, dir_name(name))
    work = opts.work_dir or os.path.join(d, "work")
    audit = opts.audit_log or os.path.join(d, "audit.jsonl")
    own = os.path.join(opts.config, dir_name(name) + ".json")
    items = ["exec", "--chdir", work, "--audit-log", audit, "--policy", own]
    presets = list(opts.presets)
    auto = auto_preset(command) if opts.auto_presets else None
    if auto is not None and auto not in presets:
        presets.insert(0, auto)
    for flag, values in (("--preset", presets), ("--policy", opts.policy_files), ("--allow-read", opts.allow_read),
                         ("--allow-write", opts.allow_write), ("--deny-read", opts.deny_read),
                         ("--allow-domain", opts.allow_domains), ("--deny-domain", opts.deny_domains)):
        for v in values:
            items += [flag, v]
    if had_args:
        items.append("--")
    elif command.startswith("-"):
        raise McpConfigError(f"server {name!r}: its command {command!r} begins with '-'",
                             hint="give it an \"args\": [] member, so that the wrapped line can end safebox's "
                                  "options with --")
    items.append(command)
    return items, work, audit, own


def _q(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)


def _ws_before(text: str, at: int) -> str:
    """The whitespace right before ``at`` (the indentation of a member)."""
    j = at
    while j > 0 and text[j - 1] in " \t\r\n":
        j -= 1
    return text[j:at] or " "


def _wrap_entry(text: str, name: str, entry: jsonc.Node, opts: WrapOptions) -> tuple[list[jsonc.Edit], Outcome]:
    cmd_member = entry.get("command")
    assert cmd_member is not None and cmd_member.value.kind == "string"
    command = str(cmd_member.value.value)
    args = entry.get("args")
    if args is not None and (args.value.kind != "array" or any(i.kind != "string" for i in args.value.items)):
        return [], Outcome(name=name, action="skipped", detail="its \"args\" is not a list of strings")
    items, work, audit, own = exec_items(name, command, opts, had_args=args is not None)
    env = entry.get("env")
    env_allow = tuple(sorted(m.key for m in env.value.members)) if env is not None and env.value.kind == "object" else ()
    # The command moves into args as its token was written (escapes and all): unwrap moves it back.
    shown = [*map(_q, items[:-1]), text[cmd_member.value.start:cmd_member.value.end]]
    edits = [jsonc.Edit(start=cmd_member.value.start, end=cmd_member.value.end, new=_q(opts.safebox))]
    if args is not None:
        arr = args.value
        if arr.items:
            edits.append(jsonc.Edit(start=arr.items[0].start, end=arr.items[0].start,
                                    new=", ".join(shown) + ", "))
        else:
            edits.append(jsonc.Edit(start=arr.end - 1, end=arr.end - 1, new=", ".join(shown)))
    else:
        sep = text[cmd_member.key_end:cmd_member.value.start]
        if "/" in sep:  # a comment between key and value: not copied
            sep = ": "
        lead = _ws_before(text, cmd_member.key_start)
        new = f",{lead}\"args\"{sep}[{', '.join(shown)}]"
        edits.append(jsonc.Edit(start=cmd_member.value.end, end=cmd_member.value.end, new=new))
    preset = auto_preset(command) if opts.auto_presets else None
    detail = f"{command} runs under safebox exec" + (f" (--preset {preset})" if preset else "") + f"; work dir {work}"
    read_only = _read_only_dirs([str(i.value) for i in args.value.items] if args is not None else [], opts, work)
    if read_only:
        # A filesystem server's roots, say: the server's own allow-list is no sandbox, and safebox's leaves them
        # read-only until the user says otherwise.
        detail += (f"; its arguments name directories it can read but not write: {', '.join(read_only)} "
                   f"(wrap it again with --server {name} --allow-write DIR for those it should write)")
    return edits, Outcome(name=name, action="wrapped", detail=detail, work_dir=work, audit_log=audit,
                          policy_file=own, env_allow=env_allow)


def _read_only_dirs(args: list[str], opts: WrapOptions, work: str) -> list[str]:
    """The absolute directories among ``args`` that no write root of the wrapped server covers."""
    roots = [os.path.normpath(os.path.expanduser(w)) for w in (*opts.allow_write, work)]
    out = []
    for a in args:
        if a.startswith("/") and os.path.isdir(a):
            p = os.path.normpath(a)
            if not any(p == r or p.startswith(r.rstrip("/") + "/") for r in roots):
                out.append(a)
    return out


def _unwrap_entry(text: str, name: str, entry: jsonc.Node) -> tuple[list[jsonc.Edit], Outcome]:
    split = wrapped_split(entry)
    cmd_member, args_member = entry.get("command"), entry.get("args")
    assert split is not None and cmd_member is not None and args_member is not None
    arr, k, had_args = split
    items = arr.items
    original = items[k]
    edits = [jsonc.Edit(start=cmd_member.value.start, end=cmd_member.value.end,
                        new=text[original.start:original.end])]
    if had_args:
        end = items[k + 1].start if k + 1 < len(items) else original.end
        edits.append(jsonc.Edit(start=items[0].start, end=end, new=""))
    else:
        members = entry.members
        at = members.index(args_member)
        if at > 0:
            start, end = members[at - 1].value.end, args_member.value.end
        elif at + 1 < len(members):
            start, end = args_member.key_start, members[at + 1].key_start
        else:
            start, end = args_member.key_start, args_member.value.end
        edits.append(jsonc.Edit(start=start, end=end, new=""))
    shown = " ".join([str(original.value), *(str(i.value) for i in items[k + 1:])])
    return edits, Outcome(name=name, action="unwrapped", detail=f"runs {shown} directly again")


def _entries(root: jsonc.Node, only: Sequence[str]) -> Iterator[tuple[str, jsonc.Node]]:
    for _where, servers in server_maps(root):
        for m in servers.members:
            if not only or m.key in only:
                yield m.key, m.value


def _parse(text: str, name: str) -> jsonc.Node:
    root = jsonc.parse(text, name=name)
    if not any(True for _ in server_maps(root)):
        raise McpConfigError(f"{name}: no MCP servers in it: neither \"mcpServers\" (Claude Desktop, Claude Code, "
                             "Cursor) nor \"servers\" (VS Code's mcp.json) nor \"mcp.servers\" (VS Code's settings)",
                             hint="give the client's MCP config file")
    return root


def _check_names(root: jsonc.Node, only: Sequence[str], name: str) -> None:
    known = {k for k, _ in _entries(root, ())}
    unknown = [s for s in only if s not in known]
    if unknown:
        raise McpConfigError(f"{name}: no server named {', '.join(map(repr, unknown))}",
                             hint=shown(f"the servers in it: {', '.join(sorted(known)) or 'none'}"))


def wrap_text(text: str, opts: WrapOptions, *, only: Sequence[str] = (), name: str = "<config>"
              ) -> tuple[str, list[Outcome]]:
    """``text`` with each stdio server (those named in ``only``, or all) wrapped.

    A server that is already wrapped is left as it is, unless ``only`` names
    it: its exec options are then replaced by ``opts``'s."""
    root = _parse(text, name)
    _check_names(root, only, name)
    renamed = [k for k, e in _entries(root, only)
               if only and e.kind == "object" and wrapped_split(e) is not None and not launcher_env(e)]
    if renamed:  # named again: unwrapped first, then wrapped with the new options
        text, _ = unwrap_text(text, only=renamed, name=name)
        root = _parse(text, name)
    edits: list[jsonc.Edit] = []
    out: list[Outcome] = []
    for key, entry in _entries(root, only):
        if entry.kind != "object":
            out.append(Outcome(name=key, action="skipped", detail="not an object"))
        elif _is_remote(entry):
            url = _str(entry, "url")
            out.append(Outcome(name=key, action="remote",
                               detail=f"left alone: a remote server ({url or _str(entry, 'type')}) runs elsewhere; "
                                      "safebox wraps the stdio servers started on this machine"))
        elif _str(entry, "command") is None:
            out.append(Outcome(name=key, action="skipped", detail="no \"command\" string: not a stdio server"))
        elif launcher_env(entry):
            names = ", ".join(launcher_env(entry))
            out.append(Outcome(name=key, action="skipped",
                               detail=f"NOT SANDBOXED: its \"env\" sets {names}, which the client gives safebox "
                                      "itself, on the host, before any sandbox exists (code in safebox's own process, "
                                      "or another helper, policy or resolver): remove it from the entry and wrap "
                                      "again"))
        elif wrapped_split(entry) is not None:
            out.append(Outcome(name=key, action="already-wrapped", detail=_wrapped_detail(entry, opts)))
        else:
            e, o = _wrap_entry(text, key, entry, opts)
            edits += e
            out.append(o)
    return jsonc.apply_edits(text, edits), out


def unwrap_text(text: str, *, only: Sequence[str] = (), name: str = "<config>") -> tuple[str, list[Outcome]]:
    """``text`` with each wrapped server (those in ``only``, or all) back as it was."""
    root = _parse(text, name)
    _check_names(root, only, name)
    edits: list[jsonc.Edit] = []
    out: list[Outcome] = []
    for key, entry in _entries(root, only):
        if entry.kind == "object" and wrapped_split(entry) is not None:
            e, o = _unwrap_entry(text, key, entry)
            edits += e
            out.append(o)
        elif entry.kind == "object" and _is_remote(entry):
            out.append(Outcome(name=key, action="remote", detail="left alone: a remote server"))
        else:
            out.append(Outcome(name=key, action="not-wrapped", detail="left as it is"))
    return jsonc.apply_edits(text, edits), out


# ------------------------------------------------------------ the file

def read(path: str) -> tuple[str, int]:
    """The config's text and mode: a regular file of this user with one
    link (hostio), never through a symlink at its last component."""
    try:
        data = hostio.read(path, max_size=MAX_CONFIG, missing_ok=False)
    except hostio.HostFileError as e:
        hint = e.hint
        if os.path.islink(path):
            hint = f"give the file it leads to: {os.path.realpath(path)}"
        raise McpConfigError(e.message, hint=hint) from None
    assert data is not None
    st = os.stat(path, follow_symlinks=False)
    try:
        return data.decode("utf-8"), stat.S_IMODE(st.st_mode)
    except UnicodeDecodeError:
        raise McpConfigError(f"{path}: not UTF-8 text") from None


def write(path: str, text: str, mode: int) -> None:
    """Replace the config atomically (a temporary file beside it, renamed
    over it: a client reading it meanwhile sees the old or the new file,
    never half of one), keeping its mode."""
    hostio.replace(path, text.encode("utf-8"), mode=mode)


def prepare(outcomes: Sequence[Outcome]) -> None:
    """Before a client starts a wrapped server: create its work dir and its
    audit log's directory (0700, ours), and its own policy file, in
    safebox's config dir (``~/.config/safebox/mcp/NAME.json``), which no
    sandbox can read or write (safebox masks it, and refuses a write root
    in it): no sandboxed command, the server included, can widen it.

    The policy file lets the server keep the variables its entry's ``env``
    gives it (``env.allow``): the config names them for that server
    (``GITHUB_PERSONAL_ACCESS_TOKEN`` for GitHub's), and ``safebox exec``
    would otherwise remove every ``*TOKEN*``-like name. A file that exists
    is the user's to edit: only names it lacks are added."""
    for o in outcomes:
        if o.action != "wrapped":
            continue
        for d in (o.work_dir, os.path.dirname(o.audit_log or ""), os.path.dirname(o.policy_file or "")):
            if d:
                os.makedirs(os.path.dirname(d), mode=0o700, exist_ok=True)
                os.makedirs(d, mode=0o700, exist_ok=True)
        if o.policy_file is not None:
            _own_policy(o.policy_file, o.env_allow)


def _own_policy(path: str, env_allow: tuple[str, ...]) -> None:
    data = hostio.read(path, max_size=1 << 20)
    doc: dict[str, object] = {}
    if data is not None:
        try:
            loaded = json.loads(data)
        except ValueError as e:
            raise McpConfigError(f"{path}: not JSON ({e})", hint="fix it, or remove it and wrap again") from None
        if not isinstance(loaded, dict):
            raise McpConfigError(f"{path}: not a JSON object", hint="fix it, or remove it and wrap again")
        doc = loaded
    env = doc.setdefault("env", {})
    if not isinstance(env, dict):
        raise McpConfigError(f"{path}: \"env\" is not an object", hint="fix it, or remove it and wrap again")
    allow = env.setdefault("allow", [])
    if not isinstance(allow, list):
        raise McpConfigError(f"{path}: \"env.allow\" is not a list", hint="fix it, or remove it and wrap again")
    missing = [n for n in env_allow if n not in allow]
    if data is not None and not missing:
        return
    allow += missing
    if not allow:
        del env["allow"]
    if not env:
        del doc["env"]
    hostio.replace(path, (json.dumps(doc, indent=2) + "\n").encode(), mode=0o600)


def shown(text: str) -> str:
    """``text`` for the terminal: every character that is not printable
    (ESC, CR, C1 controls such as U+009B) a ``?``. A cloned project's config
    picks server names, commands, options and comments: raw, an escape
    sequence in them could rewrite what ``wrap`` says it did (found in review)."""
    return "".join(c if c.isprintable() else "?" for c in text)


def report(o: Outcome) -> str:
    """The line ``wrap``/``unwrap`` says for one server (no newline)."""
    return shown(f"{o.name}: {o.action}" + (f": {o.detail}" if o.detail else ""))


def diff(path: str, old: str, new: str) -> str:
    """A unified diff of the config before and after, each line :func:`shown`."""
    return "".join(shown(line.rstrip("\n")) + "\n"
                   for line in difflib.unified_diff(old.splitlines(), new.splitlines(), fromfile=path, tofile=path,
                                                    lineterm=""))

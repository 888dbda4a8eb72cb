"""The runner's file commands (``$GITHUB_ENV``, ``$GITHUB_PATH``,
``$GITHUB_OUTPUT``, ``$GITHUB_STATE``, ``$GITHUB_STEP_SUMMARY``): a file read
exactly as the runner reads it, what of it may pass on to later steps, and
the entries written back in the runner's format."""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass

from safebox.ci_job.env_deny import env_refusal

_OUTPUT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*\Z")
#: What one file command file may hold; more is refused whole.
MAX_FILE = 16 << 20
#: The file commands, as (variable, kind); kind decides the parser's rules.
FILE_COMMANDS = (("GITHUB_ENV", "env"), ("GITHUB_PATH", "path"), ("GITHUB_OUTPUT", "output"),
                 ("GITHUB_STATE", "output"), ("GITHUB_STEP_SUMMARY", "summary"))


@dataclass(frozen=True)
class Refusal:
    """One file-command entry not passed on."""

    file: str  # GITHUB_ENV, ...
    name: str
    reason: str


def _lines(data: str) -> list[str]:
    """Split as .NET's ``TextReader.ReadLine`` does (the runner's reader):
    at ``\\r\\n``, ``\\n`` or a lone ``\\r``."""
    return re.split(r"\r\n|\n|\r", data)


def parse_file_command(data: str, *, file: str) -> tuple[list[tuple[str, str]], list[Refusal]]:
    """``NAME=value`` and ``NAME<<DELIMITER`` ... ``DELIMITER`` entries, as the
    runner reads them; returns (entries, refusals). An entry the runner would
    reject, or read differently than a careful reader would, is refused; an
    unterminated heredoc refuses everything after it."""
    entries: list[tuple[str, str]] = []
    refused: list[Refusal] = []
    lines = _lines(data)
    if lines and lines[-1] == "":
        lines.pop()
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if line == "":
            continue
        eq = line.find("=")
        here = line.find("<<")
        if eq >= 0 and (here < 0 or eq < here):
            name, value = line[:eq], line[eq + 1:]
        elif here >= 0:
            name, delim = line[:here], line[here + 2:]
            if not delim:
                refused.append(Refusal(file, name or "?", "a heredoc without a delimiter"))
                continue
            body: list[str] = []
            while i < len(lines) and lines[i] != delim:
                body.append(lines[i])
                i += 1
            if i >= len(lines):
                refused.append(Refusal(file, name or "?", f"heredoc delimiter {delim!r} never closes: "
                                                           "it and everything after it are refused"))
                break
            i += 1
            value = "\n".join(body)
        else:
            refused.append(Refusal(file, line[:60], "not NAME=value nor NAME<<DELIMITER"))
            continue
        if "\0" in value or "\0" in name:
            refused.append(Refusal(file, name[:60], "a NUL byte"))
            continue
        entries.append((name, value))
    return entries, refused


@dataclass(frozen=True)
class Passing:
    """What the policy lets a step pass on to later, unsandboxed steps.
    ``always``: the temporary directories every run may write (a private
    copy inside, but the host's own is shared by every later step)."""

    #: ``ci.passEnv``: names or patterns (``*``, ``?``) of $GITHUB_ENV variables.
    env: tuple[str, ...] = ()
    #: ``ci.passPath``: absolute directories $GITHUB_PATH may add.
    path: tuple[str, ...] = ()
    #: Every place a sandboxed run could have written: no PATH entry lies in one.
    writable: tuple[str, ...] = ()
    #: Directories any run may write (:data:`ALWAYS_WRITABLE`); tests set their own.
    always: tuple[str, ...] = ("/tmp", "/var/tmp", "/dev/shm", "/run/user")


def path_entry_refusal(entry: str, passing: Passing) -> str | None:
    """Why ``entry`` may not be prepended to later steps' PATH, or None: it
    must be an absolute path that ``ci.passPath`` lists, to an existing
    directory, holding no ``:``, outside everything a sandboxed run could
    write (whatever the list says), owned by this user or root and
    writable by nobody else, with no symlink on the way that leads into
    such a place."""
    if not entry.startswith("/"):
        return "not an absolute path"
    if ":" in entry:
        return "holds ':', which would add more than one PATH entry"
    norm = os.path.normpath(entry)
    if norm != entry or "//" in entry:
        # normpath drops `L/..` as text, the kernel follows L first: a link
        # planted in the work tree then leads `…/L/../../usr/local/bin`
        # anywhere (found in review). Only the plain spelling passes.
        return f"not a plain path ('.', '..', '//' or a trailing '/'); write it as {norm!r}"
    real = os.path.realpath(entry)
    if real != entry:
        return (f"a symlink on the way (it leads to {real}); a PATH entry is passed on only as the directory "
                "itself, with no link a step could change")
    for root in (*passing.writable, *passing.always):
        r = os.path.realpath(root)
        for p in (entry, real):
            if p == r or p.startswith(r.rstrip("/") + "/"):
                return (f"inside {root}, which a sandboxed run could write; a PATH entry there would run what "
                        "the step planted (never passed on, whatever ci.passPath says)")
    if not any(os.path.normpath(p) in (norm, real) for p in passing.path):
        return f"not in ci.passPath; fix: add {norm!r} to ci.passPath in the policy"
    try:
        st = os.stat(real)
    except OSError:
        return "not an existing directory"
    if not stat.S_ISDIR(st.st_mode):
        return "not a directory"
    if st.st_uid not in (0, os.geteuid()):
        return f"owned by uid {st.st_uid}, neither this user nor root"
    if st.st_mode & 0o022:
        return "writable by others than its owner"
    return None


def _heredoc(name: str, value: str) -> str:
    delim = "ghadelimiter_safebox_" + os.urandom(8).hex()
    while delim in value:
        delim += "_"
    return f"{name}<<{delim}\n{value}\n{delim}\n"


def render_entries(entries: list[tuple[str, str]]) -> str:
    """Entries in the runner's format: ``NAME=value``, or a heredoc with a
    fresh delimiter when the value spans lines."""
    return "".join(_heredoc(n, v) if "\n" in v or "\r" in v else f"{n}={v}\n" for n, v in entries)


def filter_entries(var: str, kind: str, data: str, passing: Passing, refused: list[Refusal]) -> str:
    """What of file command ``var``'s text ``data`` (its ``kind`` of FILE_COMMANDS) is passed on, in
    the runner's format; each entry refused is added to ``refused``."""
    if kind == "summary":
        return data if data.endswith("\n") else data + "\n"
    if kind == "path":
        keep = []
        for line in _lines(data):
            if not line:
                continue
            why = path_entry_refusal(line, passing)
            if why:
                refused.append(Refusal(var, line[:200], why))
            else:
                keep.append(line + "\n")
        return "".join(keep)
    entries, bad = parse_file_command(data, file=var)
    refused += bad
    good = []
    for name, value in entries:
        if kind == "env":
            why = env_refusal(name, passing.env)
        else:
            why = None if _OUTPUT_NAME.match(name) else "not a plain name ([A-Za-z_][A-Za-z0-9_-]*)"
        if why:
            refused.append(Refusal(var, name[:60], why))
        else:
            good.append((name, value))
    return render_entries(good)

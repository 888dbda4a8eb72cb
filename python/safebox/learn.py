"""Learn, then enforce: a suggested policy from what runs used.

``safebox exec --learn OUT`` lets the command reach any public host through
the proxy (rules.py ``learn``; loopback, private and metadata addresses are
still refused unless the policy allows them, and every file rule holds),
then writes the policy this module suggests to OUT. ``safebox policy
suggest AUDIT.jsonl...`` does the same from the audit logs of several runs.

The suggestion is srt-compatible JSON (``network.allowedDomains``,
``filesystem.allowWrite``; ``presets`` when the runs used some):

* every host the runs reached, exactly as named; siblings collapse to
  ``*.parent`` only when :data:`COLLAPSE_AT` or more distinct names under one
  parent were seen, never to a parent of fewer than two labels, and never
  under a suffix where unrelated parties get names (:data:`NEVER_COLLAPSE`:
  ``*.github.io`` would allow every Pages site);
* hosts that were refused (denied on purpose, local addresses) are left out
  and named on stderr: a learn run is no way around ``deniedDomains``;
* ``allowWrite``: the directory of each write refused only because it lay
  outside the write roots (violations feed, ``denied`` events with rule
  ``filesystem.allowWrite``); never a protected file, a credential path or
  safebox's own files, and never a directory the summary's fix lines never
  name either (system_dirs.never_suggested: a system directory, ``/``, the
  home or a directory above it). Such a write is left out and named on
  stderr, with why; nothing narrower is suggested instead: ``allowWrite``
  makes a missing path a directory, so ``~/x`` for a file the command
  creates would not even work, and a single file in a system directory is
  still the host's configuration (``/etc/cron.d/x``). The command should
  write under the work dir or ``$TMPDIR``, or the user adds the entry by hand.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

from safebox.errors import SafeboxError

if TYPE_CHECKING:
    from safebox.hostio import PinnedDir
    from safebox.report import Run

__all__ = ["COLLAPSE_AT", "LearnError", "NEVER_COLLAPSE", "collapse", "complete", "suggest", "write_policy"]


class LearnError(SafeboxError):
    """A learned policy could not be written (learn.py's own error: it never
    imports report.py, which imports it)."""

COLLAPSE_AT = 3
#: Parents under which names belong to unrelated parties (shared hosting,
#: public suffixes with two labels): never collapsed to a wildcard.
NEVER_COLLAPSE = frozenset({
    "github.io", "githubusercontent.com", "gitlab.io", "amazonaws.com", "s3.amazonaws.com",
    "cloudfront.net", "azurewebsites.net", "blob.core.windows.net", "web.core.windows.net",
    "azureedge.net", "appspot.com", "run.app", "cloudfunctions.net", "firebaseapp.com", "web.app",
    "herokuapp.com", "vercel.app", "netlify.app", "pages.dev", "workers.dev", "fly.dev", "onrender.com",
    "ngrok.io", "ngrok-free.app", "trycloudflare.com", "repl.co", "glitch.me", "surge.sh",
    "co.uk", "org.uk", "ac.uk", "gov.uk", "com.au", "net.au", "org.au", "co.jp", "co.nz", "com.br",
    "com.cn", "co.in", "co.za", "com.mx", "com.tr", "com.sg",
})
#: Rule of a ``denied`` write event that an ``allowWrite`` entry would lift.
RULE_ALLOW_WRITE = "filesystem.allowWrite"


def _is_ip(host: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(host.strip("[]"))
        return True
    except ValueError:
        return False


def collapse(names: set[str], *, at: int = COLLAPSE_AT) -> list[str]:
    """Exact names, with ``at`` or more siblings under one parent replaced by
    ``*.parent`` (the parent itself stays exact if it was seen)."""
    by_parent: dict[str, set[str]] = {}
    for n in names:
        if _is_ip(n) or "." not in n:
            continue
        parent = n.split(".", 1)[1]
        by_parent.setdefault(parent, set()).add(n)
    wild = {p for p, kids in by_parent.items()
            if len(kids) >= at and p.count(".") >= 1 and p not in NEVER_COLLAPSE}
    out = {f"*.{p}" for p in wild}
    for n in names:
        if "." in n and not _is_ip(n) and n.split(".", 1)[1] in wild:
            continue
        out.add(n)
    return sorted(out, key=lambda d: (d.lstrip("*.").split(".")[::-1], d))


def _tilde(path: str, home: str) -> str:
    if home and (path == home or path.startswith(home.rstrip("/") + "/")):
        return "~" + path[len(home.rstrip("/")):]
    return path


def suggest(runs: list[Run], *, home: str) -> tuple[dict[str, Any], list[str]]:
    """The suggested policy for ``runs``, and notes for the user."""
    used: set[str] = set()
    refused: dict[str, str] = {}
    presets: list[str] = []
    writes: dict[str, str] = {}  # directory -> the first refused path in it
    for run in runs:
        for p in run.presets:
            if p not in presets:
                presets.append(p)
        for h in run.hosts:
            host = str(h.get("host", "")).lower()
            if not host:
                continue
            if h.get("verdict") == "allow":
                used.add(host)
            else:
                refused.setdefault(host, str(h.get("reason") or h.get("rule") or "refused"))
        for d, path in _denied_write_dirs(run.denied).items():
            writes.setdefault(d, path)
    notes = []
    for host, why in sorted(refused.items()):
        if host not in used:
            notes.append(f"not suggested: {host} was refused ({why})")
    allowed: set[str] = set()
    for d, path in sorted(writes.items()):
        never = _never_suggested(d, home=home)
        if never is None:
            allowed.add(d)
        else:
            notes.append(f"not suggested: {_tilde(path, home)}: {never}; safebox never suggests it (write under "
                         "$TMPDIR or the work dir instead)")
    kept = _shallowest(allowed)
    doc: dict[str, Any] = {"network": {"allowedDomains": collapse(used)}}
    if kept:
        doc["filesystem"] = {"allowWrite": sorted(_tilde(d, home) for d in kept)}
    if presets:
        doc["presets"] = presets
    ci = _ci_entries(runs, notes)
    if ci:
        doc["ci"] = ci
    return doc, notes


def _ci_entries(runs: list[Run], notes: list[str]) -> dict[str, list[str]]:
    """``ci.passEnv`` / ``ci.passPath`` for the runner-file entries the
    steps wrote and the policy did not list (their ``refusedEntries``). A
    name known to run code later, or a PATH entry that can never pass (in a
    write root, a temporary directory), becomes a note, never a suggestion."""
    env: list[str] = []
    path: list[str] = []
    for run in runs:
        for e in run.refused_entries:
            file, name, reason = str(e.get("file", "")), str(e.get("name", "")), str(e.get("reason", ""))
            if file == "GITHUB_ENV" and reason.startswith("not in ci.passEnv;"):
                env.append(name)
            elif file == "GITHUB_PATH" and reason.startswith("not in ci.passPath;"):
                path.append(name)
            elif file in ("GITHUB_ENV", "GITHUB_PATH") and name != "*":
                notes.append(f"not suggested: {file} entry {name!r} ({reason})")
    out: dict[str, list[str]] = {}
    if env:
        out["passEnv"] = sorted(set(env))
    if path:
        out["passPath"] = list(dict.fromkeys(path))
    return out


def _denied_write_dirs(denied: list[dict[str, Any]]) -> dict[str, str]:
    """The directories of the writes ``allowWrite`` would have let through,
    each with the first refused path in it."""
    writes: dict[str, str] = {}
    for ev in denied:
        if ev.get("kind") == "write" and ev.get("rule") == RULE_ALLOW_WRITE and isinstance(ev.get("path"), str):
            path = os.path.normpath(ev["path"])
            if path.startswith("/"):
                writes.setdefault(os.path.dirname(path) if path != "/" else path, path)
    return writes


def _never_suggested(directory: str, *, home: str) -> str | None:
    """Why ``directory`` is never suggested (system_dirs.never_suggested), as
    named and with symlinks resolved (a link in the work dir to ``/etc``
    must not make ``/etc`` a suggestion under another name), or None."""
    from safebox.policy.system_dirs import never_suggested

    return never_suggested(directory, home=home) or never_suggested(os.path.realpath(directory), home=home)


def _shallowest(dirs: set[str]) -> list[str]:
    """Nested directories: the shallowest covers the rest."""
    kept: list[str] = []
    for d in sorted(dirs, key=lambda d: (d.count("/"), d)):
        if not any(d == k or d.startswith(k.rstrip("/") + "/") for k in kept):
            kept.append(d)
    return kept


def complete(ran_under: dict[str, Any], learned: dict[str, Any]) -> dict[str, Any]:
    """The policy ``--learn`` writes: the one the run ran under (its layers
    and flags as one document), then what it learned, merged as policy files
    layer (policy/layers.py). Enforcing it alone (``safebox exec -p OUT``)
    keeps every setting the learn run had: a base policy's
    ``allowLocalDestinations``, its denies, its limits."""
    from safebox.policy.layers import merge_documents

    return merge_documents([ran_under, learned])


def shell_line(argv: tuple[str, ...] | list[str]) -> str:
    """``argv`` as one line a shell runs as it is (``shlex.join``), and one
    line whatever it holds: an argument with a newline or another control
    character is written ``$'...'`` with escapes (bash, zsh, ksh and POSIX
    2024 sh), so that it can neither split the message nor forge a line."""
    import shlex

    def quote(arg: str) -> str:
        if arg.isprintable():
            return shlex.quote(arg)
        out = []
        for c in arg:
            if c in "\\'":
                out.append("\\" + c)
            elif c.isprintable():
                out.append(c)
            else:
                n = ord(c)
                out.append({"\n": "\\n", "\t": "\\t", "\r": "\\r"}.get(c, f"\\x{n:02x}" if n < 0x80
                                                                     else f"\\u{n:04x}" if n < 0x10000
                                                                     else f"\\U{n:08x}"))
        return "$'" + "".join(out) + "'"

    return " ".join(quote(a) for a in argv)


def write_policy(path: str, doc: dict[str, Any], *, pinned: PinnedDir | None = None) -> None:
    """Write ``doc`` to ``path`` as JSON, mode 0644, through
    :mod:`safebox.hostio`: a temporary file beside it renamed over a regular
    file of this user, never over anything else; a character device
    (``--learn /dev/null``) is written in place, never replaced; a symlink
    is never followed. With ``pinned``, the name is taken beneath that
    directory, pinned before the run. Raises LearnError naming the path."""
    from safebox.hostio import HostFileError, replace

    data = (json.dumps(doc, indent=2) + "\n").encode()
    try:
        if pinned is not None:
            pinned.replace(os.path.basename(path), data, mode=0o644)
        else:
            replace(path, data, mode=0o644)
    except HostFileError as e:
        raise LearnError(f"cannot write the policy to {path}: {e.why}") from None

"""The CI runner's secrets a sandboxed step must not read: the credentials
in git configs (scrubbed copies shown inside), the runner's own files, and
the safebox action's directory (read-only inside). Each finding is said in
``notes``."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

#: A self-hosted runner's credentials, in its root directory.
RUNNER_SECRET_FILES = (".credentials", ".credentials_rsaparams", ".runner", ".credentials_migrated",
                       ".runner_migrated", ".env")
_URL_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]+@")
_KEY = re.compile(r"\s*([A-Za-z][A-Za-z0-9-]*)\s*(=|$)")


def scrub_git_config(text: str) -> str:
    """``text`` without credentials: every ``extraheader`` line (with its
    backslash continuations) is dropped, and user information is taken out of
    every URL (``https://user:token@host`` -> ``https://host``)."""
    out: list[str] = []
    skipping = False
    for line in text.splitlines(keepends=True):
        if skipping:
            skipping = line.rstrip("\r\n").endswith("\\")
            continue
        m = _KEY.match(line)
        if m and m.group(1).lower() == "extraheader":
            skipping = line.rstrip("\r\n").endswith("\\")
            continue
        out.append(_URL_USERINFO.sub(r"\1", line))
    return "".join(out)


def _git_includes(config: str, text: str, home: str) -> list[str]:
    """The files ``include.path`` / ``includeIf.*.path`` entries of ``config`` name."""
    found = []
    section = ""
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("["):
            section = s[1:].split("]", 1)[0].strip().lower()
            continue
        m = re.match(r"path\s*=\s*(.+)", s, re.IGNORECASE)
        if m and section.split(" ", 1)[0].split(".", 1)[0] in ("include", "includeif"):
            p = m.group(1).strip().strip('"')
            if p.startswith("~/"):
                p = os.path.join(home, p[2:])
            elif not p.startswith("/"):
                p = os.path.join(os.path.dirname(config), p)
            found.append(os.path.normpath(p))
    return found


def _git_configs(starts: list[str]) -> list[str]:
    """The ``.git/config`` files of the repositories holding ``starts``, and of their submodules."""
    found: list[str] = []
    for start in starts:
        d = start
        while True:
            cfg = os.path.join(d, ".git", "config")
            if os.path.isfile(cfg):
                found.append(cfg)
                modules = os.path.join(d, ".git", "modules")
                if os.path.isdir(modules):
                    for root, _dirs, files in os.walk(modules):
                        if "config" in files and root.count(os.sep) - modules.count(os.sep) <= 4:
                            found.append(os.path.join(root, "config"))
                break
            parent = os.path.dirname(d)
            if parent == d:
                break
            d = parent
    return list(dict.fromkeys(found))


def _ancestor_exes(limit: int = 32) -> list[str]:
    out = []
    pid = os.getppid()
    for _ in range(limit):
        if pid <= 1:
            break
        try:
            out.append(os.readlink(f"/proc/{pid}/exe"))
        except OSError:
            pass
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
            pid = int(stat[stat.rfind(b")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return out


def runner_roots(environ: Mapping[str, str]) -> list[str]:
    """Directories that may be a GitHub runner's root (where ``.credentials`` lives)."""
    roots = []
    for exe in _ancestor_exes():
        if os.path.basename(exe) in ("Runner.Worker", "Runner.Listener"):
            roots.append(os.path.dirname(os.path.dirname(exe)))
    for var in ("RUNNER_WORKSPACE", "RUNNER_TEMP"):
        v = environ.get(var, "")
        if v.startswith("/"):
            # <root>/_work/<repo> and <root>/_work/_temp
            roots.append(os.path.dirname(os.path.dirname(os.path.normpath(v))))
    return [r for r in dict.fromkeys(roots) if r not in ("/", "")]


def git_credentials(notes: list[str], environ: Mapping[str, str], *, cwd: str, home: str, bwrap: bool,
                     scrubbed: list[tuple[str, str]]) -> list[str]:
    """Git configs that hold credentials: scrubbed copies over them (added to
    ``scrubbed``), or, without bubblewrap, returned to be made unreadable."""
    deny: list[str] = []
    starts = [cwd]
    for var in ("GITHUB_WORKSPACE", "CI_PROJECT_DIR"):
        v = environ.get(var, "")
        if v.startswith("/"):
            starts.append(v)
    configs = _git_configs(starts)
    for cfg in list(configs):
        try:
            with open(cfg, encoding="utf-8", errors="surrogateescape") as f:
                text = f.read(1 << 20)
        except OSError:
            continue
        for inc in _git_includes(cfg, text, home):
            if os.path.isfile(inc) and inc not in configs:
                configs.append(inc)
    for cfg in configs:
        try:
            with open(cfg, encoding="utf-8", errors="surrogateescape") as f:
                text = f.read(1 << 20)
        except OSError:
            continue
        clean = scrub_git_config(text)
        if clean == text:
            continue
        if bwrap:
            scrubbed.append((cfg, clean))
            notes.append(f"{cfg}: credentials hidden inside (a scrubbed copy covers it)")
        else:
            deny.append(cfg)
            notes.append(f"{cfg}: holds credentials; unreadable inside (no bubblewrap to show a scrubbed copy)")
    return deny


def runner_secret_files(notes: list[str], environ: Mapping[str, str], *, kind: str, home: str) -> list[str]:
    """The CI runner's own secret files, to be made unreadable."""
    deny: list[str] = []
    if kind == "github":
        for root in runner_roots(environ):
            found = [os.path.join(root, n) for n in RUNNER_SECRET_FILES if os.path.lexists(os.path.join(root, n))]
            deny += found
            notes += [f"{f}: the runner's own file; unreadable inside" for f in found]
        ws = environ.get("GITHUB_WORKSPACE", "")
        if ws.startswith("/") and os.path.isdir(ws):
            try:
                creds = [os.path.join(ws, n) for n in os.listdir(ws)
                         if n.startswith("gha-creds-") and n.endswith(".json")]
            except OSError:
                creds = []
            deny += creds
            notes += [f"{f}: google-github-actions/auth credentials; unreadable inside" for f in creds]
    else:
        for cfg in (os.path.join(home, ".gitlab-runner", "config.toml"), "/etc/gitlab-runner/config.toml"):
            if os.path.lexists(cfg):
                deny.append(cfg)
                notes.append(f"{cfg}: the GitLab runner's configuration (its token); unreadable inside")
        proj = environ.get("CI_PROJECT_DIR", "")
        if proj.startswith("/") and os.path.isdir(proj.rstrip("/") + ".tmp"):
            deny.append(proj.rstrip("/") + ".tmp")
            notes.append(f"{proj.rstrip('/')}.tmp: GitLab's file-type variables; hidden inside")
    return deny


def action_home(notes: list[str], environ: Mapping[str, str], *, kind: str) -> list[str]:
    """The action's own directory (``$RUNNER_TEMP/safebox``: the
    ``safebox-step`` shell on every later step's PATH, the policy copies
    the steps run under, the learned policies): read-only inside, even when
    a policy makes ``$RUNNER_TEMP`` (or a directory above it) a write root,
    or a step would rewrite the shell the next step runs (found in review)."""
    base = environ.get("SAFEBOX_ACTION_HOME") or (
        os.path.join(environ["RUNNER_TEMP"], "safebox") if environ.get("RUNNER_TEMP", "").startswith("/") else "")
    if kind != "github" or not base.startswith("/") or not os.path.isdir(base):
        return []
    notes.append(f"{base}: the safebox action's own files; read-only inside")
    return [base]

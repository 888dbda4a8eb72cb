"""The CI runner's own secrets, and its file commands, around one sandboxed run.

Imported by the runner only when the environment says the run is a CI job
(``GITHUB_ACTIONS=true`` or ``GITLAB_CI=true``; ``SAFEBOX_CI=off`` turns all of
this off). docs/ci.md, "What safebox hides from a step" and "Runner files",
is the user-facing description; this docstring is the reasoning.

Secrets of the runner, hidden inside:

* The token ``actions/checkout`` persists in ``.git/config``
  (``http.<url>.extraheader = AUTHORIZATION: basic ...``; GitLab's
  ``https://gitlab-ci-token:TOKEN@`` remote URLs, and any ``include.path``
  file such a config names, e.g. checkout's credentials file in
  ``$RUNNER_TEMP``). With bubblewrap the file is covered by a scrubbed copy,
  read-only: git inside works on the repository, fetches public remotes when
  the policy allows the host, and cannot authenticate as the job. The host's
  file is never modified, so a killed safebox leaves nothing to restore.
  Without bubblewrap nothing can be mounted: the files are added to
  ``denyRead`` instead (what the helper alone can enforce of that).
* A self-hosted runner's ``.credentials``, ``.credentials_rsaparams``,
  ``.runner`` (and the ``_migrated`` copies, and its ``.env``), in the
  runner's root: found from the runner process among safebox's ancestors
  (``<root>/bin/Runner.Worker``) and from ``RUNNER_WORKSPACE`` /
  ``RUNNER_TEMP`` (``<root>/_work/...``).
* ``google-github-actions/auth``'s ``gha-creds-*.json`` in the workspace
  (the file ``GOOGLE_GHA_CREDS_PATH`` names is denied in every run already:
  policy/defaults.py).
* GitLab: the runner's ``config.toml`` (its registration token), and the
  ``$CI_PROJECT_DIR.tmp`` directory where file-type CI/CD variables (often
  secrets: kubeconfigs, keys) are written.

File commands (``$GITHUB_ENV``, ``$GITHUB_PATH``, ``$GITHUB_OUTPUT``,
``$GITHUB_STATE``, ``$GITHUB_STEP_SUMMARY``): inside they name files of this
run (a write root of its own); the runner's own files are read-only inside.
After the run, :meth:`CiRun.finish` parses what the command wrote exactly as
the runner would (lines end at ``\\n``, ``\\r\\n`` or a lone ``\\r``, as .NET's
``ReadLine``; ``NAME=value`` and ``NAME<<DELIMITER``), refuses what could run
code in a later, unsandboxed step (:data:`ENV_DENY`, :data:`ENV_DENY_PREFIXES`,
a PATH entry that is not a plain existing directory outside every write
root), refuses anything malformed or ambiguous, and appends the rest, in a
canonical form, to the runner's files.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from safebox.hostio import PinnedDir

__all__ = ["ENV_DENY", "ENV_DENY_PREFIXES", "CiRun", "Passing", "Refusal", "code_running", "detect", "env_refusal",
           "parse_file_command", "path_entry_refusal", "prepare", "scrub_git_config"]

#: Variables known to make some later program run code, load a library,
#: trust a certificate or reach a host of the writer's choosing. Not the
#: gate (``ci.passEnv`` is, an allowlist): these only never pass through a
#: wildcard, and their refusal says why. Exact names.
ENV_DENY: dict[str, str] = {
    # the dynamic loader and glibc
    "GCONV_PATH": "loads code into every glibc program",
    "HOSTALIASES": "redirects host names",
    "LOCALDOMAIN": "changes name resolution",
    "RES_OPTIONS": "changes name resolution",
    "MALLOC_CHECK_": "changes the allocator",
    # shells
    "BASH_ENV": "a file bash runs before every script",
    "ENV": "a file sh runs at start",
    "SHELLOPTS": "changes how every bash script runs",
    "BASHOPTS": "changes how every bash script runs",
    "PS4": "runs command substitutions when tracing",
    "PROMPT_COMMAND": "a command bash runs",
    "IFS": "changes how every script splits words",
    "CDPATH": "changes where scripts cd",
    "ZDOTDIR": "where zsh finds its start-up files",
    "HOME": "where every tool finds its start-up files",
    "PATH": "use $GITHUB_PATH, whose entries are checked",
    "TMPDIR": "where later steps write temporary files",
    # language runtimes
    "NODE_OPTIONS": "options (--require) for every node process",
    "NODE_PATH": "where node finds modules",
    "NODE_EXTRA_CA_CERTS": "a certificate node trusts",
    "NODE_TLS_REJECT_UNAUTHORIZED": "turns off node's certificate checks",
    "PERL5OPT": "options (-M) for every perl",
    "PERL5LIB": "where perl finds modules",
    "PERLLIB": "where perl finds modules",
    "PERL5DB": "code perl runs",
    "RUBYOPT": "options (-r) for every ruby",
    "RUBYLIB": "where ruby finds libraries",
    "JAVA_TOOL_OPTIONS": "options (-javaagent) for every JVM",
    "_JAVA_OPTIONS": "options for every JVM",
    "JDK_JAVA_OPTIONS": "options for every java launcher",
    "CLASSPATH": "where the JVM finds classes",
    "MAVEN_OPTS": "options for maven's JVM",
    "MAVEN_ARGS": "arguments for every maven run",
    "GRADLE_OPTS": "options for gradle's JVM",
    "DOTNET_STARTUP_HOOKS": "code every .NET program loads",
    "CORECLR_PROFILER_PATH": "code every .NET program loads",
    "RUSTC_WRAPPER": "a program run in place of rustc",
    "RUSTC": "the compiler cargo runs",
    "RUSTFLAGS": "flags (linker, plugins) for rustc",
    "RUSTDOCFLAGS": "flags for rustdoc",
    # compilers and build tools
    "CC": "the C compiler later builds run", "CXX": "the C++ compiler later builds run",
    "CPP": "the preprocessor later builds run", "LD": "the linker later builds run",
    "AR": "the archiver later builds run", "AS": "the assembler later builds run",
    "CFLAGS": "compiler flags (-fplugin, -B)", "CXXFLAGS": "compiler flags (-fplugin, -B)",
    "CPPFLAGS": "preprocessor flags", "LDFLAGS": "linker flags",
    "MAKEFLAGS": "options for every make", "MFLAGS": "options for every make",
    # editors, pagers, helpers other tools start
    "EDITOR": "a program git and others run", "VISUAL": "a program git and others run",
    "PAGER": "a program git and others run", "MANPAGER": "a program man runs",
    "BROWSER": "a program tools run", "LESSOPEN": "a command less runs", "LESSCLOSE": "a command less runs",
    "SSH_ASKPASS": "a program ssh runs", "SUDO_ASKPASS": "a program sudo runs",
    # where traffic goes and whom it trusts
    "HTTP_PROXY": "where later steps' traffic goes", "HTTPS_PROXY": "where later steps' traffic goes",
    "ALL_PROXY": "where later steps' traffic goes", "NO_PROXY": "which traffic bypasses a proxy",
    "FTP_PROXY": "where later steps' traffic goes",
    "SSL_CERT_FILE": "a certificate store later steps trust", "SSL_CERT_DIR": "certificates later steps trust",
    "CURL_CA_BUNDLE": "certificates curl trusts", "REQUESTS_CA_BUNDLE": "certificates python-requests trusts",
    "DOCKER_HOST": "which Docker daemon later steps use", "DOCKER_CONFIG": "docker's credentials and helpers",
    "KUBECONFIG": "which cluster and credentials kubectl uses",
    "AWS_CONFIG_FILE": "AWS credential_process commands", "AWS_SHARED_CREDENTIALS_FILE": "AWS credentials",
    "GOOGLE_APPLICATION_CREDENTIALS": "Google credentials",
    "CLOUDSDK_AUTH_CREDENTIAL_FILE_OVERRIDE": "Google credentials",
    # found in review (issue 22): each ran code in a later step
    "XDG_CONFIG_HOME": "where git, and most tools, read their configuration (core.fsmonitor runs)",
    "XDG_CONFIG_DIRS": "where tools read their configuration",
    "XDG_DATA_HOME": "where tools find plugins and data", "XDG_DATA_DIRS": "where tools find plugins and data",
    "MAKEFILES": "makefiles every make reads first ($(shell ...) runs)",
    "TAR_OPTIONS": "options for every tar (--use-compress-program runs a program; actions/cache runs tar)",
    "OPENSSL_CONF": "an OpenSSL configuration (it loads engines and providers)",
    "OPENSSL_ENGINES": "where OpenSSL loads engines from", "OPENSSL_MODULES": "where OpenSSL loads providers from",
    "JAVA_HOME": "the JVM later builds run", "CURL_HOME": "where curl reads .curlrc",
    "WGETRC": "a wget start-up file", "LUA_INIT": "Lua code run at every start",
    "VIMINIT": "commands vim runs at start", "EXINIT": "commands vi runs at start", "MYVIMRC": "a vimrc",
    "GLIBC_TUNABLES": "glibc's tunables (a past loader exploit)", "PROMPT_DIRTRIM": "changes bash prompts",
    "INPUTRC": "readline's start-up file", "TERMINFO": "terminal descriptions programs load",
    "GNUPGHOME": "gpg's keys and configuration", "SSH_AUTH_SOCK": "which agent ssh signs with",
    "GPG_TTY": "where gpg asks for passphrases", "DBUS_SESSION_BUS_ADDRESS": "the session bus later steps talk to",
}
#: Go's variables (not every name starting with GO: GOOGLE_CLOUD_PROJECT, GOAL).
_GO_NAMES = frozenset({"GOFLAGS", "GOPROXY", "GOTOOLCHAIN", "GOROOT", "GOPATH", "GOBIN", "GOENV", "GOPRIVATE",
                       "GONOSUMDB", "GONOSUMCHECK", "GONOPROXY", "GOSUMDB", "GOINSECURE", "GOEXPERIMENT",
                       "GOCACHE", "GOMODCACHE", "GOWORK", "GOVCS", "GOAUTH", "GODEBUG"})
#: Name prefixes refused the same way (``LD_PRELOAD``, ``GIT_SSH_COMMAND``, ...).
ENV_DENY_PREFIXES: dict[str, str] = {
    "LD_": "a dynamic-loader variable (LD_PRELOAD, LD_AUDIT, LD_LIBRARY_PATH) loads code into every program",
    "BASH_FUNC_": "an exported bash function runs in every later bash",
    "PYTHON": "a Python start-up variable (PYTHONSTARTUP, PYTHONPATH, PYTHONHOME) runs code in every python",
    "LUA_INIT": "Lua code run at every start",
    "PIP_": "pip's configuration (index, trusted hosts) for later installs",
    "UV_": "uv's configuration (index) for later installs",
    "NPM_CONFIG_": "npm's configuration (registry, script-shell) for later installs",
    "YARN_": "yarn's configuration for later installs",
    "GIT_": "git's configuration (GIT_SSH_COMMAND, GIT_CONFIG_*, GIT_EXEC_PATH) runs code",
    "CGO_": "cgo's compiler flags for later builds",
    "CARGO_": "cargo's configuration (build.rustc-wrapper, registries) for later builds",
    "RUSTUP_": "rustup's configuration (toolchain) for later builds",
    "GITHUB_": "the runner's own context: a step may not rewrite it",
    "RUNNER_": "the runner's own context: a step may not rewrite it",
    "ACTIONS_": "the runner's own context: a step may not rewrite it",
    "SAFEBOX_": "safebox's own settings for later steps",
    "CI_": "the CI's own context",
}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_OUTPUT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*\Z")
#: What one file command file may hold; more is refused whole.
MAX_FILE = 16 << 20

#: A self-hosted runner's credentials, in its root directory.
RUNNER_SECRET_FILES = (".credentials", ".credentials_rsaparams", ".runner", ".credentials_migrated",
                       ".runner_migrated", ".env")
#: The file commands, as (variable, kind); kind decides the parser's rules.
FILE_COMMANDS = (("GITHUB_ENV", "env"), ("GITHUB_PATH", "path"), ("GITHUB_OUTPUT", "output"),
                 ("GITHUB_STATE", "output"), ("GITHUB_STEP_SUMMARY", "summary"))


def detect(environ: Mapping[str, str]) -> str | None:
    """``github`` or ``gitlab`` when the environment is such a CI job, else None."""
    if environ.get("SAFEBOX_CI", "").lower() in ("off", "0", "false", "no"):
        return None
    if environ.get("GITHUB_ACTIONS") == "true":
        return "github"
    if environ.get("GITLAB_CI") == "true":
        return "gitlab"
    return None


# ------------------------------------------------------------- git config

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


# ------------------------------------------------------------ runner roots

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


# ------------------------------------------------------------ file commands

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


def env_refusal(name: str, allowed: tuple[str, ...] = ()) -> str | None:
    """Why ``name`` may not be set for later steps through $GITHUB_ENV, or
    None: it must be a plain name that ``ci.passEnv`` (``allowed``) names; a
    name known to run code must be named exactly, never by a wildcard."""
    from safebox._record import glob_match

    if not _NAME.match(name):
        return "not a plain variable name ([A-Za-z_][A-Za-z0-9_]*)"
    if name in allowed:
        return None
    runs_code = code_running(name)
    if any(glob_match(name, p) for p in allowed if p != name):
        if runs_code is None:
            return None
        return (f"{runs_code}: a wildcard in ci.passEnv never passes it; fix, only if a later step must have it: "
                f"add {name!r} itself to ci.passEnv")
    if runs_code is not None:
        return (f"not in ci.passEnv ({runs_code}); fix, only if a later step must have it: add {name!r} to "
                "ci.passEnv in the policy")
    return f"not in ci.passEnv; fix: add {name!r} to ci.passEnv in the policy"


def code_running(name: str) -> str | None:
    """Why a variable is known to make a later program run code, or None
    (the names a wildcard in ``ci.passEnv`` never passes)."""
    upper = name.upper()
    why = ENV_DENY.get(upper)
    if why is not None:
        return why
    if upper in _GO_NAMES:
        return "go's configuration (GOFLAGS, GOPROXY, GOTOOLCHAIN) for later builds"
    for prefix, why in ENV_DENY_PREFIXES.items():
        # PYTHON_VERSION is a setup-python output, not Python's own variable.
        if upper.startswith(prefix) and not (prefix == "PYTHON" and upper.startswith("PYTHON_")):
            return why
    if upper.endswith("_PROXY"):
        return "where later steps' traffic goes"
    return None


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


# --------------------------------------------------------------- the run

@dataclass
class CiRun:
    """What a CI job's run adds to the sandbox, and what it passes on afterwards."""

    kind: str
    deny_read: tuple[str, ...] = ()
    deny_write: tuple[str, ...] = ()
    allow_write: tuple[str, ...] = ()
    #: (path, its scrubbed text): covered read-only inside (:meth:`materialize`).
    scrubbed: tuple[tuple[str, str], ...] = ()
    #: Variables pointing at this run's own file-command files.
    env: dict[str, str] = field(default_factory=dict)
    #: variable -> (this run's file, the runner's file)
    files: dict[str, tuple[str, str]] = field(default_factory=dict)
    commands_dir: str | None = None
    notes: list[str] = field(default_factory=list)
    #: commands_dir, pinned when it was made: this run's files are read
    #: beneath it, never through a name the command replaced.
    pinned: PinnedDir | None = None
    #: variable -> (the runner file's directory pinned before the run, the
    #: file's (st_dev, st_ino) then, or None when it did not exist yet)
    runner_files: dict[str, tuple[PinnedDir, tuple[int, int] | None]] = field(default_factory=dict)

    def materialize(self, run_dir: str, *, dry_run: bool = False) -> tuple[tuple[str, str], ...]:
        """Write the scrubbed copies into the run dir (private, read-only
        inside); returns the ``(copy, path)`` overlays for bwrap."""
        out = []
        for n, (path, text) in enumerate(self.scrubbed):
            copy = os.path.join(run_dir, f"git-config-{n}")
            if not dry_run:
                fd = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
                try:
                    os.write(fd, text.encode("utf-8", "surrogateescape"))
                finally:
                    os.close(fd)
            out.append((copy, path))
        return tuple(out)

    def attach(self, var: str, ours: str, theirs: str) -> None:
        """Give ``var`` this run's file ``ours`` (created empty, 0600; every
        file in one directory, pinned at the first) and the runner's
        ``theirs`` (its directory and identity pinned now, before the run)."""
        from safebox.hostio import pin

        if self.pinned is None:
            self.pinned = pin(os.path.dirname(ours))
        elif os.path.dirname(ours) != self.pinned.path:
            raise ValueError(f"{ours}: this run's files share one directory ({self.pinned.path})")
        self.pinned.write_exclusive(os.path.basename(ours), b"")
        _pin_runner_file(self, var, theirs)
        self.files[var] = (ours, theirs)

    def cleanup(self) -> None:
        """Remove this run's file-command directory and release the pinned
        directories (idempotent)."""
        for d, _ in self.runner_files.values():
            d.close()
        self.runner_files = {}
        if self.pinned is not None:
            self.pinned.close()
            self.pinned = None
        if self.commands_dir:
            from safebox._record import rmtree

            rmtree(self.commands_dir)
            self.commands_dir = None

    def summary_file(self) -> str | None:
        """The runner's step summary file (where the report goes), if any."""
        pair = self.files.get("GITHUB_STEP_SUMMARY")
        return pair[1] if pair else None

    def finish(self, passing: Passing) -> list[Refusal]:
        """Pass the safe entries of each file command on to the runner's file;
        returns what was refused. Call once, after the command ended."""
        refused: list[Refusal] = []
        for var, kind in FILE_COMMANDS:
            pair = self.files.get(var)
            if pair is None or self.pinned is None:
                continue
            ours, theirs = pair
            from safebox.hostio import HostFileError

            # This run's file lies in a directory the command could write:
            # read beneath the directory pinned when it was made, without
            # following a link (a step's `ln -sf ~/.ssh/id_x
            # $GITHUB_STEP_SUMMARY` must not publish the key), and only a
            # regular file of this user with one link (a hard link to
            # /etc/shadow is refused whole), at most MAX_FILE bytes.
            try:
                raw = self.pinned.read(os.path.basename(ours), max_size=MAX_FILE)
            except HostFileError as e:
                refused.append(Refusal(var, "*", f"refused whole: {e.why}"))
                continue
            if not raw:
                continue
            out = self._filter(var, kind, raw.decode("utf-8", "replace"), passing, refused)
            if out:
                try:
                    self._append_theirs(var, theirs, out.encode())
                except HostFileError as e:
                    refused.append(Refusal(var, "*", f"not passed on: the runner's file {e.why}"))
        return refused

    def _append_theirs(self, var: str, theirs: str, data: bytes) -> None:
        """Append to the runner's own file beneath its directory pinned
        before the run: the very file that was there then (same device and
        inode), or, when there was none, a new regular file of this user."""
        from safebox.hostio import HostFileError, check_regular

        pinned = self.runner_files.get(var)
        if pinned is None:
            raise HostFileError(theirs, "has a directory safebox could not pin before the run")
        d, ident = pinned
        name = os.path.basename(theirs)
        flags = os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK | (os.O_CREAT if ident is None else 0)
        try:
            fd = d.open(name, flags, 0o644)
        except OSError as e:
            raise HostFileError(theirs, e.strerror or str(e)) from None
        try:
            st = os.fstat(fd)
            if ident is None:
                check_regular(theirs, st, max_size=None)
            elif (st.st_dev, st.st_ino) != ident or not stat.S_ISREG(st.st_mode):
                raise HostFileError(theirs, "is not the file the runner gave (replaced during the run)")
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)

    @staticmethod
    def _filter(var: str, kind: str, data: str, passing: Passing, refused: list[Refusal]) -> str:
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


def _git_credentials(ci: CiRun, environ: Mapping[str, str], *, cwd: str, home: str, bwrap: bool,
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
            ci.notes.append(f"{cfg}: credentials hidden inside (a scrubbed copy covers it)")
        else:
            deny.append(cfg)
            ci.notes.append(f"{cfg}: holds credentials; unreadable inside (no bubblewrap to show a scrubbed copy)")
    return deny


def _runner_files(ci: CiRun, environ: Mapping[str, str], *, kind: str, home: str) -> list[str]:
    """The CI runner's own secret files, to be made unreadable."""
    deny: list[str] = []
    if kind == "github":
        for root in runner_roots(environ):
            found = [os.path.join(root, n) for n in RUNNER_SECRET_FILES if os.path.lexists(os.path.join(root, n))]
            deny += found
            ci.notes += [f"{f}: the runner's own file; unreadable inside" for f in found]
        ws = environ.get("GITHUB_WORKSPACE", "")
        if ws.startswith("/") and os.path.isdir(ws):
            try:
                creds = [os.path.join(ws, n) for n in os.listdir(ws)
                         if n.startswith("gha-creds-") and n.endswith(".json")]
            except OSError:
                creds = []
            deny += creds
            ci.notes += [f"{f}: google-github-actions/auth credentials; unreadable inside" for f in creds]
    else:
        for cfg in (os.path.join(home, ".gitlab-runner", "config.toml"), "/etc/gitlab-runner/config.toml"):
            if os.path.lexists(cfg):
                deny.append(cfg)
                ci.notes.append(f"{cfg}: the GitLab runner's configuration (its token); unreadable inside")
        proj = environ.get("CI_PROJECT_DIR", "")
        if proj.startswith("/") and os.path.isdir(proj.rstrip("/") + ".tmp"):
            deny.append(proj.rstrip("/") + ".tmp")
            ci.notes.append(f"{proj.rstrip('/')}.tmp: GitLab's file-type variables; hidden inside")
    return deny


def _file_commands(ci: CiRun, environ: Mapping[str, str], *, dry_run: bool) -> list[str]:
    """This run's own files for $GITHUB_ENV and the other file commands
    (their directory created unless ``dry_run``); returns the runner's
    files, which the sandbox may not write."""
    deny_write: list[str] = []
    present = [(var, environ[var]) for var, _ in FILE_COMMANDS if environ.get(var, "").startswith("/")]
    if present and not dry_run:
        import tempfile

        base = environ.get("RUNNER_TEMP", "")
        try:
            ci.commands_dir = tempfile.mkdtemp(prefix="safebox-files-", dir=base if base.startswith("/") else None)
        except OSError:
            # RUNNER_TEMP not writable: a safebox nested in a sandboxed step.
            # Its private /tmp will do; a failure there is an error.
            try:
                ci.commands_dir = tempfile.mkdtemp(prefix="safebox-files-")
            except OSError as e:
                from safebox.errors import RunError

                raise RunError(f"cannot create this run's directory for $GITHUB_ENV and the other runner files: "
                               f"{e.strerror or e}") from None
    for var, theirs in present:
        ours = os.path.join(ci.commands_dir or "/nonexistent", var.lower())
        if ci.commands_dir:
            ci.attach(var, ours, theirs)
        else:
            ci.files[var] = (ours, theirs)
        ci.env[var] = ours
        if os.path.lexists(theirs):
            deny_write.append(theirs)
    if ci.commands_dir:
        ci.allow_write = (ci.commands_dir,)
    return deny_write


def _action_home(ci: CiRun, environ: Mapping[str, str], *, kind: str) -> list[str]:
    """The action's own directory (``$RUNNER_TEMP/safebox``: the
    ``safebox-step`` shell on every later step's PATH, the policy copies
    the steps run under, the learned policies): read-only inside, even when
    a policy makes ``$RUNNER_TEMP`` (or a directory above it) a write root,
    or a step would rewrite the shell the next step runs (found in review)."""
    base = environ.get("SAFEBOX_ACTION_HOME") or (
        os.path.join(environ["RUNNER_TEMP"], "safebox") if environ.get("RUNNER_TEMP", "").startswith("/") else "")
    if kind != "github" or not base.startswith("/") or not os.path.isdir(base):
        return []
    ci.notes.append(f"{base}: the safebox action's own files; read-only inside")
    return [base]


def _pin_runner_file(ci: CiRun, var: str, theirs: str) -> None:
    """Pin the directory of the runner's file, and the file's identity,
    before the command runs (see :meth:`CiRun._append_theirs`). A directory
    that cannot be pinned leaves the variable without one: its entries are
    then refused after the run, said."""
    from safebox.hostio import HostFileError, pin

    try:
        d = pin(os.path.dirname(os.path.abspath(theirs)))
    except HostFileError:
        return
    st = d.lstat(os.path.basename(theirs)) if os.path.basename(theirs) else None
    ident = (st.st_dev, st.st_ino) if st is not None and stat.S_ISREG(st.st_mode) else None
    if st is not None and ident is None:
        d.close()  # a link, a directory, a fifo: nothing is ever appended to it
        return
    ci.runner_files[var] = (d, ident)


def prepare(environ: Mapping[str, str], *, kind: str, cwd: str, home: str, bwrap: bool,
            dry_run: bool = False) -> CiRun:
    """Decide what this CI job's run hides and where its file commands go;
    creates the run's file-command directory (unless ``dry_run``)."""
    ci = CiRun(kind=kind)
    scrubbed: list[tuple[str, str]] = []
    deny = _git_credentials(ci, environ, cwd=cwd, home=home, bwrap=bwrap, scrubbed=scrubbed)
    deny += _runner_files(ci, environ, kind=kind, home=home)
    deny_write = _file_commands(ci, environ, dry_run=dry_run)
    deny_write += _action_home(ci, environ, kind=kind)
    ci.deny_read = tuple(dict.fromkeys(deny))
    ci.deny_write = tuple(dict.fromkeys(deny_write))
    ci.scrubbed = tuple(scrubbed)
    return ci

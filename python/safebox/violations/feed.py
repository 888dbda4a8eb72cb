"""Explaining refusals: records → ``denied`` events (rule, errno, fix) → the
audit log and the end-of-run summary (docs/violations.md, "Events").

Imported only when a run has something to explain. The supervisor's
records are bytes another process wrote from what the sandboxed command
passed to the kernel: ``parse_record`` takes any bytes and returns a record
or None, never raises (fuzzed in tests/unit/test_violations_feed.py).
"""

from __future__ import annotations

import datetime
import errno as errno_mod
import os
from dataclasses import dataclass, field
from typing import Any

from safebox.builder.resolved import Layers, ResolvedPolicy
from safebox.policy.defaults import CREDENTIAL_PATHS, PROTECTED_DIRS, PROTECTED_FILES, PROTECTED_IN_GIT_DIR
from safebox.policy.effective import EffectivePolicy
from safebox.violations.table import MASK_DIR, MASK_FILE, MOUNT_C, MOUNT_W, M, Table

#: Version of the ``denied`` event's fields (docs/violations.md).
EVENT_VERSION = 1
#: Kinds, in the order the summary lists them.
KINDS = ("write", "read", "exec", "syscall", "unix-socket", "network")
_KIND = {"w": "write", "r": "read", "x": "exec", "u": "unix-socket", "n": "network"}
_PLURAL = {"write": ("write", "writes"), "read": ("read", "reads"), "exec": ("exec", "execs"),
           "syscall": ("system call", "system calls"), "unix-socket": ("unix socket", "unix sockets"),
           "network": ("connection", "connections")}

RULE_ALLOW_WRITE = "filesystem.allowWrite"
RULE_DENY_WRITE = "filesystem.denyWrite"
RULE_DENY_READ = "filesystem.denyRead"
RULE_CREDENTIALS = "filesystem.denyRead (built-in credential list)"
RULE_PROTECTED = "protected file"
RULE_SELF = "self-protection"
RULE_RUNNER_FILE = "runner file"
RULE_RUNNER_SECRET = "runner secret"
RULE_UNIX = "network.allowUnixSockets"
RULE_DOMAINS = "network.allowedDomains"
RULE_PRESET_CACHE = "preset cache"


@dataclass(frozen=True)
class Record:
    """One line of the supervisor (docs/violations.md, "Records")."""

    kind: str  # w r x s u n
    name: str  # the watched syscall's name, or "-"
    nr: int
    why: str  # T P B M or -
    idx: int  # table entry, -1: none
    err: int  # the errno the supervisor answered (denied calls), else 0
    pid: int
    time: float
    args: tuple[int, ...]
    comm: str
    path: str | None
    path2: str | None


def _unhex(field_: bytes) -> str | None:
    if field_ == b"-":
        return None
    raw = bytes.fromhex(field_.decode("ascii"))
    return os.fsdecode(raw)


def parse_record(line: bytes) -> Record | None:
    """A record from one line of the events file, or None when it is not one.
    Never raises: the line is data another process wrote."""
    try:
        f = line.split(b" ")
        if len(f) != 13 or f[0] != b"ev":
            return None
        kind = f[1].decode("ascii")
        why = f[4].decode("ascii")
        if kind not in "wrxsun" or len(kind) != 1 or len(why) != 1 or why not in "TPBM-":
            return None
        args = tuple(int(a, 16) for a in f[9].split(b","))
        if len(args) != 6 or any(not 0 <= a < 2**64 for a in args):
            return None
        name = f[2].decode("ascii")
        if not (name == "-" or name.replace("_", "").isalnum()):
            return None
        return Record(kind=kind, name=name, nr=int(f[3]), why=why, idx=int(f[5]), err=int(f[6]),
                      pid=int(f[7]), time=float(f[8]), args=args, comm=_unhex(f[10]) or "",
                      path=_unhex(f[11]), path2=_unhex(f[12]))
    except (ValueError, UnicodeDecodeError):
        return None


def _errno_name(n: int | None) -> str | None:
    if not n:
        return None
    return errno_mod.errorcode.get(n, str(n))


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def protected_by_name(path: str) -> bool:
    """Whether ``path`` is one of the mandatory protected names
    (policy/defaults.py), wherever it lies."""
    parts = [p for p in path.split("/") if p]
    if parts and parts[-1] in PROTECTED_FILES:
        return True
    for d in PROTECTED_DIRS:
        seq = d.split("/")
        for i in range(len(parts) - len(seq) + 1):
            if parts[i:i + len(seq)] == seq:
                return True
    for i, p in enumerate(parts[:-1]):
        if p == ".git" and parts[i + 1] in PROTECTED_IN_GIT_DIR:
            return True
    return False


@dataclass
class Event:
    """One refusal, explained."""

    kind: str
    fields: dict[str, Any]
    rule: str
    fix: str | None  # what to change, or None when nothing allows it
    fix_note: str = ""  # why nothing allows it
    time: float = 0.0
    shown: str = ""  # the path, syscall or host, for the summary
    quiet: bool = False  # in the audit log and -v, not in the summary (see Feed.summary)
    explained: bool = False  # its rule and fix were printed on a line of its own (the proxy's, per host)
    by_design: bool = False  # no fix is suggested on purpose (a system directory), see policy/system_dirs.py


@dataclass
class Feed:
    """The events of one run."""

    rp: ResolvedPolicy
    policy: EffectivePolicy
    home: str
    table: Table | None
    status: bytes | None = None  # the helper's status line
    own: tuple[str, ...] = ()  # this run's --policy and --audit-log files (read-only inside)
    #: Entries safebox added itself, not the user's policy (a CI runner's
    #: files, :func:`ci_entries`): path -> (rule, fix, why). A refusal under
    #: one is explained by it, never as an entry to remove from the policy.
    added: dict[str, tuple[str, str | None, str]] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    dropped: int = 0

    # ----------------------------------------------------------- helpers

    def tilde(self, path: str) -> str:
        """``path`` with the home directory shown as ``~``."""
        if self.home and _under(path, self.home) and self.home != "/":
            return "~" + path[len(self.home.rstrip("/")):]
        return path

    def _credential(self, path: str) -> bool:
        for c in CREDENTIAL_PATHS:
            c = self.home + c[1:] if c.startswith("~") else c
            if _under(path, c) or _under(path, os.path.realpath(c)):
                return True
        return False

    def _self(self, path: str) -> bool:
        from safebox.builder.resolve import self_paths

        state = os.path.dirname(os.path.dirname(self.rp.run_dir)) if self.rp.run_dir else ""
        return any(_under(path, p) for p in (*self_paths(), *self.own, *((state,) if state else ())))

    def _added(self, path: str) -> tuple[str, str | None, str] | None:
        for p, why in self.added.items():
            if _under(path, p) or _under(path, os.path.realpath(p)):
                return why
        return None

    def _entry(self, idx: int) -> tuple[str, int] | None:
        if self.table is None or not 0 <= idx < len(self.table.entries):
            return None
        return self.table.entries[idx]

    def _never_writable(self, directory: str) -> str | None:
        """Why a fix must not make ``directory`` writable, or None when a fix
        may: the rule learn mode follows too (system_dirs.never_suggested)."""
        from safebox.policy.system_dirs import never_suggested

        return never_suggested(directory, home=self.home)

    def _write_rule(self, path: str, entry: tuple[str, int] | None) -> tuple[str, str | None, str]:
        """(rule, fix, why nothing allows it) for a refused write to ``path``."""
        bits = entry[1] if entry else 0
        if bits & (M | MASK_DIR | MASK_FILE):
            return self._read_rule(path)
        if self._self(path):
            return RULE_SELF, None, ("safebox's own files (its installation, its state, this run's --policy and "
                                     "--audit-log files) are read-only in every sandbox")
        hit = self._added(path)
        if hit is not None:
            return hit
        cache = self._host_cache(path)
        if cache is not None:
            return cache
        deny_write = [os.path.realpath(p) for p in self.policy.deny_write]
        if any(_under(path, d) for d in deny_write):
            return RULE_DENY_WRITE, "remove the entry from filesystem.denyWrite (or the --deny-write flag)", ""
        sealed = {d for d, _ in self.rp.sealed_dirs}
        if (protected_by_name(path) or any(_under(path, p) for p in self.rp.read_only)
                or (entry is not None and entry[0] in sealed)):
            return RULE_PROTECTED, None, "changing it could run code outside the sandbox (docs/policy-reference.md)"
        root = self._write_root_for(path)
        why = self._never_writable(root)
        if why is not None:
            return RULE_ALLOW_WRITE, None, (f"writes outside the project are refused by design and {why}; "
                                            "write under $TMPDIR or the work dir instead")
        return RULE_ALLOW_WRITE, f"--allow-write {self.tilde(root)}", ""

    def _host_cache(self, path: str) -> tuple[str, str | None, str] | None:
        """The explanation of a refused write into the host's own cache of a
        preset's tool (``~/.npm``, ``~/.cache/pip``), or None. Without the
        preset the fix is the preset: its tools then cache in a directory of
        the sandbox's own (``npm test`` writes its logs there, not into
        ``~/.npm``); with it, the host's cache stays read-only on purpose."""
        from safebox.policy.presets import PRESETS

        if not self.home or self.home == "/":
            return None
        for preset in PRESETS.values():
            for cache in preset.caches:
                for h in cache.host_paths:
                    host = self.home.rstrip("/") + h[1:] if h.startswith("~/") else h
                    if not _under(path, host):
                        continue
                    var = cache.env[0].name if cache.env else "its cache variable"
                    if preset.name in self.policy.cache_presets:
                        return RULE_PRESET_CACHE, None, (
                            f"the host's own cache {h} stays read-only while the {preset.name} preset is on; "
                            f"the tools write the sandbox's cache instead (${var} names it)")
                    return RULE_ALLOW_WRITE, (f"--preset {preset.name} (its tools then cache in a directory of "
                                              f"the sandbox's own; --allow-write {h} would share the host's "
                                              "cache instead)"), ""
        return None

    def _write_root_for(self, path: str) -> str:
        """The directory to suggest for --allow-write: the top directory under
        the home (``~/.npm``), else the file's directory."""
        if self.home and _under(path, self.home) and path != self.home:
            first = path[len(self.home.rstrip("/")) + 1:].split("/", 1)[0]
            candidate = os.path.join(self.home, first)
            if candidate != path or os.path.isdir(candidate):
                return candidate
        return os.path.dirname(path) or "/"

    def _in_write_root(self, path: str) -> bool:
        """Whether ``path`` (by its name or its directory resolved on the
        host) lies beneath one of this run's write roots."""
        real = os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
        return any(_under(p, w) for w in self.rp.write_roots for p in (path, real))

    def _read_rule(self, path: str) -> tuple[str, str | None, str]:
        if self._credential(path):
            return RULE_CREDENTIALS, None, ("the built-in credential list hides it and a hidden path takes no "
                                            "writes (--allow-read re-allows reading it)")
        hit = self._added(path)
        if hit is not None:
            return hit
        return RULE_DENY_READ, "remove the entry from filesystem.denyRead (or the --deny-read flag)", ""

    # ------------------------------------------------------------ records

    def add_records(self, lines: list[bytes]) -> None:
        """Explain the supervisor's record lines (malformed ones are skipped)."""
        for line in lines:
            if line.startswith(b"dropped "):
                try:
                    self.dropped += int(line.split(b" ", 1)[1])
                except ValueError:
                    pass
                continue
            rec = parse_record(line)
            if rec is None:
                continue
            ev = self._explain(rec)
            if ev is not None:
                self.events.append(ev)

    def _explain(self, rec: Record) -> Event | None:
        both = self.rp.layers is Layers.BOTH
        base: dict[str, Any] = {"pid": rec.pid or None, "comm": rec.comm or None}
        if rec.kind == "s":
            return self._explain_syscall(rec, base)
        if rec.kind == "n":
            return self._explain_connect(rec, base, both=both)
        path = rec.path or "?"
        entry = self._entry(rec.idx)
        bits = entry[1] if entry else 0
        kind = _KIND[rec.kind]
        if rec.kind == "w":
            rule, fix, note = self._write_rule(path, entry)
            if rec.why == "B":
                err: int | None = errno_mod.EBUSY
            elif not both:
                err = errno_mod.EACCES
            else:
                mount_ok = bits & (MOUNT_W if rec.why == "T" else MOUNT_C)
                err = errno_mod.EACCES if mount_ok else errno_mod.EROFS
            fields = {"kind": kind, "path": path, "syscall": rec.name, "errno": _errno_name(err),
                      "rule": rule, **base}
            if rec.path2:
                fields["path2"] = rec.path2
            return Event(kind, fields, rule, fix, note, rec.time, self.tilde(path),
                         by_design=fix is None and rule in (RULE_ALLOW_WRITE, RULE_PRESET_CACHE, RULE_CREDENTIALS))
        # read, exec, unix socket: a masked path
        mask_dir = bool(bits & MASK_DIR)
        if mask_dir and entry and rec.kind in "rx" and _absent_beneath(path, entry[0]):
            # Nothing there on the host either: the call fails as it would
            # without the sandbox (a shell or execvp trying each PATH entry,
            # a program probing for an optional file). No refusal.
            return None
        if rec.kind == "u" and self._socket_gone(path, entry):
            return None
        if not both:
            err = errno_mod.EACCES
        elif rec.kind == "u":
            err = errno_mod.ENOENT if mask_dir and entry and path != entry[0] else errno_mod.ECONNREFUSED
        elif rec.kind == "x":
            err = errno_mod.ENOENT if mask_dir and entry and path != entry[0] else errno_mod.EACCES
        else:  # a read: the mask reads as empty (file), an empty directory, or has nothing inside
            err = errno_mod.ENOENT if mask_dir and entry and path != entry[0] else None
        if rec.kind == "u" and not any(_under(path, os.path.realpath(p)) or _under(path, p)
                                       for p in self.policy.deny_read):
            rule, fix, note = RULE_UNIX, f"add {self.tilde(path)} to network.allowUnixSockets", ""
        else:
            rule, fix, note = self._read_rule(path)
            if rec.kind == "r" and rule == RULE_CREDENTIALS:
                # The built-in list is a default like any denyRead entry:
                # filesystem.allowRead re-allows a path within (tested by
                # applying it: tests/security/test_feed_truthful.py).
                fix, note = f"--allow-read {self.tilde(path)} (or filesystem.allowRead)", ""
        fields = {"kind": kind, "path": path, "syscall": rec.name, "errno": _errno_name(err), "rule": rule, **base}
        return Event(kind, fields, rule, fix, note, rec.time, self.tilde(path))

    def _socket_gone(self, path: str, entry: tuple[str, int] | None) -> bool:
        """Whether a connect() to ``path`` is no refusal: a host socket
        listed at the start and gone before its mask was made
        (builder/bulk.py split_sockets) or since fails with ENOENT as it
        would without the sandbox. Not beneath a write root: there the
        command can make the path gone itself after a refused connect() (the
        mask pins the socket's name, not its directory's, which it may
        rename), and take the refusal out of the report."""
        return bool(entry and path == entry[0] and path in self.rp.socket_masks and _missing(path)
                    and not self._in_write_root(path))

    def _explain_syscall(self, rec: Record, base: dict[str, Any]) -> Event:
        from safebox.builder import seccomp

        name = rec.name if rec.name != "-" else _syscall_name(rec.nr)  # the supervisor names socket()
        rule_why = "the seccomp denylist"
        for r in seccomp.RULES:
            if r.syscall == name and all(c.matches(rec.args) for c in r.conds):
                rule_why = r.why
                break
        family = rec.args[0] & 0xFFFF_FFFF
        if name == "socket" and family == seccomp.AF_UNIX:
            fields = {"kind": "unix-socket", "syscall": name, "errno": _errno_name(rec.err),
                      "rule": RULE_UNIX, **base}
            return Event("unix-socket", fields, RULE_UNIX,
                         "list the socket's path in network.allowUnixSockets (or allowAllUnixSockets = true)",
                         "", rec.time, "socket(AF_UNIX)", quiet=True)
        if name == "socket" and family in (seccomp.AF_INET, seccomp.AF_INET6):
            rule = f"seccomp: {rule_why}"
            fields = {"kind": "network", "syscall": name, "errno": _errno_name(rec.err), "rule": rule, **base}
            return Event("network", fields, rule, "--allow-domain HOST (the proxy carries TCP only)", "",
                         rec.time, "socket(AF_INET)")
        rule = f"seccomp: {rule_why}"
        fields = {"kind": "syscall", "syscall": name, "errno": _errno_name(rec.err), "rule": rule, **base}
        return Event("syscall", fields, rule, None, "denied in every sandbox (docs/seccomp.md)", rec.time, name)

    def _landlock_tcp(self) -> bool:
        """Whether the helper reported Landlock's TCP rules enforced (ABI 4)."""
        import json

        try:
            return bool(json.loads(self.status or b"{}").get("landlock", {}).get("net"))
        except (ValueError, AttributeError):
            return False

    def _explain_connect(self, rec: Record, base: dict[str, Any], *, both: bool) -> Event | None:
        """A TCP connect to anything but the proxy's ports. Landlock (ABI 4)
        refuses it with EACCES, loopback included; without Landlock's TCP
        rules only bwrap's empty network namespace does (ENETUNREACH, and
        loopback is no refusal), and a helper-only run refuses nothing."""
        text = rec.path or "?"
        host, _, port = text.rpartition(":")
        host = host.strip("[]")
        loopback = host.startswith("127.") or host in ("::1", "::ffff:127.0.0.1")
        # The socket's protocol, as the supervisor read it ("" from an older
        # one, or when unreadable: taken as TCP).
        tcp = (rec.path2 or "TCP").upper() in ("TCP", "TCPV6", "MPTCP")
        err: int | None
        if tcp and self._landlock_tcp():
            err = errno_mod.EACCES
        elif both and not loopback:
            err = errno_mod.ENETUNREACH
        elif both and not tcp and port == "53":
            # A UDP connect to a resolver on loopback (systemd-resolved's
            # 127.0.0.53) works: the sandbox has a loopback of its own, where
            # no resolver answers. The lookup fails; the connect did not.
            err = None
        else:
            return None  # Landlock refuses TCP only; UDP on loopback connects
        proxied = bool(self.policy.allowed_domains)
        rule = RULE_DOMAINS
        if port == "53":
            # A name lookup (curl's, glibc's resolver): the sandbox resolves
            # names only in the proxy, so the fix names the host looked up,
            # not the resolver's address.
            fix = ("connect through the proxy, which resolves names itself (HTTPS_PROXY/ALL_PROXY are set)"
                   if proxied else "--allow-domain HOST for the host the command looked up (the proxy "
                                   "resolves it; the sandbox has no DNS of its own)")
            label = f"DNS lookup via {host}"
        else:
            fix = ("connect through the proxy (HTTPS_PROXY/ALL_PROXY are set in the sandbox)" if proxied
                   else f"--allow-domain NAME for the host behind {host} (then through the proxy)")
            label = f"{host}:{port}"
        fields = {"kind": "network", "host": host, "port": int(port) if port.isdigit() else None,
                  "syscall": rec.name, "errno": _errno_name(err), "rule": rule, **base}
        return Event("network", fields, rule, fix, "", rec.time, label)

    def add_network(self, refusals: list[tuple[Any, ...]], *, explained: bool = False) -> None:
        """The proxy's refusals: (host, port, protocol, decision). The fix is
        the one the proxy's own refusal line gives (proxy/explain.py), so the
        two never disagree. ``explained``: those lines were printed (the
        proxy prints one per host unless --quiet), so the summary does not
        repeat their fix (see summary)."""
        from safebox.proxy.explain import fix_for

        for host, port, protocol, decision in refusals:
            rule = str(getattr(decision, "rule", RULE_DOMAINS))
            reason = str(getattr(decision, "reason", ""))
            fix = fix_for(str(host).lower(), decision, int(port))
            fields = {"kind": "network", "host": str(host), "port": int(port), "protocol": str(protocol),
                      "errno": None, "rule": rule, "reason": reason, "pid": None, "comm": None}
            self.events.append(Event("network", fields, rule, fix, reason, 0.0, str(host), explained=explained))

    # ------------------------------------------------------------ output

    def write_audit(self, audit: Any) -> None:
        """One ``denied`` event per refusal (``audit.event(kind, **fields)``)."""
        for ev in self.events:
            extra: dict[str, Any] = {}
            if ev.time:
                extra["time"] = datetime.datetime.fromtimestamp(ev.time, datetime.UTC).isoformat(
                    timespec="milliseconds")
            audit.event("denied", v=EVENT_VERSION, **ev.fields, **({"fix": ev.fix} if ev.fix else {}), **extra)
        if self.dropped:
            audit.event("denied-dropped", v=EVENT_VERSION, count=self.dropped)

    def summary(self, *, verbose: bool) -> list[str]:
        """The stderr lines (without ``safebox: ``): every event with -v, then
        one line of counts and one with the fix for the commonest.

        Each refusal is explained once: a refusal the proxy explained on a
        line of its own (host, rule, fix) is counted, marked "explained
        above", and left out of the commonest's choice; when every refusal
        was, nothing more is printed.

        A ``socket(AF_UNIX)`` refused without an address is left out of the
        two lines: glibc's name-service lookups (``getpwuid``: git, ls -l,
        id) try nscd's and systemd-userdb's sockets and fall back quietly,
        so nearly every run would end with a refusal that changes nothing.
        Those events are in the audit log and in the -v list; a connect to a
        hidden socket path is always summarised."""
        out: list[str] = []
        if verbose:
            for ev in self.events:
                f = ev.fields
                who = f" by {f['comm']}[{f['pid']}]" if f.get("comm") else ""
                err = f["errno"] or "no error (reads as empty)" if ev.kind == "read" else f["errno"] or "refused"
                out.append(_printable(f"denied {ev.kind} {ev.shown}{who}: {err} ({ev.rule})"))
        loud = [ev for ev in self.events if not ev.quiet]
        unexplained = [ev for ev in loud if not ev.explained]
        if not unexplained:
            return out
        counts: dict[str, list[Event]] = {}
        for ev in loud:
            counts.setdefault(ev.kind, []).append(ev)
        parts = []
        for kind in KINDS:
            evs = counts.get(kind)
            if not evs:
                continue
            shown: list[str] = []
            for ev in evs:
                if ev.shown not in shown:
                    shown.append(ev.shown)
            more = f" and {len(shown) - 3} more" if len(shown) > 3 else ""
            above = "; explained above" if all(ev.explained for ev in evs) else ""
            one, many = _PLURAL[kind]
            parts.append(f"{len(evs)} {one if len(evs) == 1 else many} ({', '.join(shown[:3])}{more}{above})")
        total = len(loud)
        dropped = f" (and {self.dropped} more not recorded)" if self.dropped else ""
        out.append(_printable(f"refused {total} operation{'s' if total != 1 else ''}{dropped}: "
                              + ", ".join(parts)))
        out.append(_printable(self._commonest(unexplained)))
        return out

    def _commonest(self, events: list[Event]) -> str:
        groups: dict[tuple[str, str | None], list[Event]] = {}
        for ev in events:
            groups.setdefault((ev.rule, ev.fix), []).append(ev)
        fixable = [(k, v) for k, v in groups.items() if k[1]]
        pick = max(fixable or list(groups.items()), key=lambda kv: len(kv[1]))
        (rule, fix), evs = pick
        one, many = _PLURAL[evs[0].kind]
        what = f"{len(evs)} {one if len(evs) == 1 else many} refused by {rule}"
        if fix:
            return f"to allow the commonest ({what}): {fix}"
        if evs[0].by_design:
            return f"the commonest ({what}) stays refused: {evs[0].fix_note}"
        return f"the commonest ({what}) cannot be allowed: {evs[0].fix_note}"


def ci_entries(ci_run: Any) -> dict[str, tuple[str, str | None, str]]:
    """What a CI job's run (``safebox.ci_job.CiRun``) added to the policy, as
    :attr:`Feed.added` explains it: the runner's file-command files
    (read-only inside; the command writes this run's copies, named by the
    same variables) and the runner's secrets (hidden)."""
    out: dict[str, tuple[str, str | None, str]] = {}
    if ci_run is None:
        return out
    for path in ci_run.deny_read:
        out[path] = (RULE_RUNNER_SECRET, None,
                     "safebox hides the CI runner's own secrets (its credentials, configuration, file-type "
                     "variables) from every sandboxed step (docs/ci.md#what-safebox-hides-from-a-step); "
                     f"a step that must read one says so: --allow-read {path}")
    for var, (_ours, theirs) in ci_run.files.items():
        out[theirs] = (RULE_RUNNER_FILE, None,
                       f"safebox keeps the runner's own files read-only; write to ${var} instead (inside it names "
                       "this run's copy, whose entries the policy lists in ci.passEnv or ci.passPath safebox "
                       "passes on after the step; docs/ci.md#what-passes-cipassenv-and-cipasspath)")
    return out


def _absent_beneath(path: str, masked: str) -> bool:
    """Whether ``path``, strictly beneath the hidden directory ``masked``,
    does not exist on the host. Only looked at with ``lstat``: the path is
    one the sandboxed command chose, but beneath a directory it could not
    see, let alone change. An error other than "not there" counts as
    present (the event is kept)."""
    if path == masked or not _under(path, masked):
        return False
    return _missing(path)


def _missing(path: str) -> bool:
    """Whether ``path`` does not exist on the host (``lstat``; an error
    other than "not there" counts as present: the event is kept)."""
    try:
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return True
    except (OSError, ValueError):
        return False
    return False


def _printable(text: str) -> str:
    """No escape sequence from a path reaches the terminal."""
    return "".join(c if c.isprintable() else "?" for c in text)[:2000]


def _syscall_name(nr: int) -> str:
    try:
        import pyseccomp

        name = pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, nr)
        return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:  # noqa: BLE001 -- a name is only for the explanation
        return f"syscall {nr}"

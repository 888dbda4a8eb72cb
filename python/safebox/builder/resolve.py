"""The only impure builder step: look at the host and fix every path decision.

``resolve`` lstats and realpaths every deny path, runs ripgrep under every
write root for the mandatory-protected files, lists directories for the
Landlock sibling walk, and returns a frozen ``ResolvedPolicy``. Everything
after it (``bwrap.py``, ``landlock.py``, ``helper_policy.py``) is pure.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterable, Iterator

from safebox import _prescan
from safebox._record import Frozen, Spawned, listdir_as_owner, path_outside, read_small, realpath_cached, which
from safebox.builder.home_files import home_files
from safebox.builder.paths import Nearest, ancestors, at_or_beneath, by_depth, collapse, parent_dir
from safebox.builder.regions import Regions
from safebox.builder.resolved import EMPTY_FILE, Bridge, Layers, NetKind, ResolvedPolicy
from safebox.errors import BuildError
from safebox.policy import defaults
from safebox.policy.effective import EffectivePolicy

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from safebox.deepwatch import Baseline


class HostFacts(Frozen):
    """Paths safebox itself lives at; all are kept read-only inside."""

    helper_path: str
    self_paths: tuple[str, ...]  # package dir, venv prefix, interpreter, helper
    state_dir: str
    run_dir: str
    policy_path: str
    rg_path: str | None
    import_paths: tuple[str, ...] = ()  # sys.path and the base prefixes; see resolve()
    # The API's harness started from its own repo: an import path entry that
    # holds a write root is left writable instead of refused (docs/api.md).
    allow_import_roots: bool = False
    path_dirs: tuple[str, ...] = ()  # the caller's $PATH entries; see path_dirs_in_write_roots
    # This run's own files given on the command line (--policy, --audit-log):
    # read-only inside like safebox's installation, and refused with a second
    # name (a forged audit line, a policy rewritten for the next run).
    run_files: tuple[str, ...] = ()


def _is_under(path: str, root: str) -> bool:
    return path == root or root == "/" or path.startswith(root.rstrip("/") + "/")


class RealPaths:
    """``os.path.realpath`` and the type of many paths that share parents.

    ``realpath`` lstats every component of every path: 10,000 deny entries
    under a hundred directories cost 80,000 lstats (1.3 s profiled). Here
    each parent is resolved once, and a parent holding many of the paths is
    listed once (``prefetch``) instead of one lstat per entry."""

    #: A parent holding at least this many of the paths is listed, not lstat'ed entry by entry.
    LIST_FROM = 16

    def __init__(self) -> None:
        self._parents: dict[str, str] = {}
        self._listed: dict[str, dict[str, str]] = {}

    def prefetch(self, paths: Iterable[str]) -> None:
        """List the directories that hold many of ``paths`` (best effort:
        one that cannot be listed is looked at entry by entry)."""
        counts: dict[str, int] = {}
        for p in paths:
            i = p.rfind("/")
            head = p[:i] if i > 0 else "/"
            counts[head] = counts.get(head, 0) + 1
        for head, n in counts.items():
            if n < self.LIST_FROM or head in self._listed:
                continue
            try:
                with os.scandir(head) as it:
                    self._listed[head] = {e.name: ("link" if e.is_symlink() else
                                                   "dir" if e.is_dir(follow_symlinks=False) else "other")
                                          for e in it}
            except OSError:
                pass

    def resolve_each(self, paths: Iterable[str]) -> Iterator[tuple[str, str, str | None, OSError | None]]:
        """(path, realpath, type, None) for each of ``paths`` as :meth:`resolve`
        answers, or (path, "", None, the OSError it raised). Without a call
        per path where the answer is a listed name in a resolved parent (a
        third of the time for 10,000 entries)."""
        listed, parents = self._listed, self._parents
        for p in paths:
            i = p.rfind("/")
            head, name = (p[:i] if i > 0 else "/"), p[i + 1:]
            listing = listed.get(head)
            parent = parents.get(head)
            if listing is not None and parent is not None and name and name not in (".", ".."):
                kind = listing.get(name)
                if kind != "link":
                    yield p, (parent + "/" + name if parent != "/" else "/" + name), kind, None
                    continue
            try:
                target, kind = self.resolve(p)
            except OSError as e:
                yield p, "", None, e
                continue
            yield p, target, kind, None

    def resolve(self, path: str) -> tuple[str, str | None]:
        """(realpath of ``path``, its type: ``"dir"``, ``"link"``, ``"other"``,
        or None if it is missing).

        Raises ``OSError`` other than not-found or not-a-directory (EACCES,
        ELOOP), as ``os.lstat`` does."""
        i = path.rfind("/")
        head, name = path[:i] or "/", path[i + 1:]
        listing = self._listed.get(head)
        kind: str | None
        if listing is not None and name not in (".", ".."):
            kind = listing.get(name)
        else:
            try:
                mode = os.lstat(path).st_mode
                kind = "link" if stat.S_ISLNK(mode) else "dir" if stat.S_ISDIR(mode) else "other"
            except (FileNotFoundError, NotADirectoryError):
                kind = None
        if i < 0 or not name or name in (".", "..") or kind == "link":
            return os.path.realpath(path), kind
        parent = self._parents.get(head)
        if parent is None:
            parent = self._parents[head] = os.path.realpath(head)
        return (parent + "/" + name if parent != "/" else "/" + name), kind


def classify_deny_read(paths: tuple[str, ...],
                       real: RealPaths | None = None) -> tuple[list[str], list[str], list[str]]:
    """Split deny-read paths into (dirs, files, notes) after following symlinks.

    A symlinked credential dir (WSL2's ``~/.aws -> /mnt/c/...``) cannot be
    mounted over as a link: its resolved target is masked instead, so it stays
    unreadable. Missing paths are skipped (nothing to read). A path that exists
    but cannot be inspected is an error: skipping it could leave it readable.
    """
    dirs: list[str] = []
    files: list[str] = []
    notes: list[str] = []
    real = real or RealPaths()
    real.prefetch(paths)
    for p, target, kind, err in real.resolve_each(paths):
        if err is not None:
            raise BuildError(f"cannot inspect {p}: {err.strerror}; refusing to run without masking it")
        if kind is None:
            continue
        if kind == "link":
            if not os.path.exists(target):
                notes.append(f"deny-read {p} is a dangling symlink; nothing to mask")
                continue
            notes.append(f"deny-read {p} is a symlink; masking its target {target}")
            kind = "dir" if os.path.isdir(target) else "other"
        if target == "/":
            raise BuildError(f"filesystem.denyRead: {p} resolves to '/', which cannot be masked")
        (dirs if kind == "dir" else files).append(target)
    return sorted(set(dirs)), sorted(set(files)), notes


def read_regions(deny_read: tuple[str, ...], allow_read: tuple[str, ...], real: RealPaths | None = None
                 ) -> tuple[list[str], list[str], Regions, list[str]]:
    """(masked dirs, masked files, the read regions, notes): ``denyRead``
    classified as ``classify_deny_read`` does, and ``allowRead`` resolved,
    both reduced to the entries that change something (builder/regions.py).

    An ``allowRead`` path is taken resolved, like a denied one: what is read
    through a link is its target. One that does not exist has nothing to
    re-allow. One under ``/proc`` or ``/dev`` is refused: bound back from
    the host, it would show the host's processes or devices."""
    mask_dirs, mask_files, notes = classify_deny_read(deny_read, real)
    allows = []
    for a in allow_read:
        target = os.path.realpath(a)
        if not os.path.exists(target):
            continue
        if target != a and os.path.lexists(a):
            notes.append(f"allow-read {a} is a symlink; re-allowing its target {target}")
        allows.append(target)
    regions = Regions([*mask_dirs, *mask_files], allows)
    for a in regions.allows:
        if any(_is_under(a, d) for d in ("/proc", "/dev")):
            raise BuildError(f"filesystem.allowRead {a}: cannot be re-allowed inside denied {regions.deny_over(_parent(a))}: "
                             "bound back from the host, it would show the host's own processes or devices",
                             hint="remove the allowRead entry or the denyRead entry")
    keep = set(regions.denies)
    return [d for d in mask_dirs if d in keep], [f for f in mask_files if f in keep], regions, notes


def _parent(path: str) -> str:
    return os.path.dirname(path) or "/"


def _only_harmless_walk_errors(stderr: bytes, unlistable: frozenset[str] | set[str] = frozenset()) -> bool:
    """ripgrep exits 2 on any walk error. Two kinds cannot hide a protected file
    that the sandbox could write: an entry that vanished during the walk
    (ENOENT, os error 2), and a directory we may not read (EACCES, os error
    13) at or beneath one of ``unlistable``, the directories find reported
    as such, which are kept read-only for the run. Any other EACCES is not
    harmless: the command owns the directory it made unlistable and could
    make it listable again and write beneath it (found in review)."""
    lines = [ln for ln in stderr.decode(errors="replace").splitlines() if ln.strip()]
    if not lines:
        return False
    prefixes = tuple(p for u in unlistable for p in (u + ":", u + "/"))
    for ln in lines:
        if ln.rstrip().endswith("(os error 2)"):
            continue
        path = ln[4:] if ln.startswith("rg: ") else ln
        if not (ln.rstrip().endswith("(os error 13)") and prefixes and path.startswith(prefixes)):
            return False
    return True


def _rg_finish(proc: Spawned, root: str, unlistable: frozenset[str] | set[str] = frozenset()) -> list[str]:
    """Protected files and directories under ``root`` found by ripgrep, as
    paths; ``unlistable``: the directories find could not list."""
    try:
        rc, stdout, stderr = proc.collect(timeout=60)
    except TimeoutError as e:
        raise BuildError(f"ripgrep failed under {root}: {e}; cannot find protected files") from None
    if rc == 2 and _only_harmless_walk_errors(stderr, unlistable):
        rc = 0
    if rc not in (0, 1):  # 1 = nothing found
        raise BuildError(f"ripgrep failed under {root} (exit {rc}): "
                         f"{stderr.decode(errors='replace').strip()[:200]}")
    found: set[str] = set()
    for line in stdout.split(b"\n"):
        if not line:
            continue
        p = os.fsdecode(line)
        parts = p.split("/")
        # Reduce a file inside a protected directory to the directory itself.
        for d in defaults.PROTECTED_DIRS:
            dparts = d.split("/")
            for i in range(len(parts) - len(dparts)):
                if parts[i:i + len(dparts)] == dparts:
                    found.add("/".join(parts[:i + len(dparts)]))
                    break
        base = parts[-1]
        if base in defaults.PROTECTED_FILES:
            found.add(p)
        if base == ".git":
            found.add(p)
        elif base == "HEAD" and len(parts) > 1:
            parent = "/".join(parts[:-1])
            if parts[-2] == ".git" or _is_git_dir(parent) or _is_worktree_admin_dir(parent):
                found.add(parent)
    return sorted(found)


KNOWN_GIT_DIRS = "known-git-dirs"
# The memory's bound (docs/policy-reference.md): at most 4096 entries and
# 1 MiB, what one read takes. When a write would pass it, paths that are no
# longer directories are dropped and then the least recently seen, down to
# three quarters of the bound: that sweep costs a stat per entry (~35 ms for
# 4096 here), so it runs once per thousand or so new dirs, not at every write.
_KNOWN_MAX = 4096
_KNOWN_MAX_BYTES = 1 << 20
_KNOWN_LOW = _KNOWN_MAX * 3 // 4
_KNOWN_LOW_BYTES = _KNOWN_MAX_BYTES * 3 // 4


def _read_memory(path: str) -> bytes | None:
    """The first 1 MiB of a state-dir memory file, through safebox.hostio (no
    link followed, a regular file of ours with one link); None when missing
    or unusable."""
    from safebox.hostio import HostFileError, open_read

    try:
        fd = open_read(path)
    except HostFileError:
        return None
    try:
        return os.read(fd, _KNOWN_MAX_BYTES)
    except OSError:
        return None
    finally:
        os.close(fd)


def read_known_git_dirs(path: str) -> tuple[tuple[str, str], ...]:
    """The git dirs and worktree admin dirs remembered by earlier runs
    (``KIND HEXPATH`` lines in the state dir, which the sandbox cannot
    write). A missing or unreadable file is an empty memory; a last line
    without its newline (a file cut short) is ignored, never read as the
    shorter path its hex prefix would name."""
    raw = _read_memory(path)
    if raw is None:
        return ()
    out = []
    for line in raw[:raw.rfind(b"\n") + 1].decode("ascii", "replace").splitlines():
        kind, _, hexpath = line.partition(" ")
        try:
            out.append((kind, os.fsdecode(bytes.fromhex(hexpath))))
        except ValueError:
            continue
    return tuple(out)


def remember_git_dirs(path: str, before: tuple[tuple[str, str], ...], seen: tuple[tuple[str, str], ...]) -> None:
    """Add what this run recognised to the memory (atomically, 0600).

    Written only when this run saw a dir the memory lacks, so a run that
    adds nothing costs nothing; this run's dirs go first. Past the bound
    (4096 entries or 1 MiB) the memory is swept: paths that are no longer
    directories are dropped, then the least recently seen until three
    quarters of the bound remain. Never fails the run."""
    known = set(before)
    if all(e in known for e in seen):
        return
    merged = list(dict.fromkeys([*seen, *before]))
    _write_memory(path, [(p, f"{kind} {os.fsencode(p).hex()}\n") for kind, p in merged])


def _write_memory(path: str, entries: list[tuple[str, str]]) -> None:
    """Write a state-dir memory of (path, line) entries, newest first,
    atomically and 0600. Past the bound (4096 entries or 1 MiB) it is swept:
    entries whose directory is gone are dropped, then the oldest until three
    quarters of the bound remain. Never fails the run: a memory that cannot
    be written only loses this run's additions."""
    lines = [line for _, line in entries]
    if len(lines) > _KNOWN_MAX or sum(map(len, lines)) > _KNOWN_MAX_BYTES:
        keep: list[str] = []
        size = 0
        for p, line in entries:
            if len(keep) >= _KNOWN_LOW or size + len(line) > _KNOWN_LOW_BYTES:
                break
            if os.path.isdir(p):
                keep.append(line)
                size += len(line)
        lines = keep
    from safebox.hostio import HostFileError, replace

    try:
        replace(path, "".join(lines).encode(), mode=0o600)
    except (OSError, HostFileError):
        pass


WRITE_ROOTS = "write-roots"


def read_write_roots(path: str) -> dict[str, float]:
    """The host write roots of earlier runs, each with the time it was first
    granted (``EPOCH HEXPATH`` lines in the state dir, which the sandbox
    cannot write), most recently added first. A missing or unreadable file
    is an empty memory; a last line cut short is ignored. Same bound as the
    git-dir memory (4096 entries, 1 MiB)."""
    raw = _read_memory(path)
    if raw is None:
        return {}
    out: dict[str, float] = {}
    for line in raw[:raw.rfind(b"\n") + 1].decode("ascii", "replace").splitlines():
        when, _, hexpath = line.partition(" ")
        try:
            out.setdefault(os.fsdecode(bytes.fromhex(hexpath)), float(when))
        except ValueError:
            continue
    return out


def remember_write_roots(path: str, before: dict[str, float], roots: tuple[str, ...], now: float) -> None:
    """Add this run's new host write roots to the memory (atomically, 0600),
    first, with ``now`` as the time they were first granted; roots already
    known keep theirs. Written only when a root is new, so a run in a known
    work dir costs nothing. Past the bound the memory is swept as the
    git-dir memory is (remember_git_dirs). Never fails the run."""
    new = [r for r in dict.fromkeys(roots) if r not in before]
    if not new:
        return
    merged = [(r, now) for r in new] + list(before.items())
    _write_memory(path, [(r, f"{when:.3f} {os.fsencode(r).hex()}\n") for r, when in merged])


def refuse_planted_links(policy: EffectivePolicy, *, layers: Layers, cwd: str, pwd: str | None,
                         earlier: dict[str, float]) -> None:
    """Refuse to follow a symlink on the way to a write root that a sandboxed
    command could have planted (issue 11 item 10: run 1 replaced ``build/``
    with a link to a folder outside, and run 2's ``--allow-write ./build``
    wrote there). The rule (docs/policy-reference.md, "Symlinks on the way
    to a write root"):

    1. a link whose directory lies in a write root of this run is refused,
       whoever made it: this run's command, or an earlier one with the same
       work dir, could have;
    2. a link whose directory lies in an earlier run's write root (remembered
       in the state dir) and that was made after that root was first granted
       (its ctime, which no one can set back) is refused;
    3. any other link is the user's, and followed.

    Every allowWrite entry is walked, and the work dir as the shell names it
    (``$PWD``, when that resolves to it): the kernel gives safebox the work
    dir already resolved, so a planted ``app -> ~/.config`` that the user
    ``cd``-ed through would otherwise hand over ``~/.config``. Deny paths
    are not walked: their links are followed, and a mask or read-only bind
    on the target grants nothing.
    """
    entries = [w for w in policy.allow_write if not (w == "/tmp" and layers is not Layers.HELPER_ONLY)]
    now = {*entries, *(os.path.realpath(w) for w in entries)}

    def why(link: str) -> str | None:
        parent = os.path.dirname(link)
        for r in now:
            if r != "/" and _is_under(parent, r):
                return f"in {r}, a write root of this run"
        for r, since in earlier.items():
            if r != "/" and _is_under(parent, r):
                try:
                    made = os.lstat(link).st_ctime
                except OSError:
                    made = since
                # A second of slack for the coarse file clock: a link made
                # by the run that first granted the root is still caught.
                if made >= since - 1:
                    return (f"in {r}, a write root since "
                            f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(since))}, and made after that")
        return None

    walks = [(w, w) for w in entries if w != cwd]
    if pwd and pwd.startswith("/") and pwd != cwd and os.path.realpath(pwd) == cwd:
        walks.append((cwd, pwd))
    for w, name in walks:
        for link, target in links_on_the_way(name):
            reason = why(link)
            if reason is None:
                continue
            real = os.path.realpath(name)
            if w == cwd and name == pwd:
                raise BuildError(f"the work dir {pwd} is reached through the symlink {link} (-> {target}) "
                                 f"{reason}: a sandboxed command could have planted it; refusing to make "
                                 f"its target {real} writable", hint=f"if you made that link, cd {real} first")
            raise BuildError(f"{policy.entry('filesystem.allowWrite', w)}: {link} is a symlink (-> {target}) "
                             f"{reason}: a sandboxed command could have planted it; refusing to follow it "
                             "into a write grant", hint=f"if you made that link, allow its target: "
                                                        f"--allow-write {real}")


def _is_git_dir(d: str) -> bool:
    """A repository's git dir whatever its name: HEAD, objects/ and refs/ (what
    git's own is_git_directory() checks), as a bare repo or the target of
    --separate-git-dir has them. .git/logs/HEAD and refs/remotes/*/HEAD do not."""
    return os.path.isdir(os.path.join(d, "objects")) and os.path.isdir(os.path.join(d, "refs"))


def _is_worktree_admin_dir(d: str) -> bool:
    """A linked worktree's admin dir (.git/worktrees/NAME): HEAD and commondir,
    which names the git dir whose config and hooks the worktree uses."""
    return os.path.isfile(os.path.join(d, "commondir")) and not os.path.isdir(os.path.join(d, "objects"))


def _dot_names() -> frozenset[str]:
    """The names that start a protected path component chain: ``.bashrc``,
    ``.vscode``, ``.config`` (for ``.config/git``), ``.git`` (for its hooks)."""
    names = set(defaults.PROTECTED_FILES) | {".git"}
    names.update(d.split("/")[0] for d in defaults.PROTECTED_DIRS)
    return frozenset(names)


def _find_links_finish(proc: Spawned, roots: tuple[str, ...],
                       depth: int) -> tuple[list[str], list[str], list[str], Baseline]:
    """(the symlinks and directories ``_prescan.find_argv`` found whose names
    begin a protected path, to ``depth + 3`` below their root; the
    directories of ours it could not list; those of other users; the baseline of the watch at any depth,
    ``safebox.deepwatch``), as paths; fails closed on any error but an entry
    that vanished. A directory we may not read is reported by find itself
    (``-readable``) and not entered, so a "Permission denied" here is one
    that changed under the walk: refused, never taken as harmless."""
    from safebox import deepwatch

    root = roots[0]
    try:
        rc, stdout, stderr = proc.collect(timeout=60)
    except TimeoutError as e:
        raise BuildError(f"find failed under {root}: {e}; cannot find protected symlinks") from None
    if rc != 0:
        lines = [ln for ln in stderr.decode(errors="replace").splitlines() if ln.strip()]
        if not (lines and all(ln.endswith(": No such file or directory") for ln in lines)):
            raise BuildError(f"find failed under {root} (exit {rc}): "
                             f"{stderr.decode(errors='replace').strip()[:200]}",
                             hint=_unlistable_hint(lines[0]) if lines else None)
    dirs, specials, unlistable, foreign = deepwatch.parse(stdout)
    names = {os.fsencode(n) for n in _dot_names()}
    under = Nearest(roots) if len(roots) > 1 else None
    out = []
    for raw, kind in specials:
        if kind[:1] not in (b"d", b"l") or raw[raw.rfind(b"/") + 1:] not in names:
            continue
        p = os.fsdecode(raw)
        r = under.at_or_above(p) if under is not None else root
        # The read-only binds reach as deep as they did when find stopped
        # there (-maxdepth); the watch goes deeper. A directory find cannot
        # list is kept read-only at any depth: neither can the watch look in it.
        if r is not None and p.count("/") - r.count("/") <= depth + 3:
            out.append(p)
    return out, unlistable, foreign, deepwatch.capture(proc.since_ns, roots, dirs, specials)


def _unlistable_hint(line: str) -> str | None:
    """The fix for find's "find: 'DIR': Permission denied", if that is the line."""
    prefix, suffix = "find: '", "': Permission denied"
    if line.startswith(prefix) and line.endswith(suffix):
        return f"make it listable: chmod u+rx {line[len(prefix):-len(suffix)]}"
    return None


def unlistable_message(path: str) -> tuple[str, str]:
    """(why, the fix) for a directory in a write root that we cannot list."""
    try:
        st = os.stat(path)
        mode = f" (mode {stat.S_IMODE(st.st_mode):04o})"
        ours = st.st_uid == os.geteuid()
    except OSError:
        mode, ours = "", True
    why = (f"{path} cannot be listed{mode}: safebox cannot find the protected files in it (.git/hooks, "
           ".bashrc, ...), and a command could make it listable again and write them")
    fix = (f"chmod u+rx {path}" if ours else
           f"have its owner (uid {st.st_uid}) make it listable, or move it out of the write root")
    return why, fix


def link_candidates(link: str) -> list[tuple[str, bool]]:
    """The protected paths a symlink or directory named like a part of one
    stands for, as (path through it, is a git dir): ``~/.bashrc`` for itself,
    ``~/.config`` for ``~/.config/git`` and its siblings, ``x/.git`` for a git
    dir. Pure: a name that only looks like a part (a link called ``git``
    outside ``.config``) yields nothing."""
    parts = link.split("/")
    out: list[tuple[str, bool]] = []
    patterns = [(n.split("/"), False) for n in (*defaults.PROTECTED_FILES, *defaults.PROTECTED_DIRS)]
    patterns.append(([".git"], True))
    for comps, is_git in patterns:
        for i, c in enumerate(comps):
            if c == parts[-1] and i + 1 <= len(parts) - 1 and parts[len(parts) - 1 - i:] == comps[:i + 1]:
                out.append(("/".join([*parts, *comps[i + 1:]]), is_git))
    return out


class RootScan:
    """The walks of one write root (or of a batch: ``more``): ripgrep for
    protected files and directories, find for symlinks named like them; both
    run in the background until ``protected_paths`` collects them."""

    def __init__(self, *, rg: str, find: str | None, root: str, depth: int,
                 started: tuple[Spawned, Spawned] | None = None, more: tuple[str, ...] = ()) -> None:
        self.roots, self.depth = (root, *more), depth
        if started is not None:  # begun by the launcher (_prescan.early)
            self.rg, self.links = started
            return
        if find is None:
            raise BuildError("find not found; it finds symlinked files safebox must keep read-only",
                             hint="install findutils")
        self.rg, self.links = _prescan.start_walks(rg, find, root, depth, more=more)

    def cancel(self) -> None:
        """Stop both walks and reap them."""
        self.rg.cancel()
        self.links.cancel()

    def collect(self, root: str) -> tuple[list[str], list[str], list[str], Baseline]:
        """(protected paths found by ripgrep, symlinks and directories found by
        find, directories find could not list, the baseline of the watch at
        any depth)."""
        try:
            named, unlistable, foreign, base = _find_links_finish(self.links, self.roots, self.depth)
        except BaseException:
            self.rg.cancel()
            raise
        # ripgrep's permission errors beneath both are the ones find reported.
        return _rg_finish(self.rg, root, frozenset((*unlistable, *foreign))), named, unlistable, base


def prestart(*, cwd: str, rg: str | None) -> dict[tuple[str, int], RootScan]:
    """Start the walks of the working directory (the default write root)
    before the rest of safebox is even imported, so they run while Python
    loads. ``Scan`` adopts them when the policy's roots and depth match; the
    caller cancels whatever was not adopted."""
    depth = defaults.DEFAULT_SEARCH_DEPTH
    started = _prescan.take(cwd, depth)
    if started is not None:
        return {(cwd, depth): RootScan(rg="", find=None, root=cwd, depth=depth, started=started)}
    if rg is None:
        return {}
    return {(cwd, depth): RootScan(rg=rg, find=_prescan.safe_tool("find"), root=cwd, depth=depth)}


def start_scans(rg: str | None, write_roots: list[str], depth: int) -> dict[str, RootScan]:
    """Start the walks of every write root; they run while the rest of resolve works."""
    if rg is None:
        raise BuildError("ripgrep (rg) not found; it finds the files safebox must keep read-only",
                         hint="install ripgrep (apt-get install ripgrep) or run `safebox doctor`")
    find = which("find", path_outside(write_roots))
    scans: dict[str, RootScan] = {}
    try:
        for batch in _batches(write_roots):
            sc = RootScan(rg=rg, find=find, root=batch[0], depth=depth, more=tuple(batch[1:]))
            scans.update(dict.fromkeys(batch, sc))
    except BaseException:
        for sc in set(scans.values()):
            sc.cancel()
        raise
    return scans


def _batches(roots: list[str]) -> list[list[str]]:
    """``roots`` in groups whose paths fit one argv: one ripgrep and one find
    per group, not per root (a thousand write roots spawned two thousand
    walkers and ran out of select()able descriptors). A group's paths take at
    most a quarter of ARG_MAX, which leaves the environment room: E2BIG never."""
    try:
        arg_max = os.sysconf("SC_ARG_MAX")
    except (OSError, ValueError):
        arg_max = 128 * 1024  # the least Linux has ever allowed
    budget = max(16 * 1024, min(arg_max // 4, 1024 * 1024))
    out: list[list[str]] = []
    size = 0
    for r in roots:
        n = len(os.fsencode(r)) + 1 + 8  # the string, its NUL, its argv pointer
        if out and size + n <= budget:
            out[-1].append(r)
            size += n
        else:
            out.append([r])
            size = n
    return out


def links_on_the_way(path: str) -> list[tuple[str, str]]:
    """Every symlink met while resolving the absolute ``path``, as (the link
    in its resolved parent, its target text), in the order the kernel would
    follow them; the links of a link's target included."""
    found: list[tuple[str, str]] = []
    parts = [c for c in path.split("/") if c]
    cur = "/"
    hops = 0
    while parts:
        name = parts.pop(0)
        if name == ".":
            continue
        if name == "..":
            cur = os.path.dirname(cur)
            continue
        nxt = os.path.join(cur, name)
        try:
            target = os.readlink(nxt)
        except OSError:  # not a symlink (EINVAL), or missing from here on
            cur = nxt
            continue
        hops += 1
        if hops > 40:  # a loop (ELOOP for the kernel): nothing further to find
            break
        found.append((nxt, target))
        parts = [c for c in target.split("/") if c] + parts
        if target.startswith("/"):
            cur = "/"
    return found


class PathDirs(Frozen):
    """The caller's PATH directories that lie in a write root (issue 11)."""

    existing: list[str]  # bound read-only
    missing: list[str]  # watched, quarantined if the run creates them
    links: list[tuple[str, str]]  # symlinks on the way inside a write root: restored if replaced


def path_dirs_in_write_roots(path_dirs: tuple[str, ...], write_roots: list[str]) -> PathDirs:
    """The directories of the caller's PATH that lie in a write root.

    A program planted in one (``~/.local/bin/git``, ``.venv/bin/python`` of
    an activated venv) runs on the host the next time the user's shell looks
    it up, like a planted ``~/.bashrc`` (found in review, issue 11). So they
    are treated like protected files: existing ones are bound read-only,
    missing ones are watched and quarantined if the run creates them, and a
    symlink on the way to one inside a write root (``~/bin -> dotfiles/bin``)
    is restored after the run if the command replaced it. Relative entries
    (``.``, an empty entry) name whichever directory a shell is in, not a
    place that can be protected; they are left alone (docs/policy-reference.md).
    """
    existing: list[str] = []
    missing: list[str] = []
    links: list[tuple[str, str]] = []

    roots = Nearest(write_roots)  # thousands of write roots: walk up, not across

    def in_root(p: str) -> bool:
        return roots.at_or_above(p) is not None

    for entry in dict.fromkeys(path_dirs):
        if not entry.startswith("/"):
            continue
        for link, target in links_on_the_way(os.path.normpath(entry)):
            if in_root(link) and (link, target) not in links:
                links.append((link, target))
        real = os.path.realpath(entry)
        if not in_root(real):
            continue
        (existing if os.path.lexists(real) else missing).append(real)
    return PathDirs(existing=sorted(set(existing)), missing=sorted(set(missing)), links=links)


class Protected(Frozen):
    """What ``protected_paths`` found under the write roots."""

    existing: list[str]  # bound read-only
    missing: list[str]  # watched, quarantined if the run creates them
    sealed: list[tuple[str, list[str]]]  # git dirs missing hooks/ or config
    git_dirs: list[str]  # bound onto themselves (cannot be renamed)
    links: list[tuple[str, str]]  # (symlink, its target text): restored if replaced
    # Git dirs not named .git and worktree admin dirs seen now or before:
    # ("git" | "admin", path), remembered in the state dir (see KnownGitDirs).
    known: list[tuple[str, str]] = []
    # Watched too, compactly: (write root, the first components of TOP_NAMES
    # absent at its top). A thousand write roots made forty thousand
    # ``missing`` paths; ``top_candidates`` expands them after the run, for
    # the names that then exist.
    tops: list[tuple[str, tuple[str, ...]]] = []
    # The watch at any depth: what the start walk saw (safebox.deepwatch).
    deep: Baseline | None = None
    # Directories in a write root that we cannot list (no read or search
    # permission): whatever is protected in them cannot be found, so each is
    # read-only for the whole run (resolve.unlistable_message says why).
    unlistable: list[str] = []


#: The protected names watched at the top of every write root: `.mcp.json`,
#: `.claude/`, `.config/git` when the root is $HOME, and the config of a
#: repository the command creates there with `git init` (`core.fsmonitor` in
#: it runs at the user's next `git status`).
TOP_NAMES = (*defaults.PROTECTED_FILES, *defaults.PROTECTED_DIRS, ".git/config")


def config_anchored(home: str, env: Mapping[str, str]) -> list[str]:
    """Where the host reads the configuration that runs code: the
    ``.config/...`` protected names under ``$HOME/.config`` and
    ``$XDG_CONFIG_HOME``, and git's global config files."""
    bases = [os.path.join(home, ".config")]
    xdg = env.get("XDG_CONFIG_HOME", "")
    if xdg.startswith("/"):
        bases.append(xdg)
    out = [os.path.join(b, n.split("/", 1)[1]) for b in bases for n in defaults.PROTECTED_DIRS
           if n.startswith(".config/")]
    for var in ("GIT_CONFIG_GLOBAL",):
        if env.get(var, "").startswith("/"):
            out.append(env[var])
    out.append(os.path.join(home, ".gitconfig"))
    return list(dict.fromkeys(os.path.normpath(p) for p in out))


def _config_in_roots(home: str, roots: Nearest, regions: Regions) -> tuple[list[str], list[str]]:
    """(existing, missing) paths of :func:`config_anchored` beneath a write root."""
    existing: list[str] = []
    missing: list[str] = []
    for p in config_anchored(home, os.environ):
        if roots.at_or_above(p) is None:
            continue
        if os.path.lexists(p):
            existing.append(os.path.realpath(p))
        elif regions.readable(p):
            missing.append(p)
    return existing, missing


def top_candidates(tops: tuple[tuple[str, tuple[str, ...]], ...] | list[tuple[str, tuple[str, ...]]]) -> list[str]:
    """The watched top names that exist now, as paths, from ``Protected.tops``:
    one listing per root, and only the names whose first component was absent
    before and is there now."""
    out: list[str] = []
    for root, firsts in tops:
        listed = listdir_as_owner(root)
        if listed is None:
            continue  # gone, or not a directory any more: nothing was created in it
        now = set(listed)
        for first in now.intersection(firsts):
            out += [root + "/" + name for name in TOP_NAMES if name.split("/", 1)[0] == first]
    return out


def protected_paths(scans: dict[str, RootScan], write_roots: list[str], home: str,
                    known: tuple[tuple[str, str], ...] = (), *, allow_git_config: bool = False) -> Protected:
    """Decide every protected path under the write roots.

    Existing ones are re-bound read-only. A git directory missing one of its
    protected entries (``.git/hooks`` deleted) is sealed: bound read-only with
    its other children bound back read-write, so creating the entry fails.
    A missing protected file cannot be made to fail without a placeholder in
    the user's tree; it is watched and quarantined after the run.

    A symlink named like a protected path (``~/.bashrc -> dotfiles/bashrc``)
    protects its target when that lies under a write root (elsewhere it is
    read-only already). The link itself sits in a writable directory and is
    no mount point, so it could be replaced: it is recorded and restored
    after the run, the replacement quarantined.

    ``allow_git_config`` (srt's ``filesystem.allowGitConfig``): every git
    dir's ``config`` is left writable, and a missing one is neither sealed
    against nor watched; its hooks and the files that redirect git stay
    protected.
    """
    f = _Finds(write_roots, allow_git_config=allow_git_config)
    # Recognised in an earlier run: a command that renamed objects/ away, or
    # made an objects/ in a worktree admin dir, must not have shed the
    # protection by the next run (found in review).
    for kind, p in known:
        if f.under_a_root(p) and os.path.isdir(p) and not os.path.islink(p):
            (f.admins if kind == "admin" else f.gits).add(p)
    collected: set[int] = set()
    deep: Baseline | None = None
    unlistable: list[str] = []
    for root in write_roots:
        found: list[str]
        named: list[str]
        if id(scans[root]) in collected:
            found, named = [], []  # a batch already collected with an earlier root of it
        else:
            collected.add(id(scans[root]))
            found, named, blind, base = scans[root].collect(root)
            unlistable += blind
            deep = base if deep is None else deep.merge(base)
        f.found(found)
        f.named(named)
        f.top_names(root)
    f.git_entries()
    f.admin_entries()
    existing, missing, gits, admins, links = f.existing, f.missing, f.gits, f.admins, f.links
    # What the git configs name: hooks directories (core.hooksPath) and
    # included config files, existing or not yet.
    _git_config_paths(gits, f.dotgit_files, write_roots, home, existing=existing, missing=missing, links=links)
    # A git directory is bound onto itself read-write (git still works): a
    # mount point cannot be renamed, so `mv .git .git-old` cannot shed the
    # protection of the entries below it.
    git_dirs = sorted(p for p in gits if os.path.isdir(p) and not os.path.islink(p))
    refuse_hard_links(sorted(existing - set(git_dirs)))
    # Watched names are recorded with their parents resolved now (a dotfile
    # manager's ~/.config -> dotfiles/config is legitimate): after the run a
    # parent that resolves elsewhere was replaced by the command, and the
    # quarantine refuses to follow it (runner.quarantine).
    parents: dict[str, str] = {}  # the same few parents (each root, its .git) recur
    for m in missing:
        d = parent_dir(m)
        if d not in parents:
            parents[d] = realpath_cached(d)
    missing = {(parents[d] if parents[d] != "/" else "") + m[len(d):]
               for m in missing for d in (parent_dir(m),)}
    seen = {("git", g) for g in gits if os.path.basename(g) != ".git"} | {("admin", a) for a in admins}
    return Protected(existing=sorted(existing - set(git_dirs)), missing=sorted(missing - existing),
                     known=sorted(seen), tops=f.tops, unlistable=sorted({*unlistable, *f.blind}),
                     deep=deep.without_git_config() if deep is not None and allow_git_config else deep,
                     sealed=f.sealed, git_dirs=git_dirs, links=sorted(links.items()))


class _Finds:
    """What :func:`protected_paths` has found so far, and the steps that add to it."""

    def __init__(self, write_roots: list[str], *, allow_git_config: bool) -> None:
        self.allow_git_config = allow_git_config
        self.in_git_dir = tuple(e for e in defaults.PROTECTED_IN_GIT_DIR
                                if not (allow_git_config and e == "config"))
        self.seal_for = {"hooks"} if allow_git_config else {"hooks", "config"}
        self.names = tuple(n for n in TOP_NAMES if not (allow_git_config and n == ".git/config"))
        self.roots = Nearest(write_roots)
        self.existing: set[str] = set()
        self.missing: set[str] = set()
        self.sealed: list[tuple[str, list[str]]] = []
        self.gits: set[str] = set()
        self.admins: set[str] = set()
        self.links: dict[str, str] = {}
        # `.git` files (gitdir: ...: linked worktrees, submodules) and `.git`
        # symlinks: their work tree is where they are, not where the git dir is.
        self.dotgit_files: set[str] = set()
        self.tops: list[tuple[str, tuple[str, ...]]] = []
        self.blind: set[str] = set()  # git dirs we cannot list

    def under_a_root(self, p: str) -> bool:
        return self.roots.at_or_above(p) is not None

    def found(self, found: list[str]) -> None:
        """The protected paths ripgrep found."""
        for p in found:
            if p.endswith("/.git") and os.path.isfile(p):
                self.dotgit_files.add(p)
            if os.path.isdir(p) and os.path.isfile(os.path.join(p, "HEAD")):
                if _is_worktree_admin_dir(p):
                    self.admins.add(p)  # its own entries are protected below, not the whole dir
                    continue
                self.gits.add(p)
            self.existing.add(p)

    def named(self, named: list[str]) -> None:
        """The symlinks and directories find listed."""
        for p in named:
            for path, is_git in link_candidates(p):
                # `p` itself, or an entry below it (`.config/git`, `.git/hooks`),
                # may be the link.
                if os.path.islink(path) and path not in self.links:
                    try:
                        self.links[path] = os.readlink(path)
                    except OSError:
                        pass  # vanished since find listed it
                real = os.path.realpath(path)
                if not self.under_a_root(real):
                    continue  # outside every write root: read-only already
                if not os.path.lexists(real):
                    self.missing.add(real)
                elif is_git:
                    self.gits.add(real)
                    self.existing.add(real)
                    if path != real:
                        self.dotgit_files.add(path)
                else:
                    self.existing.add(real)

    def top_names(self, root: str) -> None:
        """Missing protected names at the top of the root (TOP_NAMES). One
        listing of the root instead of an lstat per name (thousands of write
        roots): a name whose first component is absent is watched compactly
        (``tops``); one under a present first component (`.config/git` in
        an existing `.config`, perhaps a symlink) as a path, as before."""
        try:
            present: set[str] | None = set(os.listdir(root))
        except OSError:
            present = None  # a file, or unreadable: ask name by name
        absent: list[str] = []
        for name in self.names:
            first = name.split("/", 1)[0]
            # With allowGitConfig a new repository's .git/config is the
            # command's to write: `.git` is not watched compactly (which
            # expands to every .git name after the run), its other names
            # (.git/hooks) are watched as paths.
            if present is not None and first not in present and not (self.allow_git_config and first == ".git"):
                if first not in absent:
                    absent.append(first)
            elif (present is None or "/" in name) and not os.path.lexists(root + "/" + name):
                self.missing.add(root + "/" + name)  # roots are absolute and never "/"
        if absent:
            self.tops.append((root, tuple(absent)))

    def git_entries(self) -> None:
        """Nested repositories: the .git dirs found above; protect their inner entries."""
        in_git_dir = self.in_git_dir
        for git in sorted(self.gits):
            if not os.path.isdir(git):
                continue
            if not os.access(git, os.R_OK | os.X_OK):
                # Remembered from an earlier run, and made unlistable since:
                # its entries cannot be looked at, so all of it is read-only
                # (as an unlistable directory found by the walk is).
                self.blind.add(git)
                continue
            absent = []
            for entry in in_git_dir:
                q = os.path.join(git, entry)
                if os.path.lexists(q):
                    self.existing.add(q)
                else:
                    absent.append(entry)
            if self.seal_for & set(absent):
                kids = sorted(os.listdir(git))
                self.sealed.append((git, [os.path.join(git, k) for k in kids if k not in in_git_dir]))
            else:
                # Entries that cannot be mounted over because they do not
                # exist yet are watched, and quarantined if the run creates them.
                self.missing.update(os.path.join(git, e) for e in absent)

    def admin_entries(self) -> None:
        """A linked worktree's admin dir: git writes its HEAD, index and locks
        there, so it is neither read-only nor sealed; the files that point git
        elsewhere are (commondir: which git dir's config and hooks apply;
        config.worktree: per-worktree config; gitdir: where the worktree is)."""
        for admin in sorted(self.admins):
            for entry in defaults.PROTECTED_IN_WORKTREE_ADMIN_DIR:
                q = os.path.join(admin, entry)
                (self.existing if os.path.lexists(q) else self.missing).add(q)


def _git_dir_of(dotgit: str) -> str | None:
    """The git dir a ``.git`` file names (``gitdir: ../.git/worktrees/w``)."""
    raw = read_small(dotgit, 4096)
    if raw is None:
        return None
    first = raw.split(b"\n", 1)[0].decode("utf-8", "surrogateescape").rstrip("\r")
    if not first.startswith("gitdir:"):
        return None
    return os.path.normpath(os.path.join(os.path.dirname(dotgit), first[len("gitdir:"):].strip()))


def _common_dir(git: str) -> str:
    """Where a git dir keeps its config: itself, or what its ``commondir`` names (a linked worktree)."""
    raw = read_small(os.path.join(git, "commondir"), 4096)
    text = raw.decode("utf-8", "surrogateescape").strip() if raw else ""
    return os.path.normpath(os.path.join(git, text)) if text else git


def _enclosing_repo(root: str) -> str | None:
    """The ``.git`` above a write root, found as git finds it (the nearest
    parent holding one): its config applies to the write root, and a
    relative ``core.hooksPath`` in it may point into it (a monorepo's
    ``frontend/.husky``). A few lstats."""
    d = os.path.dirname(root)
    while True:
        q = os.path.join(d, ".git")
        if os.path.lexists(q):
            return q
        if d == "/":
            return None
        d = os.path.dirname(d)


def global_git_configs(home: str, env: Mapping[str, str] | None = None) -> list[str]:
    """The system and global config files git reads, as the caller's
    environment sets them (``GIT_CONFIG_SYSTEM``, ``GIT_CONFIG_NOSYSTEM``,
    ``GIT_CONFIG_GLOBAL``, ``XDG_CONFIG_HOME``); whether they exist is
    found out by reading them."""
    e = os.environ if env is None else env
    out = []
    if not e.get("GIT_CONFIG_NOSYSTEM"):
        out.append(e.get("GIT_CONFIG_SYSTEM") or "/etc/gitconfig")
    if e.get("GIT_CONFIG_GLOBAL"):
        out.append(e["GIT_CONFIG_GLOBAL"])
    else:
        xdg = e.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
        out += [os.path.join(xdg, "git", "config"), os.path.join(home, ".gitconfig")]
    return out


def _git_config_paths(gits: set[str], dotgit_files: set[str], write_roots: list[str], home: str, *,
                      existing: set[str], missing: set[str], links: dict[str, str]) -> None:
    """Protect what git configs name beneath the write roots: the hooks
    directory of ``core.hooksPath`` and the files of ``include.path`` /
    ``includeIf.*.path`` (existing ones read-only, missing ones watched; a
    symlink among them is restored after the run like a protected one).

    The configs read are the system and global ones and those of every
    repository found beneath a write root or enclosing one. A relative
    ``core.hooksPath`` is taken relative to where git runs hooks: the work
    tree's top, or the git dir (bare repositories, and the receiving side
    of a push); a global one, relative to every such place. Raises
    BuildError when a hooks directory holds a write root: it cannot be read-only
    without taking the write root away.
    """
    repos = _repo_configs(gits, dotgit_files, write_roots)
    globals_ = global_git_configs(home)
    cache: dict[str, str | None] = {}
    named = False
    for f in (*globals_, *(f for _, files in repos for f in files)):
        if f not in cache:
            raw = read_small(f, 1 << 20)
            cache[f] = None if raw is None else raw.decode("utf-8", "surrogateescape")
            named = named or (raw is not None and (b"hookspath" in (low := raw.lower()) or b"include" in low))
    if not named:
        return  # the common case: no config names a hooks dir or an include; the parser is not even loaded
    hooks, includes = _hooks_and_includes(globals_, repos, home, cache)
    roots = Nearest(write_roots)

    def under_a_root(p: str) -> bool:
        return roots.at_or_above(p) is not None

    for p in (*hooks, *includes):
        if os.path.islink(p) and under_a_root(p) and p not in links:
            try:
                links[p] = os.readlink(p)
            except OSError:
                pass
    for h in sorted(hooks):
        real = os.path.realpath(h)
        if not under_a_root(real):
            continue  # read-only already
        held = [w for w in write_roots if _is_under(w, real)]
        if held:
            raise BuildError(f"git's core.hooksPath names {h}, which holds the write root {held[0]}: "
                             "the command could plant hooks that git runs outside the sandbox",
                             hint="point core.hooksPath at a directory inside the work tree (such as .githooks), "
                                  "or run safebox from a directory that does not contain the hooks")
        (existing if os.path.lexists(real) else missing).add(real)
    for inc in sorted(includes):
        real = os.path.realpath(inc)
        if not under_a_root(real) or os.path.isdir(real):
            continue
        (existing if os.path.lexists(real) else missing).add(real)


def _repo_configs(gits: set[str], dotgit_files: set[str], write_roots: list[str]
                  ) -> list[tuple[list[str], list[str]]]:
    """For each repository: the places a relative hooks path is taken from,
    and its configs."""
    repos: list[tuple[list[str], list[str]]] = []
    for g in gits:
        c = _common_dir(g)
        top = os.path.dirname(g) if os.path.basename(g) == ".git" else g
        repos.append(([top, g, c], [os.path.join(c, "config"), os.path.join(g, "config.worktree")]))
    dotgits = set(dotgit_files)
    for root in write_roots:
        up = _enclosing_repo(root)
        if up is not None:
            dotgits.add(up)
    for f in dotgits:
        gd = os.path.realpath(f) if os.path.isdir(f) else _git_dir_of(f)  # a symlinked .git, or a gitdir: file
        if gd is None:
            continue
        c = _common_dir(gd)
        repos.append(([os.path.dirname(f), gd, c], [os.path.join(c, "config"), os.path.join(gd, "config.worktree")]))
    return repos


def _hooks_and_includes(globals_: list[str], repos: list[tuple[list[str], list[str]]], home: str,
                        cache: dict[str, str | None]) -> tuple[set[str], set[str]]:
    """(hooks directories, included files) the configs name, absolute."""
    from safebox.builder.gitconfig import ConfigRefs, config_refs

    common = config_refs(globals_, home=home, cache=cache)
    hooks: set[str] = set()
    includes: set[str] = set(common.includes)
    for value in common.hooks:
        if os.path.isabs(value):
            hooks.update(_hooks_dirs(value, []))
    for bases, files in repos:
        own = config_refs(files, home=home, refs=ConfigRefs(), cache=cache)
        includes.update(own.includes)
        for value in (*common.hooks, *own.hooks):
            hooks.update(_hooks_dirs(value, bases))
    return hooks, includes


def _hooks_dirs(value: str, bases: list[str]) -> set[str]:
    """The directories a ``core.hooksPath`` value names, a relative one taken from each of ``bases``."""
    hooks: set[str] = set()
    rel = os.path.normpath(value)
    # husky (>= 9) sets core.hooksPath to DIR/_, whose stubs run the
    # user's scripts one level up (DIR/pre-commit): DIR is protected too.
    values = [rel, os.path.dirname(rel)] if os.path.basename(rel) == "_" and os.path.dirname(rel) else [rel]
    for v in values:
        if os.path.isabs(v):
            hooks.add(v)
        else:
            hooks.update(os.path.normpath(os.path.join(b, v)) for b in bases)
    return hooks


def refuse_hard_links(paths: list[str]) -> None:
    """Refuse to run when a protected file has another name (a hard link).

    A read-only bind protects a path; a second name of the same inode
    elsewhere in a write root stays writable, and writing it rewrites the
    protected file (a dotfiles repo hard-linked to ``~/.bashrc``, a hook
    shared between repositories with ``ln``). Finding the other names would
    take a walk of every write root, so safebox refuses instead and says how
    to find them. Checked: every protected file, and the files directly in
    a protected directory (``.git/hooks/pre-commit``, ``.vscode/tasks.json``).
    git's own hard links (objects, with ``git clone --local``) are in no
    protected path.
    """
    def refuse(path: str, nlink: int) -> None:
        raise BuildError(f"protected file {path} has {nlink} hard links: the command could rewrite it "
                         "through another name", hint=f"list the other names with `find / -xdev -samefile {path}` "
                         "and replace them with a copy or a symlink")

    for p in paths:
        try:
            st = os.lstat(p)
            if stat.S_ISREG(st.st_mode):
                if st.st_nlink > 1:
                    refuse(p, st.st_nlink)
                continue
            if not stat.S_ISDIR(st.st_mode):
                continue
            # git never runs a hook named *.sample (a fresh repository has a
            # dozen): not worth a stat each on every start.
            samples = os.path.basename(p) == "hooks"
            with os.scandir(p) as it:
                kids = [e for e in it if e.is_file(follow_symlinks=False)
                        and not (samples and e.name.endswith(".sample"))]
            for e in kids:
                n = e.stat(follow_symlinks=False).st_nlink
                if n > 1:
                    refuse(e.path, n)
        except OSError:
            continue  # vanished since it was found


def host_unix_sockets() -> list[str]:
    """Paths of the unix sockets bound in this network namespace (/proc/net/unix)."""
    out = []
    try:
        with open("/proc/net/unix", "rb") as f:
            lines = f.read().split(b"\n")[1:]
    except OSError as e:
        raise BuildError(f"cannot read /proc/net/unix ({e.strerror}); cannot hide unlisted sockets") from None
    for line in lines:
        fields = line.split(None, 7)
        if len(fields) == 8 and fields[7].startswith(b"/"):
            out.append(os.fsdecode(fields[7]))
    return sorted(set(out))


def split_unix_sockets(allowed: tuple[str, ...], candidates: list[str]) -> tuple[list[str], list[str]]:
    """(sockets to hide, allowed sockets that exist).

    seccomp cannot see a connect() path and Landlock has no unix-connect right
    (ABI <= 7), so per-path filtering is done with mounts: every socket the
    host has bound (``/proc/net/unix``) that is not listed gets /dev/null
    bound over it, and connect() there fails (ECONNREFUSED). Sockets bound
    after the sandbox starts are not covered (docs/policy-reference.md).
    """
    allowed_real = {os.path.realpath(a) for a in allowed}
    hide: list[str] = []
    keep: list[str] = []
    for path in candidates:
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISSOCK(st.st_mode):
            continue
        (keep if os.path.realpath(path) in allowed_real else hide).append(path)
    for a in sorted(allowed_real):
        try:
            if stat.S_ISSOCK(os.lstat(a).st_mode) and a not in keep:
                keep.append(a)
        except OSError:
            pass
    return sorted(set(hide)), sorted(set(keep))


def pin_ancestors(paths: list[str], write_roots: list[str]) -> list[str]:
    """Every directory strictly between a write root and one of ``paths``.

    A read-only bind or a mask protects one path, not its name: renaming a
    parent (``mv ~/.cache ~/.c2``) moves the mount away with it, and the
    command could build a fake at the old path (a poisoned safebox state dir,
    a new ``~/.config/git/config``). These ancestors are bound onto
    themselves, and a mount point cannot be renamed (EBUSY); found in review.
    """
    pins: set[str] = set()
    roots = Nearest(write_roots)
    # Asked once per parent: 10,000 entries share a hundred of them, and
    # what is pinned above an entry depends on its parent alone.
    for head in {p[:p.rfind("/")] or "/" for p in paths if p != "/"}:
        # Up to the outermost write root at or above the parent: the
        # directories between p and an inner root are renamable within the
        # outer one too.
        outer = None
        a = roots.at_or_above(head)
        while a is not None:
            outer = a
            a = roots.above(a)
        if outer is None:
            continue
        a = head
        while a != outer and a not in pins:
            pins.add(a)
            a = parent_dir(a)
    return by_depth(pins)


#: The device nodes a command may open on a helper-only host (Landlock's
#: "dev" class: read, write, device ioctl); see landlock_rules.
HELPER_ONLY_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom",
                       "/dev/tty", "/dev/ptmx")


def own_terminals() -> list[str]:
    """The terminals safebox's stdin, stdout and stderr are (and so the
    command's): on a helper-only host the only ones under /dev/pts it may
    open. The whole of /dev/pts would hand it the user's other terminals, to
    read typed passwords from and write into (found in review)."""
    out: list[str] = []
    for fd in (0, 1, 2):
        try:
            name = os.ttyname(fd)
        except OSError:
            continue  # not a terminal
        if name.startswith("/dev/") and name not in out:
            out.append(name)
    return out


#: Device nodes the command cannot do without; a deny-read entry for one is
#: an error, never a silent skip (bwrap's /dev has them all).
UNMASKABLE_DEVICES = ("/dev", *HELPER_ONLY_DEVICES, "/dev/pts", "/dev/fd", "/dev/stdin", "/dev/stdout",
                      "/dev/stderr")


def landlock_rules(*, layers: Layers, write_roots: list[str], mask_dirs: list[str],
                   mask_files: list[str], write_exclude: tuple[str, ...] = (),
                   carve_outs: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """Landlock rules as (class, path).

    Under bwrap the mounts already hide denied paths and keep safebox's own
    files read-only, so Landlock grants read on ``/`` and write on the write
    roots: a second wall for writes. On a helper-only host Landlock is the
    only wall, so a denied path must lie outside every grant: walk from ``/``
    to it, grant ``readdir`` on each ancestor and ``read`` on every sibling
    (see docs/layers.md). Write roots that contain a denied path, or one of
    ``write_exclude`` (safebox's installation and state dir: a command that
    could write them would control the next run; ``denyWrite`` paths), are
    split the same way.

    ``carve_outs`` (``allowRead`` inside a denied directory,
    builder/regions.py): Landlock's grants only add up, so each gets a grant
    of its own, split around the denies inside it, as ``/`` is around those
    inside no carve-out; a write root's carve-outs get write the same way.
    """
    denied = sorted(set(mask_dirs) | set(mask_files))
    if layers is not Layers.HELPER_ONLY:
        # bwrap's /dev is its own minimal one (null, zero, full, random,
        # urandom, tty, ptmx, pts, shm): the whole of it may be used.
        rules: list[tuple[str, str]] = [("read", "/"), ("dev", "/dev")]
        rules += [("write", r) for r in write_roots]
        rules += [("write", t) for t in ("/dev/shm",) if os.path.isdir(t)]
        return rules
    regions = Regions(denied, carve_outs)
    budget = [LANDLOCK_MAX_RULES]

    def grant(access: str, top: str, leave_out: list[str]) -> list[tuple[str, str]]:
        if not leave_out:
            return [(access, top)]
        # A symlink is never granted when its target touches any denied
        # path, not only those left out here (the helper opens rule paths
        # following links).
        try:
            return _walk_excluding(access, top, sorted(set(leave_out)), links_denied=denied, budget=budget)
        except _TooManyRules:
            raise BuildError(
                f"on a helper-only host this policy needs more than {LANDLOCK_MAX_RULES:,} Landlock rules: "
                "Landlock only grants, so every entry beside a denied path needs a grant of its own, and "
                f"{len(mask_files)} denied files and {len(mask_dirs)} denied directories lie in "
                f"{len({_parent(d) for d in denied})} directories",
                hint="deny whole directories rather than the files in them (`**/secrets/**`), fewer glob "
                     "matches, or run where bubblewrap works (`safebox doctor`)") from None

    # The host's /dev is another matter: raw disks (reading one gets around
    # every deny-read path, even for a root without capabilities, who owns
    # the node), loop devices, /dev/mem, uinput, /dev/userfaultfd (a way
    # around seccomp's userfaultfd rule), the host's /dev/shm. It stays out
    # of the read grant; only the harmless nodes are granted.
    rules = grant("read", "/", [*regions.denies_in("/"), "/dev"])
    for a in regions.allows:
        rules += grant("read", a, regions.denies_in(a))
    rules += [("dev", d) for d in (*HELPER_ONLY_DEVICES, *own_terminals()) if os.path.exists(d)]
    own_near = Nearest(write_exclude)
    roots = Nearest(write_roots)
    # Which of safebox's own paths lie strictly inside each root: walking up
    # from each, not testing every pair (the denied ones are regions').
    inside: dict[str, set[str]] = {}
    for d in own_near.paths:
        up = roots.above(d)
        while up is not None:
            inside.setdefault(up, set()).add(d)
            up = roots.above(up)
    for root in write_roots:
        if not regions.readable(root) or own_near.at_or_above(root) is not None:
            continue  # the write root itself is denied or safebox's own: grant nothing there
        for top in (root, *regions.allows_in(root)):
            own = [x for x in inside.get(root, ()) if x != top and _is_under(x, top)]
            rules += grant("write", top, [*regions.denies_in(top), *own])
    return rules


class _TooManyRules(Exception):
    """A walk passed the budget of Landlock rules."""


#: The helper's limit on filesystem rules (helper/policy.h: SB_MAX_FS).
LANDLOCK_MAX_RULES = 65536


def _walk_excluding(access: str, top: str, denied: list[str],
                    links_denied: list[str] | None = None, budget: list[int] | None = None
                    ) -> list[tuple[str, str]]:
    """``access`` on everything beneath ``top`` but ``denied``: ``readdir``
    on the directories on the way to a denied path, ``access`` on every
    other child. A symlink child whose target touches ``links_denied``
    (default: ``denied``) gets no rule. ``budget`` (a one-item list, shared
    by the walks of one policy) is decreased per rule; below zero the walk
    stops with _TooManyRules instead of listing on."""
    denied_set = frozenset(denied)
    # Every directory above a denied path: walked into rather than granted.
    above = frozenset(a for d in denied for a in ancestors(d)[1:])
    if links_denied is None:
        links_near, links_above = Nearest(denied), above
    else:
        links_near = Nearest(links_denied)
        links_above = frozenset(a for d in links_denied for a in ancestors(d)[1:])
    out: list[tuple[str, str]] = []
    stack = [top]
    while stack:
        d = stack.pop()
        # An ancestor of a denied path: listable, but READ_FILE/EXECUTE (and
        # for write roots, creating entries) beneath it would reach the denied
        # path too, so only its other children get the full grant.
        out.append(("readdir", d))
        try:
            names = os.listdir(d)
        except OSError:
            continue
        if budget is not None:
            budget[0] -= len(names) + 1
            if budget[0] < 0:
                raise _TooManyRules
        for n in names:
            child = os.path.join(d, n)
            if child in denied_set:
                continue
            if child in above:
                stack.append(child)
                continue
            if os.path.islink(child):
                # The helper opens rule paths following symlinks, so a grant on
                # ~/.aws -> ~/.aws-real (denied) would land on the denied target,
                # and one on a link to an ancestor would cover it. Such links
                # get no grant of their own; what they point at is decided by
                # the target's own place in the walk.
                target = os.path.realpath(child)
                if links_near.at_or_above(target) is not None or target in links_above:
                    continue
            out.append((access, child))
    return out


def carve_outs(regions: Regions, *, layers: Layers, write_roots: list[str], read_only: list[str],
               sealed: set[str], helper: str) -> tuple[tuple[str, bool], ...]:
    """The carve-outs bwrap binds back over their masks, as (path, writable),
    shallow first. Writable when a write root holds it and no read-only
    re-bind or sealed directory does (the bind from the host replaces what
    was mounted there). The helper too, when a mask hides it: bwrap runs it
    inside (a ``denyRead: ["~"]`` with safebox installed in ``~/.local``)."""
    out = []
    for a in regions.allows:
        writable = (any(_is_under(a, w) for w in write_roots) and not any(_is_under(a, r) for r in read_only)
                    and not any(_is_under(a, d) for d in sealed))
        out.append((a, writable))
    if layers is Layers.BOTH and helper and not regions.readable(helper):
        out.append((helper, False))
    return tuple(sorted(out, key=lambda x: (x[0].count("/"), x[0])))


class Scan:
    """The write roots and the ripgrep runs already searching them.

    Started as early as possible (right after the policy is known) so the
    walk overlaps the rest of safebox's start-up; ``resolve`` collects it.
    """

    def __init__(self, policy: EffectivePolicy, *, layers: Layers, rg_path: str | None,
                 prestarted: dict[tuple[str, int], RootScan] | None = None) -> None:
        notes: list[str] = []
        roots: list[str] = []
        for w in policy.allow_write:
            if w == "/tmp" and layers is not Layers.HELPER_ONLY:
                continue  # private tmpfs, not the host's /tmp
            real = realpath_cached(w)  # memoised: path_outside resolved the same entries
            try:
                mode = os.stat(real).st_mode
            except (OSError, ValueError):
                mode = 0
            if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or real == "/dev" or real.startswith("/dev/"):
                # /dev/shm too: under bwrap it would bind the host's shared
                # memory over the sandbox's own, around --limit-tmp (review).
                # Accepted, then silently dropped, before issue 28: bwrap's
                # /dev is its own, and a --bind of a node is nodev anyway.
                shm = real == "/dev/shm" or real.startswith("/dev/shm/")
                raise BuildError(f"filesystem.allowWrite {w}: a device node or a directory of /dev; the sandbox's "
                                 "/dev is its own and devices are never write roots",
                                 hint="the sandbox has a /dev/shm of its own (sized by limits.tmpSize); share files "
                                      "through the work dir" if shm else
                                      "for a GPU use --allow-gpu (devices.gpu, docs/gpu.md)")
            if not stat.S_ISDIR(mode) and not stat.S_ISREG(mode):
                notes.append(f"allow-write {w} does not exist; skipped")
                continue
            if real == "/":
                raise BuildError("filesystem.allowWrite: '/' would make the whole host writable; refusing")
            if stat.S_ISDIR(mode) and not os.access(real, os.R_OK | os.X_OK):
                # Not kept read-only as an unlistable directory inside a root
                # is: that would take away the whole write root, silently.
                why, fix = unlistable_message(real)
                raise BuildError(f"write root {why}", hint=fix)
            roots.append(real)
        self.write_roots = sorted(set(roots), key=lambda p: (p.count("/"), p))
        self.notes = notes
        pre = prestarted if prestarted is not None else {}
        adopt = {r: pre.pop((r, policy.search_depth)) for r in self.write_roots
                 if (r, policy.search_depth) in pre}
        # The walks begun before the policy was known used tools from outside
        # the usual write roots; one that lies in a write root of this policy
        # after all (an unusual allowWrite) is refused, never trusted.
        for sc in adopt.values():
            for tool in (sc.rg.argv[0], sc.links.argv[0]):
                real = os.path.realpath(tool)
                if any(_is_under(real, w) or _is_under(tool, w) for w in self.write_roots):
                    for other in adopt.values():
                        other.cancel()
                    raise BuildError(f"{tool} lies in a write root of this policy: the sandboxed command "
                                     "could have replaced it", hint="install it outside the write roots")
        rest = [r for r in self.write_roots if r not in adopt]
        self.procs = {**adopt, **start_scans(rg_path, rest, policy.search_depth)}

    def abandon(self) -> None:
        """Stop and reap the walks when resolve fails before collecting them."""
        for proc in self.procs.values():
            proc.cancel()
        self.procs = {}


def resolve(policy: EffectivePolicy, *, layers: Layers, cwd: str, home: str, host: HostFacts,
            bridges: tuple[Bridge, ...] = (), scan: Scan | None = None,
            cache_dirs: tuple[str, ...] = (), cache_host_paths: tuple[str, ...] = ()) -> ResolvedPolicy:
    """Look at the host once and decide every mount and rule.

    ``cache_dirs``: the presets' sandbox-private caches (builder/caches.py),
    writable inside; ``cache_host_paths``: the host's own caches of those
    tools, read-only inside even beneath a write root."""
    if scan is None:
        scan = Scan(policy, layers=layers, rg_path=host.rg_path)
    pattern_notes: list[str] = []
    if policy.deny_read_globs or policy.allow_read_globs or policy.deny_write_globs:
        from safebox.builder.globs import expand_policy

        try:
            policy, pattern_notes = expand_policy(policy)
        except BaseException:
            scan.abandon()
            raise
    # A host cache the user made a write root of (--allow-write ~/.npm), or
    # one holding a write root, is theirs to write: keeping it read-only
    # would silently take back what they asked for.
    cache_host_paths = tuple(h for h in cache_host_paths
                             if not any(_is_under(w, os.path.realpath(h)) for w in scan.write_roots))
    try:
        rp = _resolve(policy.replace(deny_write=(*policy.deny_write, *cache_host_paths)) if cache_host_paths
                      else policy, layers=layers, cwd=cwd, home=home, host=host, bridges=bridges, scan=scan,
                      extra_exclude=cache_host_paths)
        if pattern_notes:
            rp = rp.replace(notes=(*pattern_notes, *rp.notes))
        return _with_caches(rp, cache_dirs) if cache_dirs else rp
    except BaseException:
        scan.abandon()
        raise


def _with_caches(rp: ResolvedPolicy, cache_dirs: tuple[str, ...]) -> ResolvedPolicy:
    """Add the presets' cache leaves: writable inside, under every layer."""
    regions = Regions([*rp.mask_dirs, *rp.mask_files], [c for c, _ in rp.carve_outs])
    for c in cache_dirs:
        m = regions.deny_over(c)
        if m is not None:
            raise BuildError(f"the sandbox cache {c} lies inside denied {m}: a preset's cache cannot be "
                             "unreadable; remove the denyRead entry or the preset, or re-allow the cache "
                             "with filesystem.allowRead")
    rules = (*rp.landlock_rules, *(("write", c) for c in cache_dirs))
    return rp.replace(cache_dirs=cache_dirs if rp.layers is not Layers.HELPER_ONLY else (),
                      landlock_rules=rules)


def _state_masks(state_dir: str, *, layers: Layers, write_roots: list[str]) -> tuple[str, ...]:
    """The masks that keep safebox's state out of the sandbox's reach, after
    refusing a write root at or inside the state dir (BuildError).

    The state dir (caches, run dirs, memories) decides the next run's
    sandbox. A write root above it keeps it read-only (self-protection in
    _resolve); one at it or inside it could not be granted without handing
    the command that decision, so it is refused (issue 22: with a big
    policy a write root at the state dir made it writable, and a forged
    seccomp cache turned every later run's filter off).

    The caches (policies, limits, seccomp programs: STATE/cache) are the
    host's alone: under bubblewrap they are masked in every sandbox, an
    empty read-only tmpfs made after every write bind, so that no command
    can read or rewrite them whatever its write roots. The state dir's
    read-only bind is the first wall, this the second, and the reason
    bpf_cache may trust an entry's own digest. Without bubblewrap Landlock
    keeps the state dir out of every write grant (write_exclude)."""
    state = os.path.realpath(state_dir)
    for w in write_roots:
        if _is_under(w, state):
            raise BuildError(f"filesystem.allowWrite {w} lies at or inside safebox's state dir {state}: its "
                             "caches and run dirs decide the next run's sandbox, so it is never writable "
                             "inside; remove the entry (or run from another directory if it is the work dir)",
                             hint="a write root above the state dir is fine: the state dir stays read-only "
                                  "inside it")
    cache = os.path.join(state, "cache")
    # Nothing cached yet: the state dir's read-only bind keeps it from being made.
    return (cache,) if layers is not Layers.HELPER_ONLY and os.path.isdir(cache) else ()


def _refuse_unmasking(regions: Regions, masks: tuple[str, ...]) -> None:
    """BuildError when an ``allowRead`` entry re-allows one of safebox's own masks."""
    for m in masks:
        if regions.readable(m):
            raise BuildError(f"filesystem.allowRead re-allows safebox's cache dir {m}, which every sandbox "
                             "masks (its seccomp programs and policies decide the next run's sandbox)",
                             hint="remove the allowRead entry that holds it")


def _resolve(policy: EffectivePolicy, *, layers: Layers, cwd: str, home: str, host: HostFacts,
             bridges: tuple[Bridge, ...], scan: Scan, extra_exclude: tuple[str, ...] = ()) -> ResolvedPolicy:
    notes = list(scan.notes)
    write_roots = scan.write_roots
    roots = Nearest(write_roots)
    scans = scan.procs
    realpaths = RealPaths()
    own_masks = _state_masks(host.state_dir, layers=layers, write_roots=write_roots)
    mask_dirs, mask_files, regions, n = read_regions((*policy.deny_read, *own_masks), policy.allow_read, realpaths)
    notes += n
    _refuse_unmasking(regions, own_masks)
    for w in write_roots:
        d = regions.deny_over(w)
        if d is not None:
            raise BuildError(f"filesystem.allowWrite {w} lies inside denied {d}: "
                             "a write root cannot be unreadable; remove one of them, or re-allow the write "
                             "root with filesystem.allowRead")

    # The interpreter's import path too (the base installation behind a venv,
    # a `pip --user` site, the entry script's dir): code planted there runs
    # in safebox at its next start, outside any sandbox. An entry that holds
    # a write root (PYTHONPATH=. in the work dir, `python -m safebox` run from
    # it) cannot be kept read-only without taking the write root away, so
    # safebox refuses to run at all (found in review: the command planted
    # safebox/__init__.py there). build.py's launcher runs Python with -I,
    # which ignores PYTHONPATH.
    imports = _import_dirs(host.import_paths, write_roots, allow_roots=host.allow_import_roots, notes=notes)
    _refuse_unmaskable([*mask_dirs, *mask_files])
    # A denied path inside a denied directory needs no mount of its own (nor
    # a Landlock exclusion): read_regions kept only the denies that change
    # something, which keeps a deny inside a carve-out (collapsing them by
    # ancestry would drop it and leave it readable).
    refuse_hard_links([p for p in (os.path.realpath(f) for f in host.run_files)
                       if roots.at_or_above(p) is not None])
    own = tuple(sorted({os.path.realpath(p) for p in (*host.self_paths, *host.run_files, host.state_dir)
                        if os.path.lexists(p)}
                       | set(imports)))
    # denyWrite: existing paths are re-bound read-only below (bwrap) and, on
    # a helper-only host, left out of Landlock's write grant like safebox's
    # own files; missing ones beneath a write root are watched like missing
    # protected files. Before issue 11 both were silently not enforced.
    # Host caches a preset redirected (extra_exclude) are kept out of the
    # write grants too, so that they stay read-only without bwrap as well.
    deny_write = _resolve_deny_write(policy.deny_write, realpaths)
    deny_write_real = sorted(deny_write)
    deny_write_existing = [p for p in deny_write_real if deny_write[p]]
    excl = {*own, *deny_write_existing, *(os.path.realpath(p) for p in extra_exclude if os.path.lexists(p))}
    known_file = os.path.join(host.state_dir, KNOWN_GIT_DIRS)
    known_before = read_known_git_dirs(known_file)
    prot = protected_paths(scans, write_roots, home, known=known_before,
                           allow_git_config=policy.allow_git_config)
    remember_git_dirs(known_file, known_before, tuple(prot.known))
    existing, missing, sealed, git_dirs = prot.existing, prot.missing, prot.sealed, prot.git_dirs
    scan.procs = {}
    # A directory the walks could not list hides whatever is protected in it:
    # read-only for the whole run (a read-only bind: even chmod fails with
    # EROFS, so the command cannot make it listable and write beneath it),
    # on a helper-only host out of Landlock's write grant; said on every run.
    warnings = [f"{why}: it is read-only inside for this run; to write there: {fix}"
                for why, fix in map(unlistable_message, prot.unlistable)]
    excl.update(prot.unlistable)
    rules = landlock_rules(layers=layers, write_roots=write_roots, mask_dirs=mask_dirs, mask_files=mask_files,
                           write_exclude=tuple(sorted(excl)), carve_outs=regions.allows)
    socket_binds: list[str] = []
    if _hides_host_sockets(policy, layers):
        hide, keep = _unix_sockets(policy, warnings=warnings, notes=notes)
        mask_files = sorted(set(mask_files) | set(hide))
        # An allowed socket under the private /tmp or a masked directory is
        # invisible unless bound back in.
        socket_binds = [k for k in keep if _is_under(k, "/tmp") or not regions.readable(k)]
    read_only: set[str] = set(existing)
    read_only.update(deny_write_existing)
    read_only.update(prot.unlistable)
    # A writable $HOME keeps its start-up files: every dot entry directly in
    # it, and the user site's .pth and *customize (builder/home_files.py).
    # allowWritePathDirs grants the PATH directories in a write root
    # (~/.local/bin): they stay writable inside a read-only dot entry too.
    granted = path_dirs_in_write_roots(host.path_dirs, write_roots).existing if policy.allow_write_path_dirs else []
    hf = home_files(home, write_roots, env=os.environ, keep=tuple(os.path.realpath(f) for f in host.run_files),
                    granted=granted)
    refuse_hard_links(hf.files)
    read_only.update(hf.read_only)
    missing.extend(hf.missing)
    notes += hf.notes
    # The user's configuration that runs code (git's global config, login
    # start-up: defaults.PROTECTED_DIRS' `.config/...` names), anchored where
    # the host reads it, not only at the top of a write root: with the write
    # root at ~/.config itself those names were relative to it and missed
    # (review). Existing ones read-only, missing ones watched.
    cfg_existing, cfg_missing = _config_in_roots(home, roots, regions)
    read_only.update(cfg_existing)
    missing.extend(cfg_missing)
    for p in deny_write_real:
        if not deny_write[p] and roots.at_or_above(p) is not None:
            missing.append(p)
    path_links: list[tuple[str, str]] = []
    if not policy.allow_write_path_dirs:
        pdirs = path_dirs_in_write_roots(host.path_dirs, write_roots)
        read_only.update(pdirs.existing)
        missing.extend(pdirs.missing)
        path_links = [lk for lk in pdirs.links if lk not in prot.links]
        if pdirs.existing:
            notes.append("kept read-only as directories of PATH inside a write root "
                         f"(filesystem.allowWritePathDirs): {', '.join(pdirs.existing)}")
        if layers is not Layers.HELPER_ONLY:
            warnings += _path_dir_warnings(pdirs.existing, write_roots)
    # Self-protection: safebox's installation, its state dir (policy cache,
    # seccomp cache, run dirs) and the policy files of this run stay
    # read-only even beneath a write root: a command that could change them
    # would decide the next run's sandbox.
    for p in (*host.self_paths, *host.run_files, host.state_dir):
        if os.path.lexists(p):
            read_only.add(os.path.realpath(p))
    read_only.update(imports)
    # Only what lies beneath a write root needs re-binding; outside, / is read-only already.
    read_only_list = regions.readable_only(roots.covered(read_only))
    sealed_set = {d for d, _ in sealed}
    sealed_near = Nearest(sealed_set)
    # The parents of protected symlinks too: renaming one would carry the link
    # away from where it is checked after the run.
    pins = pin_ancestors([*read_only_list, *sealed_set, *git_dirs, *mask_dirs, *mask_files,
                          *(link for link, _ in (*prot.links, *path_links))], write_roots)
    pins = [p for p in pins if p not in sealed_set and p not in read_only
            and regions.readable(p)
            and sealed_near.above(p) is None]
    # A read-only bind is recursive: one beneath another (a protected .git
    # inside a denyWrite directory) adds a mount and nothing else, and so
    # does a pin beneath one (nothing can be renamed in a read-only mount).
    # Except across a write root bound again over one (home.reopened: an
    # allowWrite inside a read-only dot entry of $HOME): what lies beneath
    # it is mounted again after it.
    reopened = Nearest(hf.reopened)
    read_only_list = _collapse_within(read_only_list, reopened)
    ro = Nearest(read_only_list)

    def covered(p: str) -> bool:
        r, w = ro.above(p), reopened.at_or_above(p)
        return r is not None and (w is None or _is_under(r, w))

    pins = [p for p in pins if not covered(p)]
    # Deny-read paths that do not exist yet but lie under a write root: the
    # command could create them (say ~/.config/safebox/policy.toml for the
    # next run); they are watched and quarantined like protected files.
    for p in policy.deny_read:
        if roots.at_or_above(p) is not None and not os.path.lexists(p):
            missing.append(p)
    net = NetKind.PROXY if bridges else NetKind.NONE
    private_tmp = ("/tmp",) if layers is not Layers.HELPER_ONLY else ()
    if layers is not Layers.HELPER_ONLY:
        rules.append(("write", "/tmp"))
    return ResolvedPolicy(
        layers=layers, cwd=cwd, write_roots=tuple(write_roots), read_only=tuple(read_only_list),
        sealed_dirs=tuple((d, tuple(k)) for d, k in sealed),
        pinned_dirs=tuple(by_depth({*pins, *(g for g in git_dirs if g not in sealed_set)})),
        mask_dirs=tuple(mask_dirs), mask_files=tuple(mask_files), private_tmp=private_tmp,
        carve_outs=tuple(sorted((*carve_outs(regions, layers=layers, write_roots=write_roots,
                                             read_only=read_only_list, sealed=sealed_set, helper=host.helper_path),
                                 *((w, True) for w in hf.reopened)),
                                key=lambda x: (x[0].count("/"), x[0]))),
        net=net, bridges=bridges, helper_path=host.helper_path, policy_path=host.policy_path,
        socket_binds=tuple(socket_binds),
        run_dir=host.run_dir, empty_file=os.path.join(host.run_dir, EMPTY_FILE) if host.run_dir else "",
        watch_missing=tuple(sorted(set(missing))), watch_tops=tuple(prot.tops),
        watch_links=tuple(dict.fromkeys([*prot.links, *path_links, *hf.links])),
        watch_new=tuple(hf.watch), watch_deep=prot.deep,
        landlock_rules=tuple(rules),
        notes=tuple(notes), warnings=tuple(warnings))


def _collapse_within(paths: list[str], reopened: Nearest) -> list[str]:
    """``collapse`` (shallow first), within each region of the write roots
    bound again over a read-only entry, and outside them."""
    if not reopened.paths:
        return collapse(paths, shallow_first=True)
    groups: dict[str | None, list[str]] = {}
    for p in paths:
        groups.setdefault(reopened.at_or_above(p), []).append(p)
    return by_depth(p for g in groups.values() for p in collapse(g))


def _refuse_unmaskable(masks: list[str]) -> None:
    """BuildError for a denied path every sandbox needs."""
    for p in masks:
        if p in UNMASKABLE_DEVICES or p in ("/dev/pts", "/dev/fd") or p.startswith(("/dev/pts/", "/dev/fd/")):
            raise BuildError(f"filesystem.denyRead {p}: cannot be masked: every sandbox needs this device "
                             "(the command's terminal, /dev/null, randomness); remove it from the policy")


def _import_dirs(import_paths: tuple[str, ...], write_roots: list[str], *, allow_roots: bool = False,
                 notes: list[str] | None = None) -> list[str]:
    """The directories of Python's import path, resolved; BuildError when one
    holds a write root (with ``allow_roots``, the API's harness started from
    its own repo: left writable, with a note; docs/api.md)."""
    imports: list[str] = []
    sorted_roots = sorted(write_roots)
    prefixes = python_prefixes()
    for p in import_paths:
        real = os.path.realpath(p)
        holds = at_or_beneath(sorted_roots, real)
        if holds and real in prefixes:
            # An installation prefix above the work dir (/usr above
            # /usr/src/app): outside its write roots it is read-only anyway.
            # What of it runs at safebox's next start (the interpreter,
            # libpython, the standard library) lives in bin/ and lib*/; the
            # sys.path entries are checked on their own.
            holds = [w for w in holds if w == real
                     or any(w == real + "/" + d or w.startswith(real + "/" + d + "/")
                            for d in ("bin", "lib", "lib64", "lib32", "libx32"))]
        if holds and allow_roots:
            if notes is not None:
                notes.append(f"Python's import path has {real}, which holds the write root {holds[0]}: "
                             "left writable (Sandbox(allow_import_roots=True), docs/api.md)")
            continue
        if holds:
            raise BuildError(f"Python's import path has {real}, which holds the write root {holds[0]}: "
                             "the command could plant code that safebox itself would run next time",
                             hint=_import_hint(real, holds[0], installation=real in prefixes))
        if os.path.isdir(real):
            imports.append(real)
    return imports


def _import_hint(entry: str, root: str, *, installation: bool) -> str:
    """What to change when Python's import path entry ``entry`` holds the
    write root ``root``, by where the entry comes from: PYTHONPATH, the
    directory ``python -m safebox`` was started in, or Python's own
    installation (a work dir such as /usr/lib, which PYTHONPATH has nothing
    to do with: issue 26)."""
    import sys

    named = [os.path.realpath(p) for p in os.environ.get("PYTHONPATH", "").split(":") if p]
    if entry in named:
        return f"unset PYTHONPATH (it names {entry}), or run from a directory outside it"
    if sys.path and sys.path[0] in ("", ".") or (sys.path and os.path.realpath(sys.path[0]) == entry
                                                 and entry == os.path.realpath(os.getcwd())):
        return "start safebox by its `safebox` script, not `python -m safebox` from the work tree"
    where = "Python's own installation" if installation else "a directory Python imports from"
    return (f"{entry} is {where}: run safebox from a directory outside it (the work dir is a write root), "
            f"or take {root} off filesystem.allowWrite")


def _resolve_deny_write(paths: tuple[str, ...], realpaths: RealPaths) -> dict[str, bool]:
    """The ``denyWrite`` paths resolved, each saying whether it exists."""
    realpaths.prefetch(paths)
    deny_write: dict[str, bool] = {}  # resolved path -> exists
    for p, target, kind, err in realpaths.resolve_each(paths):
        if err is not None:  # as os.path.lexists: a path that cannot be looked at is not there
            target = os.path.realpath(p)
            there = os.path.lexists(target)
        else:
            there = kind is not None and (kind != "link" or os.path.lexists(target))
        deny_write[target] = deny_write.get(target, False) or there
    return deny_write


GPU_UNIX_HELPER_ONLY = ("--allow-gpu (devices.gpu) without bubblewrap: CUDA needs unix sockets (its UVM descriptor "
                        "server), and without bubblewrap's mounts no host socket (docker, dbus, ssh-agent) can be "
                        "hidden from the command")
GPU_UNIX_HINT = ('run with bubblewrap, or accept every host socket being reachable with '
                 'network.allowAllUnixSockets = true (docs/gpu.md, "Unix sockets")')


def _hides_host_sockets(policy: EffectivePolicy, layers: Layers) -> bool:
    """Whether unix sockets are on with every unlisted host socket hidden:
    ``allowUnixSockets`` under bubblewrap, or a GPU (CUDA serves its UVM
    descriptors on a unix socket: docs/gpu.md, "Unix sockets"). A GPU
    without bubblewrap, where nothing can be hidden, is refused unless
    ``allowAllUnixSockets`` accepts every host socket."""
    if policy.allow_all_unix_sockets:
        return False
    if layers is Layers.HELPER_ONLY:
        if policy.devices_gpu:
            raise BuildError(GPU_UNIX_HELPER_ONLY, hint=GPU_UNIX_HINT)
        return False
    return bool(policy.allow_unix_sockets or policy.devices_gpu)


def _unix_sockets(policy: EffectivePolicy, *, warnings: list[str], notes: list[str]) -> tuple[list[str], list[str]]:
    """(sockets to mask, allowed sockets) for ``allowUnixSockets`` paths
    under bubblewrap. By identity first (builder/unix_diag.py): an allowed
    path must be its socket's own name, not a hard link's, a renamed file's
    or a relative bind's (refused); a hidden socket with a second name is a
    warning (refused under --strict), one whose name may have changed a
    note (-v)."""
    from safebox.builder import unix_diag

    bound = unix_diag.listening()
    unix_diag.check_allowed(policy.allow_unix_sockets, bound)
    unhidden, maybe_unhidden = unix_diag.unhideable(policy.allow_unix_sockets, bound)
    if unhidden:
        more = f" and {len(unhidden) - 3} more" if len(unhidden) > 3 else ""
        what = (f"network.allowUnixSockets: {len(unhidden)} host unix socket{'s' if len(unhidden) > 1 else ''} "
                f"cannot be hidden, as a mask covers one name and {'they have' if len(unhidden) > 1 else 'it has'} "
                f"more: {', '.join(unhidden[:3])}{more}; a command that finds another name can connect to it")
        if policy.strict:
            raise BuildError(f"--strict: {what}", hint="remove the socket's extra links, or run without --strict "
                                                       "(docs/policy-reference.md, \"Unix sockets\")")
        warnings.append(what + ' (--strict refuses to run so; docs/policy-reference.md, "Unix sockets")')
    if maybe_unhidden:
        more = f" and {len(maybe_unhidden) - 3} more" if len(maybe_unhidden) > 3 else ""
        notes.append("network.allowUnixSockets: host unix sockets whose current name safebox may not know (no mask "
                     f"covers a name it does not know): {', '.join(maybe_unhidden[:3])}{more}")
    return split_unix_sockets(policy.allow_unix_sockets, host_unix_sockets())


def _path_dir_warnings(path_dirs: list[str], write_roots: list[str]) -> list[str]:
    """A warning for each write root that a directory on PATH keeps read-only."""
    warnings = []
    for w in write_roots:
        d = next((d for d in path_dirs if _is_under(w, d)), None)
        if d is not None:
            warnings.append(f"the write root {w} is {'a directory on PATH' if d == w else f'inside {d}, on PATH'}"
                            ": it stays read-only so that nothing can be planted for your shell to run; "
                            "set filesystem.allowWritePathDirs = true in a policy file to write there")
    return warnings


def self_paths() -> tuple[str, ...]:
    """safebox's own installation: the package, the interpreter's prefix (venv)."""
    import sys

    import safebox

    pkg = os.path.dirname(os.path.realpath(safebox.__file__))
    out = {pkg, os.path.realpath(sys.prefix)}
    return tuple(sorted(out))


def python_prefixes() -> frozenset[str]:
    """The running interpreter's installation prefixes, resolved (a venv's
    and the base installation behind it)."""
    import sys

    return frozenset(os.path.realpath(p) for p in (sys.prefix, sys.exec_prefix, sys.base_prefix,
                                                    sys.base_exec_prefix))


def import_paths() -> tuple[str, ...]:
    """Where the running interpreter and its imports come from: the base
    installation behind a venv (pyenv under ``~``), every ``sys.path`` entry
    (a ``pip --user`` site in ``~/.local``, the entry script's directory)."""
    import sys

    out = {sys.base_prefix, sys.base_exec_prefix, sys.exec_prefix}
    # '' is the current directory (`python -c`, `python -m`).
    out.update(p if p else os.getcwd() for p in sys.path if not p or os.path.isabs(p))
    return tuple(sorted(out))

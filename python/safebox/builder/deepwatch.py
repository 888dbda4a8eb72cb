"""New files that run code, at any depth of a write root (issue 22, item 4).

After the run, safebox moves to the quarantine what the command left,
anywhere beneath a write root, that a host tool runs merely because the
user enters or opens the directory: ``.envrc`` (direnv), ``.vscode/``'s
``tasks.json``, ``settings.json`` and ``launch.json``, ``.idea/``'s
``workspace.xml`` and ``runConfigurations/`` (run configurations), and in a
git dir (a ``.git`` directory, or one git takes for a git dir: ``HEAD`` with
``objects/`` and ``refs/``, or with ``commondir``) its ``config``, ``hooks``,
``commondir`` and ``config.worktree`` (git runs ``core.fsmonitor`` at the
``git status`` of a shell prompt's first ``cd``). The same names at the top
of a write root, and existing ones to the search depth, are protected by
``run/protect.py`` and the read-only binds; this module is the depth.

How, without another walk of the tree after the run:

1. the start walk (``_prescan.start_find``) already lists the directories
   of every write root; it lists all of them, at every depth, with every
   ``.envrc``, and the file clock taken before it began (``since``);
2. :func:`capture` records the device and inode of every watched entry
   present then (a few per repository);
3. after the run each directory listed at the start is lstat'ed: one whose
   ctime is at or after ``since`` had an entry created, removed or renamed
   in it during the run (POSIX: each such change updates the directory's
   ctime, and nobody can set a ctime back), and only those are listed. A
   subdirectory not listed at the start is new: it is walked whole;
4. a watched entry found there that is not the one recorded at the start
   (another inode, or none then) is moved to the quarantine.

The ctime test allows 2 s for filesystems whose clock is coarse (a second
on ext4 with small inodes, 2 s on FAT): a directory changed just before the
run is only listed once more, and what decides a move is step 4.

A run whose safebox was killed is settled by the next start from the watch
file, which keeps ``since``, the roots and the recorded entries but not the
directory list (13,000 paths for 100,000 files): that check walks the
roots whole (``Baseline.dirs is None``).

Moves go through directory descriptors opened with O_NOFOLLOW from the
write root down (:func:`move_out`): a parent the command replaced with a
symlink is never followed, and the move is refused and said instead. (The
lead's ``hostio`` module is meant to own such operations; until it lands
this is the narrow version this check needs.)
"""

from __future__ import annotations

import errno
import itertools
import os
import stat
import time

from safebox._record import open_to_owner, set_mode
from safebox.builder import dirkeys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

#: Changes in this window before the walk began still list a directory.
SLACK_NS = 2_000_000_000
VSCODE = (b"tasks.json", b"settings.json", b"launch.json")
IDEA = (b"workspace.xml", b"runConfigurations")
IN_GIT_DIR = (b"config", b"hooks", b"commondir", b"config.worktree")
#: A planted symlink by one of these names is itself what is moved.
LINK_NAMES = (b".envrc", b".vscode", b".idea")
#: A file larger than this is removed, not copied, when the quarantine lies on
#: another filesystem (a command must not make safebox copy gigabytes).
COPY_MAX = 64 << 20

_PATH_DIR = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Baseline:
    """What the start saw: the write roots, every directory under them
    (``None`` for a killed run's, which is walked whole), the watched
    entries that existed (path: (device, inode)), and the clock."""

    __slots__ = ("dirs", "git_config", "known", "order", "roots", "since_ns")

    def __init__(self, *, since_ns: int, roots: tuple[str, ...], dirs: list[bytes] | None,
                 known: dict[bytes, tuple[int, int]], git_config: bool = True) -> None:
        self.since_ns = since_ns
        self.roots = roots
        self.order = dirs  # the walk's order, for the lstats after the run
        self.dirs = None if dirs is None else set(dirs)
        self.known = known
        # False with filesystem.allowGitConfig: a git dir's config is the
        # command's to write, at any depth as at the top.
        self.git_config = git_config

    def __repr__(self) -> str:
        n = "all" if self.dirs is None else len(self.dirs)
        return f"Baseline(roots={self.roots!r}, dirs={n}, known={len(self.known)}, since_ns={self.since_ns})"

    def merge(self, other: Baseline) -> Baseline:
        """Both baselines as one (write roots walked in separate batches)."""
        dirs = None if self.order is None or other.order is None else self.order + other.order
        return Baseline(since_ns=min(self.since_ns, other.since_ns), roots=(*self.roots, *other.roots),
                        dirs=dirs, known={**self.known, **other.known},
                        git_config=self.git_config and other.git_config)

    def without_git_config(self) -> Baseline:
        """The same baseline for a policy with filesystem.allowGitConfig."""
        b = Baseline(since_ns=self.since_ns, roots=self.roots, dirs=None, known=self.known, git_config=False)
        b.order, b.dirs = self.order, self.dirs
        return b


def parse(out: bytes) -> tuple[list[bytes], list[tuple[bytes, bytes]], list[str], list[str]]:
    """The start walk's records: (every directory, in the walk's order; the
    others as (path, kind and fields); the directories of ours find could
    not list, ``!PATH``; those of other users it could not list, ``?PATH``). A dot directory and an ``objects`` one are in the first two;
    an unlistable one is a directory of the start too (it is read-only for
    the run, not new after it). C-level passes over the records: 13,000
    directories cost about a millisecond. The walk's order is kept because
    the check after the run lstats them in it: neighbours share cached
    inode and directory blocks (a third faster than a set's order here)."""
    recs = out.split(b"\0")
    marked = _marked(out)
    # The rest, in order, by C-level passes: the marked records are few
    # (one per dot or objects directory), the directories many.
    dirs = list(itertools.filterfalse(set(marked).__contains__, filter(None, recs))) if marked else list(
        filter(None, recs))
    specials = []
    unlistable: list[str] = []
    foreign: list[str] = []
    for r in marked:
        if r[:1] in (b"!", b"?"):
            dirs.append(r[1:])
            (unlistable if r[:1] == b"!" else foreign).append(os.fsdecode(r[1:]))
            continue
        path, _, kind = r.partition(b"//")
        if kind in (b"d", b"o"):
            dirs.append(path)
        specials.append((path, kind))
    return dirs, specials, unlistable, foreign


def _marked(out: bytes) -> list[bytes]:
    """The records of ``out`` that hold ``//`` or begin with ``!`` or ``?``,
    in order: found with ``bytes.find`` (a Python test of each of 13,000
    records cost 4 ms of a start in the benchmark tree; this, a tenth)."""
    starts = {0} if out[:1] in (b"!", b"?") else set()
    for needle, in_record in ((b"//", True), (b"\0!", False), (b"\0?", False)):
        i = out.find(needle)
        while i != -1:
            starts.add(out.rfind(b"\0", 0, i) + 1 if in_record else i + 1)
            i = out.find(needle, i + 1)
    found = []
    for s in sorted(starts):
        e = out.find(b"\0", s)
        found.append(out[s:] if e == -1 else out[s:e])
    return found


def _base(p: bytes) -> bytes:
    return p[p.rfind(b"/") + 1:]


def _parent(p: bytes) -> bytes:
    return p[:p.rfind(b"/")] or b"/"


def _lstat_id(p: bytes) -> tuple[int, int] | None:
    try:
        st = os.lstat(p)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _record(d: bytes, names: tuple[bytes, ...], known: dict[bytes, tuple[int, int]], *,
            listed: bytes = b"") -> None:
    """Record ``d``'s entries named in ``names`` (and every entry of its
    ``listed`` subdirectory: a hooks directory, run configurations)."""
    for n in names:
        p = d + b"/" + n
        ident = _lstat_id(p)
        if ident is None:
            continue
        known[p] = ident
        if n == listed:
            try:
                kids = os.listdir(p)
            except OSError:
                continue
            for k in kids:
                q = p + b"/" + k
                kid = _lstat_id(q)
                if kid is not None:
                    known[q] = kid


def _sort_specials(specials: list[tuple[bytes, bytes]], dirs: set[bytes],
                   known: dict[bytes, tuple[int, int]]) -> tuple[set[bytes], list[bytes], list[bytes]]:
    """Record the identities the walk printed; return (the git dirs, the
    ``.vscode`` and the ``.idea`` directories) it saw. A git dir is a
    ``.git`` directory, or one holding ``objects/``, ``refs/`` and ``HEAD``
    (a bare repository, a submodule's), or a linked worktree's admin dir
    under a git dir's ``worktrees/``."""
    by_name: dict[bytes, list[bytes]] = {b".git": [], b".vscode": [], b".idea": [], b".envrc": []}
    objects: list[bytes] = []
    for path, kind in specials:
        k = kind[:1]
        if k == b"e" or (k == b"l" and _base(path) in LINK_NAMES):
            dev, _, ino = kind[1:].partition(b".")
            if dev.isdigit() and ino.isdigit():
                known[path] = (int(dev), int(ino))
        elif k == b"o":
            objects.append(_parent(path))
        elif k == b"d" and _base(path) in by_name:
            by_name[_base(path)].append(path)
    for d in by_name[b".envrc"]:  # a directory by that name: its identity, like a file's
        ident = _lstat_id(d)
        if ident is not None:
            known[d] = ident
    gits = set(by_name[b".git"])
    gits.update(g for g in objects if g + b"/refs" in dirs and os.path.lexists(g + b"/HEAD"))
    for g in list(gits):
        wt = g + b"/worktrees"
        if wt in dirs:
            try:
                gits.update(wt + b"/" + n for n in os.listdir(wt))
            except OSError:
                pass
    return gits, by_name[b".vscode"], by_name[b".idea"]


def capture(since_ns: int, roots: tuple[str, ...], dirs: list[bytes],
            specials: list[tuple[bytes, bytes]]) -> Baseline:
    """The baseline of one start walk: record every watched entry present
    now (a few lstats per repository and editor directory)."""
    known: dict[bytes, tuple[int, int]] = {}
    dirs = [*(os.fsencode(r) for r in roots), *dirs]
    b = Baseline(since_ns=since_ns, roots=roots, dirs=dirs, known=known)
    gits, vscode, idea = _sort_specials(specials, b.dirs or set(), known)
    for g in gits:
        _record(g, IN_GIT_DIR, known, listed=b"hooks")
    for v in vscode:
        _record(v, VSCODE, known)
    for i in idea:
        _record(i, IDEA, known, listed=b"runConfigurations")
    return b


def _is_git_dir(d: bytes, names: set[bytes]) -> bool:
    """What git takes for a git dir (``is_git_directory``), by the names it holds."""
    return _base(d) == b".git" or (b"HEAD" in names and ((b"objects" in names and b"refs" in names)
                                                         or b"commondir" in names))


def _under(p: bytes, skip: bytes) -> bool:
    return bool(skip) and (p == skip or p.startswith(skip + b"/"))


def _changed(b: Baseline, skip: bytes) -> list[bytes]:
    """The directories of the start to list again: those whose ctime says an
    entry changed during the run (all of them for a killed run's baseline)."""
    if b.order is None:
        return [os.fsencode(r) for r in b.roots]
    floor = b.since_ns - SLACK_NS
    helped = dirkeys.changed_since(b.order, floor)  # a big tree's lstats, on the helper's workers
    if helped is not None:
        return [d for d in helped if not _under(d, skip)] if skip else helped
    lstat = os.lstat
    out = []
    for d in b.order:
        try:
            st = lstat(d)
        except OSError:
            continue  # gone: what replaced it is an entry of a changed parent
        if st.st_ctime_ns >= floor and stat.S_ISDIR(st.st_mode):
            out.append(d)
    return [d for d in out if not _under(d, skip)] if skip else out


def _worktree_commondir(p: bytes) -> bool:
    """``G/worktrees/NAME/commondir`` holding ``../..``, as ``git worktree add``
    writes it: it names the git dir it lies in, whose own config and hooks
    are protected or checked here, so it redirects nothing."""
    parts = p.split(b"/")
    if len(parts) < 4 or parts[-3] != b"worktrees":
        return False
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > 64:
            return False
        return os.read(fd, 64).strip() == b"../.."
    finally:
        os.close(fd)


def _candidates(d: bytes, entries: dict[bytes, os.DirEntry[bytes]]) -> list[bytes]:
    """The watched paths that the listing of ``d`` names."""
    names = set(entries)
    out: list[bytes] = []
    if b".envrc" in names:
        out.append(d + b"/.envrc")
    for link in (b".vscode", b".idea"):
        if link in names and entries[link].is_symlink():
            out.append(d + b"/" + link)
    # The watched dirs' entries, from the listing of the dir itself and from
    # its parent's (a directory moved in whole is listed here even on a
    # filesystem that keeps its ctime on rename).
    sources = [d] + [d + b"/" + sub for sub in (b".vscode", b".idea", b".git")
                     if sub in names and entries[sub].is_dir(follow_symlinks=False)]
    for w in sources:
        wb = _base(w)
        if wb == b".vscode":
            out += [w + b"/" + n for n in VSCODE]
        elif wb == b".idea":
            out += [w + b"/" + n for n in IDEA]
        elif wb == b".git" or (w == d and _is_git_dir(d, names)):
            out += [w + b"/" + n for n in IN_GIT_DIR]
    base, parent = _base(d), _parent(d)
    if (base == b"runConfigurations" and _base(parent) == b".idea") or (
            base == b"hooks" and (_base(parent) == b".git" or os.path.lexists(parent + b"/HEAD"))):
        out += [d + b"/" + n for n in names]
    return out


def _walk(b: Baseline, skip: bytes,
          reopened: list[tuple[bytes, int]]) -> tuple[list[bytes], list[tuple[str, str]]]:
    """List the changed directories and every new one; (candidates, the
    directories that could not be listed, with why). ``reopened`` gets the
    directories made listable for the check, with the mode to put back."""
    todo = _changed(b, skip)
    dirs = b.dirs
    seen: set[bytes] = set()
    candidates: list[bytes] = []
    unlistable: list[tuple[str, str]] = []
    while todo:
        d = todo.pop()
        if d in seen:
            continue
        seen.add(d)
        try:
            with os.scandir(d) as it:
                entries = {e.name: e for e in it}
        except PermissionError as err:
            mode = open_to_owner(d)
            if mode is None:
                # Not ours: the command, running as us, could not have
                # written in it unless its owner lets everyone; then it is
                # named for a check by hand, else (another user's private
                # directory in /tmp) there is nothing of ours to check.
                if os.access(d, os.W_OK, effective_ids=True):
                    unlistable.append((os.fsdecode(d), err.strerror or "permission denied"))
                continue
            reopened.append((d, mode))
            try:
                with os.scandir(d) as it:
                    entries = {e.name: e for e in it}
            except OSError:
                continue
        except OSError:
            continue  # gone, or no longer a directory: its parent's listing covers it
        for entry in entries.values():
            if (entry.is_dir(follow_symlinks=False) and (dirs is None or entry.path not in dirs)
                    and not _under(entry.path, skip)):
                todo.append(entry.path)  # new since the start: every directory in it is listed
        candidates += _candidates(d, entries)
    return candidates, unlistable


def check(b: Baseline, *, skip: str = "",
          reopened: list[tuple[bytes, int]] | None = None) -> tuple[list[str], list[tuple[str, str]]]:
    """After the run: (watched entries the command left, shallow first, none
    inside another; directories that changed and that safebox could not
    list, with why). ``skip``: a directory never looked at (safebox's
    state). ``reopened`` gets the directories of ours the command made
    unreadable, made listable for the check, with the mode to put back
    (:func:`settle` does, after the moves); without it they are put back
    at once."""
    opened: list[tuple[bytes, int]] = [] if reopened is None else reopened
    candidates, unlistable = _walk(b, os.fsencode(skip) if skip else b"", opened)
    if reopened is None:
        for d, mode in reversed(opened):
            set_mode(d, mode)
    planted: list[str] = []
    done: set[bytes] = set()
    for c in candidates:
        if c in done:
            continue
        done.add(c)
        ident = _lstat_id(c)
        if ident is None or b.known.get(c) == ident:
            continue
        if _base(c) == b"commondir" and _worktree_commondir(c):
            continue
        if not b.git_config and _base(c) == b"config":
            continue  # only a git dir's config is a candidate by that name
        planted.append(os.fsdecode(c))
    # A directory before what lies in it: moving hooks/ moves its entries too.
    planted.sort(key=lambda p: (p.count("/"), p))
    out: list[str] = []
    for p in planted:
        if not any(p.startswith(q + "/") for q in out):
            out.append(p)
    return out, unlistable


class Refused(Exception):
    """The move would have followed a symlink: nothing was moved."""


def _dest_name(path: str) -> str:
    """The quarantine's name for ``path``: its components joined by ``%``,
    the last 200 bytes of it when longer than a file name may be."""
    flat = path.strip("/").replace("/", "%")
    raw = os.fsencode(flat)
    if len(raw) > 200:
        flat = "..." + os.fsdecode(raw[-200:])
    return flat


def _copy_out(src: int, name: str, dst: int, dest: str) -> None:
    """Copy ``name`` (relative to directory fd ``src``) to ``dest`` in ``dst``
    without following links, then remove it: the quarantine is on another
    filesystem. A file over COPY_MAX, or anything but a file, link or
    directory, is removed and not kept."""
    st = os.stat(name, dir_fd=src, follow_symlinks=False)
    if stat.S_ISLNK(st.st_mode):
        os.symlink(os.readlink(name, dir_fd=src), dest, dir_fd=dst)
        os.unlink(name, dir_fd=src)
    elif stat.S_ISDIR(st.st_mode):
        fd = os.open(name, _READ_DIR, dir_fd=src)
        try:
            os.mkdir(dest, 0o700, dir_fd=dst)
            out = os.open(dest, _PATH_DIR, dir_fd=dst)
            try:
                for kid in os.listdir(fd):
                    _copy_out(fd, kid, out, kid)
            finally:
                os.close(out)
        finally:
            os.close(fd)
        os.rmdir(name, dir_fd=src)
    elif stat.S_ISREG(st.st_mode) and st.st_size <= COPY_MAX:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=src)
        try:
            out = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                          dir_fd=dst)
            try:
                left = COPY_MAX
                while left > 0:
                    chunk = os.read(fd, min(left, 1 << 20))
                    if not chunk:
                        break
                    os.write(out, chunk)
                    left -= len(chunk)
            finally:
                os.close(out)
        finally:
            os.close(fd)
        os.unlink(name, dir_fd=src)
    else:
        os.unlink(name, dir_fd=src)


def move_out(path: str, root: str, qdir: str) -> str:
    """Move ``path`` (beneath the write root ``root``) into ``qdir`` through
    directory descriptors opened without following links, from ``root``
    down; returns where it went. Raises :class:`Refused` when a directory on
    the way is a symlink now, OSError when the move fails."""
    rel = path[len(root):].strip("/").split("/")
    fd = os.open(root, _PATH_DIR)
    try:
        for comp in rel[:-1]:
            try:
                nfd = os.open(comp, _PATH_DIR, dir_fd=fd)
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise Refused(path) from None
                raise
            os.close(fd)
            fd = nfd
        os.makedirs(qdir, mode=0o700, exist_ok=True)
        q = os.open(qdir, _PATH_DIR)
        try:
            base = _dest_name(path)
            dest, n = base, 1
            while True:
                try:
                    os.stat(dest, dir_fd=q, follow_symlinks=False)
                except FileNotFoundError:
                    break
                # The same path quarantined twice in one second: keep both.
                dest, n = f"{base}.{n}", n + 1
            try:
                os.rename(rel[-1], dest, src_dir_fd=fd, dst_dir_fd=q)
            except OSError as e:
                if e.errno != errno.EXDEV:
                    raise
                _copy_out(fd, rel[-1], q, dest)
        finally:
            os.close(q)
    finally:
        os.close(fd)
    return os.path.join(qdir, dest)


def settle(b: Baseline, state: str, *, guard: Callable[[str], bool] | None = None,
           say: Callable[[str], None], killed: bool = False) -> tuple[list[str], str]:
    """Check after the run and move what the command left to the quarantine;
    say each. ``guard``: paths never to move (the read-only binds of this
    run: they could not have changed). Returns (the paths moved, the
    quarantine entry they went to)."""
    # The state dir as the walk names it (resolved): the quarantine in it
    # holds what earlier runs planted, under the same names inside moved
    # directories, and is safebox's own, never the command's.
    reopened: list[tuple[bytes, int]] = []
    planted, unlistable = check(b, skip=os.path.realpath(state), reopened=reopened)
    try:
        return _settle(b, state, planted, unlistable, reopened, guard=guard, say=say, killed=killed)
    finally:
        for d, mode in reversed(reopened):  # children before their parents
            set_mode(d, mode)


def _settle(b: Baseline, state: str, planted: list[str], unlistable: list[tuple[str, str]],
            reopened: list[tuple[bytes, int]], *, guard: Callable[[str], bool] | None,
            say: Callable[[str], None], killed: bool) -> tuple[list[str], str]:
    """:func:`settle` once the check is done: say and move."""
    from safebox.builder.paths import Nearest

    who = "a killed earlier run's command" if killed else "the command"
    roots = Nearest(b.roots)
    qdir = os.path.join(state, "quarantine", time.strftime("%Y%m%dT%H%M%S"))
    for d, why in unlistable:
        say(f"cannot look in {d} after the run ({why}; it is not yours): what {who} may have planted "
            "there was not checked; check it by hand")
    for raw, mode in reopened:
        say(f"{who} made {os.fsdecode(raw)} unreadable (mode {mode:04o}); safebox opened it to its owner "
            f"(u+rwx) to check what is in it, then set the mode back")
    moved: list[str] = []
    for p in planted:
        root = roots.at_or_above(p)
        if root is None or root == p or (guard is not None and guard(p)):
            continue
        try:
            dest = move_out(p, root, qdir)
        except Refused:
            say(f"a directory on the way to protected path {p} was replaced by a symlink during the run; "
                "nothing moved there (check it by hand)")
            continue
        except (OSError, RecursionError) as e:
            err = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            say(f"{who} created protected file {p}; it could not be moved to the quarantine ({err}): "
                "delete it before you open that directory")
            continue
        moved.append(p)
        say(f"{who} created protected file {p}; moved it to {dest}")
    return moved, qdir


def watch_lines(b: Baseline) -> list[str]:
    """The watch file's lines for a killed run's check: ``deep SINCE``,
    ``deeproot HEXROOT``, ``known DEV INO HEXPATH``."""
    lines = [f"deep {b.since_ns}"] + ([] if b.git_config else ["deepgitconfig allowed"])
    lines += [f"deeproot {os.fsencode(r).hex()}" for r in b.roots]
    lines += [f"known {dev} {ino} {p.hex()}" for p, (dev, ino) in b.known.items()]
    return lines


def from_watch_lines(lines: Iterable[str]) -> Baseline | None:
    """The baseline :func:`watch_lines` wrote (no directory list: walked whole)."""
    since: int | None = None
    roots: list[str] = []
    known: dict[bytes, tuple[int, int]] = {}
    git_config = True
    for line in lines:
        kind, _, rest = line.partition(" ")
        try:
            if kind == "deep":
                since = int(rest)
            elif kind == "deepgitconfig":
                git_config = False
            elif kind == "deeproot":
                roots.append(os.fsdecode(bytes.fromhex(rest)))
            elif kind == "known":
                dev, ino, hexpath = rest.split(" ")
                known[bytes.fromhex(hexpath)] = (int(dev), int(ino))
        except ValueError:
            continue  # our own file, 0600 in a private dir: a torn write at most
    if since is None or not roots:
        return None
    return Baseline(since_ns=since, roots=tuple(roots), dirs=None, known=known, git_config=git_config)


__all__ = ["Baseline", "Refused", "capture", "check", "from_watch_lines", "move_out", "parse", "settle",
           "watch_lines"]

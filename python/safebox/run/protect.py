"""Protected names: what a command may not leave behind.

Before the command runs, :func:`write_watch` records in its run dir what
the end of the run must check (protected names that did not exist, the
first components absent at the top of each write root, protected
symlinks). After it, :func:`settle` quarantines what the command created
there and restores the links it replaced. A run whose safebox was
SIGKILLed is settled by the next start's sweep (:func:`settle_watch`, from
``rundir.sweep_stale``) instead of leaving a planted ``~/.bashrc`` for good.
"""

from __future__ import annotations

import os
import stat
import time

from safebox._record import realpath_cached, rmtree
from safebox.errors import RunError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from safebox.builder.deepwatch import Baseline
    from safebox.builder.resolved import ResolvedPolicy

WATCH = "watch"

# The quarantine keeps the newest QUARANTINE_MAX_ENTRIES entries (one
# directory per second in which something was moved there); older ones are
# removed when a new entry is made, and safebox says so in one line. What a
# command planted is kept for the user to look at, but a harness whose tasks
# keep planting must not fill the disk (docs/policy-reference.md).
QUARANTINE_MAX_ENTRIES = 100


def _stderr(msg: str) -> None:
    import sys

    sys.stderr.write(f"safebox: {msg}\n")
    sys.stderr.flush()


def write_watch(run_dir: str, rp: ResolvedPolicy) -> None:
    """Record what the end of the run must check. Hex paths, one record a
    line: ``missing HEX``, ``new HEXDIR HEXKIND HEXNAMES``, ``top HEXROOT
    HEXNAMES``, ``link HEX HEXTARGET``, and the watch at any depth's
    ``deep``, ``deeproot`` and ``known`` lines (``safebox.builder.deepwatch.watch_lines``)."""
    if (not rp.watch_missing and not rp.watch_links and not rp.watch_tops and not rp.watch_new
            and rp.watch_deep is None):
        return
    from safebox.builder.helper_policy import write_policy_file

    lines = [f"missing {os.fsencode(p).hex()}" for p in rp.watch_missing]
    # `new HEXDIR HEXKIND HEXNAMES`: NAMES, NUL-separated, were in DIR at the
    # start (builder/home_files.py); what is new there is quarantined.
    nul = b"\0"
    lines += [f"new {os.fsencode(d).hex()} {kind.encode().hex()} {b''.join(os.fsencode(n) + nul for n in names).hex()}"
              for d, kind, names in rp.watch_new]
    # `top HEXROOT HEXNAMES`: the protected names whose first component
    # (NAMES, comma-separated) was absent at the top of ROOT.
    lines += [f"top {os.fsencode(r).hex()} {','.join(firsts).encode().hex()}" for r, firsts in rp.watch_tops]
    lines += [f"link {os.fsencode(p).hex()} {os.fsencode(t).hex()}" for p, t in rp.watch_links]
    if rp.watch_deep is not None:
        from safebox.builder.deepwatch import watch_lines

        lines += watch_lines(rp.watch_deep)
    write_policy_file(os.path.join(run_dir, WATCH), ("\n".join(lines) + "\n").encode())


def settle_watch(run_dir: str, state: str) -> list[str]:
    """Quarantine and restore what a dead run's watch file names; returns messages."""
    try:
        with open(os.path.join(run_dir, WATCH), "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return []
    missing: list[str] = []
    links: list[tuple[str, str]] = []
    tops: list[tuple[str, tuple[str, ...]]] = []
    new: list[tuple[str, str, tuple[str, ...]]] = []
    for line in raw.decode("ascii", "replace").splitlines():
        kind, *hexes = line.split(" ")
        if kind == "new" and len(hexes) == 3:
            try:
                names = bytes.fromhex(hexes[2]).split(b"\0")[:-1]
                new.append((os.fsdecode(bytes.fromhex(hexes[0])), bytes.fromhex(hexes[1]).decode(),
                            tuple(os.fsdecode(n) for n in names)))
            except ValueError:
                pass  # our own file, 0600 in a private dir: a torn write at most
            continue
        try:
            paths = [os.fsdecode(bytes.fromhex(h)) for h in hexes]
        except ValueError:
            continue  # our own file, 0600 in a private dir: a torn write at most
        if kind == "missing" and len(paths) == 1:
            missing.append(paths[0])
        elif kind == "link" and len(paths) == 2:
            links.append((paths[0], paths[1]))
        elif kind == "top" and len(paths) == 2:
            tops.append((paths[0], tuple(paths[1].split(","))))
    if tops:
        from safebox.builder.resolve import top_candidates

        missing += top_candidates(tops)
    if new:
        from safebox.builder.home_files import new_paths

        missing += new_paths(new)
    out = [f"a killed earlier run's command created protected file {src}; moved it to {dest}"
           for src, dest in quarantine(tuple(dict.fromkeys(missing)), state)]
    for link, replaced in restore_links(tuple(links), state):
        what = f"replaced it; moved the replacement to {replaced}" if replaced else "removed it"
        out.append(f"protected symlink {link}: a killed earlier run's command {what}; the link is restored")
    from safebox.builder import deepwatch

    deep = deepwatch.from_watch_lines(raw.decode("ascii", "replace").splitlines())
    if deep is not None:
        restored = {link for link, _ in links}
        _settle_deep(deep, state, say=out.append, killed=True, guard=restored.__contains__)
    return out


def settle(rp: ResolvedPolicy, state: str, *, say: Callable[[str], None]) -> tuple[list[str], list[str]]:
    """After the command: quarantine the protected files it created and
    restore the protected links it replaced; say each. Returns (quarantined
    paths, restored links) for the run record."""
    candidates = rp.watch_missing
    if rp.watch_tops:
        from safebox.builder.resolve import top_candidates

        candidates = (*candidates, *top_candidates(rp.watch_tops))
    if rp.watch_new:
        from safebox.builder.home_files import new_paths

        candidates = (*candidates, *new_paths(rp.watch_new))
    # A new ~/.git is both a new dot entry and a watched top name: moved once.
    moved = quarantine(tuple(dict.fromkeys(candidates)), state, say=say)
    for src, dest in moved:
        say(f"the command created protected file {src}; moved it to {dest}")
    relinked = restore_links(rp.watch_links, state, say=say)
    for link, replaced in relinked:
        what = f"replaced it; moved the replacement to {replaced}" if replaced else "removed it"
        say(f"protected symlink {link}: the command {what}; the link is restored")
    out = [m[0] for m in moved]
    if rp.watch_deep is not None:
        from safebox.builder.paths import Nearest

        # The read-only binds could not have changed: never moved, whatever
        # the check makes of them. Nor the protected links just restored
        # (a new inode where the check remembers the old one): what replaced
        # them is in the quarantine already.
        bound = Nearest(rp.read_only)
        restored = {link for link, _ in rp.watch_links}
        out += _settle_deep(rp.watch_deep, state, say=say,
                            guard=lambda p: p in restored or bound.at_or_above(p) is not None)
    return out, [link for link, _ in relinked]


def _settle_deep(deep: Baseline, state: str, *, say: Callable[[str], None], killed: bool = False,
                 guard: Callable[[str], bool] | None = None) -> list[str]:
    """The watch at any depth (safebox.builder.deepwatch), then the quarantine's bound."""
    from safebox.builder import deepwatch

    moved, entry = deepwatch.settle(deep, state, guard=guard, say=say, killed=killed)
    if moved:
        _say_bound(os.path.join(state, "quarantine"), entry, say)
    return moved


def _is_quarantine_entry(name: str) -> bool:
    """``YYYYmmddTHHMMSS``: the names ``quarantine`` makes (nothing else there is touched)."""
    return len(name) == 15 and name[8] == "T" and name[:8].isdigit() and name[9:].isdigit()


def bound_quarantine(qdir: str, *, keep: str, max_entries: int = QUARANTINE_MAX_ENTRIES) -> list[str]:
    """Remove the oldest quarantine entries beyond ``max_entries`` (never
    ``keep``, the one just filled); returns their names. Called only when
    something was quarantined, so runs that plant nothing pay nothing."""
    try:
        names = sorted(n for n in os.listdir(qdir) if _is_quarantine_entry(n))
    except OSError:
        return []
    excess = len(names) - max_entries
    removed = []
    for name in names:
        if excess <= 0:
            break
        path = os.path.join(qdir, name)
        if path == keep:
            continue
        rmtree(path)
        if not os.path.lexists(path):
            removed.append(name)
            excess -= 1
    return removed


def _move(p: str, qdir: str) -> tuple[str, str]:
    """Move ``p`` into this second's quarantine entry; (entry dir, destination)."""
    dest_dir = os.path.join(qdir, time.strftime("%Y%m%dT%H%M%S"))
    os.makedirs(dest_dir, mode=0o700, exist_ok=True)
    base = os.path.join(dest_dir, p.strip("/").replace("/", "%"))
    dest, n = base, 1
    while os.path.lexists(dest):
        # The same path quarantined twice in one second (two runs, or a
        # restored link replaced again): rename(2) would replace the first,
        # and that is the user's evidence.
        dest, n = f"{base}.{n}", n + 1
    try:
        os.rename(p, dest)
    except OSError:
        import shutil

        shutil.move(p, dest)
    return dest_dir, dest


def _first_link(path: str) -> str | None:
    """The first component of ``path`` that is a symlink, or None."""
    cur = ""
    for part in path.split("/")[1:]:
        cur = f"{cur}/{part}"
        try:
            if stat.S_ISLNK(os.lstat(cur).st_mode):
                return cur
        except OSError:
            return None
    return None


def quarantine(paths: tuple[str, ...], state: str, *,
               say: Callable[[str], None] = _stderr) -> list[tuple[str, str]]:
    """Move protected files the command created (they did not exist before) out of the tree.

    The paths were resolved before the run; a parent the command replaced
    with a symlink (``proj/.config -> ~/.config``) would make the move land
    on whatever the link names, the user's own ``~/.config/git/config``
    (found in review). Such a path is left alone and reported instead.
    """
    moved = []
    qdir = os.path.join(state, "quarantine")
    dest_dir = ""
    real: dict[str, str] = {}  # resolved now, after the run; each parent once
    listed: dict[str, set[str] | None] = {}
    moved_links: set[str] = set()
    for p in paths:
        parent = os.path.dirname(p)
        if realpath_cached(parent, real) != parent:
            # The parent was a real directory when the run started: the
            # first link on the way is the command's. Following it would move
            # the user's own file; leaving it would leave what it leads to
            # live (a symlinked site-packages holding a .pth: review). The
            # link itself goes to the quarantine (rename never follows it).
            if any(parent == m or parent.startswith(m + "/") for m in moved_links):
                continue  # its link went to the quarantine already
            link = _first_link(parent)
            if link is None:
                say(f"a directory on the way to protected path {p} was replaced by a symlink during the run; "
                    "nothing moved there (check it by hand)")
                continue
            dest_dir, dest = _move(link, qdir)  # said by the caller, as every move
            moved_links.add(link)
            moved.append((link, dest))
            continue
        # One listing per parent, not an lstat per watched name (forty
        # names at the top of each write root).
        if parent not in listed:
            try:
                listed[parent] = set(os.listdir(parent))
            except OSError:
                listed[parent] = None
        names = listed[parent]
        if (os.path.basename(p) in names) if names is not None else os.path.lexists(p):
            dest_dir, dest = _move(p, qdir)
            moved.append((p, dest))
    if moved:
        _say_bound(qdir, dest_dir, say)
    return moved


def _say_bound(qdir: str, keep: str, say: Callable[[str], None]) -> None:
    removed = bound_quarantine(qdir, keep=keep)
    if removed:
        shown = ", ".join(removed[:3]) + (f" and {len(removed) - 3} more" if len(removed) > 3 else "")
        say(f"the quarantine keeps the newest {QUARANTINE_MAX_ENTRIES} entries: removed "
            f"{len(removed)} older one{'s' if len(removed) > 1 else ''} from {qdir} ({shown})")


def restore_links(links: tuple[tuple[str, str], ...], state: str, *,
                  say: Callable[[str], None] = _stderr) -> list[tuple[str, str | None]]:
    """Put back protected symlinks the command removed or replaced.

    A symlink named like a protected file (``~/.bashrc -> dotfiles/bashrc``)
    lives in a writable directory and is no mount point, so the command can
    unlink it and plant a file of its own there. Whatever now stands at the
    path is quarantined and the original link recreated. Returns (path,
    quarantine destination or None when nothing replaced the link).
    """
    restored: list[tuple[str, str | None]] = []
    for path, target in links:
        try:
            if os.readlink(path) == target:
                continue
        except FileNotFoundError:
            pass
        except OSError:
            pass  # no longer a symlink (EINVAL): a replacement
        if not os.path.isdir(os.path.dirname(path)):
            # Its directory is gone, and everything in it: nothing stands at
            # the path, and nothing can until someone outside the sandbox
            # recreates the directory. Raising here would make one vanished
            # temporary tree (a killed run's watch list) stop every later start.
            continue
        if os.path.realpath(os.path.dirname(path)) != os.path.dirname(path):
            # A directory on the way is a link now: recreating the link there
            # would plant it where the command chose (review). quarantine
            # moves the command's link away and says so.
            quarantine((path,), state, say=say)
            continue
        try:
            dest = quarantine((path,), state, say=say)
            os.symlink(target, path)
        except OSError as e:
            raise RunError(f"cannot restore protected symlink {path} -> {target}: {e.strerror or e}") from None
        restored.append((path, dest[0][1] if dest else None))
    return restored


__all__ = ["QUARANTINE_MAX_ENTRIES", "WATCH", "bound_quarantine", "quarantine", "restore_links", "settle",
           "settle_watch", "write_watch"]

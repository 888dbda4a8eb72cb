"""The walks of the write roots: ripgrep for protected files, find for
symlinks named like them and for the watch at any depth. ``Scan`` decides
the write roots and starts the walks early (or adopts those the launcher
began: ``prestart``, safebox.builder.prescan); ``RootScan.collect`` reads their
answers, failing closed on any walk error that could hide a protected file."""

from __future__ import annotations

import os
import stat

from safebox._record import Spawned, path_outside, realpath_cached, which
from safebox.builder import prescan as _prescan
from safebox.builder.paths import Nearest, is_under
from safebox.builder.resolved import Layers
from safebox.errors import BuildError
from safebox.policy import defaults
from safebox.policy.effective import EffectivePolicy

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator

    from safebox.builder.deepwatch import Baseline


def _only_harmless_walk_errors(stderr: bytes, unlistable: frozenset[str] | set[str] = frozenset()) -> bool:
    """Whether every walk error in ripgrep's ``stderr`` is harmless as it
    stands: none refused, none whose directory must be walked again
    (``_walk_errors``)."""
    return _first_harmful_walk_error(stderr, unlistable) is None


def _first_harmful_walk_error(stderr: bytes, unlistable: frozenset[str] | set[str] = frozenset()) -> str | None:
    """The first line of ripgrep's ``stderr`` that is no harmless walk error
    as it stands (one refused, else one whose directory must be walked
    again), or None."""
    harmful, again = _walk_errors(stderr, unlistable)
    return harmful if harmful is not None else again[0][1] if again else None


# What a directory ripgrep was refused is when looked at again (``_now``).
_GONE, _FOREIGN, _AGAIN, _REFUSED = "gone", "foreign", "again", "refused"


def _walk_errors(stderr: bytes,
                 unlistable: frozenset[str] | set[str] = frozenset()) -> tuple[str | None, list[tuple[str, str]]]:
    """(the first line of ripgrep's ``stderr`` that could hide a protected
    file the sandbox could write, or None; the directories to walk again,
    each with its line). ripgrep exits 2 on any walk error. These hide
    nothing: an entry that vanished during the walk (ENOENT, os error 2); a
    directory we may not read (EACCES, os error 13) at or beneath one of
    ``unlistable``, the directories find reported as such (ours, kept
    read-only for the run, or another user's); and a directory that, when
    looked at now (``_now``), is gone, or is another user's that we may not
    list, the kind find skips: made after find had passed, as other users'
    private directories come and go in a shared ``/tmp`` while the two walks
    run. One that can be listed now (``mkdtemp`` then ``chmod 755``, ciI) is
    walked again, as it is now. Any other EACCES is refused: the command
    owns the directory it made unlistable and could make it listable again
    and write beneath it (found in review)."""
    if not stderr.strip():
        return "(no error message)", []
    # Lines as ripgrep ends them ("\n" only: splitlines() would also cut at
    # "\r" or "\x85", which a name may hold); names as the filesystem has
    # them (surrogateescape, as os.fsdecode): read with "replace", a name
    # holding b"\xff" was looked at again as U+FFFD, a path that is not
    # there, so "gone" and harmless (found in review).
    lines = [ln for ln in _without_known(stderr, unlistable).decode(errors="surrogateescape").split("\n")
             if ln.strip()]
    prefixes = tuple(p for u in unlistable for p in (u + ":", u + "/"))
    again: list[tuple[str, str]] = []
    for ln in lines:
        if ln.rstrip().endswith("(os error 2)"):
            continue
        path = ln[4:] if ln.startswith("rg: ") else ln
        if not ln.rstrip().endswith("(os error 13)"):
            return ln, again
        if prefixes and path.startswith(prefixes):
            continue
        readings = _denied_readings(path)
        verdicts = [_now(d) for d in readings]
        if not readings or _REFUSED in verdicts:
            return ln, again
        again += [(d, ln) for d, v in zip(readings, verdicts, strict=True) if v == _AGAIN]
    return None, again


_DENIED = ": Permission denied (os error 13)"
_IO_ERROR = ": IO error for operation on "


def _without_known(stderr: bytes, unlistable: frozenset[str] | set[str]) -> bytes:
    """ripgrep's ``stderr`` less its refusals of the directories find reported
    it could not list, and of the entries directly in them, taken out whole:
    find names them exactly (NUL-ended), and a name holding a newline splits
    ripgrep's message into lines none of which is the directory, which
    failed every start in a shared ``/tmp`` where another user kept such a
    directory private. One that can be read but not searched (0744, 0644)
    is listed by ripgrep, and each entry in it refused (found in review).
    Bytes, as names are. One pass over the messages' starts, each looked
    up by the directory it begins with (a regular expression per directory
    cost 300 ms for 300 of them in a shared /tmp)."""
    known = {os.fsencode(u) for u in unlistable}
    text = b"\n" + stderr
    if not known:
        return text
    longest = max(map(len, known))
    kept: list[bytes] = []
    done = 0  # text[done:] is not yet copied to kept
    at = 0  # the "\n" that ends one message and begins the next
    while at != -1:
        end = _known_refusal_end(text, at + 1, known, longest)
        if end is None:
            at = text.find(b"\n", at + 1)
            continue
        kept.append(text[done:at])
        done = at = end
    kept.append(text[done:])
    return b"".join(kept)


_IO_B, _DENIED_B = os.fsencode(_IO_ERROR), os.fsencode(_DENIED)


def _ends(text: bytes, lo: int, hi: int) -> Iterator[int]:
    """The indexes of ``:`` and ``/`` in ``text[lo:hi]``, in order: where a
    directory's path can end in ripgrep's message (no ``re``: it is off the
    start's import budget, tests/integration/test_import_budget.py)."""
    while True:
        colon, slash = text.find(b":", lo, hi), text.find(b"/", lo, hi)
        if colon == -1 and slash == -1:
            return
        q = slash if colon == -1 else colon if slash == -1 else min(colon, slash)
        yield q
        lo = q + 1


def _known_refusal_end(text: bytes, start: int, known: set[bytes], longest: int) -> int | None:
    """The index of the "\n" that ends ripgrep's refusal beginning at
    ``start`` of a directory of ``known`` or of an entry directly in one,
    or None when what begins there is no such refusal. An entry's name
    holds no "/": in the first form it ends where the words begin, before
    the second path's "/"; in the second at the last "Permission denied"
    before the next message's path."""
    if text.startswith(b"rg: ", start):
        start += 4
    for q in _ends(text, start + 1, start + longest + 1):
        u = text[start:q]
        if u not in known:
            continue
        for form in (u + _IO_B + u + _DENIED_B + b"\n", u + _DENIED_B + b"\n"):
            if text.startswith(form, start):
                return start + len(form) - 1
        if text[q] != ord("/"):
            continue
        slash = text.find(b"/", q + 1)
        if slash != -1 and text.endswith(_IO_B, q + 1, slash):
            kid = text[start:slash - len(_IO_B)]
            form = kid + _IO_B + kid + _DENIED_B + b"\n"
            if text.startswith(form, start):
                return start + len(form) - 1
        last = text.rfind(_DENIED_B + b"\n", q + 1, len(text) if slash == -1 else slash)
        if last != -1:
            return last + len(_DENIED_B)
    return None


def _denied_readings(line: str) -> list[str]:
    """The directory ripgrep names in "PATH: Permission denied (os error
    13)" or "PATH: IO error for operation on PATH: Permission denied (os
    error 13)" (``rg: `` taken off): every way the line can be read, as a
    path that holds the second form's words could be either; none for any
    other line. Each reading must be harmless for the line to be."""
    line = line.rstrip()
    if not line.endswith(_DENIED):
        return []
    rest = line[:-len(_DENIED)]
    out = [rest] if rest.startswith("/") else []
    # The second form repeats PATH exactly: split by length, not at the first
    # occurrence of the words, which PATH itself may hold.
    n = len(rest) - len(_IO_ERROR)
    half = rest[:n // 2]
    if n > 0 and n % 2 == 0 and rest == half + _IO_ERROR + half and half.startswith("/"):
        out.append(half)
    return out


def _now(path: str) -> str:
    """What the directory ``path`` that ripgrep was refused is now: gone;
    another user's that we cannot list (the rule of find's ``?``,
    ``prescan.find_argv``: not ours, no read or no search permission by
    ``access(2)``), which the command, running as us, can neither reopen nor
    write beneath unless its owner lets everyone; one to walk again, as it
    can be listed now; or refused (ours and still unlistable, not a
    directory, or unknown)."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        # Gone since ripgrep was refused it (a short-lived directory of
        # another user's: pip's, mkdtemp's): it holds nothing now, as an
        # entry that vanished during the walk (os error 2) holds nothing.
        return _GONE
    except OSError:
        return _REFUSED
    if not stat.S_ISDIR(st.st_mode):
        return _REFUSED
    if os.access(path, os.R_OK) and os.access(path, os.X_OK):
        return _AGAIN
    return _REFUSED if st.st_uid == os.geteuid() else _FOREIGN


# Directories walked again in one collection (``_rg_output``); past that, refused.
_AGAIN_MAX = 16


def _rg_output(proc: Spawned, root: str, unlistable: frozenset[str] | set[str], roots: tuple[str, ...],
               depth: int, budget: list[int]) -> list[bytes]:
    """ripgrep's output (``_prescan.rg_argv`` of ``roots``), then that of a
    walk again of each directory it was refused and can list now, each to
    the depth left beneath it; fails closed on any other walk error, and
    past ``budget[0]`` walks again in all."""
    try:
        rc, stdout, stderr = proc.collect(timeout=60)
    except TimeoutError as e:
        raise BuildError(f"ripgrep failed under {root}: {e}; cannot find protected files") from None
    harmful, again = _walk_errors(stderr, unlistable) if rc == 2 else (None, [])
    if again and len(again) > budget[0]:
        harmful = again[budget[0]][1]  # a tree that keeps changing under the walks
    if rc == 2 and harmful is None:
        rc = 0
    if rc not in (0, 1):  # 1 = nothing found
        # The line that decided it, not the first of many harmless ones.
        why = _shown(harmful) if harmful is not None else stderr.decode(errors="replace").strip()
        raise BuildError(f"ripgrep failed under {root} (exit {rc}): {why[:300]}")
    budget[0] -= len(again)
    out, under = [stdout], Nearest(roots)
    for d, ln in again:
        top = under.at_or_above(d)
        if top is None:
            raise BuildError(f"ripgrep failed under {root} (exit 2): {_shown(ln)[:300]}")
        left = depth - (0 if d == top else d[len(top):].strip("/").count("/") + 1)
        sub = _prescan.start_rg(proc.argv[0], d, left)
        out += _rg_output(sub, root, unlistable, (d,), left, budget)
    return out


def _shown(line: str) -> str:
    """A line of ripgrep's errors as said to the user: a name's bytes that
    are not UTF-8 as U+FFFD (the line is read with surrogateescape)."""
    return line.encode(errors="surrogateescape").decode(errors="replace")


def _rg_finish(proc: Spawned, root: str, unlistable: frozenset[str] | set[str] = frozenset(), *,
               roots: tuple[str, ...] | None = None, depth: int = defaults.DEFAULT_SEARCH_DEPTH) -> list[str]:
    """Protected files and directories under ``root`` (and the rest of
    ``roots``, walked by ``proc`` to ``depth``) found by ripgrep, as paths;
    ``unlistable``: the directories find could not list."""
    stdout = b"\n".join(_rg_output(proc, root, unlistable, roots or (root,), depth, [_AGAIN_MAX]))
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
            if parts[-2] == ".git" or is_git_dir(parent) or is_worktree_admin_dir(parent):
                found.add(parent)
    return sorted(found)


def is_git_dir(d: str) -> bool:
    """A repository's git dir whatever its name: HEAD, objects/ and refs/ (what
    git's own is_git_directory() checks), as a bare repo or the target of
    --separate-git-dir has them. .git/logs/HEAD and refs/remotes/*/HEAD do not."""
    return os.path.isdir(os.path.join(d, "objects")) and os.path.isdir(os.path.join(d, "refs"))


def is_worktree_admin_dir(d: str) -> bool:
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
    ``safebox.builder.deepwatch``), as paths; fails closed on any error but an entry
    that vanished. A directory we may not read is reported by find itself
    (``-readable``) and not entered, so a "Permission denied" here is one
    that changed under the walk: refused, never taken as harmless."""
    from safebox.builder import deepwatch

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
        return (_rg_finish(self.rg, root, frozenset((*unlistable, *foreign)), roots=self.roots, depth=self.depth),
                named, unlistable, base)


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
                if any(is_under(real, w) or is_under(tool, w) for w in self.write_roots):
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

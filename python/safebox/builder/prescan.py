"""The walks of the working directory, started before safebox is loaded.

ripgrep (about 2.4 ms here even on an empty tree: 1.5 ms of it is its own
start-up) and find are the longest step before bubblewrap can start, and
nothing about them depends on the policy in the common case: the working
directory is the default write root, searched to the default depth. So
``early`` starts them from the launcher, before ``safebox.cli`` and the rest
are imported; ``resolve.prestart`` adopts them when the policy's roots and
depth match, and whatever is not adopted is killed (``cancel_all``).

Imports only what the argv needs (``policy.defaults``, ``_record``).
"""

from __future__ import annotations

import os
import time

from safebox import _signals
from safebox._record import Spawned, path_outside, which
from safebox.errors import BuildError
from safebox.policy import defaults

# linux/time.h; the time module has no name for it on every Python we support.
_CLOCK_REALTIME_COARSE = 5

_started: dict[tuple[str, int], tuple[Spawned, Spawned]] = {}


def rg_argv(rg: str, root: str, depth: int, *, more: tuple[str, ...] = ()) -> list[str]:
    """ripgrep listing the protected files under ``root`` and ``more``
    roots (collected by ``resolve._rg_finish``)."""
    globs: list[str] = []
    for name in defaults.PROTECTED_FILES:
        globs += ["-g", f"**/{name}"]
    for d in defaults.PROTECTED_DIRS:
        globs += ["-g", f"**/{d}/**"]
    # Every HEAD: a repository's git dir need not be called .git (a bare
    # repo, `git init --separate-git-dir`, a linked worktree's admin dir).
    globs += ["-g", "**/HEAD", "-g", "**/.git"]
    # -j1: one walker thread measured faster here for small and large trees
    # alike (4.4 vs 6.0 ms on a small work tree, 65 vs 100 ms on /usr/share).
    return [rg, "--files", "--hidden", "--no-ignore", "--no-config", "-j1",
            "--max-depth", str(depth + 3), *globs, "--", root, *more]


def start_rg(rg: str, root: str, depth: int, *, more: tuple[str, ...] = ()) -> Spawned:
    """Start :func:`rg_argv`."""
    cmd = rg_argv(rg, root, depth, more=more)
    try:
        return Spawned(cmd)
    except OSError as e:
        raise BuildError(f"ripgrep failed under {root}: {e}; cannot find protected files") from None


def find_argv(find: str, root: str, *, more: tuple[str, ...] = ()) -> list[str]:
    """find(1) listing, under ``root`` and ``more`` roots, the symlinks
    and directories whose names begin with a dot (collected and narrowed to
    protected names by ``resolve._find_links_finish``), and for the watch at
    any depth (``safebox.builder.deepwatch``) every directory (``objects`` ones
    marked: git dirs are found by them) and every ``.envrc``.

    ripgrep lists files only: it never lists a symlink without ``--follow``
    (and following would walk wherever links point), nor an empty directory.
    So a dotfile manager's ``~/.bashrc -> dotfiles/bashrc``, a project's
    ``.vscode -> shared/vscode`` or an empty ``.vscode/`` went unprotected:
    writes through the link landed on the target, and files could be created
    in the empty directory (found in review). Cheap tests only: forty
    ``-name`` tests made find four times slower than the walk itself; a file
    meets one (``-name '.*'``) as before, the rest are for directories and
    dot files.

    It also lists, prefixed with ``!``, every directory we cannot list
    (no read or no search permission), and does not descend into it: neither
    walk can see the protected files in it, and the command, running as us,
    could make it listable again and write beneath it (found in review:
    ``chmod 0300 .`` in one run, ``chmod 755 .`` and a planted
    ``.git/hooks/pre-commit`` in the next). ``resolve`` keeps each one
    read-only for the run. One ``access(2)`` per directory. One of another
    user (``?PATH``: another user's private directory in ``/tmp``) is no
    such threat: the command cannot change its mode, nor write in it unless
    that user lets everyone, and it is only skipped.

    No ``-maxdepth``: the watch covers every depth (issue 22), so the walk
    goes as deep as the tree; the dot names for the read-only binds are
    kept to ``depth + 3`` by the caller. Records end in NUL; a directory is
    its path alone, anything else ``PATH//KIND`` (no path find prints holds
    ``//``), with ``DEV.INO`` after the kind where the watch needs it.
    """
    # A root that begins with "-" or is "(" would read as an expression: every
    # root is absolute, so none can. Every path printed begins with the root,
    # so with "/": a leading "!" cannot be part of one.
    return [find, root, *more, "-mindepth", "1",
            "-type", "d", "(", "!", "-readable", "-o", "!", "-executable", ")",
            "(", "-uid", str(os.geteuid()), "-printf", "!%p\\0", "-o", "-printf", "?%p\\0", ")", "-prune",
            "-o", "(", "-type", "d", "(", "-name", ".*", "-printf", "%p//d\\0",
            "-o", "-name", "objects", "-printf", "%p//o\\0", "-o", "-printf", "%p\\0", ")", ")",
            "-o", "(", "-name", ".*", "(", "-type", "l", "-printf", "%p//l%D.%i\\0",
            "-o", "-name", ".envrc", "-printf", "%p//e%D.%i\\0", ")", ")"]


def start_find(find: str, root: str, *, more: tuple[str, ...] = ()) -> Spawned:
    """Start :func:`find_argv`; ``since_ns`` on the returned walk: the file
    clock before the walk began (what the watch compares directory ctimes
    with)."""
    cmd = find_argv(find, root, more=more)
    # The coarse clock is the one file times are taken from: a change made
    # after this line has a ctime at or after it (the watch also allows for
    # filesystems with coarser times).
    since = time.clock_gettime_ns(_CLOCK_REALTIME_COARSE)
    try:
        # LC_ALL=C: the error lines are matched in resolve._find_links_finish.
        proc = Spawned(cmd, env={**os.environ, "LC_ALL": "C"}, memfd_out=True)
    except OSError as e:
        raise BuildError(f"find failed under {root}: {e}; cannot find protected symlinks") from None
    proc.since_ns = since
    return proc


def start_walks(rg: str, find: str, root: str, depth: int, *, more: tuple[str, ...] = ()
                ) -> tuple[Spawned, Spawned]:
    """The ripgrep and find walks of ``root`` (and ``more`` roots): those of
    a single root replayed from ``walkcache`` when nothing under it changed
    since they last ran, else started (and kept for the next start)."""
    if more:
        walk = start_rg(rg, root, depth, more=more)
        try:
            return walk, start_find(find, root, more=more)
        except BaseException:
            walk.cancel()
            raise
    from safebox.builder import walkcache

    argvs = (rg_argv(rg, root, depth), find_argv(find, root))
    walks = walkcache.start(root, depth, argvs, (lambda: start_rg(rg, root, depth), lambda: start_find(find, root)))
    return walks  # type: ignore[return-value]  # the part of Spawned that resolve uses


def safe_tool(name: str) -> str | None:
    """``name`` from $PATH before the policy is known: not from the working
    directory, the home directory or a temporary directory, the usual write
    roots (the runner checks again against the real ones)."""
    untrusted = (os.getcwd(), os.path.expanduser("~"), "/tmp", "/var/tmp", "/dev/shm", os.environ.get("TMPDIR") or "/tmp")
    return which(name, path_outside(untrusted))


def early(argv: list[str]) -> None:
    """Start the walks of the working directory if ``argv`` (without the
    program name) is a real ``exec``; idempotent, and never fails: any
    problem is left for the runner to meet and report."""
    if _started or not argv or argv[0] != "exec":
        return
    # Before the walks exist: from here on a signal is recorded, never the
    # default action half-way through a start-up (_signals).
    _signals.catch()
    options = argv[1:argv.index("--")] if "--" in argv else argv[1:]
    if "--dry-run" in options:
        return
    if any(o in ("-C", "--chdir") or o.startswith("--chdir=") for o in options):
        return  # the work dir is another directory: the runner walks that one
    rg, find = safe_tool("rg"), safe_tool("find")
    if rg is None or find is None:
        return
    try:
        cwd = os.path.realpath(os.getcwd())
        depth = defaults.DEFAULT_SEARCH_DEPTH
        _started[(cwd, depth)] = start_walks(rg, find, cwd, depth)
    except Exception:  # noqa: BLE001 -- an optimisation only
        return


def take(root: str, depth: int) -> tuple[Spawned, Spawned] | None:
    """The walks ``early`` started for ``root`` at ``depth``; the caller owns them."""
    return _started.pop((root, depth), None)


def cancel_all() -> None:
    """Kill and reap every walk nobody took."""
    while _started:
        _, (rg, find) = _started.popitem()
        rg.cancel()
        find.cancel()

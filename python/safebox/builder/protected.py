"""The mandatory-protected paths beneath the write roots (dotfiles, editor
and git config, git hooks: policy/defaults.py), from the walks' answers:
existing ones read-only, missing ones watched, git dirs sealed or pinned;
and the checks that keep a protection from being shed (a second name by
hard link, a renamed parent)."""

from __future__ import annotations

import os
import stat

from safebox._record import Frozen, listdir_as_owner, realpath_cached
from safebox.builder.gitpaths import git_config_paths
from safebox.builder.paths import Nearest, by_depth, parent_dir
from safebox.builder.regions import Regions
from safebox.builder.walks import RootScan, is_worktree_admin_dir
from safebox.errors import BuildError
from safebox.policy import defaults

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from safebox.builder.deepwatch import Baseline


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
    # The watch at any depth: what the start walk saw (safebox.builder.deepwatch).
    deep: Baseline | None = None
    # Directories in a write root that we cannot list (no read or search
    # permission): whatever is protected in them cannot be found, so each is
    # read-only for the whole run (walks.unlistable_message says why).
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


def config_in_roots(home: str, roots: Nearest, regions: Regions) -> tuple[list[str], list[str]]:
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
    deep, unlistable = _collect(f, scans, write_roots)
    f.git_entries()
    f.admin_entries()
    existing, missing, gits, admins, links = f.existing, f.missing, f.gits, f.admins, f.links
    # What the git configs name: hooks directories (core.hooksPath) and
    # included config files, existing or not yet.
    git_config_paths(gits, f.dotgit_files, write_roots, home, existing=existing, missing=missing, links=links)
    # A git directory is bound onto itself read-write (git still works): a
    # mount point cannot be renamed, so `mv .git .git-old` cannot shed the
    # protection of the entries below it.
    git_dirs = sorted(p for p in gits if os.path.isdir(p) and not os.path.islink(p))
    refuse_hard_links(sorted(existing - set(git_dirs)))
    # Watched names are recorded with their parents resolved now (a dotfile
    # manager's ~/.config -> dotfiles/config is legitimate): after the run a
    # parent that resolves elsewhere was replaced by the command, and the
    # quarantine refuses to follow it (runner.quarantine).
    missing = _with_parents_resolved(missing)
    seen = {("git", g) for g in gits if os.path.basename(g) != ".git"} | {("admin", a) for a in admins}
    return Protected(existing=sorted(existing - set(git_dirs)), missing=sorted(missing - existing),
                     known=sorted(seen), tops=f.tops, unlistable=sorted({*unlistable, *f.blind}),
                     deep=deep.without_git_config() if deep is not None and allow_git_config else deep,
                     sealed=f.sealed, git_dirs=git_dirs, links=sorted(links.items()))


def _collect(f: _Finds, scans: dict[str, RootScan], write_roots: list[str]) -> tuple[Baseline | None, list[str]]:
    """Give ``f`` what the walks of each write root found; (the baseline of
    the watch at any depth, the directories the walks could not list)."""
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
    return deep, unlistable


def _with_parents_resolved(missing: set[str]) -> set[str]:
    """``missing`` with each path's parent resolved (one realpath per parent)."""
    parents: dict[str, str] = {}  # the same few parents (each root, its .git) recur
    for m in missing:
        d = parent_dir(m)
        if d not in parents:
            parents[d] = realpath_cached(d)
    return {(parents[d] if parents[d] != "/" else "") + m[len(d):]
            for m in missing for d in (parent_dir(m),)}


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
                if is_worktree_admin_dir(p):
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

"""What git's configs name beneath the write roots: ``core.hooksPath``
directories and included config files, protected like ``.git/hooks``. The
configs are those git would read: system, global, and every repository's
found beneath or enclosing a write root (builder/gitconfig.py parses them)."""

from __future__ import annotations

import os

from safebox._record import read_small
from safebox.builder.paths import Nearest, is_under
from safebox.errors import BuildError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping



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


def git_config_paths(gits: set[str], dotgit_files: set[str], write_roots: list[str], home: str, *,
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
        held = [w for w in write_roots if is_under(w, real)]
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

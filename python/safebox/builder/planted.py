"""Symlinks a sandboxed command could have planted on the way to a write
root (refused), and the caller's PATH directories inside write roots
(protected like dotfiles): issue 11."""

from __future__ import annotations

import os
import time

from safebox._record import Frozen
from safebox.builder.paths import Nearest, is_under
from safebox.builder.resolved import Layers
from safebox.errors import BuildError
from safebox.policy.effective import EffectivePolicy


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

    walks = [(w, w) for w in entries if w != cwd]
    if pwd and pwd.startswith("/") and pwd != cwd and os.path.realpath(pwd) == cwd:
        walks.append((cwd, pwd))
    for w, name in walks:
        for link, target in links_on_the_way(name):
            reason = _planted_by_a_run(link, now, earlier)
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


def _planted_by_a_run(link: str, now: set[str], earlier: dict[str, float]) -> str | None:
    """Why a sandboxed command could have made ``link`` (rules 1 and 2 of
    ``refuse_planted_links``), or None: it is the user's."""
    parent = os.path.dirname(link)
    for r in now:
        if r != "/" and is_under(parent, r):
            return f"in {r}, a write root of this run"
    for r, since in earlier.items():
        if r != "/" and is_under(parent, r):
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

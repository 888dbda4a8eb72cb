"""The Landlock rules of a run, as (class, path). Under bubblewrap a second
wall for writes; on a helper-only host the only wall, so every denied
path is walked around (docs/layers.md). The device nodes a command may
open are decided here too."""

from __future__ import annotations

import os

from safebox.builder.paths import Nearest, ancestors, is_under, parent_dir
from safebox.builder.regions import Regions
from safebox.builder.resolved import Layers
from safebox.errors import BuildError

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
    budget = [LANDLOCK_MAX_RULES]  # shared by every walk of this policy

    def grant(access: str, top: str, leave_out: list[str]) -> list[tuple[str, str]]:
        return _grant(access, top, leave_out, denied=denied, budget=budget, mask_dirs=mask_dirs, mask_files=mask_files)

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
            own = [x for x in inside.get(root, ()) if x != top and is_under(x, top)]
            rules += grant("write", top, [*regions.denies_in(top), *own])
    return rules


def _grant(access: str, top: str, leave_out: list[str], *, denied: list[str], budget: list[int],
           mask_dirs: list[str], mask_files: list[str]) -> list[tuple[str, str]]:
    """``access`` on ``top`` but ``leave_out`` (one walk of ``landlock_rules``)."""
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
            f"{len({parent_dir(d) for d in denied})} directories",
            hint="deny whole directories rather than the files in them (`**/secrets/**`), fewer glob "
                 "matches, or run where bubblewrap works (`safebox doctor`)") from None


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

"""A missing ``allowWrite`` path the user asked for is created, or refused.

Never skipped: a CI step that says ``--allow-write ~/.cache/foo`` on a fresh
runner, where the directory does not exist yet, would otherwise run with a
sandbox that refuses the writes it was told to allow, and say so only with
``-v`` (issue 14).

A missing path is created as a directory (mode 0777 less the umask, as
``mkdir`` does) when all of these hold, and refused with exit 125 otherwise:

1. its parent exists (one level is created, never a chain: a typo such as
   ``~/projcts/x`` must not grow a tree);
2. the parent, with symlinks resolved, is writable by the user;
3. the new directory lies outside the system locations (``/`` itself,
   ``/usr``, ``/etc``, ``/boot``, ``/proc``, ``/sys``, ``/dev``, ``/run``,
   the ``/lib*``, ``/bin`` and ``/sbin`` trees, ``/var/lib``, ``/var/log``,
   ``/var/cache``, ``/var/spool``, ``/snap``), where as root everything is
   writable and nothing should appear by accident;
4. it lies outside every ``denyRead`` path and safebox's own state and
   config dirs;
5. no component of it is a protected name (``.git``, ``.bashrc``,
   ``.vscode``, ``.config/git``, …: docs/policy-reference.md), which a write
   root must never be.
"""

from __future__ import annotations

import os

from safebox.errors import BuildError
from safebox.policy import defaults

#: Where a missing write root is never created (rule 3).
SYSTEM_DIRS = ("/usr", "/etc", "/boot", "/proc", "/sys", "/dev", "/run", "/bin", "/sbin", "/lib", "/lib32",
               "/lib64", "/libx32", "/var/lib", "/var/log", "/var/cache", "/var/spool", "/snap")


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _protected_component(path: str) -> str | None:
    """The protected name ``path`` passes through, if any (rule 5)."""
    parts = path.strip("/").split("/")
    names = set(defaults.PROTECTED_FILES) | {".git"}
    for i, part in enumerate(parts):
        if part in names:
            return part
        for d in defaults.PROTECTED_DIRS:
            dparts = d.split("/")
            if parts[i:i + len(dparts)] == dparts:
                return d
    return None


def _refuse(path: str, why: str, hint: str | None = None) -> BuildError:
    return BuildError(f"--allow-write/filesystem.allowWrite {path} does not exist and {why}",
                      hint=hint or "create it yourself if it is meant, or correct the path")


def create_missing(paths: tuple[str, ...], *, skip: tuple[str, ...], never_under: tuple[str, ...],
                   dry_run: bool, deny_read: tuple[str, ...] = (), allow_read: tuple[str, ...] = ()) -> list[str]:
    """Create each missing path of ``paths`` (absolute, normalised) or raise
    BuildError naming it. ``skip``: paths that need no host directory (the
    private /tmp); ``never_under``: safebox's own dirs; ``deny_read`` minus
    what ``allow_read`` re-allows (builder/regions.py): the unreadable paths.
    Returns one message per directory created (or, with ``dry_run``, that
    would be)."""
    out: list[str] = []
    for w in paths:
        if w in skip or os.path.lexists(w):
            if os.path.islink(w) and not os.path.exists(w):
                raise _refuse(w, f"is a dangling symlink (to {os.readlink(w)})")
            continue
        parent = os.path.dirname(w)
        if not os.path.isdir(parent):
            raise _refuse(w, f"neither does its parent {parent}; safebox creates one directory, not a chain",
                          hint=f"mkdir -p {w}")
        target = os.path.join(os.path.realpath(parent), os.path.basename(w))
        if os.path.dirname(target) == "/" or any(_under(target, s) for s in SYSTEM_DIRS):
            raise _refuse(w, "lies in a system location, where safebox creates nothing")
        name = _protected_component(target) or _protected_component(w)
        if name is not None:
            raise _refuse(w, f"passes through the protected name {name}, which is never a write root")
        for d in never_under:
            if _under(target, d) or _under(target, os.path.realpath(d)):
                raise _refuse(w, f"lies inside {d}, which the sandbox may not write (safebox's own)")
        if deny_read:
            from safebox.builder.regions import Regions

            regions = Regions(deny_read, allow_read)
            denied = regions.deny_over(w) or regions.deny_over(target)
            if denied is not None:
                raise _refuse(w, f"lies inside {denied}, which the sandbox may not read (denyRead)",
                              hint="re-allow it with filesystem.allowRead, or correct the path")
        if not os.access(os.path.dirname(target), os.W_OK):
            raise _refuse(w, f"its parent {parent} is not writable by you")
        if not dry_run:
            try:
                os.mkdir(target)
            except FileExistsError:
                pass  # created meanwhile: as good
            except OSError as e:
                raise _refuse(w, f"cannot be created: {e.strerror}") from None
        out.append(f"{'would create' if dry_run else 'created'} the missing write root {w} (--allow-write)")
    return out

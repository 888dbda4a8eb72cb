"""Facts read from the host before the plan is made: the caller's home,
tools found outside the write roots, the mount table, and the checks on the
work dir. Everything the pure :mod:`safebox.run.plan` needs comes from here
or from ``builder.resolve``.
"""

from __future__ import annotations

import os

from safebox._record import which
from safebox.builder.resolved import Layers, ResolvedPolicy
from safebox.errors import BuildError, PolicyError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from safebox.builder.bulk import BulkPlan
    from safebox.policy.effective import EffectivePolicy


def home(environ: Mapping[str, str]) -> str:
    """``$HOME`` when it is absolute, else the password database's."""
    value = environ.get("HOME")
    if not value or not value.startswith("/"):
        import pwd

        value = pwd.getpwuid(os.getuid()).pw_dir
    return os.path.normpath(value)


def tool(name: str, tools_path: str) -> str | None:
    """``name`` from ``tools_path`` ($PATH outside the write roots). Raises
    BuildError when the only one on $PATH lies in a write root: running it
    would run whatever the command left there; None when there is none."""
    found = which(name, tools_path)
    if found is None:
        elsewhere = which(name)
        if elsewhere is not None:
            raise BuildError(f"{name} is on PATH only at {elsewhere}, inside a write root: a sandboxed "
                             "command could have replaced it, and safebox runs it outside the sandbox",
                             hint=f"install {name} outside the write roots, or take that directory off PATH")
    return found


def host_mount_points() -> frozenset[str]:
    """Every mount point of this mount namespace (``/proc/self/mountinfo``,
    field 5, octal escapes decoded)."""
    try:
        with open("/proc/self/mountinfo", "rb") as f:
            lines = f.read().split(b"\n")
    except OSError as e:
        raise BuildError(f"cannot read /proc/self/mountinfo ({e.strerror}); cannot place the write roots") from None
    out = set()
    for line in lines:
        fields = line.split(b" ", 5)
        if len(fields) > 4:
            raw = fields[4]
            if b"\\" in raw:  # space, tab, newline and backslash come as \ooo
                parts = raw.split(b"\\")
                raw = parts[0] + b"".join(bytes([int(x[:3], 8)]) + x[3:] for x in parts[1:])
            out.add(os.fsdecode(raw))
    return frozenset(out)


def bulk_plan(rp: ResolvedPolicy, bwrap: str) -> tuple[ResolvedPolicy, BulkPlan]:
    """(what bubblewrap mounts, what safebox mounts after it): a big policy's
    entries, and the masks of the host's unix sockets (builder/bulk.py
    ``split_sockets``: one gone since the listing is skipped there, where
    bubblewrap failed the start), go to ``safebox.run.mounter`` when this
    host allows it (a setuid bubblewrap's namespaces are root's;
    ``mount_setattr`` needs Linux 5.12; the helper must be there to make
    them). Otherwise, and for every small policy without such masks,
    bubblewrap makes them all."""
    import stat

    from safebox.builder.bulk import BULK_MIN, BulkPlan, split, split_sockets

    movable = (len(rp.write_roots) + len(rp.pinned_dirs) + len(rp.read_only) + len(rp.mask_dirs)
               + len(rp.mask_files) - len(rp.socket_masks))
    if (movable < BULK_MIN and not rp.socket_masks) or rp.layers is Layers.HELPER_ONLY:
        return rp, BulkPlan()
    try:
        if os.stat(bwrap).st_mode & stat.S_ISUID:
            return rp, BulkPlan()
    except OSError:
        return rp, BulkPlan()  # spawning it will say why
    from safebox.run import mounter

    # The mounts are the helper's --mount (run/mounter.py), run outside the
    # sandbox as safebox itself is: with --without helper too, the binary
    # is as trusted as safebox's own Python beside it. Without one that
    # can run, bubblewrap makes every mount (slower, enforced all the same;
    # a host socket gone before its mount fails the start, exit 125).
    if not mounter.supported() or not (rp.helper_path and os.access(rp.helper_path, os.X_OK)):
        return rp, BulkPlan()
    rest, sockets = split_sockets(rp)
    mounts, plan = (split(rest, host_mounts=host_mount_points() if len(rp.write_roots) > 1 else frozenset())
                    if movable >= BULK_MIN else (rest, BulkPlan()))
    if sockets:
        # After every other mount: see split_sockets.
        plan = BulkPlan(ops=(*plan.ops, *sockets), scratch=rp.run_dir, empty=rp.empty_file)
    return mounts, plan


def check_write_roots(policy: EffectivePolicy, *, cwd: str, home: str) -> tuple[str, ...]:
    """Refuse a write root of ``/`` by the flag or key that asked for it;
    return the warnings (said on every run, not only with -v, once the
    sandbox is built) for each write root that makes a whole system tree,
    ``$HOME`` or a directory above it writable (system_dirs.whole_tree): the
    work dir, and each ``allowWrite`` entry (issue 22 item 6:
    ``--allow-write /etc`` was silent where a work dir of ``/etc`` was not).
    Runs before any tool is looked up: a write root of ``/`` holds every
    tool, and the refusal would otherwise speak of bwrap's location (issue 11
    item 12)."""
    from safebox.policy.system_dirs import whole_tree

    for w in policy.allow_write:
        if os.path.realpath(w) != "/":
            continue
        via = "" if w == "/" else " (it resolves to /)"
        if w == cwd:
            raise PolicyError(f"the work dir {w}{via} is a write root (the built-in filesystem.allowWrite entry "
                              "`.`): `/` is refused: it would make the whole host writable",
                              hint="cd into a project directory first")
        raise PolicyError(f"{policy.entry('filesystem.allowWrite', w)}{via}: `/` is refused: it would make "
                          "the whole host writable", hint="allow only the directories the command writes")
    warnings = []
    what = whole_tree(cwd, home=home)
    if what is not None:
        warnings.append(f"warning: the work dir {cwd} is {what}, and the work dir is writable: all of {cwd} is "
                        "writable inside but for the protected and denied paths; run from a project directory to "
                        "narrow it")
    for w in dict.fromkeys(policy.allow_write):
        if w in (cwd, "/tmp"):
            # The work dir is said above. /tmp is the sandbox's own private
            # one (or, without bubblewrap, the host's, writable by every
            # user anyway): a home under it (a test's, a CI job's) is no
            # reason to speak on every run.
            continue
        real = os.path.realpath(w)
        what = whole_tree(w, home=home) or whole_tree(real, home=home)
        if what is not None:
            via = "" if real == w else f" (it resolves to {real})"
            warnings.append(f"warning: {policy.entry('filesystem.allowWrite', w)}{via} is {what}: all of {w} is "
                            "writable inside but for the protected and denied paths; allow only the directories "
                            "the command writes")
    return tuple(warnings)


def hidden_tmp_hint(command: tuple[str, ...], rp: ResolvedPolicy) -> str | None:
    """One hint when the command named a path under the host's /tmp that
    exists there but is hidden by the sandbox's private /tmp (and was not
    bound in): ``safebox exec -- cat /tmp/foo`` fails with ENOENT otherwise
    unexplained. ``--opt=/tmp/x`` counts too."""
    for arg in command[1:]:
        at = arg.find("/tmp/")
        if at != 0 and not (at > 0 and arg[at - 1] == "="):
            continue
        path = os.path.normpath(arg[at:])
        if not path.startswith("/tmp/") or not os.path.lexists(path):
            continue
        if any(path == b or path.startswith(b + "/") for b in (*rp.write_roots, *rp.socket_binds)):
            continue
        return (f"hint: {path} exists on the host, but the sandbox has a private /tmp that hides it; "
                f"use --allow-write {path} to bind it in, or a path outside /tmp")
    return None


__all__ = ["bulk_plan", "check_write_roots", "hidden_tmp_hint", "home", "host_mount_points", "tool"]

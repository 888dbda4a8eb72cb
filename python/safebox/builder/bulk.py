"""Pure: which mounts of a big policy safebox makes itself instead of bubblewrap.

bubblewrap re-reads ``/proc/self/mountinfo`` after every bind and remount it
makes (``bind_mount`` → ``parse_mountinfo`` in its bind-mount.c), so N deny
entries cost N reads of a table that grows to N lines: 200 ``denyWrite``
directories took 0.38 s, 2,000 took 8.5 s. Above :data:`BULK_MIN` movable
mounts, bubblewrap keeps the fixed skeleton (``/``, ``/dev``, ``/proc``, the
private ``/tmp``, whatever must come from the host's view or after the masks)
and ``safebox.run.mounter`` makes the rest inside the sandbox's mount namespace
before the command starts, one ``mount(2)`` or two per entry (docs/layers.md,
"Big policies"). Small policies are left entirely to bubblewrap.

The mounter runs after every bubblewrap mount, so an entry moves only when
that changes nothing:

* its path inside the sandbox is its host path: not under the private
  ``/tmp`` unless a write root bound from the host is in between, and not
  under ``/dev`` or ``/proc`` (bubblewrap's own);
* it is not the working directory or above it: bubblewrap has already
  ``chdir``-ed the command there, and a mount over its directory would not
  be seen through it;
* a read-only or masked entry holds none of what bubblewrap mounts after the
  masks (allowed sockets, the run dir, the helper under ``/tmp``, the
  ``--publish`` dir, the ``allowRead`` carve-outs), which must stay on top;
* a write root holds no host mount point (bubblewrap binds it from the host,
  where such a mount keeps its own flags; the sandbox's view of it is
  read-only);
* a write root holds nothing bubblewrap keeps: no read-only entry, mask or
  pin that stays, no sealed ``.git``, preset cache or overlay, not the run
  dir (the mounter's scratch). Moved, it would be bound after them: over a
  read-only bind at its own path, made writable, or hiding the run dir's
  (issue 22: the state dir became writable). So read-only self-protection
  always comes after every write bind, in both mount paths.

Everything else commutes: a mount made later that lies above one bubblewrap
made is a recursive bind of the sandbox's current view and carries it along
(read-only stays read-only; a mask stays a mask).
"""

from __future__ import annotations

from safebox._record import Frozen, StrEnum
from safebox.builder.paths import Nearest, ancestors, parent_dir
from safebox.builder.resolved import Layers, ResolvedPolicy

#: Below this many movable mounts bubblewrap makes them all: its cost per
#: mount is small while the mount table is short, and the mounter's fork and
#: handshake cost a few milliseconds.
BULK_MIN = 64

#: Never moved: bubblewrap's own mounts live there.
_BWRAP_OWN = ("/dev", "/proc")


class BulkOp(StrEnum):
    """What the mounter does with one path (bubblewrap's equivalent in brackets)."""

    WRITE = "write"  # a write root, read-write (--bind W W)
    PIN = "pin"  # a directory bound onto itself so it cannot be renamed (--bind P P)
    READ_ONLY = "read-only"  # recursively read-only (--ro-bind R R)
    MASK_DIR = "mask-dir"  # an empty read-only tmpfs (--tmpfs D, --remount-ro D)
    MASK_FILE = "mask-file"  # /dev/null, read-only (--ro-bind /dev/null F)


class BulkPlan(Frozen):
    """The mounts safebox makes in the sandbox, in this order."""

    ops: tuple[tuple[BulkOp, str], ...] = ()
    # Where the mounter attaches its snapshot of the sandbox's tree while it
    # works (the run dir: nothing is mounted beneath it).
    scratch: str = ""
    # What masks a file (ResolvedPolicy.empty_file).
    empty: str = ""


def _at_or_above(paths: list[str]) -> set[str]:
    """Every path of ``paths`` and every directory above one: each
    directory walked once, however many entries share it."""
    out: set[str] = set()
    for p in paths:
        while p not in out:
            out.add(p)
            if p == "/":
                break
            p = parent_dir(p)
    return out


def split(rp: ResolvedPolicy, *, host_mounts: frozenset[str] | set[str] = frozenset(),
          minimum: int = BULK_MIN) -> tuple[ResolvedPolicy, BulkPlan]:
    """(what bubblewrap still mounts, what the mounter mounts after it).

    ``host_mounts``: the host's mount points (``/proc/self/mountinfo``); a
    write root at or above one stays with bubblewrap. With fewer than
    ``minimum`` movable entries, or without bubblewrap, nothing moves."""
    if rp.layers is Layers.HELPER_ONLY or not rp.run_dir:
        return rp, BulkPlan()
    tmp_prefixes = tuple(t.rstrip("/") + "/" for t in rp.private_tmp)
    own_prefixes = tuple(d + "/" for d in _BWRAP_OWN)

    def in_tmp(p: str) -> bool:
        return p.startswith(tmp_prefixes) or p in rp.private_tmp

    # A write root inside another is bound with it (binds are recursive); the
    # protected paths between them are pinned on their own.
    roots = Nearest(rp.write_roots)
    outer = [w for w in rp.write_roots if roots.above(w) is None]
    host_held = {a for m in host_mounts for a in ancestors(m)}
    # The carve-outs too (allowRead inside a denied directory, and the helper
    # when a mask hides it): bubblewrap binds each back over its mask, so a
    # mask or read-only bind that holds one must be made before it, by
    # bubblewrap, not after it by the mounter (which would hide it again).
    # The presets' cache leaves too: bubblewrap binds them read-write after
    # the read-only re-binds, and the mounter's read-only copy would take
    # that back.
    late = tuple(p for p in (*rp.socket_binds, rp.run_dir, rp.publish_dir,
                             *(h for h in (rp.helper_path,) if h and in_tmp(h)),
                             *(c for c, _ in rp.carve_outs), *rp.cache_dirs) if p)
    holds_late = {a for p in late for a in ancestors(p)}
    above_cwd = set(ancestors(rp.cwd)) if rp.cwd else set()
    # Write roots bubblewrap binds from the host: what lies beneath them is
    # visible at its host path even under the private /tmp.
    host_bound = Nearest(w for w in outer if in_tmp(w))

    def visible(p: str) -> bool:
        return (not (p.startswith(own_prefixes) or p in _BWRAP_OWN)
                and (not in_tmp(p) or host_bound.at_or_above(p) is not None))

    def movable(p: str) -> bool:
        return visible(p) and p not in above_cwd

    pins = [p for p in rp.pinned_dirs if movable(p)]
    ro = [p for p in rp.read_only if movable(p) and p not in holds_late]
    mdirs = [d for d in rp.mask_dirs if movable(d) and d not in holds_late]
    mfiles = [f for f in rp.mask_files if movable(f) and f not in holds_late]
    # A write root moves only when bubblewrap keeps nothing at or beneath
    # it. The mounter binds it after every mount of bubblewrap's, so one
    # that held a read-only bind bubblewrap kept (the state dir, which holds
    # the run dir) would land on top of it and be made writable, and one
    # above the run dir would hide the run dir's read-only bind (issue 22).
    # Kept with bubblewrap, the root is bound before everything beneath it:
    # read-only self-protection always comes after every write bind.
    gone = {*pins, *ro, *mdirs, *mfiles}
    kept = [*late, *(p for p in (*rp.pinned_dirs, *rp.read_only, *rp.mask_dirs, *rp.mask_files) if p not in gone),
            *(p for d, kids in rp.sealed_dirs for p in (d, *kids)), *(real for real, _ in rp.masked_files),
            *(f for _, f in rp.overlays)]
    holds_kept = _at_or_above(kept)
    moved_roots = [w for w in outer if movable(w) and not in_tmp(w) and w not in host_held
                   and w not in holds_kept]
    if len(moved_roots) + len(pins) + len(ro) + len(mdirs) + len(mfiles) < minimum:
        return rp, BulkPlan()
    ops: list[tuple[BulkOp, str]] = []
    # bwrap's order (builder/bwrap.py): write roots, pins shallow first, then
    # read-only re-binds, then masks. The write roots moved are outermost (a
    # root inside another is dropped above, and pins lie inside roots), so
    # all of them can come first: the mounter binds the rest from a copy of
    # the tree that already has them (a pin inside one is read-write).
    ops += [(BulkOp.WRITE, w) for w in sorted(moved_roots, key=lambda p: (p.count("/"), p))]
    ops += [(BulkOp.PIN, p) for p in sorted(pins, key=lambda p: (p.count("/"), p))]
    ops += [(BulkOp.READ_ONLY, p) for p in ro]
    ops += [(BulkOp.MASK_DIR, d) for d in mdirs]
    ops += [(BulkOp.MASK_FILE, f) for f in mfiles]

    def rest(items: tuple[str, ...], gone: list[str]) -> tuple[str, ...]:
        drop = set(gone)
        return tuple(p for p in items if p not in drop)

    kept_roots = set(outer) - set(moved_roots)
    left = rp.replace(write_roots=tuple(w for w in rp.write_roots if w in kept_roots),
                      pinned_dirs=rest(rp.pinned_dirs, pins), read_only=rest(rp.read_only, ro),
                      mask_dirs=rest(rp.mask_dirs, mdirs), mask_files=rest(rp.mask_files, mfiles))
    return left, BulkPlan(ops=tuple(ops), scratch=rp.run_dir, empty=rp.empty_file)


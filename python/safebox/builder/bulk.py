"""Pure: which mounts of a big policy safebox makes itself instead of bubblewrap.

bubblewrap re-reads ``/proc/self/mountinfo`` after every bind and remount it
makes (``bind_mount`` → ``parse_mountinfo`` in its bind-mount.c), so N deny
entries cost N reads of a table that grows to N lines: 200 ``denyWrite``
directories took 0.38 s, 2,000 took 8.5 s. Above :data:`BULK_MIN` movable
mounts, bubblewrap keeps the fixed skeleton (``/``, ``/dev``, ``/proc``, the
private ``/tmp``, whatever must come from the host's view or after the masks)
and ``safebox.run.mounter`` makes the rest inside the sandbox's mount namespace
before the command starts, one ``mount(2)`` or two per entry (docs/layers.md,
"Big policies"). Small policies are left entirely to bubblewrap, but for the
masks of the host's unix sockets, which the mounter makes in every policy
(``split_sockets``: one may be gone since it was listed).

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
_BWRAP_OWN_PREFIXES = tuple(d + "/" for d in _BWRAP_OWN)


class BulkOp(StrEnum):
    """What the mounter does with one path (bubblewrap's equivalent in brackets)."""

    WRITE = "write"  # a write root, read-write (--bind W W)
    PIN = "pin"  # a directory bound onto itself so it cannot be renamed (--bind P P)
    READ_ONLY = "read-only"  # recursively read-only (--ro-bind R R)
    MASK_DIR = "mask-dir"  # an empty read-only tmpfs (--tmpfs D, --remount-ro D)
    MASK_FILE = "mask-file"  # /dev/null, read-only (--ro-bind /dev/null F)
    # A host unix socket, as MASK_FILE, skipped when its path is gone (see split_sockets).
    MASK_SOCKET = "mask-socket"


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


class _View:
    """Where a path lies in the sandbox's view, as far as moving its mount goes."""

    def __init__(self, rp: ResolvedPolicy, outer: list[str]) -> None:
        self.private_tmp = rp.private_tmp
        self.tmp_prefixes = tuple(t.rstrip("/") + "/" for t in rp.private_tmp)
        self.above_cwd = set(ancestors(rp.cwd)) if rp.cwd else set()
        # Write roots bubblewrap binds from the host: what lies beneath them is
        # visible at its host path even under the private /tmp.
        self.host_bound = Nearest(w for w in outer if self.in_tmp(w))

    def in_tmp(self, p: str) -> bool:
        return p.startswith(self.tmp_prefixes) or p in self.private_tmp

    def visible(self, p: str) -> bool:
        """At its host path inside the sandbox, and not in bubblewrap's own /dev or /proc."""
        return (not (p.startswith(_BWRAP_OWN_PREFIXES) or p in _BWRAP_OWN)
                and (not self.in_tmp(p) or self.host_bound.at_or_above(p) is not None))

    def movable(self, p: str) -> bool:
        """Visible, and not the working directory or above it."""
        return self.visible(p) and p not in self.above_cwd


class _Moved(Frozen):
    """The read-only entries, masks and pins the mounter makes."""

    pins: list[str]
    read_only: list[str]
    mask_dirs: list[str]
    mask_files: list[str]


def split(rp: ResolvedPolicy, *, host_mounts: frozenset[str] | set[str] = frozenset(),
          minimum: int = BULK_MIN) -> tuple[ResolvedPolicy, BulkPlan]:
    """(what bubblewrap still mounts, what the mounter mounts after it).

    ``host_mounts``: the host's mount points (``/proc/self/mountinfo``); a
    write root at or above one stays with bubblewrap. With fewer than
    ``minimum`` movable entries, or without bubblewrap, nothing moves."""
    if rp.layers is Layers.HELPER_ONLY or not rp.run_dir:
        return rp, BulkPlan()
    # 1. The outermost write roots: one inside another is bound with it
    #    (binds are recursive); the protected paths between them are pinned
    #    on their own.
    roots = Nearest(rp.write_roots)
    outer = [w for w in rp.write_roots if roots.above(w) is None]
    view = _View(rp, outer)
    # 2. What bubblewrap mounts after the masks, and must stay on top.
    late = _late_mounts(rp, view)
    # 3. The read-only entries, masks and pins that move.
    moved = _movable_entries(rp, view, late)
    # 4. The write roots that move.
    moved_roots = _movable_roots(rp, view, outer, late, moved, host_mounts)
    n = len(moved_roots) + len(moved.pins) + len(moved.read_only) + len(moved.mask_dirs) + len(moved.mask_files)
    if n < minimum:
        return rp, BulkPlan()
    # 5. The mounter's mounts, in bubblewrap's order, and what bubblewrap keeps.
    plan = BulkPlan(ops=_ops(moved_roots, moved), scratch=rp.run_dir, empty=rp.empty_file)
    return _left_to_bwrap(rp, outer, moved_roots, moved), plan


def split_sockets(rp: ResolvedPolicy) -> tuple[ResolvedPolicy, tuple[tuple[BulkOp, str], ...]]:
    """(``rp`` without the host sockets' masks the mounter makes, those masks).

    Why the mounter: the sockets are listed (sock_diag) before the
    sandbox exists, and one may be gone by its mount (another run of the
    same user ended, and its daemon's socket and temp dir with it).
    bubblewrap creates a missing mount point, which the read-only ``/``
    refuses: "Can't mkdir parents for ...", and the run failed (exit 125)
    because an unrelated process ended. The mounter (helper/mounter.c,
    ``U``) makes each of these masks after every mount of bubblewrap's and
    skips a path that no longer exists in the sandbox: nothing can connect()
    to a path that is not there, and a socket made there again before the
    mount is masked all the same (the mask covers the path). What is
    hidden is every listed socket still there when the sandbox is built.
    Nor does a skipped path give the command a host daemon's name to bind
    a listener of its own at: outside its write roots the tree is
    read-only, inside them it may bind any name anyway, and a socket
    removed after the start leaves its path as free (the host's unlink
    takes the mask with it).

    Not covered, as before: a host socket bound after the listing, even
    one bound at a path whose mask was skipped, has no mask and is
    reachable (seccomp cannot see a connect() path; Landlock has no
    unix-connect right up to ABI 7): docs/policy-reference.md, "Unix
    sockets".

    No mask at all, in either: a socket bubblewrap would not mask (under
    the private ``/tmp`` with no host bind over it: absent inside,
    ``needs_mask``), and one at or beneath what bubblewrap binds after the
    masks (this run's own run dir, whose proxy sockets the ``--without
    helper`` bridges connect to, the ``--publish`` dir, ``--review``'s
    stage, the helper, an allowed socket): that later bind covered its
    mask, and the mounter, which comes after it, would uncover it (and
    refuses anything beneath the run dir, its scratch: a big policy with a
    proxy failed so, exit 125)."""
    from safebox.builder.bwrap import needs_mask

    if rp.layers is Layers.HELPER_ONLY or not rp.run_dir or not rp.socket_masks:
        return rp, ()
    late = tuple(p for p in (rp.run_dir, rp.publish_dir, rp.review_stage, rp.helper_path, *rp.socket_binds) if p)
    late_prefixes = tuple(p.rstrip("/") + "/" for p in late)
    moved = [f for f in rp.socket_masks if needs_mask(rp, f) and f not in late and not f.startswith(late_prefixes)]
    gone = set(rp.socket_masks)
    return (rp.replace(mask_files=tuple(f for f in rp.mask_files if f not in gone)),
            tuple((BulkOp.MASK_SOCKET, f) for f in moved))


def _late_mounts(rp: ResolvedPolicy, view: _View) -> tuple[str, ...]:
    """The allowed sockets, the run dir, the ``--publish`` dir, the helper
    under /tmp, the carve-outs (allowRead inside a denied directory, and the
    helper when a mask hides it) and the presets' cache leaves: bubblewrap
    binds each after the masks and read-only re-binds, so a mask or
    read-only bind that holds one must be made before it, by bubblewrap, not
    after it by the mounter (which would hide it again, or take its
    read-write bind back)."""
    return tuple(p for p in (*rp.socket_binds, rp.run_dir, rp.publish_dir,
                             *(h for h in (rp.helper_path,) if h and view.in_tmp(h)),
                             *(c for c, _ in rp.carve_outs), *rp.cache_dirs) if p)


def _movable_entries(rp: ResolvedPolicy, view: _View, late: tuple[str, ...]) -> _Moved:
    """Every movable pin, and every movable read-only entry or mask that holds none of ``late``."""
    holds_late = {a for p in late for a in ancestors(p)}
    return _Moved(pins=[p for p in rp.pinned_dirs if view.movable(p)],
                  read_only=[p for p in rp.read_only if view.movable(p) and p not in holds_late],
                  mask_dirs=[d for d in rp.mask_dirs if view.movable(d) and d not in holds_late],
                  mask_files=[f for f in rp.mask_files if view.movable(f) and f not in holds_late])


def _movable_roots(rp: ResolvedPolicy, view: _View, outer: list[str], late: tuple[str, ...], moved: _Moved,
                   host_mounts: frozenset[str] | set[str]) -> list[str]:
    """The outer write roots that move: only when bubblewrap keeps nothing
    at or beneath one, and it holds no host mount point. The mounter binds
    it after every mount of bubblewrap's, so one that held a read-only bind
    bubblewrap kept (the state dir, which holds the run dir) would land on
    top of it and be made writable, and one above the run dir would hide the
    run dir's read-only bind (issue 22). Kept with bubblewrap, the root is
    bound before everything beneath it: read-only self-protection always
    comes after every write bind."""
    host_held = {a for m in host_mounts for a in ancestors(m)}
    gone = {*moved.pins, *moved.read_only, *moved.mask_dirs, *moved.mask_files}
    kept = [*late, *(p for p in (*rp.pinned_dirs, *rp.read_only, *rp.mask_dirs, *rp.mask_files) if p not in gone),
            *(p for d, kids in rp.sealed_dirs for p in (d, *kids)), *(real for real, _ in rp.masked_files),
            *(f for _, f in rp.overlays)]
    holds_kept = _at_or_above(kept)
    return [w for w in outer if view.movable(w) and not view.in_tmp(w) and w not in host_held
            and w not in holds_kept]


def _ops(moved_roots: list[str], moved: _Moved) -> tuple[tuple[BulkOp, str], ...]:
    """bwrap's order (builder/bwrap.py): write roots, pins shallow first,
    then read-only re-binds, then masks. The write roots moved are outermost
    (a root inside another is left out, and pins lie inside roots), so all
    of them can come first: the mounter binds the rest from a copy of the
    tree that already has them (a pin inside one is read-write)."""
    return (*((BulkOp.WRITE, w) for w in sorted(moved_roots, key=lambda p: (p.count("/"), p))),
            *((BulkOp.PIN, p) for p in sorted(moved.pins, key=lambda p: (p.count("/"), p))),
            *((BulkOp.READ_ONLY, p) for p in moved.read_only),
            *((BulkOp.MASK_DIR, d) for d in moved.mask_dirs),
            *((BulkOp.MASK_FILE, f) for f in moved.mask_files))


def _left_to_bwrap(rp: ResolvedPolicy, outer: list[str], moved_roots: list[str], moved: _Moved) -> ResolvedPolicy:
    """``rp`` without what the mounter makes."""

    def rest(items: tuple[str, ...], gone: list[str]) -> tuple[str, ...]:
        drop = set(gone)
        return tuple(p for p in items if p not in drop)

    kept_roots = set(outer) - set(moved_roots)
    return rp.replace(write_roots=tuple(w for w in rp.write_roots if w in kept_roots),
                      pinned_dirs=rest(rp.pinned_dirs, moved.pins), read_only=rest(rp.read_only, moved.read_only),
                      mask_dirs=rest(rp.mask_dirs, moved.mask_dirs), mask_files=rest(rp.mask_files, moved.mask_files))

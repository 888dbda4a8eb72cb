"""Pure: ResolvedPolicy → the supervisor's table (docs/violations.md, "Supervisor table").

The supervisor predicts whether a layer will refuse a call from this table:
for every path where what the sandbox allows changes (a mount of bwrap's, a
Landlock rule), the flags that hold beneath it. The deepest entry that is a
path or one of its ancestors decides, as the deepest mount does in the
kernel. Both layers are folded in: an entry allows a write only where the
mounts *and* Landlock do, and its ``meta`` keeps which layer refuses, for
the errno (EROFS from a read-only mount, EACCES from Landlock).

On the exec hot path: standard library only, no I/O.
"""

from __future__ import annotations

import os

from safebox.builder.resolved import Layers, ResolvedPolicy

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator

# Flags the supervisor reads (helper/notify.h).
W, C, M, B = 1, 2, 4, 8
# What only Python keeps, for the explanation.
MOUNT_W, MOUNT_C, MASK_DIR, MASK_FILE = 16, 32, 64, 128

_LETTERS = ((W, "w"), (C, "c"), (M, "m"), (B, "b"))


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _ancestors(path: str) -> Iterator[str]:
    """``path`` and each of its ancestors, deepest first, ending with ``/``."""
    while True:
        yield path
        if path == "/":
            return
        path = os.path.dirname(path)


class Table:
    """The entries (path, flags | meta) in file order, and what else the supervisor needs."""

    def __init__(self, entries: list[tuple[str, int]], *, reads: bool, ports: tuple[int, ...],
                 layers: Layers) -> None:
        self.entries = entries
        self.reads = reads
        self.ports = ports
        self.layers = layers

    def render(self) -> bytes:
        """The table file's bytes."""
        lines = ["safebox-observe 1", f"reads {int(self.reads)}"]
        for path, bits in self.entries:
            flags = "".join(letter for bit, letter in _LETTERS if bits & bit) or "-"
            lines.append(f"entry {flags} {os.fsencode(path).hex()}")
        lines += [f"port {p}" for p in self.ports]
        lines.append("end")
        return ("\n".join(lines) + "\n").encode()

    def lookup(self, path: str) -> tuple[str, int] | None:
        """The deepest entry at ``path`` or an ancestor (as the supervisor looks it up)."""
        index = {p: i for i, (p, _) in enumerate(self.entries)}
        for a in _ancestors(path):
            if a in index:
                return self.entries[index[a]]
        return None


def _landlock_grants(rules: tuple[tuple[str, str], ...]) -> dict[str, set[str]]:
    grants: dict[str, set[str]] = {}
    for access, path in rules:
        grants.setdefault(path, set()).add(access)
    return grants


def _parent(path: str) -> str:
    i = path.rfind("/")
    return path[:i] if i > 0 else "/"


class _Granted:
    """(files writable, entries creatable) beneath a path under Landlock's
    union of grants: a ``write`` grant at the path or any ancestor gives
    both, a ``dev`` grant files only. Memoised per directory, so a table of
    10,000 entries that share their parents costs a lookup each, not a walk
    to ``/`` each (docs/benchmarks.md, "Big policies")."""

    def __init__(self, grants: dict[str, set[str]]) -> None:
        self._grants = grants
        self._memo: dict[str, tuple[bool, bool]] = {}

    def _local(self, path: str) -> tuple[bool, bool]:
        classes = self._grants.get(path)
        if not classes:
            return False, False
        return ("write" in classes or "dev" in classes), "write" in classes

    def __call__(self, path: str) -> tuple[bool, bool]:
        passed: list[str] = []
        a = path
        while a not in self._memo:
            passed.append(a)
            if a == "/":
                w, c = False, False  # nothing above /
                break
            a = _parent(a)
        else:
            w, c = self._memo[a]
        for q in reversed(passed):  # from the top down
            lw, lc = self._local(q)
            w, c = (True, True) if (lc or c) else (w or lw, False)
            self._memo[q] = (w, c)
        return self._memo[path]


def _granted(grants: dict[str, set[str]], path: str) -> tuple[bool, bool]:
    """(files writable, entries creatable) beneath ``path`` (one question; see _Granted)."""
    return _Granted(grants)(path)


class _NearestMount:
    """The deepest mount at or above a path, memoised per directory."""

    def __init__(self, mounts: dict[str, tuple[bool, int]]) -> None:
        self._mounts = mounts
        self._memo: dict[str, tuple[bool, int]] = {}

    def __call__(self, path: str) -> tuple[bool, int]:
        passed: list[str] = []
        a = path
        while True:
            if a in self._mounts:
                found = self._mounts[a]
                break
            if a in self._memo:
                found = self._memo[a]
                break
            passed.append(a)
            a = _parent(a)  # "/" is always a mount: the walk ends there
        for q in passed:
            self._memo[q] = found
        return found


def _mounts(rp: ResolvedPolicy) -> dict[str, tuple[bool, int]]:
    """bwrap's mounts in builder/bwrap.py's order: path → (read-write, mask kind).
    A later mount of the same path replaces the earlier, as in the kernel."""
    m: dict[str, tuple[bool, int]] = {"/": (False, 0), "/dev": (True, 0), "/proc": (True, 0),
                                      "/proc/1": (False, 0)}
    for t in rp.private_tmp:
        m[t] = (True, 0)
    for w in (*rp.write_roots, *rp.pinned_dirs):
        m[w] = (True, 0)
    for d, kids in rp.sealed_dirs:
        m[d] = (False, 0)
        for k in kids:
            m[k] = (True, 0)
    for p in rp.read_only:
        m[p] = (False, 0)
    # The presets' caches: bound read-write beneath the state dir, which is
    # read-only (before issue 26 they were missing here, so every write into
    # a cache was reported as refused by self-protection, although it worked).
    for c in rp.cache_dirs:
        m[c] = (True, 0)
    for d in rp.mask_dirs:
        if not any(_under(d, t) for t in rp.private_tmp):
            m[d] = (False, MASK_DIR)
    for f in rp.mask_files:
        if not any(_under(f, t) for t in rp.private_tmp):
            m[f] = (False, MASK_FILE)
    for s in rp.socket_binds:
        m[s] = (True, 0)
    if rp.run_dir:
        m[rp.run_dir] = (False, 0)
    if rp.publish_dir:
        m[rp.publish_dir] = (True, 0)
    return m


def build(rp: ResolvedPolicy, *, reads: bool, ports: tuple[int, ...] = ()) -> Table:
    """The table for ``rp`` (both layers, or Landlock alone on a helper-only run)."""
    grants = _landlock_grants(rp.landlock_rules)
    granted = _Granted(grants)
    entries: list[tuple[str, int]] = []
    if rp.layers is Layers.HELPER_ONLY:
        masks = {d: MASK_DIR for d in rp.mask_dirs} | {f: MASK_FILE for f in rp.mask_files}
        for p in sorted({"/", *grants, *masks}):
            w, c = granted(p)
            mask = masks.get(p, 0)
            bits = (W if w and not mask else 0) | (C if c and not mask else 0) | (M if mask else 0)
            # No mount layer: it never refuses, Landlock does (EACCES).
            entries.append((p, bits | MOUNT_W | MOUNT_C | mask))
        return Table(entries, reads=reads, ports=ports, layers=rp.layers)
    mounts = _mounts(rp)
    nearest = _NearestMount(mounts)
    for p in sorted({*mounts, *grants, "/dev/shm"}):
        rw, mask = nearest(p)
        w, c = granted(p)
        bits = (W if rw and w else 0) | (C if rw and c else 0) | (M if mask else 0) | (B if p in mounts else 0)
        entries.append((p, bits | (MOUNT_W | MOUNT_C if rw else 0) | mask))
    return Table(entries, reads=reads, ports=ports, layers=rp.layers)

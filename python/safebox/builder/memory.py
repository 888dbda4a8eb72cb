"""The state dir's memories of earlier runs: the git dirs recognised
(``known-git-dirs``) and the write roots granted (``write-roots``). Files
the sandbox cannot write, read and replaced through safebox.hostio, bounded
(docs/policy-reference.md), and never a reason to fail a run."""

from __future__ import annotations

import os

KNOWN_GIT_DIRS = "known-git-dirs"


# The memory's bound (docs/policy-reference.md): at most 4096 entries and
# 1 MiB, what one read takes. When a write would pass it, paths that are no
# longer directories are dropped and then the least recently seen, down to
# three quarters of the bound: that sweep costs a stat per entry (~35 ms for
# 4096 here), so it runs once per thousand or so new dirs, not at every write.
_KNOWN_MAX = 4096


_KNOWN_MAX_BYTES = 1 << 20


_KNOWN_LOW = _KNOWN_MAX * 3 // 4


_KNOWN_LOW_BYTES = _KNOWN_MAX_BYTES * 3 // 4


def _read_memory(path: str) -> bytes | None:
    """The first 1 MiB of a state-dir memory file, through safebox.hostio (no
    link followed, a regular file of ours with one link); None when missing
    or unusable."""
    from safebox.hostio import HostFileError, open_read

    try:
        fd = open_read(path)
    except HostFileError:
        return None
    try:
        return os.read(fd, _KNOWN_MAX_BYTES)
    except OSError:
        return None
    finally:
        os.close(fd)


def read_known_git_dirs(path: str) -> tuple[tuple[str, str], ...]:
    """The git dirs and worktree admin dirs remembered by earlier runs
    (``KIND HEXPATH`` lines in the state dir, which the sandbox cannot
    write). A missing or unreadable file is an empty memory; a last line
    without its newline (a file cut short) is ignored, never read as the
    shorter path its hex prefix would name."""
    raw = _read_memory(path)
    if raw is None:
        return ()
    out = []
    for line in raw[:raw.rfind(b"\n") + 1].decode("ascii", "replace").splitlines():
        kind, _, hexpath = line.partition(" ")
        try:
            out.append((kind, os.fsdecode(bytes.fromhex(hexpath))))
        except ValueError:
            continue
    return tuple(out)


def remember_git_dirs(path: str, before: tuple[tuple[str, str], ...], seen: tuple[tuple[str, str], ...]) -> None:
    """Add what this run recognised to the memory (atomically, 0600).

    Written only when this run saw a dir the memory lacks, so a run that
    adds nothing costs nothing; this run's dirs go first. Past the bound
    (4096 entries or 1 MiB) the memory is swept: paths that are no longer
    directories are dropped, then the least recently seen until three
    quarters of the bound remain. Never fails the run."""
    known = set(before)
    if all(e in known for e in seen):
        return
    merged = list(dict.fromkeys([*seen, *before]))
    _write_memory(path, [(p, f"{kind} {os.fsencode(p).hex()}\n") for kind, p in merged])


def _write_memory(path: str, entries: list[tuple[str, str]]) -> None:
    """Write a state-dir memory of (path, line) entries, newest first,
    atomically and 0600. Past the bound (4096 entries or 1 MiB) it is swept:
    entries whose directory is gone are dropped, then the oldest until three
    quarters of the bound remain. Never fails the run: a memory that cannot
    be written only loses this run's additions."""
    lines = [line for _, line in entries]
    if len(lines) > _KNOWN_MAX or sum(map(len, lines)) > _KNOWN_MAX_BYTES:
        keep: list[str] = []
        size = 0
        for p, line in entries:
            if len(keep) >= _KNOWN_LOW or size + len(line) > _KNOWN_LOW_BYTES:
                break
            if os.path.isdir(p):
                keep.append(line)
                size += len(line)
        lines = keep
    from safebox.hostio import HostFileError, replace

    try:
        replace(path, "".join(lines).encode(), mode=0o600)
    except (OSError, HostFileError):
        pass


WRITE_ROOTS = "write-roots"


def read_write_roots(path: str) -> dict[str, float]:
    """The host write roots of earlier runs, each with the time it was first
    granted (``EPOCH HEXPATH`` lines in the state dir, which the sandbox
    cannot write), most recently added first. A missing or unreadable file
    is an empty memory; a last line cut short is ignored. Same bound as the
    git-dir memory (4096 entries, 1 MiB)."""
    raw = _read_memory(path)
    if raw is None:
        return {}
    out: dict[str, float] = {}
    for line in raw[:raw.rfind(b"\n") + 1].decode("ascii", "replace").splitlines():
        when, _, hexpath = line.partition(" ")
        try:
            out.setdefault(os.fsdecode(bytes.fromhex(hexpath)), float(when))
        except ValueError:
            continue
    return out


def remember_write_roots(path: str, before: dict[str, float], roots: tuple[str, ...], now: float) -> None:
    """Add this run's new host write roots to the memory (atomically, 0600),
    first, with ``now`` as the time they were first granted; roots already
    known keep theirs. Written only when a root is new, so a run in a known
    work dir costs nothing. Past the bound the memory is swept as the
    git-dir memory is (remember_git_dirs). Never fails the run."""
    new = [r for r in dict.fromkeys(roots) if r not in before]
    if not new:
        return
    merged = [(r, now) for r in new] + list(before.items())
    _write_memory(path, [(r, f"{when:.3f} {os.fsencode(r).hex()}\n") for r, when in merged])

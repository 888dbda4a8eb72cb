"""Pure: questions about many normalised absolute paths at once, in time
linear in their number (a policy may list 10,000 of them; see
docs/benchmarks.md, "Big policies")."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable


def parent_dir(path: str) -> str:
    """``os.path.dirname`` of a normalised absolute path, without its generality
    (it runs some 100,000 times for a 10,000-entry policy)."""
    i = path.rfind("/")
    return path[:i] if i > 0 else "/"


def ancestors(path: str) -> list[str]:
    """``path`` (normalised, absolute) and every directory above it, up to ``/``."""
    out = [path]
    while path != "/":
        path = parent_dir(path)
        out.append(path)
    return out


class Nearest:
    """The deepest of a set of paths at or above a given path.

    Normalised absolute paths only. ``_is_under`` against every member costs
    a pass over the whole set per query (10,000 deny entries against 10,000
    write roots: 10^8 prefix tests); this walks up from the query instead and
    remembers the answer for every directory it passed, so entries that
    share their parents cost a dictionary lookup each."""

    def __init__(self, paths: Iterable[str]) -> None:
        self.paths = frozenset(paths)
        self._memo: dict[str, str | None] = {}

    def at_or_above(self, path: str) -> str | None:
        """``path`` itself if it is a member, else the deepest member above it, else None."""
        return path if path in self.paths else self.above(path)

    def above(self, path: str) -> str | None:
        """The deepest member strictly above ``path``, or None."""
        if path == "/" or not self.paths:
            return None
        passed: list[str] = []
        d = parent_dir(path)
        while True:
            if d in self._memo:
                found = self._memo[d]
                break
            if d in self.paths:
                found = d
                break
            passed.append(d)
            if d == "/":
                found = None
                break
            d = parent_dir(d)
        for d in passed:
            self._memo[d] = found
        return found


def collapse(paths: Iterable[str]) -> list[str]:
    """``paths`` without those beneath another of them, sorted.

    A read-only bind, a mask or a write bind is recursive: an entry beneath
    another of the same kind adds nothing but a mount (and bubblewrap reads
    the whole mount table once per mount). Siblings are all kept."""
    near = Nearest(paths)
    return sorted(p for p in near.paths if near.above(p) is None)


def at_or_beneath(sorted_paths: list[str], top: str) -> list[str]:
    """The members of ``sorted_paths`` (sorted) that are ``top`` or lie
    beneath it, by bisection: those beneath share the prefix ``top/`` and so
    stand together in sorted order (``top`` itself may stand apart:
    ``/a-b`` sorts between ``/a`` and ``/a/b``)."""
    if top == "/":
        return list(sorted_paths)
    i = bisect_left(sorted_paths, top)
    out = [top] if i < len(sorted_paths) and sorted_paths[i] == top else []
    prefix = top + "/"
    i = bisect_left(sorted_paths, prefix)
    while i < len(sorted_paths) and sorted_paths[i].startswith(prefix):
        out.append(sorted_paths[i])
        i += 1
    return out

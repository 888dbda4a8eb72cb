"""Pure: questions about many normalised absolute paths at once, in time
linear in their number (a policy may list 10,000 of them; see
docs/benchmarks.md, "Big policies")."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from operator import methodcaller


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

    def below_none(self) -> list[str]:
        """The members with no other member above them (unsorted).

        Entries share parents (10,000 entries in a hundred directories): the
        question is asked once per parent, as :meth:`above` is answered
        from the nearest of them (``above(p)`` is ``at_or_above`` of p's
        parent)."""
        heads: dict[str, bool] = {}
        out = ["/"] if "/" in self.paths else []  # nothing is above /
        for p in self.paths:
            i = p.rfind("/")
            if i <= 0:
                if p != "/" and "/" not in self.paths:
                    out.append(p)
                continue
            head = p[:i]
            top = heads.get(head)
            if top is None:
                top = heads[head] = self.at_or_above(head) is None
            if top:
                out.append(p)
        return out

    def covered(self, paths: Iterable[str]) -> list[str]:
        """Those of ``paths`` with a member at or above them, in their order
        (``at_or_above(p) is not None``, asked once per parent)."""
        members = self.paths
        heads: dict[str, bool] = {}
        out = []
        for p in paths:
            if p in members:
                out.append(p)
                continue
            if p == "/":
                continue  # not a member, and nothing is above it
            i = p.rfind("/")
            head = p[:i] if i > 0 else "/"
            hit = heads.get(head)
            if hit is None:
                hit = heads[head] = self.at_or_above(head) is not None
            if hit:
                out.append(p)
        return out

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


def by_depth(paths: Iterable[str]) -> list[str]:
    """``paths`` sorted shallow first, then by name: ``sorted(paths,
    key=lambda p: (p.count("/"), p))`` without a Python call per path (two
    stable sorts whose keys are C functions: a third of the time at 10,000)."""
    return sorted(sorted(paths), key=_SLASHES)


_SLASHES = methodcaller("count", "/")


def collapse(paths: Iterable[str], *, shallow_first: bool = False) -> list[str]:
    """``paths`` without those beneath another of them, sorted (by
    :func:`by_depth` with ``shallow_first``).

    A read-only bind, a mask or a write bind is recursive: an entry beneath
    another of the same kind adds nothing but a mount (and bubblewrap reads
    the whole mount table once per mount). Siblings are all kept."""
    near = Nearest(paths)
    kept = near.below_none()
    return by_depth(kept) if shallow_first else sorted(kept)


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


def is_under(path: str, root: str) -> bool:
    """``path`` is ``root`` or beneath it (``root`` "/" holds everything)."""
    return path == root or root == "/" or path.startswith(root.rstrip("/") + "/")

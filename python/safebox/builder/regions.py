"""Pure: sandbox-runtime's deny-then-allow reads, as regions of the tree.

``denyRead`` entries make a path and everything beneath it unreadable;
``allowRead`` entries make it readable again. As srt's README says:
``allowRead`` beats ``denyRead`` (an entry of each for the same path: it is
readable), and a ``denyRead`` entry more specific than the ``allowRead``
region it lies in still wins (``allowRead: ["."]``, ``denyRead:
["./secrets"]``). So the nearest entry at or above a path decides it; with
no entry above it, a path is readable.

:class:`Regions` keeps only the entries that change something: a deny
inside a denied region, or an allow inside a readable one, is dropped. What
is left alternates down every branch, deny, allow, deny, ...: every kept
allow lies strictly inside a kept deny (a *carve-out*), and every kept deny
lies in a readable region. The builders turn that into

* mounts (builder/bwrap.py): each deny is masked, each carve-out bound back
  over its mask, and the mounts beneath a carve-out made again after it;
* Landlock grants (builder/resolve.py, ``landlock_rules``): read on every
  readable region minus the denies directly inside it.

Paths are absolute, normalised and already resolved (symlinks followed).
"""

from __future__ import annotations

from collections.abc import Iterable

from safebox.builder.paths import by_depth


def _parent(path: str) -> str:
    i = path.rfind("/")
    return path[:i] if i > 0 else "/"


class Regions:
    """The read regions of one policy (see the module docstring)."""

    def __init__(self, deny: Iterable[str], allow: Iterable[str] = ()) -> None:
        entries: dict[str, bool] = {}  # path -> readable
        for d in deny:
            entries[d] = False
        for a in allow:
            entries[a] = True  # allowRead beats denyRead at the same path
        kept: dict[str, bool] = {}
        memo: dict[str, bool] = {}
        # The state above an entry is its parent's, looked up once per
        # parent (entries share parents): everything at or above a parent is
        # decided before any entry beneath it, parents coming first.
        heads: dict[str, bool] = {}
        order = by_depth(entries)
        for p in order:
            if p == "/":
                above = True
            else:
                i = p.rfind("/")
                head = p[:i] if i > 0 else "/"
                got = heads.get(head)
                if got is None:
                    got = heads[head] = kept[head] if head in kept else self._state_above(head, kept, memo)
                above = got
            if above != entries[p]:
                kept[p] = entries[p]
        self._kept = kept
        self._memo: dict[str, bool] = {}
        #: Effective denies (masked), shallow first.
        self.denies: tuple[str, ...] = tuple(p for p in order if kept.get(p) is False)
        #: Carve-outs: effective allows, each strictly inside a deny; shallow first.
        self.allows: tuple[str, ...] = tuple(p for p in order if kept.get(p) is True)

    @staticmethod
    def _state_above(path: str, kept: dict[str, bool], memo: dict[str, bool]) -> bool:
        """Whether the nearest kept entry strictly above ``path`` is an allow (or there is none)."""
        if path == "/":
            return True
        passed = []
        d = _parent(path)
        while True:
            if d in kept:
                state = kept[d]
                break
            if d in memo:
                state = memo[d]
                break
            passed.append(d)
            if d == "/":
                state = True
                break
            d = _parent(d)
        for q in passed:
            memo[q] = state
        return state

    def entry_at_or_above(self, path: str) -> str | None:
        """The nearest kept entry at or above ``path``, or None."""
        d = path
        while True:
            if d in self._kept:
                return d
            if d == "/":
                return None
            d = _parent(d)

    def readable_only(self, paths: Iterable[str]) -> list[str]:
        """Those of ``paths`` that are readable, in their order (as
        :meth:`readable`, asked once per parent: a path that is not an entry
        is as readable as its parent)."""
        kept = self._kept
        heads: dict[str, bool] = {}
        out = []
        for p in paths:
            state = kept.get(p)
            if state is None and p == "/":
                state = True  # not an entry, and nothing is above it
            elif state is None:
                i = p.rfind("/")
                head = p[:i] if i > 0 else "/"
                state = heads.get(head)
                if state is None:
                    state = heads[head] = self.readable(head)
            if state:
                out.append(p)
        return out

    def readable(self, path: str) -> bool:
        """Whether ``path`` is readable inside the sandbox."""
        if path in self._kept:
            return self._kept[path]
        return self._state_above(path, self._kept, self._memo)

    def deny_over(self, path: str) -> str | None:
        """The deny entry whose region holds ``path``, or None when it is readable."""
        e = self.entry_at_or_above(path)
        return e if e is not None and not self._kept[e] else None

    def carve_out_over(self, path: str) -> str | None:
        """The deepest carve-out at or above ``path`` (which need not be readable itself), or None."""
        d = path
        while True:
            if self._kept.get(d) is True:
                return d
            if d == "/":
                return None
            d = _parent(d)

    def denies_in(self, top: str) -> list[str]:
        """The denies strictly beneath ``top`` that no other entry separates
        from it: what a grant on ``top`` must leave out (and nothing else:
        a deny inside a carve-out inside one of these is the carve-out's)."""
        out = []
        prefix = top.rstrip("/") + "/"
        for d in self.denies:
            if not d.startswith(prefix):
                continue
            e = self.entry_at_or_above(_parent(d))
            if e is None or e == top or not e.startswith(prefix):
                out.append(d)
        return out

    def allows_in(self, top: str) -> list[str]:
        """The carve-outs strictly beneath ``top`` (each to be granted by itself)."""
        prefix = top.rstrip("/") + "/"
        return [a for a in self.allows if a.startswith(prefix)]

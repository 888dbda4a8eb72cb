"""Glob patterns in filesystem entries (``denyRead``, ``allowRead``,
``denyWrite``): their grammar, and one fast walk that expands them.

The grammar is sandbox-runtime's (its README, "Path Syntax"), that of
``.gitignore``: ``*`` matches any characters but ``/``, ``?`` one character
but ``/``, ``[abc]`` one character of a set (``[!abc]`` or ``[^abc]`` one
not in it), and a whole path component ``**`` any number of directories,
none included. An entry ending in ``/**`` names the directories it matches
(``**/build/**``: every ``build`` directory, with everything beneath it).
Dot files are matched like any other name. A path holding none of
``* ? [ ]`` is literal, and so is srt's ``{"path": ..., "literal": true}``.

bubblewrap and Landlock take concrete paths, so a pattern is expanded when
the sandbox is built: a file created later under a pattern is not covered
(docs/policy-reference.md, "Glob patterns").

What a pattern may be (checked when a policy is loaded, before anything is
built) is ``policy/glob_syntax.py``; here the patterns are matched and
expanded.

Expansion walks the host once for every pattern of a run together
(:func:`expand`): the patterns are a small automaton over path components,
directories below the fixed part of a pattern are listed only while some
pattern can still match beneath them, and a directory that only literal
components lead through is never listed. ``re`` is imported only here,
and only a run whose policy has a pattern imports this module.
"""

from __future__ import annotations

import os
import stat

from safebox.policy.glob_syntax import class_end, is_glob

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

    from safebox.policy.effective import EffectivePolicy

def _component_regex(component: str) -> str:
    """A regex for one path component (no ``/`` in names, so ``*`` is ``.*``)."""
    import re

    out: list[str] = []
    i = 0
    while i < len(component):
        ch = component[i]
        if ch == "*":
            while i + 1 < len(component) and component[i + 1] == "*":
                i += 1
            out.append(".*")
        elif ch == "?":
            out.append(".")
        elif ch == "[":
            j = class_end(component, i)
            body = component[i + 1:j]
            neg = body[:1] in ("!", "^")
            if neg:
                body = body[1:]
            body = body.replace("\\", "\\\\")
            out.append(f"[{'^' if neg else ''}{body}]")
            i = j
        else:
            out.append(re.escape(ch))
        i += 1
    return "".join(out)


STAR = "**"


class Pattern:
    """One absolute pattern as components, and what its matches must be."""

    __slots__ = ("text", "comps", "dirs_only", "literal")

    def __init__(self, text: str) -> None:
        self.text = text
        comps = [c for c in text.split("/") if c]
        # `X/**`: X and everything beneath it, i.e. the directories X matches.
        self.dirs_only = False
        while len(comps) > 1 and comps[-1] == STAR:
            comps.pop()
            self.dirs_only = True
        # Adjacent `**` components mean what one does.
        out: list[str] = []
        for c in comps:
            if not (c == STAR and out and out[-1] == STAR):
                out.append(c)
        self.comps = tuple(out)
        # Per component: None for `**`, the name itself when literal, else a regex source.
        self.literal = tuple(c if not is_glob(c) else None for c in self.comps)


class _Step:
    """What the active states at one directory do with each child name
    (built once per distinct set of states and cached: every directory
    under a `**` has the same one)."""

    __slots__ = ("names", "regex", "wild", "stars", "only_literal", "star_next")

    def __init__(self, patterns: list[Pattern], states: frozenset[tuple[int, int]]) -> None:
        import re

        # name -> states after it; regex alternatives -> states after them;
        # `**` states, which every child directory keeps.
        self.names: dict[str, set[tuple[int, int]]] = {}
        self.wild: list[tuple[re.Pattern[str], tuple[int, int]]] = []
        self.stars: set[tuple[int, int]] = set()
        for pid, i in states:
            comp = patterns[pid].comps[i]
            lit = patterns[pid].literal[i]
            if comp == STAR:
                self.stars.add((pid, i))
            elif lit is not None:
                self.names.setdefault(lit, set()).add((pid, i + 1))
            else:
                self.wild.append((re.compile(_component_regex(comp), re.DOTALL), (pid, i + 1)))
        # One combined test first: most names match no wildcard at all.
        self.regex = (re.compile("|".join(f"(?:{w.pattern})" for w, _ in self.wild), re.DOTALL)
                      if self.wild else None)
        self.only_literal = not self.wild and not self.stars
        # The states of a child directory that only the `**` states reach
        # (set by expand, which knows the closure).
        self.star_next: frozenset[tuple[int, int]] = frozenset()

    def advance(self, name: str) -> set[tuple[int, int]] | None:
        """The states a child called ``name`` is reached in besides the
        ``**`` ones (before closure), or None when it reaches only those."""
        hit = self.names.get(name)
        if self.regex is None or self.regex.fullmatch(name) is None:
            return None if hit is None else hit
        out = set(hit) if hit else set()
        for w, nxt in self.wild:
            if w.fullmatch(name):
                out.add(nxt)
        return out


class Expansion:
    """What :func:`expand` found: per pattern, its matches (as spelled by
    the walk: the pattern's fixed part as written, the rest as listed);
    and the directories it could not list."""

    def __init__(self, patterns: list[str]) -> None:
        self.matches: dict[str, list[str]] = {p: [] for p in patterns}
        # Directories that could not be listed, with the patterns that
        # would have walked them (by text).
        self.unreadable: list[tuple[str, tuple[str, ...]]] = []
        self.listed = 0  # directory entries looked at (for the benchmark)


def expand(patterns: Iterable[str]) -> Expansion:
    """Expand absolute, normalised patterns against the host, all in one walk.

    Symbolic links: a fixed component is followed as the kernel would; a
    link met by a wildcard or ``**`` is matched by its own name, and
    walked into only while no ``**`` is active (a ``**`` through links
    could loop, or leave the tree for the whole host). A directory that
    cannot be listed (EACCES) is recorded in ``unreadable`` with the
    patterns that would have walked it (the caller denies it whole for a
    deny pattern: a name guessed inside could still be opened); one that
    vanished is skipped; any other error raises OSError, so that a deny
    pattern is never silently half-expanded."""
    w = _Walk(patterns)
    # (directory, states there); the root's states are every pattern's first component.
    stack: list[tuple[str, frozenset[tuple[int, int]]]] = [("/", w.close((pid, 0) for pid in range(len(w.pats))))]
    while stack:
        d, states = stack.pop()
        step = w.steps.get(states)
        if step is None:
            step = w.steps[states] = _Step(w.pats, states)
            step.star_next = w.close(step.stars)
        if step.only_literal:
            # Only fixed names lead on from here: look them up, list nothing.
            w.look_up(d, step, states, stack)
        else:
            w.list_dir(d, step, states, stack)
    out = w.out
    for t in w.texts:
        out.matches[t].sort()
    return out


class _Walk:
    """The state of one :func:`expand`: the patterns, the step of each set of
    states, and what was found."""

    def __init__(self, patterns: Iterable[str]) -> None:
        self.texts = list(dict.fromkeys(patterns))
        self.pats = [Pattern(t) for t in self.texts]
        self.out = Expansion(self.texts)
        self.steps: dict[frozenset[tuple[int, int]], _Step] = {}

    def close(self, states: Iterable[tuple[int, int]]) -> frozenset[tuple[int, int]]:
        # A `**` may match no directory at all: its next component applies here too.
        pats = self.pats
        done: set[tuple[int, int]] = set()
        todo = list(states)
        while todo:
            s = todo.pop()
            if s in done:
                continue
            done.add(s)
            pid, i = s
            if i < len(pats[pid].comps) and pats[pid].comps[i] == STAR:
                todo.append((pid, i + 1))
        return frozenset(done)

    def emit(self, path: str, reached: set[tuple[int, int]], is_dir: bool) -> set[tuple[int, int]]:
        """Record ``path`` for every pattern it completes; the states that go on."""
        pats = self.pats
        rest = set()
        for pid, i in reached:
            if i == len(pats[pid].comps):
                if is_dir or not pats[pid].dirs_only:
                    self.out.matches[self.texts[pid]].append(path)
            else:
                rest.add((pid, i))
        return rest

    def unreadable(self, d: str, states: frozenset[tuple[int, int]]) -> None:
        self.out.unreadable.append((d, tuple(sorted({self.texts[pid] for pid, _ in states}))))

    def look_up(self, d: str, step: _Step, states: frozenset[tuple[int, int]],
                stack: list[tuple[str, frozenset[tuple[int, int]]]]) -> None:
        """The fixed names of ``step`` in ``d``, without listing it."""
        prefix = d if d.endswith("/") else d + "/"
        for name, reached in step.names.items():
            child = prefix + name
            try:
                st = os.stat(child)  # followed, as the kernel resolves a fixed path
            except (FileNotFoundError, NotADirectoryError):
                if os.path.islink(child):  # a dangling link named by the pattern: a match as itself
                    self.emit(child, reached, False)
                continue
            except PermissionError:
                self.unreadable(d, states)
                continue
            is_dir = stat.S_ISDIR(st.st_mode)
            rest = self.emit(child, reached, is_dir)
            if rest and is_dir:
                stack.append((child, self.close(rest)))

    def list_dir(self, d: str, step: _Step, states: frozenset[tuple[int, int]],
                 stack: list[tuple[str, frozenset[tuple[int, int]]]]) -> None:
        """Match every entry of ``d`` against ``step``."""
        prefix = d if d.endswith("/") else d + "/"
        try:
            it = os.scandir(d)
        except (FileNotFoundError, NotADirectoryError):
            return
        except PermissionError:
            self.unreadable(d, states)
            return
        pats = self.pats
        stars = step.stars
        names_get = step.names.get
        rx = step.regex.fullmatch if step.regex is not None else None
        listed = 0
        with it:
            for e in it:
                listed += 1
                name = e.name
                if names_get(name) is None and (rx is None or rx(name) is None):
                    # The common case under `**`: nothing matched; a real
                    # directory is walked on in the same states.
                    if stars and e.is_dir(follow_symlinks=False):
                        stack.append((prefix + name, step.star_next))
                    continue
                extra = step.advance(name) or set()
                child = prefix + e.name
                try:
                    is_link = e.is_symlink()
                    is_dir = e.is_dir(follow_symlinks=False) or (is_link and e.is_dir())
                except OSError:
                    is_link, is_dir = False, False
                rest = self.emit(child, extra | stars, is_dir)
                if not rest or not is_dir:
                    continue
                nxt = self.close(rest)
                if is_link and any(pats[pid].comps[i] == STAR for pid, i in nxt):
                    continue  # no `**` through a symlink (see the docstring)
                stack.append((child, nxt))
        self.out.listed += listed


def expand_policy(policy: EffectivePolicy) -> tuple[EffectivePolicy, list[str]]:
    """``policy`` with the matches of its patterns added to the literal lists
    (``deny_read``, ``allow_read``, ``deny_write``), all patterns expanded in
    one walk; and the notes ``-v`` shows (what each pattern matched).

    Raises BuildError when the walk fails other than by a vanished entry or
    a directory nobody in the sandbox could list either: a deny pattern is
    never half expanded."""
    from safebox.errors import BuildError

    fields = (("deny_read", policy.deny_read_globs, "filesystem.denyRead"),
              ("allow_read", policy.allow_read_globs, "filesystem.allowRead"),
              ("deny_write", policy.deny_write_globs, "filesystem.denyWrite"))
    try:
        found = expand(p for _, pats, _ in fields for p in pats)
    except OSError as e:
        raise BuildError(f"cannot expand the glob patterns of the policy: {e.filename}: {e.strerror}; "
                         "refusing to run with a pattern half expanded") from None
    notes = []
    changes = {}
    for field, pats, key in fields:
        if not pats:
            continue
        extra: list[str] = []
        for p in pats:
            hits = found.matches[p]
            extra += hits
            notes.append(f"{key} pattern {p} matched {len(hits)} path{'' if len(hits) == 1 else 's'}"
                         " (a file created later is not covered)")
        changes[field] = tuple(dict.fromkeys((*getattr(policy, field), *extra)))
    # A directory a deny pattern could not walk is denied whole: the sandbox
    # cannot list it either, but could open a name it guessed there.
    for d, pats in found.unreadable:
        for field, globs_, key in fields:
            if field != "allow_read" and set(pats) & set(globs_):
                changes[field] = (*changes.get(field, getattr(policy, field)), d)
                notes.append(f"{key}: {d} cannot be listed to match a pattern; it is denied whole")
    return policy.replace(**changes), notes

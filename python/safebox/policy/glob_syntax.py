"""What a glob pattern in a filesystem entry (``denyRead``, ``allowRead``,
``denyWrite``) may be: sandbox-runtime's grammar (its README, "Path
Syntax"), that of ``.gitignore``; docs/policy-reference.md, "Glob patterns".

Part of the policy language: ``safebox policy check`` (policy/model.py)
refuses a pattern that cannot be expanded as srt would, before anything is
built. Matching and expanding the patterns on the host is
``builder/globs.py``, which takes the bracket grammar from here. Standard
library only.
"""

from __future__ import annotations

#: The characters that make an entry a pattern: sandbox-runtime's.
GLOB_CHARS = frozenset("*?[]")


def is_glob(path: str) -> bool:
    """Whether ``path`` (as the policy spells it) is a pattern."""
    return not GLOB_CHARS.isdisjoint(path)


def check_pattern(pattern: str) -> None:
    """Raise ValueError, in words for the user, when ``pattern`` cannot be
    expanded as srt would: the caller names the key and the entry.

    Refused: ``**`` inside a component (``a**b``, which srt's matcher reads
    as crossing ``/``, and ``.gitignore`` as two ``*``: one cannot honour
    both), an unclosed ``[``, braces (srt takes ``{a,b}`` literally where a
    shell would expand it: either reading would surprise someone), and a
    pattern whose fixed part is ``/`` (expanding it walks the whole host at
    every start; srt skips such a pattern)."""
    parts = [c for c in pattern.split("/") if c]
    for c in parts:
        if "**" in c and c != "**":
            raise ValueError("'**' must be a whole path component ('a/**/b', '**/x'), as in .gitignore")
        if _unclosed_bracket(c):
            raise ValueError("an unclosed '[' in a glob pattern; for a literal '[' use "
                             '{ "path": ..., "literal": true }')
    if "{" in pattern or "}" in pattern:
        raise ValueError("braces are not expanded in glob patterns (sandbox-runtime takes them literally): "
                         "list each alternative as its own entry, or use "
                         '{ "path": ..., "literal": true } for a name that holds a brace')
    if pattern.startswith("/") and (not parts or is_glob(parts[0])):
        raise ValueError("a glob pattern must start below / (its fixed part is walked at every start); "
                         "name a directory first, such as ~/**/.env or ./**/.env")


def _unclosed_bracket(component: str) -> bool:
    i = 0
    while i < len(component):
        if component[i] == "[":
            j = class_end(component, i)
            if j < 0:
                return True
            i = j
        i += 1
    return False


def class_end(s: str, i: int) -> int:
    """The index of the ``]`` closing the class opened at ``s[i]``, or -1.
    A ``]`` first in the class (after ``!``/``^``) is a member, as in fnmatch."""
    j = i + 1
    if j < len(s) and s[j] in "!^":
        j += 1
    if j < len(s) and s[j] == "]":
        j += 1
    while j < len(s) and s[j] != "]":
        j += 1
    return j if j < len(s) else -1

"""JSON with comments, parsed into nodes that know where they lie in the text.

``safebox mcp wrap`` edits MCP client configs in place: it replaces a
server's ``command`` and inserts into its ``args``, and leaves every other
byte of the file as it was (indentation, key order, comments, the keys it
does not know), so that ``unwrap`` gives back the same file. A JSON
library's load and dump would reformat the whole file and drop comments,
which VS Code's ``mcp.json`` and ``settings.json`` allow (JSONC: ``//`` and
``/* */`` comments, trailing commas). So this module parses JSONC into
:class:`Node` records carrying ``start``/``end`` offsets, and
:func:`apply_edits` splices replacements into the text.

Strings are decoded with :func:`json.loads` of their own token, so every
escape means what JSON says it means.
"""

from __future__ import annotations

import json
import re
from typing import Any

from safebox._record import Frozen
from safebox.errors import SafeboxError

__all__ = ["Edit", "JsoncError", "Member", "Node", "apply_edits", "parse"]


class JsoncError(SafeboxError):
    """The text is not JSON (with comments); the message names line and column."""


class Node(Frozen):
    """A value: ``kind`` is ``object``, ``array``, ``string`` or ``literal``
    (number, true, false, null); ``text[start:end]`` is its token(s)."""

    kind: str
    start: int
    end: int
    value: Any = None  # strings and literals: the decoded value
    members: tuple[Member, ...] = ()  # objects
    items: tuple[Node, ...] = ()  # arrays

    def get(self, key: str) -> Member | None:
        """The last member named ``key`` (JSON parsers keep the last of duplicates)."""
        found = None
        for m in self.members:
            if m.key == key:
                found = m
        return found


class Member(Frozen):
    """``"key": value`` of an object; ``key_start``/``key_end`` span the quoted key."""

    key: str
    key_start: int
    key_end: int
    value: Node


class Edit(Frozen):
    """Replace ``text[start:end]`` with ``new``."""

    start: int
    end: int
    new: str


def apply_edits(text: str, edits: list[Edit]) -> str:
    """``text`` with every edit applied; edits must not overlap."""
    out = text
    last = len(text) + 1
    for e in sorted(edits, key=lambda e: (e.start, e.end), reverse=True):
        if e.end > last:
            raise ValueError(f"overlapping edits at {e.start}")
        out = out[:e.start] + e.new + out[e.end:]
        last = e.start
    return out


_WS = " \t\r\n\ufeff"
_SPECIAL = re.compile(r'["\\]')


class _Parser:
    def __init__(self, text: str, name: str) -> None:
        self.text = text
        self.name = name
        self.i = 0

    def fail(self, what: str, at: int | None = None) -> JsoncError:
        at = self.i if at is None else at
        line = self.text.count("\n", 0, at) + 1
        col = at - (self.text.rfind("\n", 0, at) + 1) + 1
        return JsoncError(f"{self.name}: line {line} column {col}: {what}")

    def skip(self) -> None:
        """Whitespace and comments."""
        t, n = self.text, len(self.text)
        while self.i < n:
            c = t[self.i]
            if c in _WS:
                self.i += 1
            elif t.startswith("//", self.i):
                j = t.find("\n", self.i)
                self.i = n if j < 0 else j + 1
            elif t.startswith("/*", self.i):
                j = t.find("*/", self.i + 2)
                if j < 0:
                    raise self.fail("a /* comment is never closed")
                self.i = j + 2
            else:
                return

    def value(self, depth: int) -> Node:
        if depth > 200:
            raise self.fail("nested more than 200 deep")
        self.skip()
        if self.i >= len(self.text):
            raise self.fail("unexpected end of the file")
        c = self.text[self.i]
        if c == "{":
            return self.obj(depth)
        if c == "[":
            return self.arr(depth)
        if c == '"':
            start, s = self.string()
            return Node(kind="string", start=start, end=self.i, value=s)
        return self.literal()

    def string(self) -> tuple[int, str]:
        t, start = self.text, self.i
        j = start + 1
        while True:
            # One search to the next quote or backslash: linear however many escapes
            # (a config from a cloned project is input safebox does not trust).
            m = _SPECIAL.search(t, j)
            if m is None:
                raise self.fail("a string is never closed", start)
            k = m.start()
            if t[k] == "\\":
                j = k + 2
                continue
            break
        token = t[start:k + 1]
        try:
            s = json.loads(token)
        except ValueError:
            raise self.fail("not a valid JSON string", start) from None
        self.i = k + 1
        return start, str(s)

    def literal(self) -> Node:
        t, start = self.text, self.i
        j = start
        while j < len(t) and (t[j].isalnum() or t[j] in "+-."):
            j += 1
        token = t[start:j]
        try:
            v = json.loads(token) if token else None
        except ValueError:
            v = None
        if not token or (v is None and token != "null"):
            raise self.fail(f"unexpected {t[start:start + 12]!r}", start)
        self.i = j
        return Node(kind="literal", start=start, end=j, value=v)

    def obj(self, depth: int) -> Node:
        start = self.i
        self.i += 1
        members: list[Member] = []
        while True:
            self.skip()
            if self.i < len(self.text) and self.text[self.i] == "}":
                self.i += 1
                return Node(kind="object", start=start, end=self.i, members=tuple(members))
            if self.i >= len(self.text) or self.text[self.i] != '"':
                raise self.fail("expected a quoted key or '}'")
            key_start, key = self.string()
            key_end = self.i
            self.skip()
            if self.i >= len(self.text) or self.text[self.i] != ":":
                raise self.fail(f"expected ':' after the key {key!r}")
            self.i += 1
            members.append(Member(key=key, key_start=key_start, key_end=key_end, value=self.value(depth + 1)))
            self.skip()
            if self.i < len(self.text) and self.text[self.i] == ",":
                self.i += 1
            elif self.i >= len(self.text) or self.text[self.i] != "}":
                raise self.fail("expected ',' or '}'")

    def arr(self, depth: int) -> Node:
        start = self.i
        self.i += 1
        items: list[Node] = []
        while True:
            self.skip()
            if self.i < len(self.text) and self.text[self.i] == "]":
                self.i += 1
                return Node(kind="array", start=start, end=self.i, items=tuple(items))
            items.append(self.value(depth + 1))
            self.skip()
            if self.i < len(self.text) and self.text[self.i] == ",":
                self.i += 1
            elif self.i >= len(self.text) or self.text[self.i] != "]":
                raise self.fail("expected ',' or ']'")


def parse(text: str, *, name: str = "<text>") -> Node:
    """The top-level value of ``text`` (JSON, or JSONC: comments, trailing
    commas); :class:`JsoncError` naming ``name``, line and column otherwise."""
    p = _Parser(text, name)
    node = p.value(0)
    p.skip()
    if p.i != len(text):
        raise p.fail("more after the top-level value")
    return node

"""The two things safebox needs from git's config files: where hooks run
from (``core.hooksPath``) and which other files are read as config
(``include.path``, ``includeIf.<condition>.path``).

Both name files that run code on the host later: a hook planted in the
hooks directory runs at the user's next commit, and an included file can
set ``core.fsmonitor`` or ``core.hooksPath`` itself. ``builder/resolve.py``
keeps what they name read-only inside (or watches it when it does not exist
yet).

The parser follows git's own (``config.c``: ``git_parse_source``,
``get_base_var``, ``get_value``, ``parse_value``) for the syntax that can
hide a key: quoted subsections, ``[core] key = v`` on the header's line,
quotes and escapes in values, backslash-newline continuations, comments.
A file git would refuse as a whole ("bad config line") is read up to the
bad line: git then runs no hook at all, so what comes after cannot matter.

Standard library only, and cheap: a file that mentions neither
``hookspath`` nor ``include`` (most ``.git/config`` files) is not parsed.
"""

from __future__ import annotations

import os

from safebox._record import read_small

__all__ = ["MAX_CONFIG_BYTES", "MAX_INCLUDE_DEPTH", "ConfigRefs", "config_refs", "entries", "read_config"]

#: git refuses deeper include chains (``MAX_INCLUDE_DEPTH`` in config.c).
MAX_INCLUDE_DEPTH = 10
MAX_CONFIG_BYTES = 1 << 20

_SPACE = " \t\n\v\f\r"
_ESCAPES = {"t": "\t", "b": "\b", "n": "\n", "\\": "\\", '"': '"'}


def _is_key_char(c: str) -> bool:
    return c.isascii() and (c.isalnum() or c == "-")


class _Source:
    """A config text as git's ``get_next_char`` sees it: CRLF is LF, and the
    end of the text is an LF that sets ``eof``."""

    def __init__(self, text: str) -> None:
        self.text = text.removeprefix("\ufeff")
        self.pos = 0
        self.eof = False

    def next(self) -> str:
        if self.pos >= len(self.text):
            self.eof = True
            return "\n"
        c = self.text[self.pos]
        self.pos += 1
        if c == "\r" and self.text.startswith("\n", self.pos):
            self.pos += 1
            return "\n"
        return c


def _base_var(src: _Source) -> str | None:
    """``[section]``, ``[section "sub"]`` or ``[section.sub]`` after the
    ``[``: the lower-cased stem (``includeif.gitdir:~/w/``), None if bad."""
    name: list[str] = []
    while True:
        c = src.next()
        if src.eof:
            return None
        if c == "]":
            return "".join(name)
        if c in _SPACE:
            break
        if not _is_key_char(c) and c != ".":
            return None
        name.append(c.lower())
    while c in _SPACE:  # [section "extension"]
        if c == "\n":
            return None
        c = src.next()
    if c != '"':
        return None
    name.append(".")
    while True:
        c = src.next()
        if c == "\n":
            return None
        if c == '"':
            break
        if c == "\\":
            c = src.next()
            if c == "\n":
                return None
        name.append(c)  # subsections keep their case
    return "".join(name) if src.next() == "]" else None


def _value(src: _Source) -> str | None:
    """A value after ``=``: quotes, escapes, continuations, comments; None if git would refuse it."""
    out: list[str] = []
    space = 0
    quote = comment = False
    while True:
        c = src.next()
        if c == "\n":
            return None if quote else "".join(out)
        if comment:
            continue
        if c in _SPACE and not quote:
            if out:
                space += 1
            continue
        if not quote and c in "#;":
            comment = True
            continue
        if space:
            out.append(" " * space)
            space = 0
        if c == "\\":
            c = src.next()
            if c == "\n":
                continue  # a continuation line (at the end of the text: nothing)
            if c not in _ESCAPES:
                return None
            out.append(_ESCAPES[c])
            continue
        if c == '"':
            quote = not quote
            continue
        out.append(c)


def entries(text: str) -> list[tuple[str, str | None]]:
    """Every ``(section[.subsection].key, value)`` of a config text, in order;
    a key without ``=`` has the value None (git's boolean true). Section and
    key are lower-cased as git does."""
    src = _Source(text)
    out: list[tuple[str, str | None]] = []
    stem = ""
    comment = False
    while True:
        c = src.next()
        if c == "\n":
            if src.eof:
                return out
            comment = False
            continue
        if comment or c in _SPACE:
            continue
        if c in "#;":
            comment = True
            continue
        if c == "[":
            base = _base_var(src)
            if not base:
                return out  # git: bad config line
            stem = base + "."
            continue
        if not c.isascii() or not c.isalpha():
            return out
        key, c = _key(src, c)
        value = None
        if c != "\n":
            if c != "=":
                return out
            value = _value(src)
            if value is None:
                return out
        out.append((stem + key, value))
        if src.eof:
            return out


def _key(src: _Source, first: str) -> tuple[str, str]:
    """The lower-cased key that starts with ``first``, and the character
    after it and the blanks that follow."""
    key = [first.lower()]
    while True:
        c = src.next()
        if src.eof or not _is_key_char(c):
            break
        key.append(c.lower())
    while c in " \t":
        c = src.next()
    return "".join(key), c


def read_config(path: str) -> str | None:
    """The text of a config file (its first 1 MiB, more than git would ever
    need), or None when there is none to read."""
    raw = read_small(path, MAX_CONFIG_BYTES)
    return None if raw is None else raw.decode("utf-8", "surrogateescape")


class ConfigRefs:
    """What a set of config files (and the files they include) names."""

    def __init__(self) -> None:
        self.hooks: list[str] = []  # core.hooksPath values, ~ expanded, relative ones as written
        self.includes: list[str] = []  # included files, absolute, existing or not
        self.read: list[str] = []  # config files read, in order


def _expand(value: str, home: str) -> str:
    """git's ``interpolate_path``: ``~`` and ``~/`` are the user's home, ``~user/`` that user's."""
    if value == "~" or value.startswith("~/"):
        return home + value[1:]
    if value.startswith("~"):
        return os.path.expanduser(value)  # ~user: a passwd lookup, only here
    return value


def config_refs(files: list[str], *, home: str, refs: ConfigRefs | None = None,
                cache: dict[str, str | None] | None = None) -> ConfigRefs:
    """Read ``files`` (those that exist) and, recursively, every file they
    include, whatever the ``includeIf`` condition (protecting one more file
    costs nothing; deciding git's conditions here could get one wrong).
    ``cache`` holds texts already read, so shared includes are read once."""
    out = refs if refs is not None else ConfigRefs()
    texts = cache if cache is not None else {}
    stack = [(f, 0) for f in reversed(files)]
    seen: set[str] = set(out.read)
    while stack:
        path, depth = stack.pop()
        if path in seen or depth > MAX_INCLUDE_DEPTH:
            continue
        seen.add(path)
        if path not in texts:
            texts[path] = read_config(path)
        text = texts[path]
        if text is None:
            continue
        out.read.append(path)
        lowered = text.lower()
        if "hookspath" not in lowered and "include" not in lowered:
            continue  # most .git/config files: nothing to parse
        base = os.path.dirname(path)
        nested: list[tuple[str, int]] = []
        for name, value in entries(text):
            if not value:
                continue
            if name == "core.hookspath":
                out.hooks.append(_expand(value, home))
            elif name == "include.path" or (name.startswith("includeif.") and name.endswith(".path")):
                target = os.path.normpath(os.path.join(base, _expand(value, home)))
                out.includes.append(target)
                nested.append((target, depth + 1))
        stack.extend(reversed(nested))
    return out

"""What :class:`~safebox.api.Sandbox` and :class:`~safebox.api.Popen` share:
subprocess's constants and errors, how a command becomes an argv, and what
a run reports (:class:`Event`, :class:`CompletedRun`)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

PIPE = subprocess.PIPE
DEVNULL = subprocess.DEVNULL
STDOUT = subprocess.STDOUT


class TimeoutExpired(subprocess.TimeoutExpired):
    """``timeout`` passed: the whole sandbox was killed (as subprocess.run does).
    ``output`` and ``stderr`` hold what was read (bytes, as subprocess's)."""


class CalledProcessError(subprocess.CalledProcessError):
    """``check=True`` and the command's exit status was not 0 (subprocess's attributes)."""


#: What a command may be: a sequence of arguments, or with ``shell=True`` a
#: string for ``/bin/sh -c``.
Args = Sequence[str | bytes | os.PathLike[str]] | str | bytes


def argv_of(args: Args, shell: bool) -> tuple[str, ...]:
    """The argv to run: a str is never split on spaces (``"echo hi"`` is one
    program's name to subprocess, a shell line to a person: refused unless
    ``shell=True`` says which)."""
    if isinstance(args, (str, bytes)):
        if not shell:
            raise TypeError(f"the command is a string ({args!r}): pass a list of arguments, "
                            "or shell=True to run it with /bin/sh -c")
        return ("/bin/sh", "-c", os.fsdecode(args))
    argv = tuple(os.fsdecode(a) for a in args)
    if shell:  # subprocess's meaning: the first item is the script, the rest its $0, $1...
        if not argv:
            raise ValueError("shell=True with an empty list: nothing to run")
        return ("/bin/sh", "-c", *argv)
    if not argv:
        raise ValueError("an empty command: nothing to run")
    return argv


def cmd_of(args: Args) -> str | bytes | list[Any]:
    """The command as subprocess's exceptions name it: as it was given."""
    return args if isinstance(args, (str, bytes)) else list(args)


@dataclass(frozen=True)
class Event:
    """Something that happened in a sandbox.

    ``kind``: ``start`` (``data``: layers), ``stop`` (``returncode``,
    ``duration``), ``network`` (a refused connection: ``host``, ``port``,
    ``protocol``, ``decision``, ``rule``, ``message``: the line the client
    was answered with), ``violation`` (a refusal the violations
    feed explained: the ``denied`` audit event's fields with ``rule`` and
    ``fix``; docs/violations.md), ``message`` (a line ``safebox exec``
    would print on stderr: ``text``)."""

    kind: str
    time: float
    args: tuple[str, ...] | None = None
    pid: int | None = None
    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CompletedRun:
    """What :meth:`Sandbox.run` returns (subprocess.CompletedProcess's vocabulary)."""

    args: tuple[str, ...]
    returncode: int
    stdout: Any  # bytes, str in text mode, None when not captured
    stderr: Any
    duration: float
    events: tuple[Event, ...]

    def check_returncode(self) -> None:
        """Raise :class:`CalledProcessError` when ``returncode`` is not 0."""
        if self.returncode:
            raise CalledProcessError(self.returncode, list(self.args), self.stdout, self.stderr)

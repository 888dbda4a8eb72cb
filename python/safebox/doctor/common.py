"""What every doctor check returns (:class:`Check`, :class:`Status`) and the
wording the checks share. Standard library only (safebox/doctor/__init__.py)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

# Seconds: version queries are instant; creating a sandbox may page in bwrap.
VERSION_TIMEOUT = 5.0
SANDBOX_TIMEOUT = 15.0


class Status(StrEnum):
    """Outcome of one check."""

    OK = "ok"
    WARN = "warn"
    FAIL = "fail"


@dataclass(frozen=True)
class Check:
    """The result of one host check.

    ``found`` says what is on the host, ``fix`` the exact command or step that
    makes a non-ok check pass (``None`` when ok), and ``required`` whether a
    ``fail`` here makes :func:`~safebox.doctor.exit_code` return 1.
    """

    name: str
    status: Status
    found: str
    fix: str | None
    required: bool


def errno_name(err: int) -> str:
    """``EPERM`` for 1: the symbolic name of an errno (its number when unknown)."""
    import errno

    return errno.errorcode.get(err, str(err))


def first_line(text: str) -> str:
    """The first non-blank line of a tool's output, stripped ("" when none)."""
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


def version_tuple(text: str) -> tuple[int, ...] | None:
    """The first ``X.Y[.Z]`` in ``text`` as numbers, or None."""
    import re

    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not m:
        return None
    return tuple(int(g) for g in m.groups() if g is not None)

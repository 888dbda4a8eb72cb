""":func:`check_host`: ``safebox doctor``'s checks for a harness (docs/doctor.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from safebox.doctor import Check


@dataclass(frozen=True)
class HostCheck:
    """``safebox doctor``'s result: every check, and whether a required one failed."""

    checks: tuple[Check, ...]
    ok: bool

    def __getitem__(self, name: str) -> Check:
        return next(c for c in self.checks if c.name == name)


def check_host() -> HostCheck:
    """Run ``safebox doctor``'s checks (docs/doctor.md) and return them, so
    that a harness can degrade knowingly (``check_host()["bwrap"].status``)."""
    from pathlib import Path

    from safebox import doctor
    from safebox.run.helper_binary import find_helper

    checks = doctor.run_checks(helper_path=Path(find_helper()))
    return HostCheck(checks=tuple(checks), ok=doctor.exit_code(checks) == 0)

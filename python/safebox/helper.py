"""Locating the helper binary and reading what it reports (``HelperStatus``).

The helper writes one JSON line on a status descriptor just before exec
(docs/helper-protocol.md); Python never parses the helper's human stderr.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from safebox.errors import HelperError

STATUS_VERSION = 1


def find_helper() -> Path:
    """The helper installed inside the package (``_bin/safebox-helper``)."""
    override = os.environ.get("SAFEBOX_HELPER")
    if override:
        # For the test suite and packagers; the path must be absolute.
        p = Path(override)
        if not p.is_absolute():
            raise HelperError(f"SAFEBOX_HELPER must be an absolute path, not {override!r}")
        return p
    return Path(__file__).resolve().parent / "_bin" / "safebox-helper"


def check_helper(path: Path) -> None:
    """Refuse a helper that is missing, not executable, or writable by us."""
    if not path.is_file():
        raise HelperError(f"helper not found at {path}",
                          hint="reinstall safebox (pip install . compiles it) or run `safebox doctor`")
    if not os.access(path, os.X_OK):
        raise HelperError(f"helper at {path} is not executable", hint="run `safebox doctor`")


@dataclass(frozen=True)
class LandlockStatus:
    """What the helper's Landlock step achieved."""

    abi: int
    kernel_abi: int
    fs: bool | None
    net: bool | None
    scope: bool | None
    rules: int
    skipped: int


@dataclass(frozen=True)
class HelperStatus:
    """The helper's one-line report."""

    ok: bool
    error: str | None
    landlock: LandlockStatus | None
    nnp: bool
    caps: bool
    seccomp: bool
    bridges: int

    def summary(self) -> str:
        """One human line: which layers were enforced, at which ABI."""
        if not self.ok:
            return f"helper refused: {self.error}"
        parts = []
        ll = self.landlock
        if ll is not None:
            def flag(v: bool | None) -> str:
                return "-" if v is None else ("yes" if v else "NO")
            parts.append(f"landlock abi {ll.abi}/{ll.kernel_abi} (fs {flag(ll.fs)}, net {flag(ll.net)}, "
                         f"scope {flag(ll.scope)}, {ll.rules} rules)")
        parts.append(f"no_new_privs {'yes' if self.nnp else 'NO'}")
        parts.append(f"capabilities dropped {'yes' if self.caps else 'NO'}")
        parts.append(f"seccomp {'yes' if self.seccomp else 'NO'}")
        return ", ".join(parts)


def parse_status(line: bytes) -> HelperStatus:
    """Parse the status line; raises HelperError on anything unexpected."""
    try:
        d = json.loads(line)
        if d.get("v") != STATUS_VERSION:
            raise ValueError(f"status version {d.get('v')!r}")
        if not d.get("ok"):
            return HelperStatus(False, str(d.get("error", "unknown error")), None, False, False, False, 0)
        ll = d.get("landlock")
        lls = None
        if ll is not None:
            lls = LandlockStatus(int(ll["abi"]), int(ll.get("kernel_abi", ll["abi"])), ll.get("fs"),
                                 ll.get("net"), ll.get("scope"), int(ll.get("rules", 0)),
                                 int(ll.get("skipped", 0)))
        return HelperStatus(True, None, lls, bool(d.get("nnp")), bool(d.get("caps")),
                            bool(d.get("seccomp")), int(d.get("bridges", 0)))
    except (ValueError, KeyError, TypeError) as e:
        raise HelperError(f"unreadable helper status line ({e})") from None


def read_status(fd: int) -> HelperStatus | None:
    """Read one line from ``fd`` (blocking). None when it closed without a line
    (the helper never ran: bwrap failed before it)."""
    buf = b""
    while b"\n" not in buf and len(buf) < 65536:
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        buf += chunk
    if not buf.strip():
        return None
    return parse_status(buf.split(b"\n", 1)[0])

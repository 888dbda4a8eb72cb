"""Locating the helper binary and reading what it reports (``HelperStatus``).

The helper writes one JSON line on a status descriptor just before exec
(docs/helper-protocol.md); Python never parses the helper's human stderr.

Called ``helper`` before it moved into run/: beside builder/helper_policy.py
(what the helper is told to apply) that name said nothing of which side of
the helper it is; this one is the binary itself, found and heard from.
"""

from __future__ import annotations

import os

from safebox._record import Frozen, read_until
from safebox.errors import HelperError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

STATUS_VERSION = 1


def find_helper() -> str:
    """The helper installed inside the package (``_bin/safebox-helper``)."""
    override = os.environ.get("SAFEBOX_HELPER")
    if override:
        # For the test suite and packagers; the path must be absolute.
        if not override.startswith("/"):
            raise HelperError(f"SAFEBOX_HELPER must be an absolute path, not {override!r}")
        return override
    # safebox/_bin/, beside this module's package (run/).
    return os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(__file__))), "_bin", "safebox-helper")


def check_helper(path: str) -> None:
    """Refuse a helper that is missing or not executable."""
    if not os.path.isfile(path):
        raise HelperError(f"helper not found at {path}",
                          hint="reinstall safebox (pip install . compiles it) or run `safebox doctor`")
    if not os.access(path, os.X_OK):
        raise HelperError(f"helper at {path} is not executable", hint="run `safebox doctor`")


#: The inode of the initial user namespace (PROC_USER_INIT_INO, include/linux/proc_ns.h).
_INIT_USER_NS_INO = 0xEFFFFFFD


def _outer_uid(uid: int) -> int | None:
    """``uid`` of this user namespace as its parent sees it; None when this
    namespace does not map it (the kernel shows such an owner as the
    overflow uid, 65534)."""
    with open("/proc/self/uid_map") as f:
        for line in f:
            inside, outside, count = (int(x) for x in line.split())
            if inside <= uid < inside + count:
                return outside + uid - inside
    return None


def replaceable(path: str, *, stat: Callable[[str], os.stat_result] = os.stat) -> str | None:
    """Why a process other than root could replace the helper at ``path``,
    or None when only root can: the file and its directory must be owned by
    root and writable by neither their group nor everyone.

    One rule for ``safebox doctor`` (its ``helper`` check fails) and
    ``safebox exec`` (``--strict`` refuses, a plain run warns): the two
    disagreed on a user's own venv (issue 11, item 9). Three stats: cheap
    enough for the exec hot path.

    In a user namespace (``unshare -r``, rootless containers) owners are
    judged as the parent namespace sees them: there a user's own venv shows
    as uid 0. An owner the namespace does not map (shown as 65534) may be
    root or anyone else outside it: that cannot be told from inside, so it
    counts as not root (fail closed)."""
    try:
        nested = os.stat("/proc/self/ns/user").st_ino != _INIT_USER_NS_INO
    except OSError:
        nested = False  # no /proc: the uids stat reports are the only ones there are
    for p in (path, os.path.dirname(path)):
        st = stat(p)
        uid = _outer_uid(st.st_uid) if nested else st.st_uid
        if uid is None:
            return (f"{p} is owned by a user this user namespace does not map (shown as uid {st.st_uid}), "
                    "which may not be root")
        if uid != 0:
            where = f" (uid {st.st_uid} in this user namespace)" if nested else ""
            return f"{p} is owned by uid {uid}{where}, not root"
        if st.st_mode & 0o022:
            return f"{p} is group- or world-writable (mode {st.st_mode & 0o7777:04o})"
    return None


class LandlockStatus(Frozen):
    """What the helper's Landlock step achieved."""

    abi: int
    kernel_abi: int
    fs: bool | None
    net: bool | None
    scope: bool | None
    rules: int
    skipped: int


class HelperStatus(Frozen):
    """The helper's one-line report."""

    ok: bool
    error: str | None
    landlock: LandlockStatus | None
    nnp: bool
    caps: bool
    seccomp: bool
    bridges: int

    def unenforced(self) -> list[str]:
        """The requested parts this host could not enforce (empty when all were)."""
        out = []
        ll = self.landlock
        if ll is not None:
            for part, value in (("filesystem", ll.fs), ("TCP", ll.net), ("scopes", ll.scope)):
                if value is False:
                    out.append(f"Landlock {part} (kernel ABI {ll.kernel_abi}, used {ll.abi})")
        if self.ok and not self.seccomp:
            out.append("seccomp")
        return out

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


# The exact opening of a success line (docs/helper-protocol.md): checking it
# needs no JSON parser on the hot path; details are parsed only when asked for.
_OK_PREFIX = b'{"v":1,"ok":true,'


def status_ok(line: bytes) -> bool:
    """True when ``line`` is a success status line."""
    return line.startswith(_OK_PREFIX)


def parse_status(line: bytes) -> HelperStatus:
    """Parse the status line; raises HelperError on anything unexpected."""
    import json

    try:
        d = json.loads(line)
        if d.get("v") != STATUS_VERSION:
            raise ValueError(f"status version {d.get('v')!r}")
        if not d.get("ok"):
            return HelperStatus(ok=False, error=str(d.get("error", "unknown error")), landlock=None,
                                nnp=False, caps=False, seccomp=False, bridges=0)
        ll = d.get("landlock")
        lls = None
        if ll is not None:
            lls = LandlockStatus(abi=int(ll["abi"]), kernel_abi=int(ll.get("kernel_abi", ll["abi"])),
                                 fs=ll.get("fs"), net=ll.get("net"), scope=ll.get("scope"),
                                 rules=int(ll.get("rules", 0)), skipped=int(ll.get("skipped", 0)))
        return HelperStatus(ok=True, error=None, landlock=lls, nnp=bool(d.get("nnp")), caps=bool(d.get("caps")),
                            seccomp=bool(d.get("seccomp")), bridges=int(d.get("bridges", 0)))
    except (ValueError, KeyError, TypeError) as e:
        raise HelperError(f"unreadable helper status line ({e})") from None


def read_status_line(fd: int) -> bytes | None:
    """Read one line from ``fd`` (blocking). None when it closed without a line
    (the helper never ran: bwrap failed before it)."""
    buf = read_until(fd, b"\n")
    if not buf.strip():
        return None
    return buf.split(b"\n", 1)[0]

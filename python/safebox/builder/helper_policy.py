"""Pure: the helper policy file (format v3, ``docs/helper-protocol.md``).

Paths are hex-encoded so any path bytes are unambiguous; the file ends with
``end`` so a truncated file is rejected by the helper.
"""

from __future__ import annotations

import os

from safebox._record import Frozen, StrEnum

FORMAT_VERSION = 3


class FsAccess(StrEnum):
    """Landlock access classes the helper understands (see helper-protocol.md)."""

    READ = "read"
    READDIR = "readdir"
    DEV = "dev"
    WRITE = "write"


class NetMode(StrEnum):
    """How Landlock restricts TCP (ABI >= 4)."""

    OFF = "off"  # no TCP connect or bind at all
    PROXY = "proxy"  # TCP connect only to the listed ports
    HOST = "host"  # not restricted by Landlock


class Scope(StrEnum):
    """Landlock scopes (ABI >= 6)."""

    ABSTRACT_UNIX = "abstract_unix"
    SIGNAL = "signal"


class HelperPolicy(Frozen):
    """Everything the helper enforces, already decided by Python."""

    fs_rules: tuple[tuple[FsAccess, str], ...]
    net: NetMode
    connect_ports: tuple[int, ...] = ()
    bind_any: bool = False
    scopes: tuple[Scope, ...] = (Scope.ABSTRACT_UNIX, Scope.SIGNAL)
    seccomp_path: str | None = None
    # The observing program (violations feed): installed with a listener
    # instead of seccomp_path where the kernel allows (docs/violations.md).
    observe_path: str | None = None
    strict: bool = False
    abi_max: int | None = None
    landlock: bool = True
    # Ports the helper listens on inside and hands to the proxy (--handoff-fd).
    listens: tuple[int, ...] = ()
    publishes: tuple[tuple[int, str], ...] = ()
    socat_path: str | None = None
    # Resource limits the helper sets before exec (safebox/run/limits.py); 0: none.
    rlimit_nproc: int = 0
    rlimit_data: int = 0
    extra: tuple[tuple[str, str], ...] = ()  # never set in production; for tests only


def _hex(path: str | bytes) -> str:
    raw = os.fsencode(path)
    return raw.hex()


def render(policy: HelperPolicy) -> bytes:
    """Serialise ``policy`` to the exact bytes of the helper policy file."""
    lines = [f"safebox-policy {FORMAT_VERSION}"]
    lines.append(f"strict {int(policy.strict)}")
    if policy.abi_max is not None:
        lines.append(f"abi_max {policy.abi_max}")
    lines.append(f"landlock {'on' if policy.landlock else 'off'}")
    for access, path in policy.fs_rules:
        lines.append(f"fs {access.value} {_hex(path)}")
    lines.append(f"net {policy.net.value}")
    for port in policy.connect_ports:
        lines.append(f"connect_port {port}")
    lines.append(f"bind {'any' if policy.bind_any else 'none'}")
    for scope in policy.scopes:
        lines.append(f"scope {scope.value}")
    if policy.seccomp_path is not None:
        lines.append(f"seccomp {_hex(policy.seccomp_path)}")
    if policy.observe_path is not None:
        lines.append(f"seccomp_observe {_hex(policy.observe_path)}")
    for port in policy.listens:
        lines.append(f"listen {port}")
    if policy.publishes:
        if policy.socat_path is None:
            raise ValueError("publishes need socat_path")
        lines.append(f"socat {_hex(policy.socat_path)}")
        for port, sock in policy.publishes:
            lines.append(f"publish {port} {_hex(sock)}")
    if policy.rlimit_nproc:
        lines.append(f"rlimit nproc {policy.rlimit_nproc}")
    if policy.rlimit_data:
        lines.append(f"rlimit data {policy.rlimit_data}")
    for key, value in policy.extra:
        lines.append(f"{key} {value}")
    lines.append("end")
    return ("\n".join(lines) + "\n").encode()


# The fields of each line that hold a hex-encoded path (by the line's first word).
_HEX_FIELDS = {"fs": (2,), "seccomp": (1,), "seccomp_observe": (1,), "socat": (1,), "publish": (2,)}


def readable(data: bytes) -> str:
    """The policy file for people (``--dry-run``): the same lines with every
    hex-encoded path decoded and shell-quoted when it needs quoting (a
    non-printable path is shown as a Python bytes literal). Not the file
    format: the helper reads only hex."""
    import shlex

    out = []
    for line in data.decode("ascii", "replace").splitlines():
        fields = line.split(" ")
        for i in _HEX_FIELDS.get(fields[0], ()):
            if i < len(fields):
                try:
                    raw = bytes.fromhex(fields[i])
                except ValueError:
                    continue
                text = raw.decode("utf-8", "surrogateescape")
                fields[i] = shlex.quote(text) if text.isprintable() else repr(raw)
        out.append(" ".join(fields))
    return "\n".join(out) + "\n"


def write_policy_file(path: str | os.PathLike[str], data: bytes) -> None:
    """Create ``path`` with mode 0600 (never following a symlink) and write ``data``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)

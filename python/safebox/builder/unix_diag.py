"""Listening unix sockets by identity: the kernel's sock_diag (netlink,
``UNIX_DIAG_VFS``) gives, for every path socket bound in this network
namespace, the device and inode of the file it was bound to and the name it
was bound at.

``/proc/net/unix`` gives only the name, as it was at ``bind()``. A socket
reached under another name (a hard link to its file, the file renamed after
the bind, a bind to a relative name) cannot be matched to an allowed path by
name. ``check_allowed`` matches it by identity instead, and refuses an
allowed path that is not the name its socket was bound at (issue 22,
item 10; docs/policy-reference.md, "Unix sockets").
"""

from __future__ import annotations

import os
import stat
import struct
from dataclasses import dataclass

from safebox.errors import BuildError

_NETLINK_SOCK_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_NLM_F_REQUEST, _NLM_F_DUMP = 0x1, 0x300
_NLMSG_DONE, _NLMSG_ERROR = 3, 2
_UDIAG_SHOW_NAME, _UDIAG_SHOW_VFS = 0x1, 0x2
_UNIX_DIAG_NAME, _UNIX_DIAG_VFS = 0, 1
_ALL_STATES = 0xFFFFFFFF


@dataclass(frozen=True)
class BoundSocket:
    """A bound path socket: the name it was bound at (possibly relative)
    and its file's identity (``st_dev``, ``st_ino``)."""

    name: str
    dev: int
    ino: int


def _st_dev(kdev: int) -> int:
    """The kernel's internal dev_t (major << 20 | minor), as ``st_dev``."""
    return os.makedev(kdev >> 20, kdev & 0xFFFFF)


def listening() -> list[BoundSocket]:
    """Every unix socket of this network namespace bound to a path (stream
    listeners and datagram sockets alike: both are reached by path).
    Raises BuildError when the kernel does not answer (safebox then cannot
    tell which socket an allowed path is, and refuses to guess)."""
    import socket

    req = struct.pack("=BBHIII8x", socket.AF_UNIX, 0, 0, _ALL_STATES, 0, _UDIAG_SHOW_NAME | _UDIAG_SHOW_VFS)
    # unix_diag_req: family, protocol, pad, states, ino, show, cookie[2] (zero: any)
    msg = struct.pack("=IHHII", 16 + len(req), _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST | _NLM_F_DUMP, 1, 0) + req
    out: list[BoundSocket] = []
    try:
        with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG) as s:
            s.sendto(msg, (0, 0))
            while True:
                data = s.recv(1 << 16)
                at = 0
                while at + 16 <= len(data):
                    length, kind = struct.unpack_from("=IH", data, at)
                    if length < 16 or at + length > len(data):
                        return out
                    if kind == _NLMSG_DONE:
                        return out
                    if kind == _NLMSG_ERROR:
                        err = -struct.unpack_from("=i", data, at + 16)[0]
                        raise OSError(err, os.strerror(err))
                    sock = _parse(data[at + 16:at + length])
                    if sock is not None:
                        out.append(sock)
                    at += (length + 3) & ~3
                if not data:
                    return out
    except OSError as e:
        raise BuildError(f"cannot list the host's unix sockets (sock_diag: {e.strerror or e}); "
                         "network.allowUnixSockets cannot be checked",
                         hint="use network.allowAllUnixSockets, or run where sock_diag answers") from None


def _parse(body: bytes) -> BoundSocket | None:
    """One unix_diag_msg and its attributes; None without a name or a file."""
    at = 16  # family, type, state, pad, ino, cookie[2]
    name: bytes | None = None
    vfs: tuple[int, int] | None = None
    while at + 4 <= len(body):
        length, kind = struct.unpack_from("=HH", body, at)
        if length < 4 or at + length > len(body):
            break
        value = body[at + 4:at + length]
        if kind == _UNIX_DIAG_NAME:
            name = value
        elif kind == _UNIX_DIAG_VFS and len(value) >= 8:
            ino, kdev = struct.unpack_from("=II", value)
            vfs = (_st_dev(kdev), ino)
        at += (length + 3) & ~3
    if not name or name[:1] == b"\0" or vfs is None:
        return None  # abstract, or unnamed
    return BoundSocket(os.fsdecode(name.split(b"\0", 1)[0]), vfs[0], vfs[1])


def check_allowed(allowed: tuple[str, ...], sockets: list[BoundSocket]) -> None:
    """Refuse an allowed path that is a live socket's file under a name
    other than the one it was bound at: a hard link, a rename after the
    bind, a relative bind. By name, such a path could stand for any socket
    (an earlier run could have linked ``docker.sock`` there); by identity,
    safebox knows which socket it is, and asks for its own name."""
    by_id = {(b.dev, b.ino): b for b in sockets}
    for path in allowed:
        real = os.path.realpath(path)
        try:
            st = os.stat(real)
        except OSError:
            continue  # not there (yet): nothing is reachable through it
        if not stat.S_ISSOCK(st.st_mode):
            continue
        bound = by_id.get((st.st_dev, st.st_ino))
        if bound is None:
            continue  # no listener in this network namespace: connect() is refused anyway
        if bound.name.startswith("/") and os.path.realpath(bound.name) == real:
            continue
        how = ("bound with the relative name " + repr(bound.name)) if not bound.name.startswith("/") else (
            f"bound at {bound.name}: {real} is a hard link to it, or it was renamed")
        raise BuildError(f"network.allowUnixSockets: {path} is not its socket's own name (the socket was {how}); "
                         "safebox allows a socket by the path it was bound at",
                         hint=f"list the socket's own path instead of {path}"
                              + (f" ({bound.name})" if bound.name.startswith("/") and os.path.lexists(bound.name)
                                 else "; or bind it at an absolute path that stays put"))


def unhideable(allowed: tuple[str, ...], sockets: list[BoundSocket]) -> tuple[list[str], list[str]]:
    """The host sockets that bubblewrap's masks may not hide, each described,
    as (certain, possible): a mask covers one name, and these may have a name
    safebox does not know.

    - certain: its file has more than one link. The mask covers the recorded
      name; a hard link elsewhere still reaches the socket.
    - possible: bound with a relative name (``/proc/net/unix`` and sock_diag
      give the name as passed to ``bind()``, not the directory it was
      relative to), or its recorded name no longer holds its file: renamed
      after the bind (a name safebox does not know) or unlinked (no name at
      all: harmless), which the kernel does not tell apart. Every process of
      the host's network namespace counts, other users' too, so these are
      only said with -v.

    Allowed sockets are left out."""
    allowed_ids: set[tuple[int, int]] = set()
    for path in allowed:
        try:
            st = os.stat(os.path.realpath(path))
            allowed_ids.add((st.st_dev, st.st_ino))
        except OSError:
            pass
    certain: list[str] = []
    possible: list[str] = []
    for b in sockets:
        if (b.dev, b.ino) in allowed_ids:
            continue
        if not b.name.startswith("/"):
            possible.append(f"{b.name!r} (bound with a relative name)")
            continue
        try:
            st = os.lstat(b.name)
            ident: tuple[int, int] | None = (st.st_dev, st.st_ino)
        except OSError:
            ident = None
        if ident != (b.dev, b.ino):
            possible.append(f"{b.name} (renamed or removed since its bind)")
        elif st.st_nlink > 1:
            certain.append(f"{b.name} (with {st.st_nlink - 1} more hard link{'s' if st.st_nlink > 2 else ''})")
    return sorted(set(certain)), sorted(set(possible))


__all__ = ["BoundSocket", "check_allowed", "listening", "unhideable"]

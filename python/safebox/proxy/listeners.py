"""The proxy's listening sockets: made here (unix, 0600 before listen) or
handed over by the helper over ``--handoff-fd`` and checked. Below both
deferred.py (which holds them until the first client) and server.py (which
serves them): neither imports the other for these."""

from __future__ import annotations

import _socket
import os
import sys

from safebox.errors import ProxyError

__all__ = ["BACKLOG", "HANDOFF_TIMEOUT", "check_listeners", "receive_fds"]

#: Listen backlog; the kernel clamps it to net.core.somaxconn (4096 by default).
BACKLOG = 4096
#: How long :meth:`DeferredProxy.adopt` waits for the helper: bwrap's mounts
#: and the helper's preparation (opening every Landlock path) come first.
HANDOFF_TIMEOUT = 30.0
#: Two listeners (127.0.0.1 and ::1) per port, eight ports at most (helper-protocol.md).
MAX_HANDOFF_FDS = 16
_FDS_SIZE = 4  # sizeof(int), the unit of SCM_RIGHTS


def receive_fds(handoff: _socket.socket) -> tuple[bytes, list[int]]:
    """One message from the helper: its tag byte and the descriptors sent
    with it (close-on-exec from the start).  Raises OSError, TimeoutError;
    ProxyError (descriptors closed) when the kernel truncated the list."""
    fds: list[int] = []
    msg, anc, flags, _ = handoff.recvmsg(16, _socket.CMSG_SPACE(MAX_HANDOFF_FDS * _FDS_SIZE),
                                         _socket.MSG_CMSG_CLOEXEC)
    for level, kind, data in anc:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            whole = len(data) - len(data) % _FDS_SIZE
            fds += [int.from_bytes(data[i:i + _FDS_SIZE], sys.byteorder, signed=True)
                    for i in range(0, whole, _FDS_SIZE)]
    if flags & (_socket.MSG_CTRUNC | _socket.MSG_TRUNC):
        for fd in fds:
            os.close(fd)
        raise ProxyError("the helper sent more than the proxy ports (message truncated)")
    return msg, fds


def check_listeners(tag: bytes, fds: list[int], ports: dict[int, str]) -> list[_socket.socket]:
    """Each descriptor must be a listening TCP socket on 127.0.0.1 or ::1
    bound to one of ``ports``, one per address family and port, with an IPv4
    one for every port.  Returns them as sockets; on any mismatch closes all
    and raises :class:`ProxyError` naming what was wrong."""
    socks: list[_socket.socket] = []
    try:
        if tag != b"L":
            raise ProxyError(f"unexpected proxy-port message from the helper: {tag!r}")
        seen: set[tuple[int, int]] = set()
        while fds:
            fd = fds.pop(0)
            try:
                s = _socket.socket(fileno=fd)
            except OSError:
                os.close(fd)
                raise ProxyError(f"the helper handed over descriptor {fd}, which is not a socket") from None
            socks.append(s)
            if s.family not in (_socket.AF_INET, _socket.AF_INET6) or s.type != _socket.SOCK_STREAM:
                raise ProxyError(f"the helper handed over a socket that is not TCP (family {s.family}, "
                                 f"type {s.type})")
            host, port = s.getsockname()[:2]
            if not s.getsockopt(_socket.SOL_SOCKET, _socket.SO_ACCEPTCONN):
                raise ProxyError(f"the helper handed over a socket on {host} port {port} that is not listening")
            if host not in ("127.0.0.1", "::1") or port not in ports or (s.family, port) in seen:
                raise ProxyError(f"the helper handed over an unexpected listener on {host} port {port}")
            seen.add((s.family, port))
        missing = sorted(p for p in ports if (_socket.AF_INET, p) not in seen)
        if missing:
            raise ProxyError(f"the helper did not hand over 127.0.0.1 port {missing[0]}")
    except BaseException:
        for s in socks:
            s.close()
        for fd in fds:
            os.close(fd)
        raise
    return socks


def _unix_listener(path: str) -> _socket.socket:
    """Listen on a unix socket at ``path``, mode 0600 before anyone can connect.

    A stale socket file (a killed earlier run) is replaced; any other
    existing file is an error, never overwritten."""
    import stat

    try:
        st = os.lstat(path)
    except FileNotFoundError:
        pass
    else:
        if not stat.S_ISSOCK(st.st_mode):
            raise ProxyError(f"{path} exists and is not a socket")
        os.unlink(path)
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.bind(path)
        # Not yet listening: nobody can connect before the mode is 0600.
        os.chmod(path, 0o600)
        sock.listen(BACKLOG)
    except OSError as exc:
        sock.close()
        raise ProxyError(f"cannot create proxy socket {path}: {exc.strerror}") from None
    return sock


def _tcp_listener() -> _socket.socket:
    """Listen on a free 127.0.0.1 port."""
    sock = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", 0))
        sock.listen(BACKLOG)
    except OSError as exc:
        sock.close()
        raise ProxyError(f"cannot listen on 127.0.0.1: {exc.strerror}") from None
    return sock

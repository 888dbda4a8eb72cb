"""Network isolation with no allowed domain, through the real ``safebox exec``.

Everything stays on this machine: every server listens on 127.0.0.1, ::1, a
unix socket in the scratch dir or an abstract unix name, and no test sends a
packet to any other address. The DNS test first proves, in the same sandbox,
that no route out exists before it lets the resolver try.

Which layer answers: bubblewrap's empty network namespace (ECONNREFUSED: the
host's loopback is not this loopback), the helper's Landlock TCP rules
(EACCES, both layers) and its seccomp filter (EPERM: no inet or unix socket
at all on a helper-only host without a proxy).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from netservers import OriginServer, abstract_unix_listener, serving, start_origin, stop_origin
from sbx import BOTH, BWRAP_ONLY, EACCES, ECONNREFUSED, EPERM, HELPER_ONLY, FakeHome, host, missing, token

ALL_MODES = [BOTH, BWRAP_ONLY, HELPER_ONLY]
SECCOMP_MODES = [BOTH, HELPER_ONLY]
TCP_CONNECT_ERRNO = {BOTH: EACCES, BWRAP_ONLY: ECONNREFUSED, HELPER_ONLY: EPERM}


@pytest.fixture
def http4() -> Iterator[OriginServer]:
    """An HTTP server on the host's 127.0.0.1."""
    with serving(body=b"host-server\n") as srv:
        yield srv


@pytest.fixture
def http6() -> Iterator[OriginServer]:
    """An HTTP server on the host's ::1."""
    if not socket.has_ipv6 or not Path("/proc/net/if_inet6").exists():
        missing("no IPv6 on this host")
    try:
        srv = start_origin(body=b"host-server\n", host="::1")
    except OSError as e:
        missing(f"cannot listen on ::1: {e}")
    yield srv
    stop_origin(srv)


@pytest.mark.parametrize("mode", ALL_MODES)
def test_curl_cannot_reach_a_server_on_the_host_loopback(shared_home: FakeHome, http4: OriginServer,
                                                         mode: str) -> None:
    port = http4.port
    url = f"http://127.0.0.1:{port}/control"
    control = host(["curl", "-sS", "--max-time", "5", url])
    assert control.returncode == 0 and control.stdout == "host-server\n", control
    assert [s.path for s in http4.seen] == ["/control"]

    r = shared_home.run(["curl", "-sS", "--max-time", "5", f"http://127.0.0.1:{port}/inside"], mode=mode)
    assert r.returncode == 7, r.stderr  # CURLE_COULDNT_CONNECT
    assert f"Failed to connect to 127.0.0.1 port {port}" in r.stderr
    assert [s.path for s in http4.seen] == ["/control"]


@pytest.mark.parametrize("mode", ALL_MODES)
def test_tcp_connect_to_the_host_ipv4_loopback_fails_with_the_layer_errno(shared_home: FakeHome, probe: Path,
                                                                        http4: OriginServer,
                                                                        mode: str) -> None:
    port = http4.port
    assert host([str(probe), "connect_tcp", "127.0.0.1", str(port)]).returncode == 0  # control
    r = shared_home.run([str(probe), "connect_tcp", "127.0.0.1", str(port)], mode=mode)
    assert r.returncode == TCP_CONNECT_ERRNO[mode], r.stdout + r.stderr


@pytest.mark.parametrize("mode", ALL_MODES)
def test_tcp_connect_to_the_host_ipv6_loopback_fails_with_the_layer_errno(shared_home: FakeHome, probe: Path,
                                                                        http6: OriginServer,
                                                                        mode: str) -> None:
    port = http6.port
    assert host([str(probe), "connect_tcp", "::1", str(port)]).returncode == 0  # control
    r = shared_home.run([str(probe), "connect_tcp", "::1", str(port)], mode=mode)
    assert r.returncode == TCP_CONNECT_ERRNO[mode], r.stdout + r.stderr


# A guard run first inside the same sandbox: it exits 99 (and the resolver is
# never tried) unless nothing can leave — only "lo" in /proc/net/dev (own
# network namespace), or no inet socket at all (seccomp).
_NO_ROUTE_OUT = ("n=$(tail -n +3 /proc/net/dev | grep -vc '^ *lo:'); "
                 "if [ \"$n\" -ne 0 ] && {probe} socket_udp >/dev/null; then exit 99; fi; ")


@pytest.mark.parametrize("mode", ALL_MODES)
def test_dns_lookup_fails_while_local_names_still_resolve(shared_home: FakeHome, probe: Path, mode: str) -> None:
    # Control: the name service itself works inside (/etc/hosts).
    local = shared_home.run(["getent", "hosts", "localhost"], mode=mode)
    assert local.returncode == 0 and "localhost" in local.stdout, local
    name = f"safebox-{token()}.example.invalid"
    r = shared_home.run(["sh", "-c", _NO_ROUTE_OUT.format(probe=probe) + f"getent ahosts {name}"], mode=mode)
    assert r.returncode == 2, r  # getent: key not found (no resolver reachable)
    assert r.stdout == ""


@pytest.mark.parametrize("mode", ALL_MODES)
def test_raw_sockets_are_refused(shared_home: FakeHome, own_probe: Path, mode: str) -> None:
    # Control: with a network namespace of its own (and CAP_NET_RAW there) the call succeeds.
    control = host(["unshare", "-rn", str(own_probe), "raw_socket"])
    assert control.returncode == 0, control.stdout + control.stderr
    r = shared_home.run([str(own_probe), "raw_socket"], mode=mode)
    assert r.returncode == EPERM, r.stdout + r.stderr


@pytest.fixture
def udp_server() -> Iterator[tuple[int, socket.socket]]:
    """A UDP socket bound on the host's 127.0.0.1."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    s.settimeout(0.5)
    try:
        yield s.getsockname()[1], s
    finally:
        s.close()


def _received(s: socket.socket) -> list[bytes]:
    got = []
    try:
        while True:
            got.append(s.recv(100))
    except TimeoutError:
        return got


@pytest.mark.parametrize("mode", ALL_MODES)
def test_udp_datagrams_do_not_reach_a_host_loopback_server(shared_home: FakeHome, own_probe: Path,
                                                           udp_server: tuple[int, socket.socket],
                                                           mode: str) -> None:
    port, srv = udp_server
    assert host([str(own_probe), "udp_send", "127.0.0.1", str(port)]).returncode == 0
    assert _received(srv) == [b"safebox-udp"]  # control

    r = shared_home.run([str(own_probe), "udp_send", "127.0.0.1", str(port)], mode=mode)
    if mode == HELPER_ONLY:
        assert r.returncode == EPERM and "socket: errno 1" in r.stdout, r.stdout  # no inet socket at all
    # Under bubblewrap the send "succeeds" into the sandbox's own loopback.
    assert _received(srv) == []


@pytest.fixture
def host_unix_server(scratch: Path) -> Iterator[Path]:
    """A listening AF_UNIX socket in the scratch dir (visible, read-only, inside)."""
    path = scratch / f"host-{token()}.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.listen(8)
    try:
        yield path
    finally:
        s.close()
        path.unlink()


@pytest.mark.parametrize("mode", SECCOMP_MODES)
def test_host_unix_socket_in_the_filesystem_cannot_be_connected(shared_home: FakeHome, own_probe: Path,
                                                                host_unix_server: Path, mode: str) -> None:
    assert host([str(own_probe), "unix_connect", str(host_unix_server)]).returncode == 0  # control
    r = shared_home.run([str(own_probe), "unix_connect", str(host_unix_server)], mode=mode)
    assert r.returncode == EPERM, r.stdout + r.stderr
    assert "socket: errno 1" in r.stdout  # socket(AF_UNIX) itself is denied by seccomp


def test_bwrap_alone_does_not_stop_connecting_to_a_visible_host_unix_socket(shared_home: FakeHome,
                                                                           own_probe: Path,
                                                                           host_unix_server: Path) -> None:
    """Documented limit (docs/threat-model.md): a read-only bind does not stop
    connect(2) to a socket inode; only the helper's seccomp filter does."""
    r = shared_home.run([str(own_probe), "unix_connect", str(host_unix_server)], mode=BWRAP_ONLY)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.fixture
def abstract_server() -> Iterator[str]:
    """A listening abstract unix socket on the host (network-namespace scoped)."""
    with abstract_unix_listener() as name:
        yield name


@pytest.mark.parametrize("mode", ALL_MODES)
def test_host_abstract_unix_socket_is_unreachable(shared_home: FakeHome, probe: Path, abstract_server: str,
                                                  mode: str) -> None:
    assert host([str(probe), "connect_abstract", abstract_server]).returncode == 0  # control
    r = shared_home.run([str(probe), "connect_abstract", abstract_server], mode=mode)
    # bwrap alone: another network namespace holds other abstract names.
    assert r.returncode == (ECONNREFUSED if mode == BWRAP_ONLY else EPERM), r.stdout + r.stderr


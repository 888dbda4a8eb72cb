"""--publish PORT: a server inside is reachable from the host's 127.0.0.1:PORT,
only when asked, only while the sandbox runs, and only with allowLocalBinding."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from sbx import BOTH, BWRAP_ONLY, FakeHome

# The server answers and then waits for the client to close before it exits:
# bytes still inside the sandbox (in its bridge) when the command ends are
# lost with the sandbox (docs/network.md, --publish), and a server that
# exited at once lost its answer so under load (ciG of turn 7). These tests
# are about who can reach the server, not about that limit.
SERVER = ("import socket; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
          "s.bind(('127.0.0.1', {port})); s.listen(4); print('listening', flush=True); "
          "c, _ = s.accept(); c.sendall(b'hello from inside'); c.shutdown(socket.SHUT_WR); c.recv(1); c.close()")


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def fetch(port: int, deadline: float = 10.0) -> bytes | OSError:
    return fetch_tries(port, deadline)[-1]


def fetch_tries(port: int, deadline: float = 10.0) -> list[bytes | OSError]:
    """What each try to read from the host's 127.0.0.1:``port`` got, until one
    got data: a failure shows whether the first try was refused or reached
    the server and came back empty (the server answers once, then exits)."""
    end = time.monotonic() + deadline
    tries: list[bytes | OSError] = []
    while time.monotonic() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
                tries.append(c.recv(100))
            if tries[-1]:
                return tries
        except OSError as e:
            tries.append(e)
        time.sleep(0.1)
    return tries or [OSError("never tried")]


def policy(home: FakeHome, *, binding: bool) -> list[str]:
    p = home.root / "bind.json"
    p.write_text('{"network": {"allowLocalBinding": %s}}' % ("true" if binding else "false"))
    return ["-p", str(p)]


@pytest.mark.parametrize("mode", [BOTH])
def test_a_published_port_reaches_the_server_inside(fresh_home: FakeHome, mode: str) -> None:
    port = free_port()
    proc = fresh_home.popen(["python3", "-c", SERVER.format(port=port)], mode=mode,
                            opts=[*policy(fresh_home, binding=True), "--publish", str(port)])
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "listening\n"
        tries = fetch_tries(port)
        assert tries[-1] == b"hello from inside", tries
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
        proc.communicate()
    # After the run nothing listens on the host any more.
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5)


@pytest.mark.parametrize("mode", [BOTH, BWRAP_ONLY])
def test_without_publish_the_host_cannot_reach_a_server_inside(fresh_home: FakeHome, mode: str) -> None:
    port = free_port()
    proc = fresh_home.popen(["python3", "-c", SERVER.format(port=port) + "; "], mode=mode,
                            opts=policy(fresh_home, binding=True))
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "listening\n"
        result = fetch(port, deadline=1.0)
        assert isinstance(result, ConnectionRefusedError), result  # its own network namespace
    finally:
        proc.kill()
        proc.communicate()


def test_publish_without_allow_local_binding_is_refused(fresh_home: FakeHome) -> None:
    r = fresh_home.run(["true"], opts=["--publish", "8080"])
    assert r.returncode == 125
    assert r.stderr.strip() == ("safebox: --publish needs network.allowLocalBinding = true "
                                "(the command may not listen otherwise)")


@pytest.mark.parametrize("value", ["0", "65536", "http"])
def test_publish_needs_a_port_number(fresh_home: FakeHome, value: str) -> None:
    r = fresh_home.run(["true"], opts=[*policy(fresh_home, binding=True), "--publish", value])
    assert r.returncode == 125 and f"--publish: '{value}' is not a port number" in r.stderr


def test_a_port_taken_on_the_host_is_a_clear_error(fresh_home: FakeHome) -> None:
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    port = busy.getsockname()[1]
    try:
        r = fresh_home.run(["true"], opts=[*policy(fresh_home, binding=True), "--publish", str(port)])
        assert r.returncode == 125
        assert f"safebox: --publish {port}: cannot listen on the host's 127.0.0.1:{port}" in r.stderr
    finally:
        busy.close()


def test_without_allow_local_binding_the_command_cannot_listen(fresh_home: FakeHome) -> None:
    r = fresh_home.run(["python3", "-c", "import socket; socket.socket().bind(('127.0.0.1', 0))"])
    assert r.returncode == 1 and "PermissionError: [Errno 13] Permission denied" in r.stderr
    ok = subprocess.run(["python3", "-c", "import socket; socket.socket().bind(('127.0.0.1', 0))"])
    assert ok.returncode == 0  # control: the host may


def test_publish_without_the_helper_is_a_refusal(fresh_home: FakeHome) -> None:
    """Only the helper can pin the published socket before the command runs."""
    marker = fresh_home.work / "ran"
    r = fresh_home.run(["touch", str(marker)], mode=BWRAP_ONLY,
                       opts=[*policy(fresh_home, binding=True), "--publish", str(free_port())])
    assert r.returncode == 125 and not marker.exists()
    assert "safebox: --publish needs the helper" in r.stderr, r.stderr


def test_a_replaced_publish_socket_cannot_redirect_the_relay_to_a_host_socket(fresh_home: FakeHome) -> None:
    """Started from $HOME, the state dir lies in the write root: the command
    replaces run/*/cmd-*/pub/PORT.sock with a symlink to a host socket (an
    ssh-agent, docker.sock), hoping the host relay follows the name (found
    in review). The relay connects through the socket the helper pinned."""
    port = free_port()
    host_sock = fresh_home.root.parent / f"agent-{port}.sock"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(host_sock))
    srv.listen(4)
    srv.settimeout(0.2)
    attack = (f"d=$(ls -d {fresh_home.root}/.cache/safebox/run/*/cmd-*/pub) && rm -f $d/{port}.sock && "
              f"ln -s {host_sock} $d/{port}.sock && echo replaced $d/{port}.sock && "
              f"python3 -c \"{SERVER.format(port=port)}\"")
    proc = fresh_home.popen(["sh", "-c", attack], opts=[*policy(fresh_home, binding=True), "--publish", str(port)],
                            cwd=fresh_home.root)
    try:
        assert proc.stdout is not None
        replaced = proc.stdout.readline().split()
        assert replaced[0] == "replaced", replaced
        assert proc.stdout.readline() == "listening\n"
        # Control: by name, the path now leads to the host socket.
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as by_name:
            by_name.connect(replaced[1])
            srv.accept()[0].close()
        assert fetch(port) == b"hello from inside"
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
        proc.communicate()
        srv.close()
        host_sock.unlink()


ANSWER = 8 << 20  # more than the kernel buffers between the bridge and a client that does not read (about 3 MiB)


class Bridge:
    """A real unix socket standing in for the bridge inside the sandbox: it
    sends ``answer`` to the first connection the forwarder makes, then
    closes (the command answered and exited). The forwarder is pinned to it
    and listens on a port of its own choosing (0: no race for a free port)."""

    def __init__(self, tmp_path: Path, answer: bytes) -> None:
        from safebox.run.publish import PublishForwarder

        sock = tmp_path / "bridge.sock"
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(sock))
        self.listener.listen(1)
        self.fw = PublishForwarder(0, str(sock))
        self.port = self.fw._listener.getsockname()[1]
        self.fw.pin(os.open(sock, os.O_PATH))
        self.sender = threading.Thread(target=self._send, args=(answer,), daemon=True)
        self.sender.start()

    def _send(self, answer: bytes) -> None:
        inside, _ = self.listener.accept()
        try:
            inside.sendall(answer)
        except OSError:
            pass  # cut by the forwarder
        inside.close()
        self.listener.close()

    def client(self) -> socket.socket:
        c = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        assert c.recv(1)  # the relay has begun: the rest waits for the client
        return c


def read_all(c: socket.socket) -> int:
    total = 1  # the byte client() read
    while chunk := c.recv(1 << 20):
        total += len(chunk)
    c.close()
    return total


def test_an_answer_still_in_the_relay_when_the_command_ends_reaches_the_client(tmp_path: Path) -> None:
    """The session closes the forwarder as soon as the command has ended
    (run/command.py). A server that answers and exits at once can leave its
    answer in the relay then: close() used to cut the connection at once,
    and the client saw it closed empty (CI under load, see
    test_a_published_port_reaches_the_server_inside). Here the answer is
    too big for the buffers, so it is still being relayed when close() runs."""
    bridge = Bridge(tmp_path, os.urandom(ANSWER))
    c = bridge.client()
    closing = threading.Thread(target=bridge.fw.close)
    closing.start()
    assert read_all(c) == ANSWER
    closing.join(timeout=10)
    assert not closing.is_alive()


def test_a_client_that_does_not_read_holds_the_forwarder_no_longer_than_the_drain_bound(tmp_path: Path) -> None:
    """Control for the drain: close() cuts a connection whose client does
    not read after DRAIN_S; the client then gets the start of the answer
    and the end of the stream."""
    from safebox.run.publish import DRAIN_S

    bridge = Bridge(tmp_path, os.urandom(ANSWER))
    c = bridge.client()
    start = time.monotonic()
    bridge.fw.close()
    took = time.monotonic() - start
    assert DRAIN_S - 0.1 <= took < DRAIN_S + 2, took
    assert read_all(c) < ANSWER
    bridge.sender.join(timeout=10)
    assert not bridge.sender.is_alive()  # the bridge's side was cut too


def test_once_closed_the_forwarder_listens_no_more_though_its_accept_thread_waited_in_accept(tmp_path: Path) -> None:
    """safebox used as a library lives on after the run: close() alone left
    the port listening (the accept thread, blocked in accept(2), holds the
    socket) and the next connection was still taken."""
    bridge = Bridge(tmp_path, b"hello")
    with socket.create_connection(("127.0.0.1", bridge.port), timeout=10) as c:
        assert c.recv(100) == b"hello"  # control: it listened, and relayed
    bridge.fw.close()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", bridge.port), timeout=5)

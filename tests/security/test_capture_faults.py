"""Capture under bad input and faults (docs/network.md, "Capture", "DNS"):
a command opening 10,000 connections or sending garbage to the DNS cannot
exhaust safebox, and a dead proxy or supervisor lets no connection out.
Loopback only."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import threading
from collections.abc import Iterator

import pytest

import safebox
from sbx import FakeHome, supervisor_of, token, wait_for

pytestmark = pytest.mark.needs_bwrap

LOCAL = {"allowedDomains": ["localhost"], "allowLocalDestinations": True}


class Counting:
    """A TCP server that accepts and holds every connection, counting them."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4096)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.held: list[socket.socket] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            c.sendall(b"hi")
            self.held.append(c)
            if len(self.held) > 2000:
                self.held.pop(0).close()


@pytest.fixture
def counting() -> Iterator[Counting]:
    srv = Counting()
    yield srv
    # The accepting thread ends before the held connections are closed: one
    # it accepted meanwhile would otherwise be left open (a ResourceWarning
    # that pytest pins on whichever test runs when it is collected).
    with contextlib.suppress(OSError):
        srv.sock.shutdown(socket.SHUT_RDWR)  # wakes the accept()
    srv.thread.join(10)
    srv.sock.close()
    for c in srv.held:
        c.close()


def _policy(home: FakeHome, network: dict[str, object]) -> list[str]:
    path = home.root / f"policy-{token()}.json"
    path.write_text(json.dumps({"network": network}))
    return ["-p", str(path)]


FLOOD = """import json, resource, socket, sys, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
addr = socket.getaddrinfo('localhost.', int(sys.argv[1]), socket.AF_INET, socket.SOCK_STREAM)[0][4]
held, codes = [], {}
for i in range(10000):
    s = socket.socket()
    try:
        s.connect(addr)
        held.append(s)
    except OSError as e:
        codes[e.errno] = codes.get(e.errno, 0) + 1
        s.close()
opened = len(held)
for s in held:
    s.close()
for _ in range(100):  # the proxy sees the closes; then a connection works again
    s = socket.socket()
    try:
        s.connect(addr)
        got = s.recv(2)
        break
    except OSError:
        time.sleep(0.1)
    finally:
        s.close()
print(json.dumps([opened, sorted(codes.items()), got.decode()]))
"""


def test_ten_thousand_connections_are_bounded_refused_with_a_line_and_safebox_keeps_serving(
        shared_home: FakeHome, counting: Counting) -> None:
    from safebox.proxy.capture import connection_cap

    r = shared_home.run(["python3", "-c", FLOOD, str(counting.port)], opts=_policy(shared_home, LOCAL), timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    opened, codes, got = json.loads(r.stdout)
    cap = connection_cap()
    assert 0 < opened <= cap and got == "hi", r.stdout
    assert codes == [[13, 10000 - opened]], r.stdout  # every other one: EACCES, at once
    assert f"safebox: more than {cap} captured connections open at once" in r.stderr, r.stderr
    assert counting.accepted <= cap + 1


GARBAGE = """import os, socket, struct
for i in range(200):
    s = socket.create_connection(('198.18.0.53', 53), 5)
    junk = os.urandom(i % 70)
    s.sendall(struct.pack('!H', len(junk)) + junk if i % 2 else junk)
    s.close()
s = socket.create_connection(('198.18.0.53', 53), 5)
s.sendall(b'\\xff\\xff' + b'x' * 100)  # a length over the bound: closed
print(s.recv(10) == b'')
print(socket.getaddrinfo('localhost.', 80, socket.AF_INET, socket.SOCK_STREAM)[0][4][0].startswith('198.18.'))
"""


def test_garbage_sent_to_the_dns_closes_its_connection_and_lookups_keep_working(shared_home: FakeHome) -> None:
    r = shared_home.run(["python3", "-c", GARBAGE], opts=_policy(shared_home, LOCAL), timeout=120)
    assert (r.returncode, r.stdout) == (0, "True\nTrue\n"), r.stdout + r.stderr


CONNECT = ("import socket, sys\n"
           "s = socket.socket()\n"
           "try:\n"
           "    s.connect(('localhost.', int(sys.argv[1]))); print('ok', s.recv(2).decode())\n"
           "except OSError as e:\n"
           "    print('errno', e.errno)\n")


def test_a_dead_proxy_lets_no_captured_connection_out(shared_home: FakeHome, counting: Counting) -> None:
    ready, go = (shared_home.work / f"{n}-{token()}" for n in ("ready", "go"))
    code = ("import os, socket, sys, time\n"
            "addr = socket.getaddrinfo('localhost.', int(sys.argv[1]), socket.AF_INET, socket.SOCK_STREAM)[0][4]\n"
            "s = socket.create_connection(addr); print('ok', s.recv(2).decode()); s.close()\n"
            f"open({str(ready)!r}, 'w').close()\n"
            f"while not os.path.exists({str(go)!r}): time.sleep(0.02)\n"
            "s = socket.socket()\n"
            "try:\n"
            "    s.connect(addr); print('ok')\n"
            "except OSError as e:\n"
            "    print('errno', e.errno)\n")
    with safebox.Sandbox({"network": LOCAL}, cwd=shared_home.work, env=shared_home.env()) as sb:
        p = sb.popen(["python3", "-c", code, str(counting.port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                     text=True)
        assert wait_for(ready.exists, timeout=30)
        before = counting.accepted  # the control connection above got through
        server = sb._session.proxy._server  # the loop stops as if it had crashed
        server._loop.call_soon_threadsafe(server._loop.stop)
        server._thread.join(10)
        # An impostor takes the capture port and says yes to everything: it
        # cannot know the proxy's answer key, so nothing is accepted.
        impostor = socket.socket()
        impostor.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        impostor.bind(("127.0.0.1", sb._session.proxy.capture_port))
        impostor.listen()
        heard: list[bytes] = []

        def yes() -> None:
            c, _ = impostor.accept()
            heard.append(c.recv(200))
            c.sendall(b"y" * 33)
            c.close()

        threading.Thread(target=yes, daemon=True).start()
        go.touch()
        out, err = p.communicate(timeout=60)
        impostor.close()
    assert out == "ok hi\nerrno 13\n", out + err  # EACCES: no proxy, and the impostor was not believed
    assert heard and heard[0].startswith(b"capture "), heard
    assert counting.accepted == before


def test_a_killed_supervisor_lets_no_captured_connection_out(fresh_home: FakeHome, counting: Counting) -> None:

    ready, go = (fresh_home.work / f"{n}-{token()}" for n in ("ready", "go"))
    code = ("import os, socket, sys, time\n"
            "addr = socket.getaddrinfo('localhost.', int(sys.argv[1]), socket.AF_INET, socket.SOCK_STREAM)[0][4]\n"
            f"open({str(ready)!r}, 'w').close()\n"
            f"while not os.path.exists({str(go)!r}): time.sleep(0.02)\n"
            "s = socket.socket()\n"
            "try:\n"
            "    s.connect(addr); print('ok')\n"
            "except OSError as e:\n"
            "    print('errno', e.errno)\n")
    proc = fresh_home.popen(["python3", "-c", code, str(counting.port)], opts=_policy(fresh_home, LOCAL))
    try:
        assert wait_for(ready.exists, timeout=30), proc.communicate(timeout=60)
        before = counting.accepted
        sup = supervisor_of(proc.pid)
        assert sup is not None
        os.kill(sup, signal.SIGKILL)
        go.touch()
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.communicate(timeout=60)
    # The run ends (test_supervisor_death.py); the connect, if it ran, got ENOSYS.
    assert proc.returncode == 125 and out in ("", "errno 38\n"), (out, err)
    assert counting.accepted == before

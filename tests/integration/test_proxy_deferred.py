"""The proxy started at its first client (``proxy/deferred.py``), with real
clients: curl through the proxy to a server on 127.0.0.1, racing the start.

The listeners exist before anything connects; the asyncio server behind them
is loaded by the first connection. These tests hold the three promises of
that trick: an early connection is served (not refused, not hanging), by the
same filter (a name not allowed is refused exactly as by a started proxy),
and a proxy that cannot start refuses at once, with one ``safebox:`` line.
"""

from __future__ import annotations

import _signal
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from netservers import serving
from safebox.errors import ProxyError
from safebox.proxy.config import ProxyConfig
from safebox.proxy.deferred import DeferredProxy
from sbx import FakeHome, token, wait_for

CURL = shutil.which("curl")


@pytest.fixture(scope="module")
def origin() -> Iterator[tuple[int, str]]:
    body = f"early-{token()}"
    with serving(body=body.encode()) as srv:
        yield srv.port, body


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[DeferredProxy]:
    p = DeferredProxy(ProxyConfig(("localhost",), allow_local_destinations=True), run_dir=tmp_path, tcp=True,
                      unix=False)
    yield p
    p.stop()


def _curl(proxy_port: int, url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    assert CURL, "curl is needed for the real-client tests"
    return subprocess.run([CURL, "-sS", "--max-time", "20", "-x", f"http://127.0.0.1:{proxy_port}", *extra, url],
                          capture_output=True, text=True, timeout=30)


def test_clients_racing_the_start_are_all_served_by_the_filter(proxy: DeferredProxy, origin: tuple[int, str]) -> None:
    port, body = origin
    proxy.start()
    assert proxy.http_port and not proxy.serving  # listening, nothing loaded yet
    # Launched together the instant start() returns: the first finds no
    # server, the others arrive while it starts; all wait in the backlog.
    with ThreadPoolExecutor(8) as pool:
        allowed = [pool.submit(_curl, proxy.http_port, f"http://localhost:{port}/{i}") for i in range(6)]
        refused = [pool.submit(_curl, proxy.http_port, f"http://example.org:{port}/", "-D", "/dev/stderr")
                   for _ in range(2)]
        results = [f.result() for f in allowed], [f.result() for f in refused]
    for r in results[0]:
        assert (r.returncode, r.stdout) == (0, body), r.stderr
    for r in results[1]:  # early, and still judged by the rules: the documented refusal
        assert r.returncode == 0 and "403 Forbidden" in r.stderr, r.stderr
        assert "X-Safebox-Rule: network.allowedDomains" in r.stderr
        assert body not in r.stdout
    assert proxy.serving
    hosts = {d["host"] for d in proxy.destinations()}
    assert hosts == {"localhost", "example.org"}


def test_an_early_socks_client_is_served_too(proxy: DeferredProxy, origin: tuple[int, str]) -> None:
    port, body = origin
    proxy.start()
    assert proxy.socks_port
    r = subprocess.run([CURL or "curl", "-sS", "--max-time", "20", "-x", f"socks5h://127.0.0.1:{proxy.socks_port}",
                        f"http://localhost:{port}/"], capture_output=True, text=True, timeout=30)
    assert (r.returncode, r.stdout) == (0, body), r.stderr


def test_a_request_sent_whole_before_the_proxy_is_loaded_waits_in_the_backlog(tmp_path: Path,
                                                                         origin: tuple[int, str]) -> None:
    """The tightest race: the client connects and sends its whole request
    the instant the port exists, before any server is loaded."""
    port, body = origin
    p = DeferredProxy(ProxyConfig(("localhost",), allow_local_destinations=True), run_dir=tmp_path, tcp=True,
                      unix=False)
    p.start()
    try:
        assert p.http_port
        with socket.create_connection(("127.0.0.1", p.http_port), timeout=20) as c:
            c.sendall(f"GET http://localhost:{port}/ HTTP/1.1\r\nHost: localhost:{port}\r\nConnection: close\r\n\r\n"
                      .encode())
            reply = b""
            while chunk := c.recv(65536):
                reply += chunk
        assert reply.split(b"\r\n")[0].endswith(b" 200 OK") and reply.endswith(body.encode()), reply[:200]
    finally:
        p.stop()


@pytest.mark.serial  # "immediate": a time bound
def test_with_no_client_the_server_is_never_loaded_and_stop_is_immediate(proxy: DeferredProxy) -> None:
    proxy.start()
    time.sleep(0.05)
    t = time.perf_counter()
    proxy.stop()
    assert time.perf_counter() - t < 0.5
    assert not proxy.serving and proxy.destinations() == []
    # The port is closed: a client now is refused, not queued.
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", proxy.http_port or 0), timeout=5)


def test_ready_starts_the_server_without_a_client(proxy: DeferredProxy, origin: tuple[int, str]) -> None:
    port, body = origin
    proxy.start()
    proxy.ready()
    assert proxy.serving
    r = _curl(proxy.http_port or 0, f"http://localhost:{port}/")
    assert (r.returncode, r.stdout) == (0, body), r.stderr


def test_a_proxy_that_cannot_start_refuses_the_waiting_client_and_says_why(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    from safebox.proxy import server

    def broken(_self: object, **_kw: object) -> None:
        raise ProxyError("injected start failure")

    monkeypatch.setattr(server.ProxyServer, "start", broken)
    p = DeferredProxy(ProxyConfig(("localhost",)), run_dir=tmp_path, tcp=True, unix=False)
    p.start()
    try:
        t = time.perf_counter()
        # The listener is closed with the connection in its backlog: reset
        # (at connect or at the first read, as the race goes), not a hang.
        with pytest.raises((ConnectionResetError, ConnectionRefusedError, BrokenPipeError)):
            with socket.create_connection(("127.0.0.1", p.http_port or 0), timeout=20) as c:
                c.sendall(b"GET http://localhost/ HTTP/1.1\r\nHost: localhost\r\n\r\n")
                assert c.recv(100) != b"", "an orderly close would be a refusal too, but none is expected"
        assert time.perf_counter() - t < 10
        with pytest.raises(ProxyError, match="could not start: injected start failure"):
            p.ready()
    finally:
        p.stop()
    err = capfd.readouterr().err
    assert err.count("safebox: ") == 1
    assert "safebox: the network proxy could not start (injected start failure); " \
           "the command's connections are refused" in err


def test_control_the_same_proxy_started_normally_serves(tmp_path: Path, origin: tuple[int, str]) -> None:
    port, body = origin
    p = DeferredProxy(ProxyConfig(("localhost",), allow_local_destinations=True), run_dir=tmp_path, tcp=True,
                      unix=False)
    p.start()
    try:
        r = _curl(p.http_port or 0, f"http://localhost:{port}/")
        assert (r.returncode, r.stdout) == (0, body), r.stderr
    finally:
        p.stop()


def _blocked(tid: int) -> int:
    for line in Path(f"/proc/self/task/{tid}/status").read_text().splitlines():
        if line.startswith("SigBlk:"):
            return int(line.split()[1], 16)
    raise AssertionError("no SigBlk")


def test_the_watcher_and_the_server_threads_block_the_relayed_signals(proxy: DeferredProxy,
                                                                      origin: tuple[int, str]) -> None:
    """A process-directed SIGTERM must reach the main thread (``_signals.py``)."""
    port, _ = origin
    proxy.start()
    term = 1 << (_signal.SIGTERM - 1)
    assert wait_for(lambda: proxy.watcher_tid)
    assert _blocked(proxy.watcher_tid) & term
    assert not _blocked(threading.main_thread().native_id or 0) & term  # control
    assert _curl(proxy.http_port or 0, f"http://localhost:{port}/").returncode == 0
    server = [t for t in threading.enumerate() if t.name == "safebox-proxy"]
    assert server and server[0].native_id and _blocked(server[0].native_id) & term


def test_a_bad_audit_log_fails_start_before_any_command(tmp_path: Path) -> None:
    p = DeferredProxy(ProxyConfig(("localhost",), audit_log=str(tmp_path / "missing" / "audit.jsonl")),
                      run_dir=tmp_path, tcp=True, unix=False)
    with pytest.raises(ProxyError, match="cannot open audit log .*missing/audit.jsonl: No such file or directory"):
        p.start()
    p.stop()


@pytest.mark.needs_bwrap
def test_a_sandboxed_command_that_connects_at_once_is_served(shared_home: FakeHome, origin: tuple[int, str]) -> None:
    """Through the real ``safebox exec``: curl is the command's first act,
    over each front end, and a name not allowed is refused as always."""
    port, body = origin
    opts = ["--allow-domain", "localhost", "--deny-domain", "example.org"]
    policy = shared_home.root / f"local-{token()}.json"
    policy.write_text('{"network": {"allowLocalDestinations": true}}')
    script = (f"curl -sS --max-time 20 http://localhost:{port}/a; echo; "
              f"curl -sS --max-time 20 -x socks5h://127.0.0.1:1080 http://localhost:{port}/b; echo; "
              f"curl -sS --max-time 20 -o /dev/null -w '%{{http_code}}' http://example.org:{port}/")
    r = shared_home.run(["sh", "-c", script], opts=[*opts, "-p", str(policy)])
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [body, body, "403"], r.stdout



# -- adopt(): the helper's handed-over ports, as run/main.py and Sandbox use them

def _listener() -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    return s


def _hand_over(p: DeferredProxy, fds: list[int], ports: dict[int, str], *, key: object = None,
               tag: bytes = b"L") -> tuple[int, bytes]:
    """Send ``fds`` as the helper does; (adopt's result, the helper's answer)."""
    ours, theirs = socket.socketpair()
    with ours, theirs:
        socket.send_fds(ours, [tag], fds)
        n = p.adopt(theirs, ports=ports, timeout=5, key=key)
        ours.settimeout(0.5)
        try:
            answer = ours.recv(1)
        except TimeoutError:
            answer = b""
        return n, answer


@pytest.fixture
def handoff_proxy(tmp_path: Path) -> Iterator[DeferredProxy]:
    p = DeferredProxy(ProxyConfig(("localhost",), allow_local_destinations=True), run_dir=tmp_path, unix=False)
    p.start()
    yield p
    p.stop()


def test_adopted_ports_are_served_from_their_first_client(handoff_proxy: DeferredProxy,
                                                          origin: tuple[int, str]) -> None:
    port, body = origin
    http_l, socks_l = _listener(), _listener()
    hp, sp = http_l.getsockname()[1], socks_l.getsockname()[1]
    with http_l, socks_l:
        assert _hand_over(handoff_proxy, [http_l.fileno(), socks_l.fileno()], {hp: "http", sp: "socks5h"}) \
            == (2, b"k")
    assert not handoff_proxy.serving
    assert (_curl(hp, f"http://localhost:{port}/").stdout, handoff_proxy.serving) == (body, True)
    r = subprocess.run([CURL or "curl", "-sS", "--max-time", "20", "-x", f"socks5h://127.0.0.1:{sp}",
                        f"http://localhost:{port}/"], capture_output=True, text=True, timeout=30)
    assert (r.returncode, r.stdout) == (0, body), r.stderr


def _bound(kind: int) -> socket.socket:
    s = socket.socket(socket.AF_INET, kind)
    s.bind(("127.0.0.1", 0))
    return s


@pytest.mark.parametrize("make, message", [
    (lambda: [os.pipe()[0]], "is not a socket"),
    (lambda: [_bound(socket.SOCK_DGRAM)], "is not TCP"),
    (lambda: [_bound(socket.SOCK_STREAM)], "is not listening"),
    (lambda: [_listener(), _listener()], "unexpected listener"),
])
def test_adopt_refuses_anything_but_the_expected_listeners(handoff_proxy: DeferredProxy, make: Any,
                                                           message: str) -> None:
    objs = make()
    fds = [o if isinstance(o, int) else o.fileno() for o in objs]
    port = objs[0].getsockname()[1] if isinstance(objs[0], socket.socket) else 1
    try:
        with pytest.raises(ProxyError, match=message):
            _hand_over(handoff_proxy, fds, {port: "http"})
    finally:
        for o in objs:
            o.close() if isinstance(o, socket.socket) else os.close(o)


def test_released_listeners_refuse_before_and_after_the_server_is_up(handoff_proxy: DeferredProxy,
                                                                     origin: tuple[int, str]) -> None:
    """A Sandbox adopts two listeners per command: once the command is gone,
    release() closes them, whether or not a client ever came."""
    port, body = origin
    first, second, third = _listener(), _listener(), _listener()
    p1, p2, p3 = (s.getsockname()[1] for s in (first, second, third))
    with first:
        assert _hand_over(handoff_proxy, [first.fileno()], {p1: "http"}, key="one") == (1, b"k")
    with second:
        assert _hand_over(handoff_proxy, [second.fileno()], {p2: "http"}, key="two") == (1, b"k")
    with third:  # closed on any failure too: a leaked socket fails the next test (filterwarnings)
        handoff_proxy.release("one")  # never served
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", p1), timeout=5)
        # The released port woke nothing: the watcher was inside poll() on
        # it, and its shutdown() is an event there; waited for, as the
        # server takes a while to come up when it is (wrongly) woken.
        assert not wait_for(lambda: handoff_proxy.serving, timeout=2)
        assert _curl(p2, f"http://localhost:{port}/").stdout == body  # control: the other one serves
        assert _hand_over(handoff_proxy, [third.fileno()], {p3: "http"}, key="three") == (1, b"k")
    assert _curl(p3, f"http://localhost:{port}/").stdout == body
    handoff_proxy.release("two")  # served
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", p2), timeout=5)
    assert _curl(p3, f"http://localhost:{port}/").stdout == body


def test_a_listener_shut_down_while_the_watcher_polls_it_wakes_nothing(handoff_proxy: DeferredProxy) -> None:
    """release()'s steps, with the watcher let in between them: shutdown()
    takes a listener out of LISTEN at once, and a watcher inside poll() on
    it wakes (POLLHUP). That is not a client: the watcher must find the
    listener released and go back to waiting, not start the server (the
    unprivileged flake of the test above, whose next test then failed on
    the listener it leaked)."""
    lst = _listener()
    with lst:
        assert _hand_over(handoff_proxy, [lst.fileno()], {lst.getsockname()[1]: "http"}, key="k") == (1, b"k")
    time.sleep(0.2)  # the watcher is in poll() on it
    with handoff_proxy._lock:  # as release() holds it
        ((s, _),) = handoff_proxy._pending
        handoff_proxy._pending.clear()
        handoff_proxy._adopted.pop("k")
        s.shutdown(socket.SHUT_RDWR)
        time.sleep(0.3)  # the watcher wakes now, while the socket is still open
        s.close()
    handoff_proxy._wake()
    assert not wait_for(lambda: handoff_proxy.serving, timeout=2)
    # Control: a real client on a listener adopted now still wakes it.
    lst2 = _listener()
    p2 = lst2.getsockname()[1]
    with lst2:
        assert _hand_over(handoff_proxy, [lst2.fileno()], {p2: "http"}) == (1, b"k")
    socket.create_connection(("127.0.0.1", p2), timeout=5).close()
    assert wait_for(lambda: handoff_proxy.serving, timeout=30)


def test_with_capture_the_watcher_waits_for_the_first_adopted_listener(tmp_path: Path, origin: tuple[int, str]) -> None:
    """The capture listener and the DNS's socket are reachable only once
    the helper's ports are adopted: until then no thread of the proxy runs
    beside safebox's start-up (counting the DNS's socket started it at
    once, +5.8 ms of every networked start on 16 cores)."""
    p = DeferredProxy(ProxyConfig(("localhost",), allow_local_destinations=True), run_dir=tmp_path, unix=False,
                      capture=True)
    try:
        p.start()
        assert p.capture_port is not None
        time.sleep(0.05)
        assert not p._watching
        first = _listener()
        port = first.getsockname()[1]
        with first:
            assert _hand_over(p, [first.fileno()], {port: "http"}) == (1, b"k")
        assert p._watching  # control: the first adopted listener starts it
        assert _curl(port, f"http://localhost:{origin[0]}/").stdout == origin[1]
    finally:
        p.stop()

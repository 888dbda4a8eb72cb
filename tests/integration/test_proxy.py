"""The filtering proxy against loopback-only upstreams, with real curl and socat.

Every packet stays on 127.0.0.1/::1 or inside a network namespace a test
creates itself (``unshare -n``).  Names resolve through the host's
/etc/hosts (``localhost``) or, in the namespace test, a private bind-mounted
/etc/hosts.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import pathlib
import socket
import subprocess
import textwrap
import threading
import time
from collections.abc import Iterator

import pytest

from netns import run_in_netns
from netservers import Reply, Seen, serving
from safebox.proxy import ProxyConfig, ProxyServer

BIG = 64 * 1024 * 1024
_BLOCK = hashlib.sha256(b"safebox").digest() * (1024 * 1024 // 32)  # 1 MiB, deterministic
BIG_SHA = hashlib.sha256(_BLOCK * (BIG // len(_BLOCK))).hexdigest()


def _upstream(seen: Seen) -> Reply:
    """/hello, /host (echoes the Host header), /headers (the names of those that arrived), /big (64 MiB)."""
    if seen.path == "/big":
        return Reply(_BLOCK * (BIG // len(_BLOCK)))
    body = {"/hello": b"hello from upstream\n", "/host": seen.headers.get("host", "").encode(),
            "/headers": str(sorted(seen.headers)).encode()}.get(seen.path)
    if body is None:
        return Reply(b"not found\n", status=404)
    return Reply(body, headers=(("Connection", "close"),))


@pytest.fixture(scope="module")
def upstream() -> Iterator[int]:
    with serving(reply=_upstream) as srv:
        yield srv.port


@pytest.fixture(scope="module")
def upstream6() -> Iterator[int]:
    with serving(reply=_upstream, host="::1") as srv:
        yield srv.port


@pytest.fixture
def make_proxy(tmp_path: pathlib.Path) -> Iterator:
    started: list[ProxyServer] = []

    def make(allowed: tuple[str, ...] = ("localhost",), denied: tuple[str, ...] = (), *,
             local: bool = True, audit: bool = False) -> ProxyServer:
        run_dir = tmp_path / f"run{len(started)}"
        run_dir.mkdir(mode=0o700)
        cfg = ProxyConfig(allowed, denied, allow_local_destinations=local,
                          audit_log=tmp_path / "audit.jsonl" if audit else None)
        p = ProxyServer(cfg, run_dir=run_dir, tcp=True)
        p.start()
        started.append(p)
        return p

    yield make
    for p in started:
        p.stop()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def bridge() -> Iterator:
    """socat TCP-LISTEN on 127.0.0.1 -> unix socket, as the sandbox bridges it."""
    procs: list[subprocess.Popen[bytes]] = []

    def make(path: pathlib.Path) -> int:
        port = _free_port()
        procs.append(subprocess.Popen(
            ["socat", "-b", "262144", f"TCP-LISTEN:{port},bind=127.0.0.1,fork,reuseaddr",
             f"UNIX-CONNECT:{path}"]))
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                return port
            time.sleep(0.02)
        raise RuntimeError("socat bridge did not start")

    yield make
    for p in procs:
        p.terminate()
        p.wait(5)


def curl(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["curl", "-sS", "-m", str(int(timeout)), *args],
                          capture_output=True, text=True, timeout=timeout + 5)


def raw(path: pathlib.Path, data: bytes, *, timeout: float = 10) -> bytes:
    """Send ``data`` on the proxy's unix socket, return everything it answers."""
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(timeout)
        s.connect(str(path))
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)


def socks_connect(path: pathlib.Path, request: bytes) -> bytes:
    """A SOCKS5 greeting then ``request``; returns the reply to the request."""
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(str(path))
        s.sendall(b"\x05\x01\x00")
        assert s.recv(2) == b"\x05\x00"
        s.sendall(request)
        return s.recv(64)


# -- each path reaches an allowed local server ------------------------------------


def test_plain_http_through_socat_bridge_reaches_allowed_local_server(make_proxy, bridge, upstream) -> None:
    p = make_proxy()
    port = bridge(p.http_socket)
    r = curl("-x", f"http://127.0.0.1:{port}", f"http://localhost:{upstream}/hello")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "hello from upstream\n"


def test_plain_http_forwards_origin_form_without_hop_by_hop_headers(make_proxy, bridge, upstream) -> None:
    p = make_proxy()
    port = bridge(p.http_socket)
    r = curl("-x", f"http://127.0.0.1:{port}", "-H", "Keep-Alive: 5", "-H", "Proxy-Authorization: Basic eA==",
             f"http://localhost:{upstream}/headers")
    assert "host" in r.stdout and "keep-alive" not in r.stdout and "proxy-" not in r.stdout


def test_connect_tunnel_through_socat_bridge(make_proxy, bridge, upstream) -> None:
    p = make_proxy()
    port = bridge(p.http_socket)
    r = curl("-p", "-x", f"http://127.0.0.1:{port}", f"http://localhost:{upstream}/hello")
    assert (r.returncode, r.stdout) == (0, "hello from upstream\n"), r.stderr


@pytest.mark.parametrize(
    ("url", "allowed", "scheme"),
    [
        ("http://localhost:{v4}/hello", ("localhost",), "socks5h"),  # ATYP domain
        ("http://127.0.0.1:{v4}/hello", ("127.0.0.1",), "socks5"),  # ATYP IPv4
        ("http://[::1]:{v6}/hello", ("[::1]",), "socks5h"),  # ATYP IPv6
    ],
)
def test_socks5_on_the_unix_socket_for_each_address_type(make_proxy, upstream, upstream6, url, allowed, scheme) -> None:
    p = make_proxy(allowed)
    r = curl("-x", f"{scheme}://localhost{p.socks_socket}", url.format(v4=upstream, v6=upstream6))
    assert (r.returncode, r.stdout) == (0, "hello from upstream\n"), r.stderr


def test_socks5_through_socat_bridge(make_proxy, bridge, upstream) -> None:
    p = make_proxy()
    port = bridge(p.socks_socket)
    r = curl("-x", f"socks5h://127.0.0.1:{port}", f"http://localhost:{upstream}/hello")
    assert (r.returncode, r.stdout) == (0, "hello from upstream\n"), r.stderr


# -- refusals --------------------------------------------------------------------


def test_allowed_name_resolving_to_loopback_is_refused_without_allow_local(make_proxy, upstream) -> None:
    p = make_proxy(local=False)
    r = curl("-x", f"http://127.0.0.1:{p.http_port}", "-w", "%{http_code}", f"http://localhost:{upstream}/hello")
    assert r.stdout.startswith("safebox refused localhost:")
    assert "loopback" in r.stdout and "set network.allowLocalDestinations to true" in r.stdout
    assert r.stdout.endswith("403")
    r = curl("-p", "-x", f"http://127.0.0.1:{p.http_port}", f"http://localhost:{upstream}/hello")
    assert r.returncode == 56 and "403" in r.stderr
    r = curl("-x", f"socks5h://localhost{p.socks_socket}", f"http://localhost:{upstream}/hello")
    assert r.returncode == 97 and "(2)" in r.stderr


@pytest.mark.parametrize(
    ("target", "rule"),
    [
        ("CONNECT example.org:443", "network.allowedDomains"),
        ("CONNECT bad.sandbox.test:443", "network.deniedDomains"),  # deny wins over *.sandbox.test
        ("CONNECT 127.0.0.1:80", "network.allowedDomains"),
        ("CONNECT [::ffff:127.0.0.1]:80", "network.allowedDomains"),
        ("CONNECT [::1]:80", "network.allowedDomains"),
        ("GET http://example.org/", "network.allowedDomains"),
    ],
)
def test_refusal_is_403_naming_host_and_policy_key(make_proxy, target, rule) -> None:
    p = make_proxy(("localhost", "*.sandbox.test"), ("bad.sandbox.test",))
    out = raw(p.http_socket, f"{target} HTTP/1.1\r\n\r\n".encode())
    head, _, body = out.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 403 ")
    assert f"X-Safebox-Rule: {rule}".encode() in head
    assert body.startswith(b"safebox refused ") and f" by {rule}: ".encode() in body and body.count(b"\n") == 1
    assert b"X-Safebox-Refused: " in head and f"; {rule}; ".encode() in head


@pytest.mark.parametrize(
    "authority",
    ["127.1:80", "0x7f.1:80", "2130706433:80", "0177.0.0.1:80", "evil.com@localhost:80",
     "localhost.:80x", "local host:80", "[::1:80", "localhost", "localhost:0", "localhost:65536", "a..b:80"],
)
def test_host_tricks_are_refused(make_proxy, authority) -> None:
    p = make_proxy()
    out = raw(p.http_socket, f"CONNECT {authority} HTTP/1.1\r\n\r\n".encode())
    assert out.split(b" ", 2)[1] in (b"400", b"403"), out


@pytest.mark.parametrize("name", ["example.org", "127.1", "2130706433", "bad.sandbox.test"])
def test_socks5_refuses_names_with_0x02(make_proxy, name) -> None:
    p = make_proxy(("localhost", "*.sandbox.test"), ("bad.sandbox.test",))
    req = b"\x05\x01\x00\x03" + bytes([len(name)]) + name.encode() + b"\x00\x50"
    assert socks_connect(p.socks_socket, req)[:2] == b"\x05\x02"


def test_socks5_unsupported_command_and_address_type(make_proxy) -> None:
    p = make_proxy()
    assert socks_connect(p.socks_socket, b"\x05\x02\x00\x01\x7f\x00\x00\x01\x00\x50")[:2] == b"\x05\x07"
    assert socks_connect(p.socks_socket, b"\x05\x01\x00\x09\x7f\x00\x00\x01\x00\x50")[:2] == b"\x05\x08"
    assert raw(p.socks_socket, b"\x05\x01\x02") == b"\x05\xff"  # username/password only


def test_host_header_disagreeing_with_target_is_refused(make_proxy, upstream) -> None:
    p = make_proxy()
    out = raw(p.http_socket, f"GET http://localhost:{upstream}/host HTTP/1.1\r\nHost: evil.com\r\n\r\n".encode())
    assert out.startswith(b"HTTP/1.1 400 ") and b"disagrees" in out
    out = raw(p.http_socket, f"GET http://localhost:{upstream}/host HTTP/1.1\r\nHost: LOCALHOST:{upstream}\r\n\r\n".encode())
    assert out.startswith(b"HTTP/1.1 200 ") and out.endswith(f"LOCALHOST:{upstream}".encode())


# -- robustness ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "status"),
    [
        (b"garbage\r\n\r\n", b"400"),
        (b"GET /local HTTP/1.1\r\n\r\n", b"400"),
        (b"GET https://localhost/ HTTP/1.1\r\n\r\n", b"400"),
        (b"GET http://localhost/#x HTTP/1.1\r\n\r\n", b"400"),
        (b"GET http://localhost/ HTTP/2.0\r\n\r\n", b"505"),
        (b"GET http://localhost/ HTTP/1.1\r\n folded\r\n\r\n", b"400"),
        (b"GET http://localhost/ HTTP/1.1\r\nX: a\r\nX y\r\n\r\n", b"400"),
        (b"GET http://localhost/ HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n", b"400"),
        (b"POST http://localhost/ HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", b"400"),
        (b"CONNECT localhost:80 HTTP/1.1\r\nX: " + b"a" * 70000 + b"\r\n\r\n", b"431"),
        (b"GET http://localhost/ HTTP/1.1\r\nX: 1", b"400"),  # truncated
    ],
)
def test_malformed_requests_get_an_error_and_the_proxy_keeps_serving(make_proxy, upstream, data, status) -> None:
    p = make_proxy()
    out = raw(p.http_socket, data)
    assert out.split(b" ", 2)[1] == status, out[:200]
    assert out.split(b"\r\n\r\n", 1)[1].startswith(b"safebox: ")
    ok = raw(p.http_socket, f"GET http://localhost:{upstream}/hello HTTP/1.1\r\n\r\n".encode())
    assert ok.endswith(b"hello from upstream\n")


def test_slow_client_gets_408(make_proxy, monkeypatch) -> None:
    import safebox.proxy.http as proxy_http

    monkeypatch.setattr(proxy_http, "HEAD_TIMEOUT", 0.3)
    p = make_proxy()
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(5)
        s.connect(str(p.http_socket))
        s.sendall(b"GET http://localhost/ HTTP/1.1\r\n")
        assert s.recv(100).startswith(b"HTTP/1.1 408 ")


def test_upstream_refusing_gives_502_and_socks_0x05(make_proxy) -> None:
    p = make_proxy()
    closed = _free_port()
    out = raw(p.http_socket, f"CONNECT localhost:{closed} HTTP/1.1\r\n\r\n".encode())
    assert out.startswith(b"HTTP/1.1 502 ") and b"refused" in out
    req = b"\x05\x01\x00\x03\x09localhost" + closed.to_bytes(2, "big")
    assert socks_connect(p.socks_socket, req)[:2] == b"\x05\x05"


def test_upstream_reset_mid_stream_closes_the_client_and_proxy_keeps_serving(make_proxy, upstream) -> None:
    p = make_proxy()
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        port = srv.getsockname()[1]
        with socket.socket(socket.AF_UNIX) as c:
            c.settimeout(5)
            c.connect(str(p.http_socket))
            c.sendall(f"CONNECT localhost:{port} HTTP/1.1\r\n\r\n".encode())
            conn, _ = srv.accept()
            assert c.recv(100).startswith(b"HTTP/1.1 200 ")
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            conn.close()  # RST
            with contextlib.suppress(ConnectionResetError):
                assert c.recv(100) == b""
    assert raw(p.http_socket, f"GET http://localhost:{upstream}/hello HTTP/1.1\r\n\r\n".encode()).endswith(b"upstream\n")


def test_a_thousand_concurrent_connections(make_proxy) -> None:
    import resource

    # Each connection costs the test (client + echo server) and the proxy
    # (two sockets) descriptors; 1024, the usual soft limit, is not enough.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < 8192:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(8192, hard), hard))
    p = make_proxy()

    async def main() -> None:
        async def echo(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            w.write(await r.readexactly(5))
            await w.drain()
            w.close()

        server = await asyncio.start_server(echo, "127.0.0.1", 0, backlog=2048)
        port = server.sockets[0].getsockname()[1]

        async def client(i: int) -> bytes:
            r, w = await asyncio.open_unix_connection(str(p.http_socket))
            w.write(f"CONNECT localhost:{port} HTTP/1.1\r\n\r\n".encode())
            assert (await r.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200 ")
            w.write(f"{i:05d}".encode())
            data = await r.read()
            w.close()
            return data

        async with server:
            results = await asyncio.wait_for(asyncio.gather(*(client(i) for i in range(1000))), 60)
        assert results == [f"{i:05d}".encode() for i in range(1000)]

    asyncio.run(main())
    deadline = time.monotonic() + 5
    while p.active_connections and time.monotonic() < deadline:
        time.sleep(0.05)
    assert p.active_connections == 0


@pytest.mark.parametrize("path", ["connect", "socks5"])
def test_a_tunnel_carries_small_exchanges_then_bulk_both_ways_and_a_half_close(make_proxy, path) -> None:
    # The relay reads small messages with read/write and splices once a read
    # fills its buffer, each direction on its own: a few bytes each way, then
    # 8 MiB echoed back, then the client's end of file reaches the server.
    p = make_proxy()
    big = hashlib.sha256(b"seed").digest() * (8 << 15)  # 8 MiB, not one repeated byte

    def echo(srv: socket.socket, seen: list[bytes]) -> None:
        conn, _ = srv.accept()
        with conn:
            conn.sendall(b"banner\n")  # server speaks first, as SSH does
            data = bytearray()
            while chunk := conn.recv(1 << 20):
                data += chunk
                if data == b"ping":
                    conn.sendall(b"pong")
                    data.clear()
                elif len(data) == len(big):
                    conn.sendall(bytes(data))
            seen.append(bytes(data))

    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        port = srv.getsockname()[1]
        seen: list[bytes] = []
        t = threading.Thread(target=echo, args=(srv, seen))
        t.start()
        with socket.socket(socket.AF_UNIX) as c:
            c.settimeout(10)
            if path == "connect":
                c.connect(str(p.http_socket))
                c.sendall(f"CONNECT localhost:{port} HTTP/1.1\r\n\r\n".encode())
                head = b""
                while b"\r\n\r\n" not in head:
                    head += c.recv(1)
                assert head.startswith(b"HTTP/1.1 200 ")
            else:
                c.connect(str(p.socks_socket))
                c.sendall(b"\x05\x01\x00")
                assert c.recv(2) == b"\x05\x00"
                c.sendall(b"\x05\x01\x00\x03\x09localhost" + port.to_bytes(2, "big"))
                assert _recv_exactly(c, 10)[:2] == b"\x05\x00"
            assert _recv_exactly(c, 7) == b"banner\n"
            c.sendall(b"ping")
            assert _recv_exactly(c, 4) == b"pong"
            sender = threading.Thread(target=c.sendall, args=(big,))
            sender.start()
            assert _recv_exactly(c, len(big)) == big
            sender.join()
            c.shutdown(socket.SHUT_WR)
            assert c.recv(1) == b""  # the server saw the end of file and closed
        t.join(10)
    assert seen == [big]


def _recv_exactly(s: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = s.recv(min(n - len(out), 1 << 20))
        assert chunk, f"closed after {len(out)} of {n} bytes"
        out += chunk
    return bytes(out)


@pytest.mark.parametrize("path", ["http", "connect", "socks5"])
def test_64_mib_download_arrives_whole(make_proxy, bridge, upstream, tmp_path, path) -> None:
    p = make_proxy()
    if path == "socks5":
        args = ["-x", f"socks5h://127.0.0.1:{bridge(p.socks_socket)}"]
    else:
        args = (["-p"] if path == "connect" else []) + ["-x", f"http://127.0.0.1:{bridge(p.http_socket)}"]
    out = tmp_path / "big"
    r = curl(*args, "-o", str(out), f"http://localhost:{upstream}/big", timeout=120)
    assert r.returncode == 0, r.stderr
    h = hashlib.sha256()
    with out.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    assert h.hexdigest() == BIG_SHA


# -- audit, lifecycle --------------------------------------------------------------


def test_audit_log_has_one_json_line_per_decision(make_proxy, upstream, tmp_path) -> None:
    p = make_proxy(("localhost",), ("denied.example",), audit=True)
    raw(p.http_socket, f"GET http://localhost:{upstream}/hello HTTP/1.1\r\n\r\n".encode())
    raw(p.http_socket, b"CONNECT denied.example:443 HTTP/1.1\r\n\r\n")
    socks_connect(p.socks_socket, b"\x05\x01\x00\x03\x0bexample.org\x01\xbb")
    p.stop()
    lines = [json.loads(x) for x in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert [(x["protocol"], x["verdict"], x["rule"]) for x in lines] == [
        ("http", "allow", "network.allowLocalDestinations"),
        ("connect", "deny", "network.deniedDomains"),
        ("socks5", "deny", "network.allowedDomains"),
    ]
    assert all({"time", "host", "port", "reason"} <= x.keys() for x in lines)
    assert oct((tmp_path / "audit.jsonl").stat().st_mode & 0o777) == "0o600"


def test_stop_removes_sockets_closes_connections_and_is_idempotent(tmp_path) -> None:
    before = len(os.listdir("/proc/self/fd"))
    threads = threading.active_count()
    p = ProxyServer(ProxyConfig(("localhost",)), run_dir=tmp_path)
    p.start()
    assert oct(os.stat(p.http_socket).st_mode & 0o777) == "0o600"
    assert p.http_port is None
    held = socket.socket(socket.AF_UNIX)
    held.settimeout(10)
    held.connect(str(p.socks_socket))  # an idle client must not block stop()
    deadline = time.monotonic() + 5
    while not p.active_connections and time.monotonic() < deadline:
        time.sleep(0.01)
    assert p.active_connections == 1
    p.stop()
    p.stop()
    assert held.recv(10) == b""
    held.close()
    assert not os.path.exists(p.http_socket) and not os.path.exists(p.socks_socket)
    assert len(os.listdir("/proc/self/fd")) <= before  # nothing leaked
    # No thread left behind (a thread of an earlier test may end meanwhile).
    assert threading.active_count() <= threads


def test_bad_pattern_and_unusable_run_dir_raise_proxy_error(tmp_path) -> None:
    from safebox.errors import ProxyError

    with pytest.raises(ProxyError, match="pattern"):
        ProxyServer(ProxyConfig(("a.*.com",)), run_dir=tmp_path)
    with pytest.raises(ProxyError):
        ProxyServer(ProxyConfig(("a.com",)), run_dir=tmp_path / "missing").start()


# -- cloud metadata, in a network namespace of our own -------------------------------

_METADATA_SCRIPT = textwrap.dedent(
    """
    import json, pathlib, subprocess, tempfile
    from netservers import start_origin
    from safebox.proxy import ProxyConfig, ProxyServer

    start_origin(body=b"SECRET", host="169.254.169.254", port=80)
    out = {}
    def run(key, allowed, local, *args):
        d = pathlib.Path(tempfile.mkdtemp())
        p = ProxyServer(ProxyConfig(allowed, allow_local_destinations=local), run_dir=d, tcp=True)
        p.start()
        try:
            args = [a.format(http=p.http_port, socks=p.socks_port) for a in args]
            r = subprocess.run(["curl", "-sS", "-m", "10", *args], capture_output=True, text=True)
            out[key] = [r.returncode, r.stdout, r.stderr]
        finally:
            p.stop()
    names = ("metadata.test", "localhost")
    run("literal_http", names, True, "-x", "http://127.0.0.1:{http}", "http://169.254.169.254/latest/")
    run("name_http", names, True, "-x", "http://127.0.0.1:{http}", "http://metadata.test/latest/")
    run("name_connect", names, True, "-p", "-x", "http://127.0.0.1:{http}", "http://metadata.test/latest/")
    run("name_socks", names, True, "-x", "socks5h://127.0.0.1:{socks}", "http://metadata.test/latest/")
    run("mapped_socks", names, True, "-x", "socks5h://127.0.0.1:{socks}", "http://[::ffff:169.254.169.254]/")
    run("listed_literally", ("169.254.169.254",), False, "-x", "http://127.0.0.1:{http}", "http://169.254.169.254/")
    print(json.dumps(out))
    """
)


def test_cloud_metadata_is_refused_by_the_proxy_inside_a_private_netns(tmp_path) -> None:
    out, _ = run_in_netns(tmp_path, _METADATA_SCRIPT, hosts="127.0.0.1 localhost\n169.254.169.254 metadata.test\n",
                          addresses=["169.254.169.254"])
    for key in ("literal_http", "name_http"):
        code, body, _ = out[key]
        assert code == 0 and body.startswith("safebox refused ") and "SECRET" not in body, out[key]
    assert "not listed literally in network.allowedDomains" in out["literal_http"][1]
    assert "cloud metadata address" in out["name_http"][1]
    assert out["name_connect"][0] == 56 and "403" in out["name_connect"][2]
    assert out["name_socks"][0] == 97 and "(2)" in out["name_socks"][2]
    assert out["mapped_socks"][0] == 97 and "(2)" in out["mapped_socks"][2]
    # The fake metadata server is reachable when listed literally: a broken
    # guard would have been seen above, not hidden by an unreachable address.
    assert out["listed_literally"][1] == "SECRET"


# -- listeners handed over by the helper (helper/handoff.c) -----------------------


def _listener(family: int = socket.AF_INET, host: str = "127.0.0.1") -> socket.socket:
    s = socket.socket(family, socket.SOCK_STREAM)
    s.bind((host, 0))
    s.listen(16)
    return s


def _hand_over(p: ProxyServer, fds: list[int], ports: dict[int, str], *, tag: bytes = b"L") -> tuple[int, bytes]:
    """Send ``fds`` as the helper does and return (adopt's result, the helper's answer)."""
    ours, theirs = socket.socketpair()
    with ours, theirs:
        socket.send_fds(ours, [tag], fds)
        n = p.adopt(theirs, ports=ports, timeout=5)
        ours.settimeout(0.5)
        try:
            answer = ours.recv(1)
        except TimeoutError:
            answer = b""
        return n, answer


def test_handed_over_listeners_serve_http_connect_and_socks5(make_proxy, upstream) -> None:
    p = make_proxy()
    http_l, socks_l = _listener(), _listener()
    hp, sp = http_l.getsockname()[1], socks_l.getsockname()[1]
    with http_l, socks_l:
        assert _hand_over(p, [http_l.fileno(), socks_l.fileno()], {hp: "http", sp: "socks5h"}) == (2, b"k")
    # Our copies are closed: only the proxy accepts on the ports now.
    url = f"http://localhost:{upstream}/hello"
    for args in (["-x", f"http://127.0.0.1:{hp}"], ["-p", "-x", f"http://127.0.0.1:{hp}"],
                 ["-x", f"socks5h://127.0.0.1:{sp}"]):
        r = curl(*args, url)
        assert (r.returncode, r.stdout) == (0, "hello from upstream\n"), (args, r.stderr)


def test_handed_over_ipv6_listener_is_served(make_proxy, upstream) -> None:
    p = make_proxy()
    v4, v6 = _listener(), _listener(socket.AF_INET6, "::1")
    port = v4.getsockname()[1]
    v6.close()
    v6 = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    v6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    v6.bind(("::1", port))
    v6.listen(4)
    with v4, v6:
        assert _hand_over(p, [v4.fileno(), v6.fileno()], {port: "http"}) == (2, b"k")
    r = curl("-g", "-x", f"http://[::1]:{port}", f"http://localhost:{upstream}/hello")
    assert (r.returncode, r.stdout) == (0, "hello from upstream\n"), r.stderr


def _pipe() -> list[socket.socket | int]:
    return list(os.pipe())


def _udp() -> list[socket.socket | int]:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    return [s]


def _not_listening() -> list[socket.socket | int]:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    return [s]


def _ipv6_only() -> list[socket.socket | int]:
    return [_listener(socket.AF_INET6, "::1")]


def _two_ports() -> list[socket.socket | int]:
    return [_listener(), _listener()]


@pytest.mark.parametrize("make, message", [
    (_pipe, "is not a socket"),
    (_udp, "is not TCP"),
    (_not_listening, "is not listening"),
    (_ipv6_only, "did not hand over 127.0.0.1 port"),
    (_two_ports, "unexpected listener"),
])
def test_adopt_refuses_anything_but_the_expected_listeners(make_proxy, make, message) -> None:
    from safebox.errors import ProxyError

    p = make_proxy()
    objs = make()
    fds = [o if isinstance(o, int) else o.fileno() for o in objs]
    # The expected port is the first object's (any port for the pipe).
    port = objs[0].getsockname()[1] if isinstance(objs[0], socket.socket) else 1
    try:
        with pytest.raises(ProxyError, match=message):
            _hand_over(p, fds, {port: "http"})
    finally:
        for o in objs:
            os.close(o) if isinstance(o, int) else o.close()
    assert p.active_connections == 0


def test_adopt_refuses_a_message_without_the_tag(make_proxy) -> None:
    from safebox.errors import ProxyError

    p = make_proxy()
    with _listener() as lst:
        with pytest.raises(ProxyError, match="unexpected proxy-port message"):
            _hand_over(p, [lst.fileno()], {lst.getsockname()[1]: "http"}, tag=b"X")


def test_adopt_returns_zero_when_the_helper_closed_first(make_proxy) -> None:
    p = make_proxy()
    ours, theirs = socket.socketpair()
    ours.close()
    with theirs:
        assert p.adopt(theirs, ports={3128: "http"}, timeout=5) == 0


def test_adopt_times_out_naming_the_helper(make_proxy) -> None:
    from safebox.errors import ProxyError

    p = make_proxy()
    ours, theirs = socket.socketpair()
    with ours, theirs, pytest.raises(ProxyError, match="did not hand over the proxy ports within"):
        p.adopt(theirs, ports={3128: "http"}, timeout=0.2)


def test_a_crashed_proxy_loop_refuses_new_connections_at_once(make_proxy, upstream) -> None:
    p = make_proxy()
    lst = _listener()
    port = lst.getsockname()[1]
    with lst:
        assert _hand_over(p, [lst.fileno()], {port: "http"}) == (1, b"k")
    assert curl("-x", f"http://127.0.0.1:{port}", f"http://localhost:{upstream}/hello").returncode == 0
    # Control: a listener nobody accepts from leaves a client waiting (curl's timeout, 28).
    with _listener() as idle:
        r = curl("-m", "1", "-x", f"http://127.0.0.1:{idle.getsockname()[1]}", f"http://localhost:{upstream}/hello")
        assert r.returncode == 28, r.stderr
    # The loop stops without stop(): the thread's last act closes the listeners.
    assert p._loop is not None
    p._loop.call_soon_threadsafe(p._loop.stop)
    assert p._thread is not None
    p._thread.join(10)
    started = time.monotonic()
    r = curl("-x", f"http://127.0.0.1:{port}", f"http://localhost:{upstream}/hello")
    assert r.returncode == 7, r.stderr  # couldn't connect: refused, not a hang
    assert time.monotonic() - started < 5

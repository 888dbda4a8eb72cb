#!/usr/bin/env python3
"""Proxy benchmark: throughput, integrity, time to first byte and memory.

Downloads a large file from a loopback server (sendfile, so the server is not
the bottleneck) directly and through each proxy path, the proxy running in
its own process as in ``safebox exec``, accepting the connections itself
(as it does on the listeners the helper hands over inside the sandbox), and,
for comparison, behind socat bridges with ``-b 262144`` (what
``--without helper`` still uses).  Loopback only.

    python benchmarks/bench_proxy.py [--size-mib 512] [--repeat 20] [--write docs/benchmarks.md]
    python benchmarks/bench_proxy.py --tls-only [--tls-rounds 15] [--write docs/benchmarks.md]

``--tls-only`` compares ``network.tlsTerminate`` with a plain CONNECT tunnel
(HTTPS from ``openssl s_server``, interleaved A/B) and the start-up of
``safebox exec`` with and without it.

``SAFEBOX_BENCH_REPEAT`` overrides the default repeat count.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import http.server
import json
import os
import pathlib
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
START, END = "<!-- proxy:start -->", "<!-- proxy:end -->"

_PROXY_CHILD = """
import pathlib, sys
sys.path.insert(0, sys.argv[1])
from safebox.proxy import ProxyConfig, ProxyServer
p = ProxyServer(ProxyConfig(("localhost",), allow_local_destinations=True), run_dir=pathlib.Path(sys.argv[2]), tcp=True)
p.start()
print(p.http_port, p.socks_port, flush=True)
sys.stdin.read()
p.stop()
"""


def make_server(directory: pathlib.Path) -> http.server.ThreadingHTTPServer:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            path = directory / self.path.lstrip("/")
            with path.open("rb") as f:
                size = os.fstat(f.fileno()).st_size
                self.send_response(200)
                self.send_header("Content-Length", str(size))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.flush()
                offset = 0
                while offset < size:
                    offset += os.sendfile(self.connection.fileno(), f.fileno(), offset, size - offset)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def bridge(path: pathlib.Path) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    proc = subprocess.Popen(["socat", "-b", "262144", f"TCP-LISTEN:{port},bind=127.0.0.1,fork,reuseaddr",
                             f"UNIX-CONNECT:{path}"])
    for _ in range(250):
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return proc, port
        except OSError:
            time.sleep(0.02)
    raise RuntimeError("socat did not start")


def curl_time(args: list[str], url: str) -> tuple[float, float]:
    """(seconds total, seconds to first byte) of one download to /dev/null."""
    out = subprocess.run(["curl", "-sS", "-o", "/dev/null", "-w", "%{time_total} %{time_starttransfer}", *args, url],
                         check=True, capture_output=True, text=True).stdout.split()
    return float(out[0]), float(out[1])


def curl_sha(args: list[str], url: str) -> str:
    curl = subprocess.Popen(["curl", "-sS", *args, url], stdout=subprocess.PIPE)
    h = hashlib.sha256()
    assert curl.stdout is not None
    while chunk := curl.stdout.read(1 << 20):
        h.update(chunk)
    if curl.wait() != 0:
        raise RuntimeError(f"curl failed: {args}")
    return h.hexdigest()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (all its threads), seconds."""
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def memory(pid: int) -> tuple[int, int]:
    """(RSS, PSS) in KiB from smaps_rollup."""
    text = pathlib.Path(f"/proc/{pid}/smaps_rollup").read_text()
    rss = int(re.search(r"^Rss:\s+(\d+)", text, re.M).group(1))  # type: ignore[union-attr]
    pss = int(re.search(r"^Pss:\s+(\d+)", text, re.M).group(1))  # type: ignore[union-attr]
    return rss, pss


SAFEBOX = pathlib.Path(sys.executable).with_name("safebox")

_EXEC_SCRIPT = r"""
set -ef
url=http://localhost:$PORT
for path in direct http connect socks5; do
  case $path in
    direct) args="--noproxy *" ;;
    http) args="" ;;
    connect) args="-p" ;;
    socks5) args="-x socks5h://127.0.0.1:1080" ;;
  esac
  [ "$path" = direct ] && [ "$INSIDE" = 1 ] && continue
  [ "$path" != direct ] && [ "$INSIDE" = 0 ] && continue
  i=0; while [ $i -lt $TIMED ]; do
    echo "$path time $(curl -sS $args -o /dev/null -w '%{time_total}' $url/big)"; i=$((i+1)); done
  i=0; while [ $i -lt $TTFB ]; do
    echo "$path ttfb $(curl -sS $args -o /dev/null -w '%{time_starttransfer}' $url/tiny)"; i=$((i+1)); done
  i=0; while [ $i -lt $REPEAT ]; do
    echo "$path sha $(curl -sS $args $url/big | sha256sum | cut -c1-64)"; i=$((i+1)); done
done
"""


def exec_paths(port: int, policy: pathlib.Path, opts: argparse.Namespace, expected: str) -> list[tuple]:
    """Direct on the host, then HTTP/CONNECT/SOCKS5 from inside one real ``safebox exec``."""
    env = {**os.environ, "PORT": str(port), "TIMED": str(opts.timed), "TTFB": str(opts.ttfb),
           "REPEAT": str(opts.repeat)}
    for k in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        env.pop(k, None)
    out = subprocess.run(["sh", "-c", _EXEC_SCRIPT], env={**env, "INSIDE": "0"},
                         check=True, capture_output=True, text=True).stdout
    out += subprocess.run([str(SAFEBOX), "exec", "-p", str(policy), "--", "sh", "-c", _EXEC_SCRIPT],
                          env={**env, "INSIDE": "1"}, check=True, capture_output=True, text=True).stdout
    data: dict[str, dict[str, list[str]]] = {}
    for line in out.splitlines():
        path, kind, value = line.split()
        data.setdefault(path, {}).setdefault(kind, []).append(value)
    rows = []
    for path, label in (("direct", "direct"), ("http", "HTTP"), ("connect", "CONNECT"), ("socks5", "SOCKS5")):
        d = data[path]
        mibs = opts.size_mib / statistics.median(float(x) for x in d["time"])
        ttfb = statistics.median(float(x) for x in d["ttfb"])
        ok = sum(x == expected for x in d["sha"])
        rows.append((label, mibs, ttfb * 1000, ok))
        print(f"exec {label:10s} {mibs:8.0f} MiB/s  ttfb {ttfb * 1000:6.2f} ms  sha ok {ok}/{opts.repeat}", flush=True)
    return rows


def tree_pss(root: int) -> tuple[int, int, int]:
    """(PSS of the whole process tree, PSS of safebox + socat in it, socat count), KiB."""
    children: dict[int, list[int]] = {}
    for entry in pathlib.Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    total = net = socats = 0
    todo = [root]
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            pss = memory(pid)[1]
            comm = pathlib.Path(f"/proc/{pid}/comm").read_text().strip()
        except (OSError, AttributeError):
            continue
        total += pss
        if pid == root or comm == "socat":
            net += pss
            socats += comm == "socat"
    return total, net, socats


def sandbox_memory(policy: pathlib.Path, n: int = 10) -> dict[str, float]:
    """Mean PSS per process tree (MiB) with ``n`` running at once: bare ``sleep``,
    ``safebox exec`` without network, and with the proxy (networked)."""
    result: dict[str, float] = {}
    cases = {"bare sleep": ["sleep", "6"],
             "safebox exec, no network": [str(SAFEBOX), "exec", "--", "sleep", "6"],
             "safebox exec, networked": [str(SAFEBOX), "exec", "-p", str(policy), "--", "sleep", "6"]}
    for name, argv in cases.items():
        procs = [subprocess.Popen(argv) for _ in range(n)]
        try:
            time.sleep(3)
            figures = [tree_pss(p.pid) for p in procs]
        finally:
            for p in procs:
                p.wait(30)
        result[name] = sum(f[0] for f in figures) / n / 1024
        if name.endswith("networked"):
            result["safebox process + socat (networked)"] = sum(f[1] for f in figures) / n / 1024
            result["socat per sandbox"] = sum(f[2] for f in figures) / n
        print(f"{name:40s} {result[name]:6.1f} MiB PSS per tree", flush=True)
    return result


TLS_START, TLS_END = "<!-- tls:start -->", "<!-- tls:end -->"

_TLS_CHILD = """
import pathlib, sys
sys.path.insert(0, sys.argv[1])
from safebox.proxy import ProxyConfig, ProxyServer
mitm = None
if sys.argv[3] != "-":
    from safebox.proxy.tls import Mitm
    mitm = Mitm(ca_cert_path=None, ca_key_path=None, extra_ca_cert_paths=(sys.argv[3],), exclude_domains=())
    pathlib.Path(sys.argv[2], "bundle.pem").write_bytes(mitm.bundle_pem)
p = ProxyServer(ProxyConfig(("localhost",), allow_local_destinations=True, mitm=mitm),
                run_dir=pathlib.Path(sys.argv[2]), tcp=True, unix=False)
p.start()
print(p.http_port, flush=True)
sys.stdin.read()
p.stop()
"""


def _spread(xs: list[float]) -> str:
    q = statistics.quantiles(xs, n=4) if len(xs) >= 4 else [min(xs), 0, max(xs)]
    return f"{q[0]:.2f}–{q[2]:.2f}"


def tls_bench(opts: argparse.Namespace) -> list[str]:
    """``network.tlsTerminate`` against a plain CONNECT tunnel, interleaved
    A/B: throughput and per-request time through the proxy alone, and the
    start-up of a whole ``safebox exec``."""
    sys.path.insert(0, str(ROOT / "tests"))
    from netservers import make_test_ca

    rounds = opts.tls_rounds
    with tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as tmp:
        d = pathlib.Path(tmp)
        ca = make_test_ca(d / "ca")
        ca.server_context(["localhost"])  # writes leaf-localhost.pem (cert + key)
        www = d / "www"
        www.mkdir()
        block = os.urandom(1 << 20)
        with (www / "big").open("wb") as f:
            for _ in range(opts.tls_size_mib):
                f.write(block)
        (www / "tiny").write_bytes(b"x")
        port = free_port()
        leaf = d / "ca" / "leaf-localhost.pem"
        origin = subprocess.Popen(["openssl", "s_server", "-quiet", "-accept", f"127.0.0.1:{port}", "-cert",
                                   str(leaf), "-WWW"], cwd=www, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        children, proxy_ports = [], {}
        try:
            for name, extra in (("tunnel", "-"), ("terminated", str(ca.cert_path))):
                run = d / name
                run.mkdir()
                child = subprocess.Popen([sys.executable, "-c", _TLS_CHILD, str(ROOT / "python"), str(run), extra],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                children.append(child)
                proxy_ports[name] = int(child.stdout.readline())  # type: ignore[union-attr]
            time.sleep(0.5)
            mem = {name: memory(c.pid)[0] / 1024 for name, c in zip(proxy_ports, children, strict=True)}
            # Both clients trust the same bundle (CA, host roots, the test CA),
            # as inside a sandbox: curl's cost of loading it is not the proxy's.
            trust = {n: str(d / "terminated" / "bundle.pem") for n in proxy_ports}
            args = {n: ["-x", f"http://127.0.0.1:{p}", "--cacert", trust[n]] for n, p in proxy_ports.items()}
            for _ in range(50):  # the origin is up
                try:
                    curl_time(args["tunnel"], f"https://localhost:{port}/tiny")
                    break
                except subprocess.CalledProcessError:
                    time.sleep(0.1)
            speed: dict[str, list[float]] = {n: [] for n in args}
            small: dict[str, list[float]] = {n: [] for n in args}
            for _ in range(rounds):
                for n in args:  # interleaved: tunnel, terminated, tunnel, ...
                    speed[n].append(opts.tls_size_mib / curl_time(args[n], f"https://localhost:{port}/big")[0])
                    small[n].append(curl_time(args[n], f"https://localhost:{port}/tiny")[0] * 1000)
        finally:
            for c in children:
                c.stdin.close()  # type: ignore[union-attr]
                c.wait(10)
            origin.terminate()
            origin.wait()
        # Start-up: a whole safebox exec, networked, with and without the key.
        home = d / "home"
        (home / "proj").mkdir(parents=True)
        policies = {}
        for name, net in (("without tlsTerminate", {}), ("with tlsTerminate", {"tlsTerminate": {}})):
            pol = d / f"{len(policies)}.json"
            pol.write_text(json.dumps({"network": {"allowedDomains": ["localhost"], **net}}))
            policies[name] = pol
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home)}
        start: dict[str, list[float]] = {n: [] for n in policies}
        for i in range(opts.tls_startup + 2):
            for n, pol in policies.items():
                t0 = time.perf_counter()
                subprocess.run([str(SAFEBOX), "exec", "-p", str(pol), "--", "true"], cwd=home / "proj", env=env,
                               check=True, stdin=subprocess.DEVNULL)
                if i >= 2:  # two warm-up rounds (caches)
                    start[n].append((time.perf_counter() - t0) * 1000)
    med = {n: statistics.median(v) for n, v in speed.items()}
    med_small = {n: statistics.median(v) for n, v in small.items()}
    med_start = {n: statistics.median(v) for n, v in start.items()}
    lines = [
        f"Command: `.venv/bin/python benchmarks/bench_proxy.py --tls-only --write docs/benchmarks.md`. "
        f"HTTPS from `openssl s_server -WWW` on loopback through the proxy alone (its own process), the same "
        f"requests interleaved A/B, {rounds} rounds, {opts.tls_size_mib} MiB downloads: \"tunnel\" is a CONNECT the "
        f"proxy relays untouched (curl verifies the origin), \"terminated\" is `network.tlsTerminate` (the "
        f"proxy decrypts, verifies the origin, re-encrypts); curl trusts the same bundle in both. {os.cpu_count()} cores, Python {sys.version.split()[0]}, OpenSSL "
        f"{ssl_version()}; the host was shared and busy (load average {os.getloadavg()[0]:.0f}), so single "
        "figures move by tens of percent: read the ratios.",
        "",
        "| path | MiB/s (median, IQR) | one small request, ms (median, IQR) | proxy RSS after start, MiB |",
        "|---|---:|---:|---:|",
    ]
    for n in args:
        lines.append(f"| {n} | {med[n]:.0f} ({_spread(speed[n])}) | {med_small[n]:.2f} ({_spread(small[n])}) | "
                     f"{mem[n]:.1f} |")
    lines += [
        "",
        f"Terminated against tunnel: throughput {med['terminated'] / med['tunnel']:.0%}; a small request "
        f"{med_small['terminated'] - med_small['tunnel']:+.2f} ms (a second TLS handshake, to the origin, and "
        "a certificate minted on the first request to a host).",
        "",
        f"Start-up of `safebox exec -p policy.json -- true` (networked), interleaved, {opts.tls_startup} runs "
        "each after two warm-up rounds:",
        "",
        "| policy | ms (median, IQR) |",
        "|---|---:|",
    ]
    for n, v in start.items():
        lines.append(f"| {n} | {med_start[n]:.0f} ({_spread(v)}) |")
    lines += ["", f"`tlsTerminate` adds {med_start['with tlsTerminate'] - med_start['without tlsTerminate']:.0f} ms "
                  "to start-up (importing `cryptography`, making the per-run CA and the leaf key, writing the "
                  "trust bundle)."]
    return lines


def ssl_version() -> str:
    import ssl

    return ssl.OPENSSL_VERSION.split()[1]


def _write_section(path: pathlib.Path, start: str, end: str, title: str, table: str) -> None:
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    if start in text and end in text:
        text = text[: text.index(start)] + start + "\n" + table + "\n" + text[text.index(end):]
    else:
        text = text.rstrip("\n") + f"\n\n{title}\n\n{start}\n{table}\n{end}\n"
    path.write_text(text)


def start_proxy(source: pathlib.Path, run_dir: pathlib.Path) -> tuple[subprocess.Popen[str], int, int]:
    """The proxy of the ``python/`` tree ``source`` in a process of its own: (process, HTTP port, SOCKS5 port)."""
    run_dir.mkdir(mode=0o700, exist_ok=True)
    child = subprocess.Popen([sys.executable, "-c", _PROXY_CHILD, str(source), str(run_dir)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    http_port, socks_port = map(int, child.stdout.readline().split())
    return child, http_port, socks_port


def proxy_paths(child: subprocess.Popen[str], http_port: int, socks_port: int,
                base: tuple[subprocess.Popen[str], int, int] | None, bridges: list[tuple[subprocess.Popen[bytes], int]]
                ) -> tuple[dict[str, list[str]], dict[str, subprocess.Popen[str] | None]]:
    """curl's arguments per path, and the proxy process that serves each (None: direct, no proxy)."""
    paths = {
        "direct": [],
        "HTTP, proxy accepts": ["-x", f"http://127.0.0.1:{http_port}"],
        "CONNECT, proxy accepts": ["-p", "-x", f"http://127.0.0.1:{http_port}"],
        "SOCKS5, proxy accepts": ["-x", f"socks5h://127.0.0.1:{socks_port}"],
    }
    owner: dict[str, subprocess.Popen[str] | None] = {name: (None if name == "direct" else child) for name in paths}
    if base is not None:
        for name, args in [
            ("HTTP, baseline", ["-x", f"http://127.0.0.1:{base[1]}"]),
            ("CONNECT, baseline", ["-p", "-x", f"http://127.0.0.1:{base[1]}"]),
            ("SOCKS5, baseline", ["-x", f"socks5h://127.0.0.1:{base[2]}"]),
        ]:
            paths[name] = args
            owner[name] = base[0]
    if bridges:
        (_, port_http), (_, port_socks) = bridges
        paths.update({
            "HTTP via socat": ["-x", f"http://127.0.0.1:{port_http}"],
            "CONNECT via socat": ["-p", "-x", f"http://127.0.0.1:{port_http}"],
            "SOCKS5 via socat": ["-x", f"socks5h://127.0.0.1:{port_socks}"],
        })
    return paths, owner


def _raw_direct(port: int, get: bytes, _: tuple[int, int]) -> float:
    t = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(get)
        s.recv(1)
        return time.perf_counter() - t


def _raw_connect(port: int, get: bytes, pp: tuple[int, int]) -> float:
    t = time.perf_counter()
    with socket.create_connection(("127.0.0.1", pp[0])) as s:
        s.sendall(f"CONNECT localhost:{port} HTTP/1.1\r\nHost: localhost:{port}\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += s.recv(4096)
        s.sendall(get)
        s.recv(1)
        return time.perf_counter() - t


def _raw_socks(port: int, get: bytes, pp: tuple[int, int]) -> float:
    t = time.perf_counter()
    with socket.create_connection(("127.0.0.1", pp[1])) as s:
        s.sendall(b"\x05\x01\x00")
        s.recv(2)
        s.sendall(b"\x05\x01\x00\x03\x09localhost" + port.to_bytes(2, "big"))
        s.recv(10)
        s.sendall(get)
        s.recv(1)
        return time.perf_counter() - t


def _raw_plain(port: int, _get: bytes, pp: tuple[int, int]) -> float:
    t = time.perf_counter()
    with socket.create_connection(("127.0.0.1", pp[0])) as s:
        s.sendall(f"GET http://localhost:{port}/tiny HTTP/1.1\r\nHost: localhost:{port}\r\n\r\n".encode())
        s.recv(1)
        return time.perf_counter() - t


def raw_clients(opts: argparse.Namespace) -> list[str]:
    """Time to first byte without curl: a Python client on raw sockets asks
    for one byte directly, then through the proxy of this tree and of
    --baseline (if given), CONNECT, SOCKS5 and plain HTTP, interleaved for
    --raw rounds; with the proxy process's CPU (user + system) per connection.
    Less noise than curl's process start on a shared machine."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            with contextlib.suppress(OSError):
                self.connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nConnection: close\r\n\r\nx")
            self.close_connection = True

    class Server(http.server.ThreadingHTTPServer):
        daemon_threads = True

        def handle_error(self, *args: object) -> None:
            pass

    server = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    get = f"GET /tiny HTTP/1.1\r\nHost: localhost:{port}\r\n\r\n".encode()

    kinds = {"CONNECT": _raw_connect, "SOCKS5": _raw_socks, "HTTP": _raw_plain}
    trees = [("this tree", ROOT / "python")] + ([("baseline", opts.baseline)] if opts.baseline else [])
    with tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as tmp:
        proxies = [(name, *start_proxy(src, pathlib.Path(tmp) / f"run{i}")) for i, (name, src) in enumerate(trees)]
        times: dict[str, list[float]] = {"direct": []}
        cpu: dict[str, float] = {}
        try:
            for _, _, hp, sp in proxies:
                for f in kinds.values():
                    f(port, get, (hp, sp))  # warm: the proxy loads at its first client
            for _ in range(opts.raw):
                times["direct"].append(_raw_direct(port, get, (0, 0)))
                for name, child, hp, sp in proxies:
                    for kind, f in kinds.items():
                        before = cpu_seconds(child.pid)
                        times.setdefault(f"{kind}, {name}", []).append(f(port, get, (hp, sp)))
                        cpu[f"{kind}, {name}"] = cpu.get(f"{kind}, {name}", 0.0) + cpu_seconds(child.pid) - before
        finally:
            for _, child, _, _ in proxies:
                child.stdin.close()  # type: ignore[union-attr]
                child.wait(10)
            server.shutdown()
    base = statistics.median(times["direct"]) * 1000
    lines = [f"Raw-socket clients, {opts.raw} interleaved rounds, {os.cpu_count()} cores, Python "
             f"{sys.version.split()[0]}, load average {os.getloadavg()[0]:.1f}; direct: {base:.3f} ms to the first byte.",
             "", "| path | added to the first byte, ms (median) | proxy CPU µs per connection |", "|---|---:|---:|"]
    for key, xs in times.items():
        if key != "direct":
            lines.append(f"| {key} | {statistics.median(xs) * 1000 - base:+.3f} | {cpu[key] / opts.raw * 1e6:.0f} |")
    return lines


def proxy_alone(paths: dict[str, list[str]], owner: dict[str, subprocess.Popen[str] | None],
                child: subprocess.Popen[str], port: int, expected: str, opts: argparse.Namespace
                ) -> tuple[list[tuple[str, float, float, int, float]], tuple[int, int]]:
    """Rows (path, MiB/s, TTFB ms, sha256 ok, proxy CPU µs per connection) and the proxy's peak memory."""
    rows: list[tuple[str, float, float, int, float]] = []
    peak = (0, 0)
    # Interleaved: every round runs each path once (a timed download
    # in the first --timed rounds, then one-byte requests), so a
    # shared machine's load falls on every path alike. The CPU time
    # (user + system) of the proxy process that served the one-byte
    # requests is summed: CPU per connection. The socat rows' proxy
    # CPU excludes socat's own.
    url, tiny = f"http://localhost:{port}/big", f"http://localhost:{port}/tiny"
    times: dict[str, list[float]] = {name: [] for name in paths}
    ttfbs: dict[str, list[float]] = {name: [] for name in paths}
    cpu: dict[str, float] = dict.fromkeys(paths, 0.0)
    for r in range(max(opts.timed, opts.ttfb)):
        for name, args in paths.items():
            if r < opts.timed:
                times[name].append(curl_time(args, url)[0])
            if r < opts.ttfb:
                who = owner.get(name, child)
                before = cpu_seconds(who.pid) if who is not None else 0.0
                ttfbs[name].append(curl_time(args, tiny)[1])
                cpu[name] += cpu_seconds(who.pid) - before if who is not None else 0.0
    for name, args in paths.items():
        ok = sum(curl_sha(args, url) == expected for _ in range(opts.repeat))
        peak = max(peak, memory(child.pid))
        mibs = opts.size_mib / statistics.median(times[name])
        ttfb = statistics.median(ttfbs[name])
        per = cpu[name] / opts.ttfb * 1e6
        rows.append((name, mibs, ttfb * 1000, ok, per))
        print(f"{name:22s} {mibs:8.0f} MiB/s  ttfb {ttfb * 1000:6.2f} ms  proxy CPU {per:5.0f} us/conn  "
              f"sha ok {ok}/{opts.repeat}", flush=True)
    return rows, peak


def tls_main(opts: argparse.Namespace) -> int:
    table = "\n".join(tls_bench(opts))
    print(table)
    if opts.write:
        _write_section(opts.write, TLS_START, TLS_END, "## TLS termination (`network.tlsTerminate`)", table)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mib", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=int(os.environ.get("SAFEBOX_BENCH_REPEAT", "20")),
                    help="checksummed downloads per path (soak)")
    ap.add_argument("--timed", type=int, default=3, help="timed downloads per path (median)")
    ap.add_argument("--ttfb", type=int, default=50, help="tiny-file requests per path (median)")
    ap.add_argument("--write", type=pathlib.Path, help="replace the Proxy section of this markdown file")
    ap.add_argument("--no-exec", action="store_true", help="skip the runs through a real safebox exec")
    ap.add_argument("--baseline", type=pathlib.Path,
                    help="a python/ source tree (e.g. of main: git archive main python | tar -x -C DIR) whose "
                         "proxy is measured in the same interleaved rounds, rows marked 'baseline'")
    ap.add_argument("--raw", type=int, default=0, metavar="ROUNDS",
                    help="only the time to first byte with raw-socket clients (no curl), ROUNDS interleaved rounds")
    ap.add_argument("--tls-only", action="store_true", help="only the network.tlsTerminate comparison")
    ap.add_argument("--tls-rounds", type=int, default=15, help="interleaved A/B rounds (TLS termination)")
    ap.add_argument("--tls-size-mib", type=int, default=256)
    ap.add_argument("--tls-startup", type=int, default=30, help="safebox exec runs per policy (TLS start-up)")
    opts = ap.parse_args()
    if opts.raw:
        print("\n".join(raw_clients(opts)))
        return 0
    if opts.tls_only:
        return tls_main(opts)
    exec_rows: list[tuple] = []
    mem: dict[str, float] = {}

    with tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as tmp:
        d = pathlib.Path(tmp)
        block = os.urandom(1 << 20)
        with (d / "big").open("wb") as f:
            for _ in range(opts.size_mib):
                f.write(block)
        (d / "tiny").write_bytes(b"x")
        expected = hashlib.sha256(block * opts.size_mib).hexdigest()
        server = make_server(d)
        run_dir = d / "run"
        run_dir.mkdir(mode=0o700)
        child, http_port, socks_port = start_proxy(ROOT / "python", run_dir)
        rss0, pss0 = memory(child.pid)
        # --baseline: the same proxy from another source tree, measured in
        # the same rounds (its rows are marked "baseline").
        base = start_proxy(opts.baseline, d / "run-baseline") if opts.baseline else None
        # Without socat (a bare benchmark machine) the bridged rows are left out.
        bridges = [bridge(run_dir / "http-proxy.sock"), bridge(run_dir / "socks-proxy.sock")] if shutil.which("socat") else []
        paths, owner = proxy_paths(child, http_port, socks_port, base, bridges)
        port = server.server_address[1]
        rows: list[tuple[str, float, float, int, float]] = []
        peak = (0, 0)
        policy = d / "policy.json"
        policy.write_text('{"network":{"allowedDomains":["localhost"],"allowLocalDestinations":true}}')
        try:
            if not opts.no_exec:
                exec_rows = exec_paths(port, policy, opts, expected)
                mem = sandbox_memory(policy)
            rows, peak = proxy_alone(paths, owner, child, port, expected, opts)
        finally:
            for c in (child, base[0] if base else None):
                if c is not None:
                    c.stdin.close()  # type: ignore[union-attr]
                    c.wait(10)
            for b, _ in bridges:
                b.terminate()
                b.wait()
            server.shutdown()

    exec_ok = all(ok == opts.repeat for *_, ok in exec_rows)
    all_ok = all(row[3] == opts.repeat for row in rows)
    direct, direct_ttfb = rows[0][1], rows[0][2]
    lines = []
    if exec_rows:
        e_direct = exec_rows[0][1]
        lines += [
            "Command: `.venv/bin/python benchmarks/bench_proxy.py --size-mib 512 --repeat 20 "
            "--write docs/benchmarks.md`; figures vary by tens of percent between runs on a shared host.",
            "",
            "### Through `safebox exec`\n",
            f"curl inside one `safebox exec -p policy.json` (bwrap + helper; the proxy, in the safebox "
            f"process, accepts on the listeners the helper handed over) against direct curl on the host, {opts.size_mib} MiB from a loopback "
            f"sendfile server: median of {opts.timed} timed runs, {opts.repeat} downloads per path piped "
            f"to sha256sum and compared, TTFB median of {opts.ttfb} one-byte requests.",
            "",
            "| path | MiB/s | vs direct | TTFB ms | sha256 ok |",
            "|---|---:|---:|---:|---:|",
        ]
        for name, mibs, ttfb, ok in exec_rows:
            lines.append(f"| {name} | {mibs:.0f} | {mibs / e_direct:.0%} | {ttfb:.2f} | {ok}/{opts.repeat} |")
        lines += ["", "Memory, 10 sandboxes running `sleep` at once, mean PSS per process tree "
                      "(the `safebox exec` process and all its descendants):", "",
                  "| what | MiB PSS |", "|---|---:|"]
        for name, value in mem.items():
            if name != "socat per sandbox":
                lines.append(f"| {name} | {value:.1f} |")
        lines += ["", f"Added by networking per sandbox (networked minus no network): "
                      f"{mem['safebox exec, networked'] - mem['safebox exec, no network']:.1f} MiB; "
                      f"{mem['socat per sandbox']:.0f} socat processes per sandbox.", "",
                  "### The proxy alone", ""]
    lines += [
        "The proxy in a process of its own, without a sandbox: \"proxy accepts\" is the path `safebox exec` "
        "uses (the proxy accepts the client's TCP connection itself); \"via socat\" puts a socat bridge in "
        "front, as `--without helper` still does (and every run did before the handoff). "
        f"{opts.size_mib} MiB from a loopback sendfile server with curl, median of {opts.timed} timed runs; "
        f"{opts.repeat} checksummed downloads per path; time to first byte: median of {opts.ttfb} "
        f"one-byte requests; the paths interleaved (each round runs every path once); proxy CPU: user + "
        f"system time of the proxy's process per one-byte request. {os.cpu_count()} cores, Python "
        f"{sys.version.split()[0]}.",
        "",
        "| path | MiB/s | vs direct | TTFB ms | TTFB added ms | proxy CPU µs per connection | sha256 ok |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, mibs, ttfb, ok, per in rows:
        lines.append(f"| {name} | {mibs:.0f} | {mibs / direct:.0%} | {ttfb:.2f} | {ttfb - direct_ttfb:+.2f} | "
                     f"{per:.0f} | {ok}/{opts.repeat} |")
    lines += ["", f"Proxy process memory: idle RSS {rss0 / 1024:.1f} MiB (PSS {pss0 / 1024:.1f} MiB); "
                  f"peak seen RSS {peak[0] / 1024:.1f} MiB (PSS {peak[1] / 1024:.1f} MiB)."]
    table = "\n".join(lines)
    print(table)
    if opts.write:
        section = f"## Proxy\n\n{START}\n{table}\n{END}\n"
        text = opts.write.read_text() if opts.write.exists() else "# Benchmarks\n"
        if START in text and END in text:
            text = text[: text.index(START)] + START + "\n" + table + "\n" + text[text.index(END):]
        else:
            text = text.rstrip("\n") + "\n\n" + section
        opts.write.write_text(text)
    return 0 if exec_ok and all_ok else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Proxy benchmark: throughput, integrity, time to first byte and memory.

Downloads a large file from a loopback server (sendfile, so the server is not
the bottleneck) directly and through each proxy path, the proxy running in
its own process as in ``safebox exec``, accepting the connections itself
(as it does on the listeners the helper hands over inside the sandbox), and,
for comparison, behind socat bridges with ``-b 262144`` (what
``--without helper`` still uses).  Loopback only.

    python benchmarks/bench_proxy.py [--size-mib 512] [--repeat 20] [--write docs/benchmarks.md]

``SAFEBOX_BENCH_REPEAT`` overrides the default repeat count.
"""

from __future__ import annotations

import argparse
import hashlib
import http.server
import os
import pathlib
import re
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mib", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=int(os.environ.get("SAFEBOX_BENCH_REPEAT", "20")),
                    help="checksummed downloads per path (soak)")
    ap.add_argument("--timed", type=int, default=3, help="timed downloads per path (median)")
    ap.add_argument("--ttfb", type=int, default=50, help="tiny-file requests per path (median)")
    ap.add_argument("--write", type=pathlib.Path, help="replace the Proxy section of this markdown file")
    ap.add_argument("--no-exec", action="store_true", help="skip the runs through a real safebox exec")
    opts = ap.parse_args()
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
        child = subprocess.Popen([sys.executable, "-c", _PROXY_CHILD, str(ROOT / "python"), str(run_dir)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None
        http_port, socks_port = map(int, child.stdout.readline().split())
        rss0, pss0 = memory(child.pid)
        b_http, port_http = bridge(run_dir / "http-proxy.sock")
        b_socks, port_socks = bridge(run_dir / "socks-proxy.sock")
        paths = {
            "direct": [],
            "HTTP, proxy accepts": ["-x", f"http://127.0.0.1:{http_port}"],
            "CONNECT, proxy accepts": ["-p", "-x", f"http://127.0.0.1:{http_port}"],
            "SOCKS5, proxy accepts": ["-x", f"socks5h://127.0.0.1:{socks_port}"],
            "HTTP via socat": ["-x", f"http://127.0.0.1:{port_http}"],
            "CONNECT via socat": ["-p", "-x", f"http://127.0.0.1:{port_http}"],
            "SOCKS5 via socat": ["-x", f"socks5h://127.0.0.1:{port_socks}"],
        }
        port = server.server_address[1]
        rows = []
        peak = (0, 0)
        policy = d / "policy.json"
        policy.write_text('{"network":{"allowedDomains":["localhost"],"allowLocalDestinations":true}}')
        try:
            if not opts.no_exec:
                exec_rows = exec_paths(port, policy, opts, expected)
                mem = sandbox_memory(policy)
            for name, args in paths.items():
                url = f"http://localhost:{port}/big"
                times = [curl_time(args, url)[0] for _ in range(opts.timed)]
                ttfb = statistics.median(curl_time(args, f"http://localhost:{port}/tiny")[1]
                                         for _ in range(opts.ttfb))
                ok = sum(curl_sha(args, url) == expected for _ in range(opts.repeat))
                peak = max(peak, memory(child.pid))
                mibs = opts.size_mib / statistics.median(times)
                rows.append((name, mibs, ttfb * 1000, ok))
                print(f"{name:22s} {mibs:8.0f} MiB/s  ttfb {ttfb * 1000:6.2f} ms  sha ok {ok}/{opts.repeat}",
                      flush=True)
        finally:
            child.stdin.close()  # type: ignore[union-attr]
            child.wait(10)
            for b in (b_http, b_socks):
                b.terminate()
                b.wait()
            server.shutdown()

    exec_ok = all(ok == opts.repeat for *_, ok in exec_rows)
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
        f"one-byte requests. {os.cpu_count()} cores, Python {sys.version.split()[0]}.",
        "",
        "| path | MiB/s | vs direct | TTFB ms | TTFB added ms | sha256 ok |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, mibs, ttfb, ok in rows:
        lines.append(f"| {name} | {mibs:.0f} | {mibs / direct:.0%} | {ttfb:.2f} | {ttfb - direct_ttfb:+.2f} | "
                     f"{ok}/{opts.repeat} |")
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
    return 0 if exec_ok and all(ok == opts.repeat for *_, ok in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

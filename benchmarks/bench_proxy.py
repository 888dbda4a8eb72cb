#!/usr/bin/env python3
"""Proxy benchmark: throughput, integrity, time to first byte and memory.

Downloads a large file from a loopback server (sendfile, so the server is not
the bottleneck) directly and through each proxy path, the proxy running in
its own process as in ``safebox exec``; the socat bridges use ``-b 262144``
as the sandbox does.  Loopback only.

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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mib", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=int(os.environ.get("SAFEBOX_BENCH_REPEAT", "20")),
                    help="checksummed downloads per path (soak)")
    ap.add_argument("--timed", type=int, default=3, help="timed downloads per path (median)")
    ap.add_argument("--ttfb", type=int, default=50, help="tiny-file requests per path (median)")
    ap.add_argument("--write", type=pathlib.Path, help="replace the Proxy section of this markdown file")
    opts = ap.parse_args()

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
            "HTTP via socat": ["-x", f"http://127.0.0.1:{port_http}"],
            "CONNECT via socat": ["-p", "-x", f"http://127.0.0.1:{port_http}"],
            "SOCKS5 via socat": ["-x", f"socks5h://127.0.0.1:{port_socks}"],
            "SOCKS5 unix socket": ["-x", f"socks5h://localhost{run_dir / 'socks-proxy.sock'}"],
            "HTTP proxy TCP port": ["-x", f"http://127.0.0.1:{http_port}"],
        }
        port = server.server_address[1]
        rows = []
        peak = (0, 0)
        try:
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

    direct, direct_ttfb = rows[0][1], rows[0][2]
    lines = [
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
    return 0 if all(ok == opts.repeat for *_, ok in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

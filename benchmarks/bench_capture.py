#!/usr/bin/env python3
"""Capture benchmark (docs/network.md, "Capture"): throughput and connect
latency of a program that ignores the proxy, against a direct connection in
the same run, and the start-up of ``safebox exec`` with capture on.

- throughput: a loopback server sends SIZE MiB with ``sendfile`` on every
  connection; the client reads it all, on the host (direct) and inside
  ``safebox exec`` by the name ``localhost.`` (captured: the supervisor, the
  proxy's filter, a splice relay);
- connect latency: connect and read the server's first byte, ROUNDS times
  (after one warm-up connection that starts the proxy), median;
- start-up: ``safebox exec -- true`` with a networked policy, this checkout
  against another install (``--baseline``, e.g. main's ``.venv/bin/safebox``,
  which has no capture), interleaved, median; and the same with no network,
  where capture costs nothing by construction.

Loopback only.

    python benchmarks/bench_capture.py [--size-mib 256] [--rounds 200] [--baseline PATH] [--write docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import json
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
SAFEBOX = ROOT / ".venv" / "bin" / "safebox"
START, END = "<!-- capture:start -->", "<!-- capture:end -->"

CLIENT = r"""
import socket, sys, time
host, port, mode, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
addr = socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_STREAM)[0][4]
if mode == "bulk":
    out = []
    for _ in range(n):
        t = time.perf_counter(); s = socket.create_connection(addr); total = 0
        while True:
            b = s.recv(1 << 20)
            if not b: break
            total += len(b)
        out.append((total, time.perf_counter() - t)); s.close()
    print(" ".join(f"{a}:{b}" for a, b in out))
else:
    s = socket.create_connection(addr); s.recv(1); s.close()  # warm-up: the proxy starts here
    ts = []
    for _ in range(n):
        t = time.perf_counter(); s = socket.create_connection(addr); s.recv(1); ts.append(time.perf_counter() - t)
        s.close()
    print(" ".join(str(x) for x in ts))
"""


class Server:
    """Sends ``data`` (sendfile) on every connection to the bulk port, one byte on the ping port."""

    def __init__(self, size: int) -> None:
        self.file = tempfile.TemporaryFile()
        chunk = os.urandom(1 << 20)
        for _ in range(size >> 20):
            self.file.write(chunk)
        self.file.flush()
        self.bulk = self._listen(self._send_all)
        self.ping = self._listen(lambda c: c.sendall(b"x"))

    def _listen(self, serve) -> int:  # type: ignore[no-untyped-def]
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(1024)

        def loop() -> None:
            while True:
                c, _ = s.accept()
                threading.Thread(target=self._one, args=(c, serve), daemon=True).start()

        threading.Thread(target=loop, daemon=True).start()
        return int(s.getsockname()[1])

    @staticmethod
    def _one(c: socket.socket, serve) -> None:  # type: ignore[no-untyped-def]
        try:
            serve(c)
        finally:
            c.close()

    def _send_all(self, c: socket.socket) -> None:
        with open(f"/proc/self/fd/{self.file.fileno()}", "rb") as f:
            c.sendfile(f)


def _policy(tmp: pathlib.Path) -> pathlib.Path:
    p = tmp / "policy.json"
    p.write_text(json.dumps({"network": {"allowedDomains": ["localhost"], "allowLocalDestinations": True}}))
    return p


def _run(argv: list[str]) -> str:
    r = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    if r.returncode != 0:
        raise SystemExit(f"{argv[:4]}...: exit {r.returncode}: {r.stderr}")
    return r.stdout


def _client(inside: bool, policy: pathlib.Path, host: str, port: int, mode: str, n: int) -> str:
    argv = [sys.executable, "-c", CLIENT, host, str(port), mode, str(n)]
    if inside:
        argv = [str(SAFEBOX), "exec", "-q", "-p", str(policy), "--", "/usr/bin/python3", *argv[1:]]
    return _run(argv)


def _once(binary: str, opts: list[str]) -> float:
    t = time.perf_counter()
    _run([binary, "exec", "-q", *opts, "--", "true"])
    return time.perf_counter() - t


def _startup(pairs: list[tuple[str, list[str]]], rounds: int) -> list[float]:
    """Median start-up of each (binary, options), interleaved run by run."""
    times: list[list[float]] = [[] for _ in pairs]
    for _ in range(rounds):
        for i, (binary, opts) in enumerate(pairs):
            times[i].append(_once(binary, opts))
    return [statistics.median(t) for t in times]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mib", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--startup-rounds", type=int, default=30)
    ap.add_argument("--baseline", default="/work/main/.venv/bin/safebox")
    ap.add_argument("--write", type=pathlib.Path)
    a = ap.parse_args()
    srv = Server(a.size_mib << 20)
    tmp = pathlib.Path(tempfile.mkdtemp())
    policy = _policy(tmp)
    rows: dict[str, list[float]] = {"direct": [], "capture": []}
    for _ in range(a.repeat):  # interleaved, so both see the same machine
        for name, inside, host in (("direct", False, "127.0.0.1"), ("capture", True, "localhost.")):
            for item in _client(inside, policy, host, srv.bulk, "bulk", 1).split():
                size, secs = item.split(":")
                assert int(size) == a.size_mib << 20, (name, size)
                rows[name].append(int(size) / float(secs) / 1e6)
    direct, captured = statistics.median(rows["direct"]), statistics.median(rows["capture"])
    lat_direct = statistics.median(float(x) for x in _client(False, policy, "127.0.0.1", srv.ping, "ping",
                                                             a.rounds).split())
    lat_capture = statistics.median(float(x) for x in _client(True, policy, "localhost.", srv.ping, "ping",
                                                              a.rounds).split())
    net = ["-p", str(policy)]
    s_ours, s_base, s_ours0, s_base0 = _startup([(str(SAFEBOX), net), (a.baseline, net), (str(SAFEBOX), []),
                                                 (a.baseline, [])], a.startup_rounds)
    table = "\n".join([
        START,
        f"Measured by `benchmarks/bench_capture.py --size-mib {a.size_mib} --repeat {a.repeat} --rounds {a.rounds}` "
        f"on {os.cpu_count()} cores, Linux {os.uname().release}, one run (loopback; medians):",
        "",
        "| measure | direct | capture | ratio / delta |",
        "| --- | --- | --- | --- |",
        f"| throughput, {a.size_mib} MiB per connection | {direct:,.0f} MB/s | {captured:,.0f} MB/s | "
        f"{100 * captured / direct:.0f}% |",
        f"| connect + first byte | {lat_direct * 1e3:.3f} ms | {lat_capture * 1e3:.3f} ms | "
        f"+{(lat_capture - lat_direct) * 1e3:.3f} ms |",
        "",
        "| `safebox exec -- true` | without capture (baseline) | with capture | delta |",
        "| --- | --- | --- | --- |",
        f"| networked policy | {s_base * 1e3:.1f} ms | {s_ours * 1e3:.1f} ms | {(s_ours - s_base) * 1e3:+.1f} ms |",
        f"| no network | {s_base0 * 1e3:.1f} ms | {s_ours0 * 1e3:.1f} ms | {(s_ours0 - s_base0) * 1e3:+.1f} ms |",
        "",
        f"Baseline: `{a.baseline}` (an install without capture), interleaved run by run, "
        f"{a.startup_rounds} runs each. The no-network row is the control: capture adds nothing there by "
        "construction, so its delta is the noise of the machine (and of whatever else differs between the "
        "two commits).",
        END,
    ])
    print(table)
    if a.write:
        text = a.write.read_text()
        if START in text:
            text = re.sub(re.escape(START) + r".*?" + re.escape(END), table, text, flags=re.S)
        else:
            text += "\n## Capture\n\n" + table + "\n"
        a.write.write_text(text)


if __name__ == "__main__":
    main()

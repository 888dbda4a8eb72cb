#!/usr/bin/env python3
"""Start-up overhead of `safebox exec -- true` against bare bubblewrap, same run.

    .venv/bin/python benchmarks/bench_startup.py [--runs 60] [--write docs/benchmarks.md]
        [--launcher NAME=PATH ...] [--concurrent 10]

Besides one start at a time, it starts --concurrent (10) copies at once and
times the whole burst (the wall time until the last exits), for bare bwrap,
the no-network and the networked start: issue 12's targets are a networked
start at most 1.5x the no-network one, and 10 networked starts at once under
0.3 s on 2 cores.

--launcher adds `PATH exec -- true` (and the networked start, alone and in
bursts) for another installed `safebox`: a pip or pipx install (their
console-script launcher against build.py's -IS one, docs/index.md "As a
Python tool"), or another commit's venv to compare against in the same run.

Interleaves the variants (so drift affects all alike), reports medians and
the ratio to the bare-bwrap baseline, and with --write replaces the section
between <!-- startup:start --> and <!-- startup:end --> in the given file.
This is a benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAFEBOX = str(ROOT / ".venv" / "bin" / "safebox")
BARE = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-all",
        "--die-with-parent", "true"]


def timed(cmd: list[str], cwd: str) -> float:
    t = time.perf_counter()
    r = subprocess.run(cmd, cwd=cwd, stdin=subprocess.DEVNULL)
    dt = time.perf_counter() - t
    if r.returncode != 0:
        raise SystemExit(f"{cmd} exited {r.returncode}")
    return dt


def burst(cmd: list[str], cwd: str, n: int) -> float:
    """Wall time for ``n`` copies of ``cmd`` started at once, until the last exits."""
    t = time.perf_counter()
    procs = [subprocess.Popen(cmd, cwd=cwd, stdin=subprocess.DEVNULL) for _ in range(n)]
    codes = [p.wait() for p in procs]
    dt = time.perf_counter() - t
    if any(codes):
        raise SystemExit(f"{cmd} exited {codes}")
    return dt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=60)
    ap.add_argument("--write", type=Path)
    ap.add_argument("--launcher", action="append", default=[], metavar="NAME=PATH",
                    help="also time PATH exec -- true (another installed safebox)")
    ap.add_argument("--concurrent", type=int, default=10, metavar="N", help="starts at once in a burst (10)")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="safebox-bench-")
    subprocess.run(["git", "init", "-q", work], check=True)
    variants = {
        "bare bwrap (baseline)": BARE,
        "safebox exec -- true": [SAFEBOX, "exec", "--", "true"],
        "safebox exec --without bwrap -- true": [SAFEBOX, "exec", "--without", "bwrap", "--", "true"],
        "safebox exec --without helper -- true": [SAFEBOX, "exec", "--without", "helper", "--", "true"],
        # With a proxy; the second adds a preset's domains and caches (docs/toolchains.md, "Cost").
        "safebox exec --allow-domain example.com -- true": [SAFEBOX, "exec", "--allow-domain", "example.com",
                                                            "--", "true"],
        "safebox exec --preset npm -- true": [SAFEBOX, "exec", "--preset", "npm", "--", "true"],
        "python3 -c pass (interpreter alone)": [sys.executable, "-c", "pass"],
    }
    for spec in args.launcher:
        name, _, path = spec.partition("=")
        variants[f"{name}: safebox exec -- true"] = [path, "exec", "--", "true"]
        variants[f"{name}: safebox exec --allow-domain example.com -- true"] = [
            path, "exec", "--allow-domain", "example.com", "--", "true"]
    for cmd in variants.values():  # warm caches (policy, seccomp program, page cache)
        timed(cmd, work)
    samples: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(args.runs):
        for name, cmd in variants.items():
            samples[name].append(timed(cmd, work))
    networked = [SAFEBOX, "exec", "--allow-domain", "example.com", "--", "true"]
    bursts = {"bare bwrap": BARE, "safebox exec -- true": [SAFEBOX, "exec", "--", "true"],
              "safebox exec --allow-domain example.com -- true": networked}
    for spec in args.launcher:
        name, _, path = spec.partition("=")
        bursts[f"{name}: safebox exec --allow-domain example.com -- true"] = [
            path, "exec", "--allow-domain", "example.com", "--", "true"]
    burst_samples: dict[str, list[float]] = {k: [] for k in bursts}
    for _ in range(max(5, args.runs // 4)):
        for name, cmd in bursts.items():
            burst_samples[name].append(burst(cmd, work, args.concurrent))
    base = statistics.median(samples["bare bwrap (baseline)"])
    rows = ["| variant | median | p90 | ratio to bare bwrap |", "|---|---|---|---|"]
    for name, xs in samples.items():
        xs.sort()
        med, p90 = statistics.median(xs), xs[int(len(xs) * 0.9) - 1]
        rows.append(f"| {name} | {med * 1000:.1f} ms | {p90 * 1000:.1f} ms | {med / base:.1f}x |")
    ratio = statistics.median(samples["safebox exec -- true"]) / base
    net_ratio = (statistics.median(samples["safebox exec --allow-domain example.com -- true"])
                 / statistics.median(samples["safebox exec -- true"]))
    burst_base = statistics.median(burst_samples["bare bwrap"])
    burst_rows = [f"| {args.concurrent} at once | median (whole burst) | p90 | ratio to bare bwrap |",
                  "|---|---|---|---|"]
    for name, xs in burst_samples.items():
        xs.sort()
        med, p90 = statistics.median(xs), xs[max(0, int(len(xs) * 0.9) - 1)]
        burst_rows.append(f"| {name} | {med * 1000:.0f} ms | {p90 * 1000:.0f} ms | {med / burst_base:.1f}x |")
    net_burst = statistics.median(burst_samples["safebox exec --allow-domain example.com -- true"])
    uname = os.uname()
    text = "\n".join([
        f"Measured {time.strftime('%Y-%m-%d')} on {uname.sysname} {uname.release} ({os.cpu_count()} cores), "
        f"{args.runs} interleaved runs each, warm caches, in a git work tree:",
        "", "```", f".venv/bin/python benchmarks/bench_startup.py --runs {args.runs} --write docs/benchmarks.md",
        "```", "", *rows, "",
        f"**safebox exec -- true is {ratio:.1f}x bare bwrap** (issue 24's target: at most 4x; sandbox-runtime measured "
        "here: about 58x). "
        f"**A networked start is {net_ratio:.2f}x the no-network one** (target: at most 1.5x).", "",
        f"{args.concurrent} starts at once, {len(burst_samples['bare bwrap'])} bursts each, interleaved:", "",
        *burst_rows, "",
        f"**{args.concurrent} networked starts at once finish in {net_burst:.2f} s** "
        f"(target: under 0.3 s on 2 cores).", ""])
    print(text)
    if args.write:
        doc = args.write.read_text() if args.write.exists() else "# Benchmarks\n"
        start, end = "<!-- startup:start -->", "<!-- startup:end -->"
        block = f"{start}\n{text}\n{end}"
        if start in doc:
            doc = doc[:doc.index(start)] + block + doc[doc.index(end) + len(end):]
        else:
            doc += f"\n## Start-up\n\n{block}\n"
        args.write.write_text(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())

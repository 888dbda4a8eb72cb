#!/usr/bin/env python3
"""Start-up of a command inside one `safebox.Sandbox`, against bare bubblewrap
started from the same process, interleaved.

    .venv/bin/python benchmarks/bench_api.py [--runs 40] [--write docs/benchmarks.md]

Issue 12's target: inside one networked Sandbox, a command starts in at most
4x a bare bwrap measured in the same process. The Sandbox is opened once
(policy, layers, run dir, proxy listeners) and every `sb.run(["true"])`
pays only what a command pays: the work-tree checks, the plan, bwrap, the
helper. Bare bwrap is `subprocess.run` of the same argv bench_startup.py
uses. With --write the section between <!-- api:start --> and <!-- api:end
--> of the given file is replaced. This is a benchmark, not a test: it
asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BARE = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-all",
        "--die-with-parent", "true"]


def _time(fn: object) -> float:
    start = time.perf_counter()
    fn()  # type: ignore[operator]
    return (time.perf_counter() - start) * 1000


def measure(runs: int) -> dict[str, list[float]]:
    import safebox

    out: dict[str, list[float]] = {"bare bwrap": [], "Sandbox, no network": [], "Sandbox, networked": []}
    with tempfile.TemporaryDirectory(prefix="safebox-bench-api-", dir="/var/tmp") as work, \
            safebox.Sandbox(cwd=work) as plain, \
            safebox.Sandbox({"network": {"allowedDomains": ["example.com"]}}, cwd=work) as net:
        for sb in (plain, net):  # warm: the policy and seccomp caches, the first command's set-up
            sb.run(["true"])
        for _ in range(runs):
            out["bare bwrap"].append(_time(lambda: subprocess.run(BARE, check=True)))
            out["Sandbox, no network"].append(_time(lambda: plain.run(["true"]).check_returncode()))
            out["Sandbox, networked"].append(_time(lambda: net.run(["true"]).check_returncode()))
    return out


def report(samples: dict[str, list[float]], runs: int) -> str:
    base = statistics.median(samples["bare bwrap"])
    rows = ["| variant | median | p90 | ratio to bare bwrap |", "|---|---|---|---|"]
    for name, xs in samples.items():
        p90 = sorted(xs)[int(0.9 * (len(xs) - 1))]
        rows.append(f"| {name} | {statistics.median(xs):.1f} ms | {p90:.1f} ms | {statistics.median(xs) / base:.2f}x |")
    ratio = statistics.median(samples["Sandbox, networked"]) / base
    load = os.getloadavg()[0]
    return "\n".join([
        f"Measured {time.strftime('%Y-%m-%d')} on Linux {platform.release()} ({os.cpu_count()} cores, load average "
        f"{load:.1f}), {runs} interleaved rounds in one process, warm caches:", "",
        "```", f".venv/bin/python benchmarks/bench_api.py --runs {runs} --write docs/benchmarks.md", "```", "",
        *rows, "",
        f"**A command in a networked Sandbox starts in {ratio:.1f}x a bare bwrap** (issue 12's target: at most 4x).",
    ])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--write", type=Path)
    args = ap.parse_args()
    text = report(measure(args.runs), args.runs)
    print(text)
    if args.write:
        doc = args.write.read_text()
        start, end = "<!-- api:start -->", "<!-- api:end -->"
        if start in doc and end in doc:
            doc = doc[:doc.index(start) + len(start)] + "\n" + text + "\n" + doc[doc.index(end):]
        else:
            doc += f"\n## Commands inside one Sandbox (the Python API)\n\n{start}\n{text}\n{end}\n"
        args.write.write_text(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())

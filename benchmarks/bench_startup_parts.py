#!/usr/bin/env python3
"""Where the milliseconds of `safebox exec -- true` go: each part as the
difference between two variants that differ by it alone, measured
interleaved in one run (so drift affects all alike), medians.

    .venv/bin/python benchmarks/bench_startup_parts.py [--runs 30] [--write docs/benchmarks.md]

The variants, each a superset of the one before:

1. `python -IS -c pass`: the interpreter;
2. `python -IS` importing what a start imports (``safebox.builder.prescan``,
   ``safebox.cli``, ``safebox.run.main``), nothing run;
3. `safebox exec --dry-run -- true`: the policy (warm cache), the walks of
   the work dir and every decision, the argv printed, nothing started;
4. `safebox exec --observe off --limit-processes unlimited -- true`: the
   sandbox (bwrap with safebox's mounts, the helper), no supervisor, no cgroup;
5. the same with the limits cgroup (``--limit-processes`` default: the shell
   that puts bwrap in the cgroup, and the cgroup's set-up and removal);
6. `safebox exec -- true`: also the violations supervisor
   (``safebox-helper --supervise``);

and bare bwrap (the baseline of bench_startup.py), a domain's start
(`--allow-domain example.com`), and `sh -c 'exec true'` (what the cgroup's
shell costs by itself). This is a benchmark, not a test: it asserts nothing.
With --write replaces the section between <!-- startparts:start --> and
<!-- startparts:end --> in the given file.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv"
SAFEBOX = str(VENV / "bin" / "safebox")
PY = str(VENV / "bin" / "python")
BARE = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-all",
        "--die-with-parent", "true"]
SITE = next(str(p) for p in (VENV / "lib").glob("python3*/site-packages"))
IMPORTS = (f"import sys; sys.path.append({SITE!r}); import safebox.builder.prescan, safebox.cli, safebox.run.main")
SH = "sh -c 'exec true'"
LEAN = ["--observe", "off", "--limit-processes", "unlimited"]

VARIANTS: dict[str, list[str]] = {
    "bare bwrap": BARE,
    "1 interpreter": [PY, "-IS", "-c", "pass"],
    "2 imports": [PY, "-IS", "-c", IMPORTS],
    "3 dry run": [SAFEBOX, "exec", "--dry-run", "--", "true"],
    "4 sandbox": [SAFEBOX, "exec", *LEAN, "--", "true"],
    "5 + cgroup": [SAFEBOX, "exec", "--observe", "off", "--", "true"],
    "6 + supervisor (safebox exec -- true)": [SAFEBOX, "exec", "--", "true"],
    "with a domain": [SAFEBOX, "exec", "--allow-domain", "example.com", "--", "true"],
    SH: ["/bin/sh", "-c", "exec true"],
}


def timed(cmd: list[str], cwd: str) -> tuple[float, float]:
    """(wall ms, CPU ms of every process of the run: user and system)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    r = subprocess.run(cmd, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    dt = (time.perf_counter() - t) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise SystemExit(f"{cmd} exited {r.returncode}")
    cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000
    return dt, cpu


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--write", type=Path)
    args = ap.parse_args()
    times: dict[str, list[float]] = {k: [] for k in VARIANTS}
    cpus: dict[str, list[float]] = {k: [] for k in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="bench-parts-", dir="/var/tmp") as work:
        subprocess.run(["git", "init", "-q", work], check=True)
        for cmd in VARIANTS.values():  # warm the policy and seccomp caches
            timed(cmd, work)
        for _ in range(args.runs):
            for name, cmd in VARIANTS.items():
                wall, cpu = timed(cmd, work)
                times[name].append(wall)
                cpus[name].append(cpu)
    med = {k: statistics.median(v) for k, v in times.items()}
    cmed = {k: statistics.median(v) for k, v in cpus.items()}
    steps = [k for k in VARIANTS if k[:1].isdigit()]
    what = {
        "1 interpreter": "the interpreter (`python -IS`)",
        "2 imports": "safebox's imports on the exec path",
        "3 dry run": "policy (warm cache), walks of the work dir, every decision",
        "4 sandbox": "the run dir, bwrap with safebox's mounts, the helper (Landlock, seccomp, capabilities), "
                     "`true`, and the wait for them",
        "5 + cgroup": "the limits cgroup: its set-up and removal, and the shell that enters it",
        "6 + supervisor (safebox exec -- true)": "the violations supervisor (`safebox-helper --supervise`)",
    }
    rows, prev, cprev = [], 0.0, 0.0
    for k in steps:
        rows.append(f"| {what[k]} | {med[k] - prev:+.1f} ms | {med[k]:.1f} ms | {cmed[k] - cprev:+.1f} ms "
                    f"| {cmed[k]:.1f} ms |")
        prev, cprev = med[k], cmed[k]
    full, bare = med["6 + supervisor (safebox exec -- true)"], med["bare bwrap"]
    dom = med["with a domain"]
    lines = [
        f"Measured {time.strftime('%Y-%m-%d')} on Linux {platform.release()} ({os.cpu_count()} cores, shared with "
        f"other jobs: load average {os.getloadavg()[0]:.0f}), {args.runs} interleaved runs of each variant, "
        "medians, warm caches, in an empty git work tree:",
        "", "```", f".venv/bin/python benchmarks/bench_startup_parts.py --runs {args.runs} --write docs/benchmarks.md",
        "```", "",
        "| part of `safebox exec -- true` | adds (wall) | total (wall) | adds (CPU) | total (CPU) |",
        "|---|---|---|---|---|", *rows, "",
        f"Bare bwrap took {bare:.1f} ms in the same run (`safebox exec -- true` is {full / bare:.1f}x it; with "
        f"`--allow-domain example.com` {dom:.1f} ms, {dom / bare:.1f}x); `sh -c 'exec true'` alone "
        f"{med[SH]:.1f} ms. CPU: every process of the run, user and system (`getrusage(RUSAGE_CHILDREN)`), "
        f"which other jobs on the machine disturb less than the wall time; bare bwrap {cmed['bare bwrap']:.1f} ms.",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.write:
        doc = args.write.read_text()
        start, end = "<!-- startparts:start -->", "<!-- startparts:end -->"
        if start in doc and end in doc:
            doc = doc[:doc.index(start) + len(start)] + "\n" + text + doc[doc.index(end):]
        else:
            doc += f"\n## Where a start's milliseconds go\n\n{start}\n{text}{end}\n"
        args.write.write_text(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())

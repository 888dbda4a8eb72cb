#!/usr/bin/env python3
"""What the violations feed costs: start-up, and a file-heavy job, against
the same runs with ``--observe off``, interleaved in one run.

    .venv/bin/python benchmarks/bench_violations.py [--runs 40] [--jobs 7] [--write docs/benchmarks.md]

1. Start-up: ``safebox exec -- true`` with ``--observe off``, the default
   (``calls``), ``writes`` and ``all``; medians and the difference in milliseconds.
2. The job: unpack a 10,000-file tarball (a git work tree, 100 directories of
   100 files) and run ``git status`` inside, in the working directory
   (a write root), once on the disk under ``/var/tmp`` (what a project
   checkout is) and once on ``/dev/shm`` (tmpfs: no disk time to hide the
   cost behind, the worst case); ratio of medians to ``--observe off``.

With --write, replaces the section between <!-- violations:start --> and
<!-- violations:end --> in the given file. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAFEBOX = str(ROOT / ".venv" / "bin" / "safebox")
MODES = ("off", "calls", "writes", "all")
LOAD_START = 0.0
JOB = "tar xf ../repo.tar && cd repo && git status --short | wc -l >/dev/null"


def timed(cmd: list[str], cwd: str) -> float:
    t = time.perf_counter()
    r = subprocess.run(cmd, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True)
    dt = time.perf_counter() - t
    if r.returncode != 0:
        raise SystemExit(f"{cmd} exited {r.returncode}: {r.stderr}")
    if "safebox: refused" in r.stderr:
        raise SystemExit(f"{cmd}: something was refused, the comparison is off: {r.stderr}")
    return dt


def make_tarball(where: Path) -> Path:
    """A git work tree of 10,000 small files, tarred."""
    src = where / "src" / "repo"
    src.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(src)], check=True)
    for d in range(100):
        (src / f"d{d}").mkdir()
        for f in range(100):
            (src / f"d{d}" / f"f{f}.txt").write_text(f"file {d} {f}\n")
    env = dict(os.environ, GIT_AUTHOR_NAME="b", GIT_AUTHOR_EMAIL="b@b.invalid", GIT_COMMITTER_NAME="b",
               GIT_COMMITTER_EMAIL="b@b.invalid")
    subprocess.run(["git", "-C", str(src), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(src), "commit", "-qm", "bench"], check=True, env=env)
    tar = where / "repo.tar"
    subprocess.run(["tar", "cf", str(tar), "-C", str(src.parent), "repo"], check=True)
    shutil.rmtree(where / "src")
    return tar


def job_samples(base: Path, tar: Path, runs: int) -> dict[str, list[float]]:
    """Interleaved timings of the job in ``base`` (tarball beside the work dir)."""
    work = base / "w"
    shutil.copy(tar, base / "repo.tar")
    samples: dict[str, list[float]] = {m: [] for m in MODES}
    for i in range(runs + 1):
        for mode in MODES:
            if work.exists():
                shutil.rmtree(work)
            work.mkdir()
            dt = timed([SAFEBOX, "exec", "--observe", mode, "--allow-write", str(base), "--", "sh", "-c", JOB],
                       str(work))
            if i:  # the first round warms caches
                samples[mode].append(dt)
    shutil.rmtree(work, ignore_errors=True)
    return samples


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=40, help="start-up runs per variant")
    ap.add_argument("--jobs", type=int, default=7, help="job runs per variant and place")
    ap.add_argument("--write", type=Path)
    args = ap.parse_args()
    global LOAD_START
    LOAD_START = os.getloadavg()[0]

    work = tempfile.mkdtemp(prefix="safebox-bench-", dir="/var/tmp")
    subprocess.run(["git", "init", "-q", work], check=True)
    start: dict[str, list[float]] = {m: [] for m in MODES}
    for i in range(args.runs + 1):
        for mode in MODES:
            dt = timed([SAFEBOX, "exec", "--observe", mode, "--", "true"], work)
            if i:
                start[mode].append(dt)
    shutil.rmtree(work)

    places: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory(prefix="safebox-bench-tar-", dir="/var/tmp") as t:
        tar = make_tarball(Path(t))
        for label, base_dir in (("disk (/var/tmp)", "/var/tmp"), ("tmpfs (/dev/shm)", "/dev/shm")):
            if not os.path.isdir(base_dir):
                continue
            with tempfile.TemporaryDirectory(prefix="safebox-bench-job-", dir=base_dir) as b:
                places[label] = job_samples(Path(b), tar, args.jobs)

    med = {m: statistics.median(xs) for m, xs in start.items()}
    rows = ["| `--observe` | median | p90 | added |", "|---|---|---|---|"]
    for mode, xs in start.items():
        xs.sort()
        rows.append(f"| {mode} | {med[mode] * 1000:.1f} ms | {xs[int(len(xs) * 0.9) - 1] * 1000:.1f} ms | "
                    f"{(med[mode] - med['off']) * 1000:+.2f} ms |")
    job_rows = ["| where | off | calls | writes (default) | all (reads, metadata; default with --audit-log) |",
                "|---|---|---|---|---|"]
    for label, samples in places.items():
        jm = {m: statistics.median(xs) for m, xs in samples.items()}
        job_rows.append(f"| {label} | {jm['off']:.2f} s | "
                        + " | ".join(f"{jm[m]:.2f} s ({jm[m] / jm['off']:.2f}x)" for m in MODES[1:]) + " |")
    uname = os.uname()
    load = os.getloadavg()[0]
    load_start = LOAD_START
    text = "\n".join([
        f"Measured {time.strftime('%Y-%m-%d')} on {uname.sysname} {uname.release} ({os.cpu_count()} cores, "
        f"load average {load_start:.1f} at the start, {load:.1f} at the end), interleaved, warm caches:",
        "", "```", f".venv/bin/python benchmarks/bench_violations.py --runs {args.runs} --jobs {args.jobs} "
        "--write docs/benchmarks.md", "```", "",
        f"Start-up, `safebox exec -- true`, {args.runs} runs each:", "", *rows, "",
        f"The job: unpack a 10,000-file tarball and run `git status` inside, {args.jobs} runs each "
        "(median, ratio to `--observe off`):", "", *job_rows, ""])
    print(text)
    if args.write:
        doc = args.write.read_text() if args.write.exists() else "# Benchmarks\n"
        start_m, end_m = "<!-- violations:start -->", "<!-- violations:end -->"
        block = f"{start_m}\n{text}\n{end_m}"
        if start_m in doc:
            doc = doc[:doc.index(start_m)] + block + doc[doc.index(end_m) + len(end_m):]
        else:
            doc += f"\n## Violations feed\n\n{block}\n"
        args.write.write_text(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())

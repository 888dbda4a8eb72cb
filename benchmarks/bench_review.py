#!/usr/bin/env python3
"""What ``--review`` costs (docs/review.md): start-up against a normal run,
and ``safebox changes apply`` of 10,000 new files.

    .venv/bin/python benchmarks/bench_review.py [--runs 20] [--files 10000] [--npm 20] [--write docs/benchmarks.md]

1. ``safebox exec -- true`` and ``safebox exec --review -- true`` in a small
   git work tree, interleaved, each its own process (the review run mounts
   an overlay per write root at the handshake; it changes nothing, so it
   holds nothing);
2. a ``--review`` run writes FILES files of 100 bytes in 100 directories;
   ``safebox changes apply`` puts them on the host (timed as a whole
   process, three times, each on a fresh held run: the layer is on the
   work tree's file system, so each file is moved, not copied); for scale,
   ``cp -a`` of the same layer tree, and the same writes by a normal run;
3. with --npm N (0: skipped), ``npm install`` of a project of N packages
   from a verdaccio on 127.0.0.1 (bench_cache_reuse.py's, from ``.tools/``),
   ``safebox exec --preset npm`` with and without ``--review``, five rounds
   interleaved (the held run discarded after each, untimed).

Reports medians (wall, and CPU: user + system of the process and what it
waited for) and ratios from this one run; with --write replaces the
section between <!-- review:start --> and <!-- review:end --> in the file.
This is a benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAFEBOX = str(ROOT / ".venv" / "bin" / "safebox")
WRITE = ("import os\nfor d in range(100):\n    os.makedirs(f'out/d{{d}}', exist_ok=True)\n"
         "for i in range({n}):\n    open(f'out/d{{i % 100}}/f{{i}}', 'w').write('x' * 100)\n")


CPU: list[float] = []  # the CPU seconds of each timed() call, in order


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def timed(argv: list[str], cwd: Path, env: dict[str, str]) -> float:
    """Wall seconds of one process; its CPU seconds are appended to CPU."""
    c = _cpu()
    t = time.perf_counter()
    r = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    dt = time.perf_counter() - t
    CPU.append(_cpu() - c)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({r.returncode}): {r.stderr}")
    return dt


def held_id(cwd: Path, env: dict[str, str]) -> str:
    r = subprocess.run([SAFEBOX, "changes", "list", "--json"], cwd=cwd, env=env, capture_output=True, text=True,
                       check=True)
    return str(json.loads(r.stdout)[-1]["id"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--files", type=int, default=10_000)
    ap.add_argument("--npm", type=int, default=20)
    ap.add_argument("--write")
    a = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-review-"))
    try:
        home = base / "home"
        work = home / "proj"
        (work / ".git" / "hooks").mkdir(parents=True)
        (work / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
        (work / "README.md").write_text("hello\n")
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LC_ALL": "C"}
        for _ in range(2):  # warm the caches
            timed([SAFEBOX, "exec", "--", "true"], work, env)
            timed([SAFEBOX, "exec", "--review", "--", "true"], work, env)
        normal, review, normal_cpu, review_cpu = [], [], [], []
        for _ in range(a.runs):
            normal.append(timed([SAFEBOX, "exec", "--", "true"], work, env))
            normal_cpu.append(CPU[-1])
            review.append(timed([SAFEBOX, "exec", "--review", "--", "true"], work, env))
            review_cpu.append(CPU[-1])
        script = WRITE.format(n=a.files)
        applies, applies_cpu, copies, writes_normal, writes_review = [], [], [], [], []
        for _ in range(3):
            shutil.rmtree(work / "out", ignore_errors=True)
            writes_normal.append(timed([SAFEBOX, "exec", "--", "python3", "-c", script], work, env))
            shutil.rmtree(work / "out")
            writes_review.append(timed([SAFEBOX, "exec", "--review", "--", "python3", "-c", script], work, env))
            rid = held_id(work, env)
            upper = home / ".cache" / "safebox" / "review" / rid / "layers" / "0" / "upper"
            t = time.perf_counter()
            subprocess.run(["cp", "-a", str(upper / "out"), str(base / "copy")], check=True)
            copies.append(time.perf_counter() - t)
            shutil.rmtree(base / "copy")
            applies.append(timed([SAFEBOX, "changes", "apply", rid], work, env))
            applies_cpu.append(CPU[-1])
            assert len(list((work / "out").rglob("f*"))) == a.files
            subprocess.run([SAFEBOX, "changes", "discard", rid], cwd=work, env=env, check=True, capture_output=True)
        npm_normal: list[float] = []
        npm_review: list[float] = []
        if a.npm:
            npm_normal, npm_review = _npm(base, env, a.npm)
        m = statistics.median
        load = os.getloadavg()[0]
        text = (f"Measured {time.strftime('%Y-%m-%d')} on Linux {platform.release()} ({os.cpu_count()} cores, shared "
                f"with other jobs: load average {load:.0f}), {a.runs} interleaved rounds:\n\n"
                f"```\n.venv/bin/python benchmarks/bench_review.py --runs {a.runs} --files {a.files} "
                f"--write docs/benchmarks.md\n```\n\n"
                "| run | median |\n|---|---|\n"
                f"| `safebox exec -- true` | {m(normal) * 1e3:.1f} ms (CPU {m(normal_cpu) * 1e3:.1f} ms) |\n"
                f"| `safebox exec --review -- true` | {m(review) * 1e3:.1f} ms (CPU {m(review_cpu) * 1e3:.1f} ms) |\n"
                f"| a normal run writing {a.files:,} files | {m(writes_normal) * 1e3:.0f} ms |\n"
                f"| the same under `--review` | {m(writes_review) * 1e3:.0f} ms |\n"
                f"| `safebox changes apply` of those {a.files:,} files (whole process) | {m(applies) * 1e3:.0f} ms "
                f"(CPU {m(applies_cpu) * 1e3:.0f} ms) |\n"
                f"| for scale: `cp -a` of the layer's tree | {m(copies) * 1e3:.0f} ms |\n"
                + (f"| `npm install` of {a.npm} packages (verdaccio on 127.0.0.1) | {m(npm_normal) * 1e3:.0f} ms |\n"
                   f"| the same under `--review` | {m(npm_review) * 1e3:.0f} ms |\n" if a.npm else "")
                + "\n"
                f"**Start-up with `--review`: {m(review) / m(normal):.2f}x a normal start; "
                f"writing {a.files:,} files: {m(writes_review) / m(writes_normal):.2f}x; "
                f"apply of {a.files:,} files: {m(applies):.2f} s ({m(applies) / m(copies):.1f}x `cp -a`)"
                + (f"; `npm install`: {m(npm_review) / m(npm_normal):.2f}x" if a.npm else "")
                + ", measured in the same run.**\n")
        print(text)
        if a.write:
            doc = Path(a.write).read_text()
            start, end = "<!-- review:start -->\n", "<!-- review:end -->"
            i, j = doc.index(start) + len(start), doc.index(end)
            Path(a.write).write_text(doc[:i] + text + doc[j:])
    finally:
        subprocess.run(["chmod", "-R", "u+rwx", str(base)], check=False)
        shutil.rmtree(base, ignore_errors=True)


def _npm(base: Path, env: dict[str, str], packages: int, rounds: int = 5) -> tuple[list[float], list[float]]:
    """npm install with and without --review, interleaved."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_cache_reuse", ROOT / "benchmarks" / "bench_cache_reuse.py")
    assert spec is not None and spec.loader is not None
    cr = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cr)
    proc, url, names = cr.start_verdaccio(base / "verdaccio", packages)
    try:
        tool = cr.npm_tool(url, names, base / "no-lock")
        proj = base / "home" / "npmproj"
        tool.new(proj)
        cmd = [SAFEBOX, "exec", "-q", "--preset", "npm", "--allow-domain", "127.0.0.1", "--"]
        timed([*cmd, *tool.install], proj, env)  # the project's first run: its cache
        normal, review = [], []
        for _ in range(rounds):
            tool.clean(proj)
            normal.append(timed([*cmd, *tool.install], proj, env))
            tool.clean(proj)
            review.append(timed([*cmd[:2], "--review", *cmd[2:], *tool.install], proj, env))
            subprocess.run([SAFEBOX, "changes", "discard", held_id(proj, env)], cwd=proj, env=env, check=True,
                           capture_output=True)
        return normal, review
    finally:
        cr.stop(proc)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""What a work tree's size costs a start: `safebox exec -- true` in an empty
work dir against the 100,000-file tree of bench_watch_depth.py, warm (the
start walks kept by ``safebox.builder.walkcache``) and cold (the kept walks removed
before each run), interleaved, each variant with its own HOME.

    .venv/bin/python benchmarks/bench_tree_size.py [--runs 20] [--tree DIR] [--write docs/benchmarks.md]

Also, in this process, the parts a warm start in the tree pays: the kept
walks' look-up (read, unmarshal, the helper's lstat per directory), the watch's parse
and capture of the replayed output, and the check after a run that changed
nothing; and the two walks it replaces. Issue 24's target: warm, at most
30 ms more than the empty work dir. Reports medians; with --write replaces
the section between <!-- treesize:start --> and <!-- treesize:end -->.
This is a benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAFEBOX = str(ROOT / ".venv" / "bin" / "safebox")
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_watch_depth import make_tree  # noqa: E402


def timed(cmd: list[str], *, cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """(wall ms, CPU ms of every process of the run, user and system)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    r = subprocess.run(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True)
    dt = (time.perf_counter() - t) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise SystemExit(f"{cmd[:3]} exited {r.returncode}: {r.stderr[-500:]!r}")
    return dt, (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000


def parts(tree: Path, state: Path, runs: int) -> dict[str, list[float]]:
    """The warm start's parts and the walks they replace, in this process, ms."""
    from safebox.builder import deepwatch, walkcache
    from safebox.builder import prescan as _prescan
    from safebox.policy import defaults

    rg, find = shutil.which("rg") or "rg", shutil.which("find") or "find"
    depth = defaults.DEFAULT_SEARCH_DEPTH
    argvs = (_prescan.rg_argv(rg, str(tree), depth), _prescan.find_argv(find, str(tree)))
    walkcache.bind(str(state))
    out: dict[str, list[float]] = {k: [] for k in ("walks", "lookup", "parse+capture", "check")}
    for _ in range(runs):
        t = time.perf_counter()
        a, b = _prescan.start_rg(rg, str(tree), depth), _prescan.start_find(find, str(tree))
        a.collect(timeout=120)
        b.collect(timeout=120)
        out["walks"].append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        kept = walkcache.lookup(str(state), str(tree), depth, argvs)
        same = kept is not None and kept[2].result()  # the helper's lstats (dirkeys), waited for here
        out["lookup"].append((time.perf_counter() - t) * 1000)
        if kept is None or not same:
            raise SystemExit("the kept walks were not replayed: is the tree older than two seconds?")
        t = time.perf_counter()
        dirs, specials, _, _ = deepwatch.parse(kept[1])
        base = deepwatch.capture(time.clock_gettime_ns(5), (str(tree),), dirs, specials)
        out["parse+capture"].append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        deepwatch.check(base)
        out["check"].append((time.perf_counter() - t) * 1000)
    return out


def whole_runs(tree: Path, empty: Path, scratch: Path, runs: int) -> dict[str, list[float]]:
    envs = {}
    for name in ("empty", "warm", "cold"):
        home = scratch / f"home-{name}"
        home.mkdir(exist_ok=True)
        envs[name] = {"PATH": os.environ["PATH"], "HOME": str(home), "LC_ALL": "C"}
    where = {"empty": empty, "warm": tree, "cold": tree}
    cmd = [SAFEBOX, "exec", "--", "true"]
    for name in where:  # warm the policy and seccomp caches, and keep the walks
        timed(cmd, cwd=where[name], env=envs[name])
    out: dict[str, list[float]] = {k: [] for k in (*where, *(f"{n} cpu" for n in where))}
    for _ in range(runs):
        for name in where:
            if name == "cold":
                shutil.rmtree(scratch / "home-cold" / ".cache" / "safebox" / "walks", ignore_errors=True)
            wall, cpu = timed(cmd, cwd=where[name], env=envs[name])
            out[name].append(wall)
            out[f"{name} cpu"].append(cpu)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--tree", type=Path, help="where to make (or find) the 100,000-file tree")
    ap.add_argument("--write", type=Path)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-tree-", dir="/var/tmp") as tmp:
        scratch = Path(tmp)
        tree = args.tree or scratch / "tree"
        if not (tree / "package.json").exists():
            make_tree(tree)
        empty = scratch / "empty"
        empty.mkdir()
        ndirs = sum(1 for _ in os.walk(tree))
        nfiles = sum(len(f) for _, _, f in os.walk(tree))
        time.sleep(2.1)  # older than walkcache.SLACK_NS: the first run keeps its walks
        w = whole_runs(tree, empty, scratch, args.runs)
        p = parts(tree, scratch / "home-warm" / ".cache" / "safebox", args.runs)
    med = {k: statistics.median(v) for k, v in {**w, **p}.items()}
    lines = [
        f"Measured {time.strftime('%Y-%m-%d')} on Linux {platform.release()} ({os.cpu_count()} cores, shared with "
        f"other jobs: load average {os.getloadavg()[0]:.0f}), {args.runs} interleaved rounds, in a git work tree "
        f"of {nfiles:,} files in {ndirs:,} directories (node_modules-like):",
        "", "```",
        f".venv/bin/python benchmarks/bench_tree_size.py --runs {args.runs} --write docs/benchmarks.md",
        "```", "",
        "| `safebox exec -- true` | median wall | over the empty work dir | median CPU | over the empty work dir |",
        "|---|---|---|---|---|",
        *(f"| {label} | {med[k]:.1f} ms | {med[k] - med['empty']:+.1f} ms | {med[k + ' cpu']:.1f} ms "
          f"| {med[k + ' cpu'] - med['empty cpu']:+.1f} ms |"
          for k, label in (("empty", "in an empty work dir"), ("warm", "in the tree, warm (the kept walks replayed)"),
                           ("cold", "in the tree, cold (the kept walks removed first)"))),
        "",
        "CPU: every process of the run, user and system (`getrusage(RUSAGE_CHILDREN)`), which other jobs on "
        "the machine disturb less than the wall time.",
        "",
        "| part, in the tree | median |", "|---|---|",
        f"| ripgrep and find walking it (what a cold start runs) | {med['walks']:.1f} ms |",
        f"| the kept walks' look-up (read, unmarshal, and the helper's lstat per directory, waited for) | {med['lookup']:.1f} ms |",
        f"| the watch's parse and capture of the output | {med['parse+capture']:.1f} ms |",
        f"| the watch's check after a run that changed nothing (an lstat per directory) | {med['check']:.1f} ms |",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.write:
        doc = args.write.read_text()
        start, end = "<!-- treesize:start -->", "<!-- treesize:end -->"
        if start in doc and end in doc:
            doc = doc[:doc.index(start) + len(start)] + "\n" + text + doc[doc.index(end):]
        else:
            doc += f"\n## Start-up in a big work tree\n\n{start}\n{text}{end}\n"
        args.write.write_text(doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

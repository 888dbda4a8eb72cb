#!/usr/bin/env python3
"""What the watch at any depth (safebox.builder.deepwatch, issue 22 item 4) costs a run
in a 100,000-file work tree.

    .venv/bin/python benchmarks/bench_watch_depth.py [--runs 20] [--tree DIR]
        [--baseline PATH/TO/OTHER/safebox] [--write docs/benchmarks.md]

The tree: a git work tree whose node_modules holds packages of about a
hundred files in twelve directories, one in ten nested in another's
node_modules (100,000 files, about 13,600 directories). --tree DIR keeps it
there (made once; it takes a minute on a busy 2-core machine).

Two measurements, both in this one run:

1. the parts, in this process, interleaved: the start walk with the
   watch's find expression against the one before it (every directory,
   ``.envrc`` files, and no -maxdepth), parsing its output and recording
   the watched entries (``deepwatch.parse``, ``capture``), and the check
   after a run that changed nothing (``deepwatch.check``);
2. with --baseline, whole runs of ``safebox exec -- true`` in the tree by
   this checkout's safebox and by another install without the watch (the
   parent commit's, in its own venv), interleaved, each with its own HOME.

Reports medians; with --write replaces the section between
<!-- watchdepth:start --> and <!-- watchdepth:end --> in the given file.
This is a benchmark, not a test: it asserts nothing.
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
sys.path.insert(0, str(ROOT / "python"))

from safebox.builder import deepwatch  # noqa: E402

SAFEBOX = str(ROOT / ".venv" / "bin" / "safebox")
# The walk before the watch (the parent commit's _prescan.start_find, at the default depth).
OLD_FIND = ["-mindepth", "1", "-maxdepth", "9",
            "-type", "d", "(", "!", "-readable", "-o", "!", "-executable", ")", "-printf", "!%p\\0", "-prune",
            "-o", "-name", ".*", "(", "-type", "l", "-o", "-type", "d", ")", "-print0"]


def make_tree(root: Path, files: int = 100_000) -> int:
    """A node_modules-like tree of ``files`` files; returns how many directories."""
    root.mkdir(parents=True, exist_ok=True)
    git = root / ".git"
    for d in ("hooks", "objects", "refs/heads"):
        (git / d).mkdir(parents=True, exist_ok=True)
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    (git / "config").write_text("[core]\n\trepositoryformatversion = 0\n")
    (root / "package.json").write_text("{}\n")
    n = pkg = 0
    while n < files:
        base = root / "node_modules" / f"pkg{pkg}"
        if pkg % 10 == 9:
            base = root / "node_modules" / f"pkg{pkg - 1}" / "node_modules" / f"dep{pkg}"
        pkg += 1
        for sub in ("", "lib", "lib/util", "lib/util/internal", "dist", "dist/esm", "dist/cjs", "dist/cjs/x/y",
                    "test", "test/fixtures", "types", "docs"):
            d = base / sub
            d.mkdir(parents=True, exist_ok=True)
            for i in range(8):
                if n >= files:
                    break
                (d / f"f{i}.js").write_text("x\n")
                n += 1
    return sum(1 for _ in os.walk(root))


def timed(cmd: list[str], *, cwd: Path, env: dict[str, str] | None = None) -> tuple[float, bytes]:
    t = time.perf_counter()
    r = subprocess.run(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True)
    dt = (time.perf_counter() - t) * 1000
    if r.returncode != 0:
        raise SystemExit(f"{cmd[:3]} exited {r.returncode}: {r.stderr[-500:]!r}")
    return dt, r.stdout


def parts(tree: Path, runs: int) -> dict[str, list[float]]:
    """The watch's parts, interleaved, in ms."""
    from safebox.builder.prescan import start_find

    out: dict[str, list[float]] = {k: [] for k in ("old find", "new find", "parse+capture", "check",
                                                   "newerct walk")}
    for _ in range(runs):
        dt, _ = timed(["find", str(tree), *OLD_FIND], cwd=tree)
        out["old find"].append(dt)
        t = time.perf_counter()
        proc = start_find("/usr/bin/find", str(tree))
        rc, stdout, _ = proc.collect(timeout=120)
        out["new find"].append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        dirs, specials, _ = deepwatch.parse(stdout)
        base = deepwatch.capture(proc.since_ns, (str(tree),), dirs, specials)
        out["parse+capture"].append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        planted, _ = deepwatch.check(base)
        out["check"].append((time.perf_counter() - t) * 1000)
        # The alternative the design avoids: walking the tree again after the run.
        since = f"@{(base.since_ns - deepwatch.SLACK_NS) / 1e9:.3f}"
        out["newerct walk"].append(timed(["find", str(tree), "-type", "d", "-newerct", since, "-print0"],
                                         cwd=tree)[0])
        assert rc == 0 and not planted
    return out


def whole_runs(tree: Path, runs: int, baseline: str, scratch: Path) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"with the watch": [], "without (baseline)": []}
    variants = {"with the watch": SAFEBOX, "without (baseline)": baseline}
    envs = {}
    for name in variants:
        home = scratch / name.split()[0]
        home.mkdir(exist_ok=True)
        envs[name] = {"PATH": os.environ["PATH"], "HOME": str(home), "LC_ALL": "C"}
    for name, exe in variants.items():  # warm the policy and seccomp caches
        timed([exe, "exec", "--", "true"], cwd=tree, env=envs[name])
    for _ in range(runs):
        for name, exe in variants.items():
            out[name].append(timed([exe, "exec", "--", "true"], cwd=tree, env=envs[name])[0])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--tree", type=Path, help="where to make (or find) the 100,000-file tree")
    ap.add_argument("--baseline", help="another safebox without the watch, for whole runs")
    ap.add_argument("--write", type=Path)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-watch-", dir="/var/tmp") as tmp:
        tree = args.tree or Path(tmp) / "tree"
        if not (tree / "package.json").exists():
            make_tree(tree)
        ndirs = sum(1 for _ in os.walk(tree))
        nfiles = sum(len(f) for _, _, f in os.walk(tree))
        p = parts(tree, args.runs)
        w = whole_runs(tree, args.runs, args.baseline, Path(tmp)) if args.baseline else {}
    med = {k: statistics.median(v) for k, v in {**p, **w}.items()}
    added_walk = med["new find"] - med["old find"]
    added = added_walk + med["parse+capture"] + med["check"]
    lines = [
        f"Measured {time.strftime('%Y-%m-%d')} on Linux {platform.release()} ({os.cpu_count()} cores, shared with "
        f"other jobs: load average {os.getloadavg()[0]:.0f}), {args.runs} interleaved rounds, in a git work tree "
        f"of {nfiles:,} files in {ndirs:,} directories (node_modules-like):",
        "", "```",
        f".venv/bin/python benchmarks/bench_watch_depth.py --runs {args.runs}"
        + (" --baseline PARENT/.venv/bin/safebox" if args.baseline else "") + " --write docs/benchmarks.md",
        "```", "",
        "| part | median |", "|---|---|",
        f"| the start walk before (find, dot names to depth 9) | {med['old find']:.1f} ms |",
        f"| the start walk with the watch (every directory, `objects/` marked, `.envrc`, any depth) "
        f"| {med['new find']:.1f} ms |",
        f"| parsing it and recording the watched entries | {med['parse+capture']:.1f} ms |",
        f"| the check after a run that changed nothing (an lstat per directory) | {med['check']:.1f} ms |",
        f"| (not used) a second walk after the run instead, `find -type d -newerct` | {med['newerct walk']:.1f} ms |",
        "",
        f"The walk runs beside safebox's start-up (it is started before safebox is even imported); counted "
        f"in full, the watch adds at most {added:.1f} ms to a run here.",
    ]
    if w:
        a, b = med["with the watch"], med["without (baseline)"]
        lines += [
            "", "| whole run, `safebox exec -- true` in the tree | median |", "|---|---|",
            f"| without the watch (the parent commit) | {b:.1f} ms |",
            f"| with the watch | {a:.1f} ms |", "",
            f"**The watch adds {a - b:+.1f} ms a run: {a / b:.2f}x the run without it, measured in the same run.**",
        ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.write:
        doc = args.write.read_text()
        start, end = "<!-- watchdepth:start -->", "<!-- watchdepth:end -->"
        if start in doc and end in doc:
            doc = doc[:doc.index(start) + len(start)] + "\n" + text + doc[doc.index(end):]
        else:
            doc += f"\n## The watch at any depth\n\n{start}\n{text}{end}\n"
        args.write.write_text(doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

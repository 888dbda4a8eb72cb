#!/usr/bin/env python3
"""Glob pattern expansion (issue 16) on a 100,000-file tree.

    .venv/bin/python benchmarks/bench_globs.py [--files 100000] [--runs 5] [--write docs/benchmarks.md]

Builds a tree of ``--files`` files (default 100,000, in directories of about
a dozen files, up to ten levels deep; a few hundred ``.env`` and ``*.pem``
files among them) under /var/tmp, then times, with warm caches:

* ``builder/globs.expand`` alone for 1, 5 and 15 ``**/`` patterns (one walk
  for all of them);
* the same patterns expanded the way a per-pattern expander does it (one
  full listing of the base directory per pattern, every path tested
  against the pattern's regex: sandbox-runtime's ``walkGlobPattern``
  shape), for comparison;
* ``safebox exec -- true`` in the tree without patterns and with 15, in
  each layer mode (the whole run: the walk, the masks, and on a helper-only
  host the Landlock rules around every match).

Medians of ``--runs`` runs. With ``--write`` it replaces the section between
<!-- globs:start --> and <!-- globs:end --> in the given file. This is a
benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAFEBOX = str(ROOT / ".venv" / "bin" / "safebox")
sys.path.insert(0, str(ROOT / "python"))

from safebox.builder.globs import expand  # noqa: E402

PATTERNS = ["**/.env", "**/*.pem", "**/id_rsa", "**/.npmrc", "**/credentials.json", "**/*.key", "**/.pgpass",
            "**/secrets.yml", "**/.netrc", "**/*.p12", "**/service-account*.json", "**/.htpasswd",
            "**/terraform.tfstate", "**/.vault-token", "**/kubeconfig"]


def build_tree(root: Path, files: int) -> tuple[int, int]:
    """(files, directories) created under ``root``."""
    rng = random.Random(16)
    dirs = [root]
    root.mkdir(parents=True)
    n = 0
    names = ["index.js", "main.py", "README.md", "util.ts", "data.json", "x.c", "Makefile"]
    while n < files:
        d = rng.choice(dirs)
        if str(d).count("/") - str(root).count("/") < 10 and rng.random() < 0.08:
            nd = d / f"d{len(dirs)}"
            nd.mkdir()
            dirs.append(nd)
            continue
        r = rng.random()
        name = ".env" if r < 0.004 else "tls.pem" if r < 0.008 else f"{n}-{rng.choice(names)}"
        p = d / name
        if not p.exists():
            p.write_bytes(b"")
            n += 1
    return n, len(dirs)


def glob_regex(pattern: str) -> re.Pattern[str]:
    """A full-path regex as sandbox-runtime's globToRegex builds it."""
    out = re.escape(pattern).replace(r"\*\*/", "(?:.*/)?").replace(r"\*\*", ".*").replace(r"\*", "[^/]*")
    return re.compile(out.replace(r"\?", "[^/]") + "$")


def per_pattern(base: Path, patterns: list[str]) -> int:
    """One full recursive listing of ``base`` per pattern, each path tested by regex."""
    hits = 0
    for p in patterns:
        rx = glob_regex(f"{base}/{p}")
        for dirpath, dirnames, filenames in os.walk(base):
            for name in dirnames + filenames:
                if rx.match(f"{dirpath}/{name}"):
                    hits += 1
    return hits


def median_time(fn, runs: int) -> float:  # type: ignore[no-untyped-def]
    xs = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        xs.append(time.perf_counter() - t)
    return statistics.median(xs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--write", type=Path)
    args = ap.parse_args()
    top = Path(tempfile.mkdtemp(prefix="safebox-bench-globs-", dir="/var/tmp"))
    try:
        tree = top / "tree"
        nfiles, ndirs = build_tree(tree, args.files)
        subprocess.run(["git", "init", "-q", str(tree)], check=True)
        rows = ["| patterns | safebox: one walk | entries listed | matches | one walk per pattern |",
                "|---:|---:|---:|---:|---:|"]
        for k in (1, 5, 15):
            pats = [f"{tree}/{p}" for p in PATTERNS[:k]]
            expand(pats)  # warm the page cache
            one = median_time(lambda pats=pats: expand(pats), args.runs)
            e = expand(pats)
            found = sum(len(v) for v in e.matches.values())
            each = median_time(lambda k=k: per_pattern(tree, PATTERNS[:k]), max(1, args.runs // 2))
            rows.append(f"| {k} | {one * 1000:.0f} ms | {e.listed:,} | {found} | {each * 1000:.0f} ms |")
        runs = ["| layers | no pattern | 15 `**/` patterns | added |", "|---|---:|---:|---:|"]
        opts15 = [x for p in PATTERNS for x in ("--deny-read", p)]
        for label, mode in (("both", []), ("helper only", ["--without", "bwrap"]),
                            ("bwrap only", ["--without", "helper"])):
            def run(extra: list[str], mode: list[str] = mode) -> subprocess.CompletedProcess[str]:
                return subprocess.run([SAFEBOX, "exec", *mode, *extra, "--", "true"], cwd=tree, check=False,
                                      stdin=subprocess.DEVNULL, capture_output=True, text=True)
            run([])
            refused = run(opts15)
            base = median_time(lambda run=run: run([]), args.runs)
            if refused.returncode == 125:
                # Landlock only grants: every entry beside a match needs a rule of its own.
                why = refused.stderr.splitlines()[0].removeprefix("safebox: ")
                runs.append(f"| {label} | {base * 1000:.0f} ms | refused (125): {why} | |")
                continue
            with15 = median_time(lambda run=run: run(opts15), args.runs)
            runs.append(f"| {label} | {base * 1000:.0f} ms | {with15 * 1000:.0f} ms | "
                        f"{(with15 - base) * 1000:+.0f} ms |")
        uname = os.uname()
        load = os.getloadavg()[0]
        text = "\n".join([
            f"Measured {time.strftime('%Y-%m-%d')} on {uname.sysname} {uname.release} ({os.cpu_count()} cores, "
            f"load average {load:.1f} while measuring), a tree of {nfiles:,} files in {ndirs:,} directories, "
            f"warm caches, medians of {args.runs} runs:", "",
            "```", f".venv/bin/python benchmarks/bench_globs.py --files {args.files} --runs {args.runs} "
            "--write docs/benchmarks.md", "```", "",
            "Expansion alone (`builder/globs.expand`), against one full listing per pattern with a regex per "
            "path (the shape of sandbox-runtime's `walkGlobPattern`):", "", *rows, "",
            "The whole `safebox exec -- true` in the tree's root, without patterns and with 15 `denyRead` "
            "patterns (`**/.env`, `**/*.pem`, ...):", "", *runs, ""])
        print(text)
        if args.write:
            doc = args.write.read_text()
            start, end = "<!-- globs:start -->", "<!-- globs:end -->"
            block = f"{start}\n{text}\n{end}"
            if start in doc:
                doc = doc[:doc.index(start)] + block + doc[doc.index(end) + len(end):]
            else:
                doc += f"\n## Glob patterns\n\n{block}\n"
            args.write.write_text(doc)
    finally:
        shutil.rmtree(top, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Start-up cost of big policies: `safebox exec -p POLICY -- true` for 10, 1,000
and 10,000 entries of each list kind, against a baseline measured in the same run.

    .venv/bin/python benchmarks/bench_policy_size.py [--runs 15] [--sizes 10,1000,10000]
        [--kinds denyWrite,...] [--compare OTHER/.venv/bin/safebox] [--write docs/benchmarks.md]

Every variant runs in the same git work tree, whose 10,000 denyWrite
directories exist for all of them (ripgrep walks them in the baseline too),
so "added" is the cost of the list alone. Filesystem entries are real paths
under a temporary directory in /var/tmp (not /tmp: the sandbox's /tmp is
private, and a deny entry there costs nothing); each entry is its own
directory or file, none inside another, so no entry can be collapsed away:

* denyWrite: directories inside the work tree (the working directory);
* denyRead (dirs) and denyRead (files): outside every write root;
* allowWrite: directories outside the work tree;
* allowedDomains: distinct names; deniedDomains: distinct ``*.`` patterns
  (with one allowed domain, so the proxy runs; its baseline is a policy with
  that one domain alone).

Variants are interleaved round by round (drift affects all alike); the
first run of each fills the policy cache and is reported apart ("first run":
pydantic validation and the cache write). With --compare, a second safebox
(another checkout's venv) runs the same variants in the same rounds. With
--write, the section between <!-- policy-size:start --> and
<!-- policy-size:end --> of the given file is replaced. This is a benchmark,
not a test: it asserts nothing but that every run exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
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
KINDS = ("denyWrite", "denyRead (dirs)", "denyRead (files)", "allowWrite", "allowedDomains", "deniedDomains")
FS_TARGET_MS, DOMAIN_TARGET_MS = 100.0, 20.0


def _tree(base: Path, n: int, *, file: bool) -> list[str]:
    """``n`` entries as base/pNNN/eNN (100 a directory), created."""
    out = []
    for i in range(n):
        d = base / f"p{i // 100:03d}"
        d.mkdir(parents=True, exist_ok=True)
        p = d / f"e{i % 100:02d}"
        if file:
            p.write_text("secret\n")
        else:
            p.mkdir(exist_ok=True)  # empty: the denyWrite tree is walked by ripgrep in every variant
        out.append(str(p))
    return out


def make_policies(top: Path, sizes: list[int], kinds: list[str]) -> tuple[Path, dict[str, Path]]:
    """The work tree and one policy file per variant (plus the two baselines)."""
    work = top / "work"
    work.mkdir()
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    big = max(sizes)
    lists = {
        "denyWrite": ("filesystem", "denyWrite", _tree(work / "dw", big, file=False)),
        "denyRead (dirs)": ("filesystem", "denyRead", _tree(top / "outside" / "rd", big, file=False)),
        "denyRead (files)": ("filesystem", "denyRead", _tree(top / "outside" / "rf", big, file=True)),
        "allowWrite": ("filesystem", "allowWrite", _tree(top / "outside" / "aw", big, file=False)),
        "allowedDomains": ("network", "allowedDomains", [f"h{i}.example{i % 97}.com" for i in range(big)]),
        "deniedDomains": ("network", "deniedDomains", [f"*.d{i}.example.org" for i in range(big)]),
    }
    policies: dict[str, Path] = {}

    def write(name: str, doc: dict[str, dict[str, list[str]]]) -> None:
        p = top / f"{len(policies):02d}.json"
        p.write_text(json.dumps(doc))
        policies[name] = p

    write("baseline", {})
    write("baseline, network", {"network": {"allowedDomains": ["example.com"]}})
    for kind in kinds:
        section, key, entries = lists[kind]
        for n in sizes:
            doc: dict[str, dict[str, list[str]]] = {section: {key: entries[:n]}}
            if key == "deniedDomains":
                doc[section]["allowedDomains"] = ["example.com"]
            write(f"{kind} {n}", doc)
    return work, policies


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


class Failed(Exception):
    """The run exited non-zero (its last stderr line is the message)."""


def timed(cmd: list[str], cwd: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the whole process tree: safebox, bubblewrap,
    the helper, the walkers and the command, each reaped by its parent)."""
    c = _cpu()
    t = time.perf_counter()
    r = subprocess.run(cmd, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE)
    dt = time.perf_counter() - t
    if r.returncode != 0:
        lines = r.stderr.decode(errors="replace").strip().splitlines() or [f"exit {r.returncode}"]
        raise Failed(lines[0][:120])  # the first line says what failed; hints follow
    return dt, _cpu() - c


Key = tuple[str, str]  # (tool, variant)


def measure(tools: dict[str, str], policies: dict[str, Path], work: Path, *, runs: int, slow: float
            ) -> tuple[dict[Key, float], dict[Key, str], dict[Key, list[float]], dict[Key, list[float]]]:
    """(first run's time, why a compared safebox refused, wall-time samples,
    CPU-time samples) of every tool and variant, in interleaved rounds."""
    first: dict[Key, float] = {}
    failed: dict[Key, str] = {}
    for tool, exe in tools.items():  # the first run fills the policy and seccomp caches
        for name, pol in policies.items():
            try:
                first[(tool, name)] = timed([exe, "exec", "-p", str(pol), "--", "true"], work)[0]
            except Failed as e:
                if tool == "this":
                    raise SystemExit(f"{name}: {e}") from None
                failed[(tool, name)] = str(e)  # the other safebox may refuse what this one runs
    samples: dict[Key, list[float]] = {k: [] for k in first}
    cpu: dict[Key, list[float]] = {k: [] for k in first}
    for _ in range(runs):
        for name, pol in policies.items():
            for tool, exe in tools.items():
                if (tool, name) in failed or (tool != "this" and first[(tool, name)] > slow):
                    continue  # a compared run this slow is timed once (first run) only
                wall, used = timed([exe, "exec", "-p", str(pol), "--", "true"], work)
                samples[(tool, name)].append(wall)
                cpu[(tool, name)].append(used)
    return first, failed, samples, cpu


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--sizes", default="10,1000,10000")
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--compare", help="another safebox to run the same variants (e.g. main's venv)")
    ap.add_argument("--slow", type=float, default=10.0,
                    help="a compared variant whose first run took longer (seconds) is not repeated")
    ap.add_argument("--write", type=Path)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    kinds = [k for k in args.kinds.split(",") if k]
    top = Path(tempfile.mkdtemp(prefix="safebox-bench-size-", dir="/var/tmp"))
    try:
        work, policies = make_policies(top, sizes, kinds)
        tools = {"this": SAFEBOX, **({"compare": args.compare} if args.compare else {})}
        first, failed, samples, cpu = measure(tools, policies, work, runs=args.runs, slow=args.slow)
    finally:
        shutil.rmtree(top, ignore_errors=True)

    med = {k: statistics.median(v) * 1000 if v else first[k] * 1000 for k, v in samples.items()}
    cmed = {k: statistics.median(v) * 1000 for k, v in cpu.items() if v}

    def other(name: str, base: str) -> str:
        """The compared safebox's median and added time, or why there is none."""
        if ("compare", name) in failed:
            return f" refused: {failed[('compare', name)]} | |"
        once = "" if samples[("compare", name)] else " (one run)"
        return (f" {med[('compare', name)]:.1f} ms{once} | "
                f"{med[('compare', name)] - med[('compare', base)]:+.1f} ms |")
    head = "| list | entries | median | added to a start | CPU added | first run |"
    rows = [head + (" main: median | main: added |" if args.compare else ""),
            "|---|---:|---:|---:|---:|---:|" + ("---:|---:|" if args.compare else "")]
    for tool_base in ("baseline", "baseline, network"):
        row = (f"| {tool_base} | 0 | {med[('this', tool_base)]:.1f} ms | | ({cmed[('this', tool_base)]:.0f} ms) "
               f"| {first[('this', tool_base)] * 1000:.0f} ms |")
        if args.compare:
            row += f" {med[('compare', tool_base)]:.1f} ms | |"
        rows.append(row)
    verdict: list[str] = []
    for kind in kinds:
        base = "baseline, network" if "Domains" in kind else "baseline"
        for n in sizes:
            name = f"{kind} {n}"
            added = med[("this", name)] - med[("this", base)]
            row = (f"| {kind} | {n:,} | {med[('this', name)]:.1f} ms | {added:+.1f} ms "
                   f"| {cmed[('this', name)] - cmed[('this', base)]:+.1f} ms "
                   f"| {first[('this', name)] * 1000:.0f} ms |")
            if args.compare:
                row += other(name, base)
            rows.append(row)
            target = DOMAIN_TARGET_MS if "Domains" in kind else FS_TARGET_MS if kind != "allowWrite" else None
            if target is not None and n == 10000:
                verdict.append(f"{kind}: {added:+.0f} ms ({'met' if added < target else 'NOT met'}: "
                               f"under {target:.0f} ms)")
    uname = os.uname()
    text = "\n".join([
        f"Measured {time.strftime('%Y-%m-%d')} on {uname.sysname} {uname.release} ({os.cpu_count()} cores), "
        f"{args.runs} interleaved rounds, medians, warm caches:",
        "", "```",
        f".venv/bin/python benchmarks/bench_policy_size.py --runs {args.runs}"
        + (" --compare MAIN/.venv/bin/safebox" if args.compare else "") + " --write docs/benchmarks.md",
        "```", "", *rows, "",
        "Targets for 10,000 entries: " + "; ".join(verdict) + ".", ""])
    print(text)
    if args.write:
        doc = args.write.read_text() if args.write.exists() else "# Benchmarks\n"
        start, end = "<!-- policy-size:start -->", "<!-- policy-size:end -->"
        block = f"{start}\n{text}\n{end}"
        if start in doc:
            doc = doc[:doc.index(start)] + block + doc[doc.index(end) + len(end):]
        else:
            doc += f"\n## Big policies\n\n{block}\n"
        args.write.write_text(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""What per-project caches cost: `npm install` and `pip install` inside the
sandbox, a project's second run and another project's first, against the bare
install on the host, all in the same run.

    .venv/bin/python benchmarks/bench_cache_reuse.py [--rounds 5] [--packages 20]
        [--before /path/to/other/.venv/bin/safebox] [--write docs/toolchains.md]

The registries are the ones tests/integration/test_toolchains.py uses,
started here on 127.0.0.1: verdaccio (from ``.tools/``) holding ``--packages``
tiny packages this script publishes, and pypiserver (in ``.venv``) serving as
many wheels it builds. Nothing leaves the machine. Variants, interleaved by
round so that drift affects all alike:

- bare: the client on the host, no safebox, its own cache warm (the baseline);
- second run: ``safebox exec --preset X`` in a project that installed once
  before (its cache warm; node_modules or the target dir removed first);
- new project: the same in a directory no run used before. With caches
  shared by preset (``--before``, e.g. the main branch's venv) its cache is
  warm from the other projects' runs; per project it starts empty.

Each safebox binary gets a home of its own, so their state dirs never meet.
Reports medians and the ratio to the bare run; with --write replaces the
section between <!-- cachebench:start --> and <!-- cachebench:end -->. This is
a benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import zipfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
AFTER = str(ROOT / ".venv" / "bin" / "safebox")
VERDACCIO = ROOT / ".tools" / "node_modules" / ".bin" / "verdaccio"
PYPI_SERVER = ROOT / ".venv" / "bin" / "pypi-server"
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The payload of each package: enough that a download is not free.
PAYLOAD = 64 * 1024


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, proc: subprocess.Popen[bytes]) -> None:
    end = time.monotonic() + 60
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise SystemExit(f"{url}: server exited {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"{url}: server not ready in 60 s")


def payload(name: str) -> str:
    """Deterministic, incompressible-enough text for one package."""
    out, h = [], name.encode()
    while sum(map(len, out)) < PAYLOAD:
        h = hashlib.sha256(h).digest()
        out.append(h.hex())
    return "".join(out)


def start_verdaccio(base: Path, n: int) -> tuple[subprocess.Popen[bytes], str, list[str]]:
    base.mkdir()
    (base / "config.yaml").write_text(f"""
storage: {base}/storage
auth: {{ htpasswd: {{ file: {base}/htpasswd, max_users: -1 }} }}
uplinks: {{}}
packages: {{ '**': {{ access: $all, publish: $all }} }}
log: {{ type: stdout, format: pretty, level: warn }}
web: {{ enable: false }}
""")
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    env = {"PATH": PATH, "HOME": str(base)}
    proc = subprocess.Popen([str(VERDACCIO), "--config", str(base / "config.yaml"), "--listen", f"127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, env=env)
    wait_http(url + "-/ping", proc)
    (base / "npmrc").write_text(f"//127.0.0.1:{port}/:_authToken=bench-only\n")
    names = [f"sbx-bench-{i}" for i in range(n)]
    for name in names:
        pkg = base / "pkg" / name
        pkg.mkdir(parents=True)
        (pkg / "package.json").write_text(json.dumps({"name": name, "version": "1.0.0", "main": "index.js"}))
        (pkg / "index.js").write_text(f'module.exports = "{payload(name)}";\n')
        subprocess.run(["npm", "publish", "--registry", url], cwd=pkg, capture_output=True, check=True,
                       env={**env, "npm_config_userconfig": str(base / "npmrc"),
                            "npm_config_cache": str(base / "npm-cache")}, timeout=120)
    return proc, url, names


def wheel(dest: Path, name: str) -> None:
    mod = name.replace("-", "_")
    files = {
        f"{mod}/__init__.py": f"VALUE = '{payload(name)}'\n".encode(),
        f"{mod}-1.0.0.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0.0\n".encode(),
        f"{mod}-1.0.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: safebox-bench\nRoot-Is-Purelib: true\n"
                                        b"Tag: py3-none-any\n",
    }
    record = [f"{k},sha256={base64.urlsafe_b64encode(hashlib.sha256(v).digest()).rstrip(b'=').decode()},{len(v)}"
              for k, v in files.items()]
    files[f"{mod}-1.0.0.dist-info/RECORD"] = ("\n".join([*record, f"{mod}-1.0.0.dist-info/RECORD,,"]) + "\n").encode()
    with zipfile.ZipFile(dest / f"{mod}-1.0.0-py3-none-any.whl", "w") as z:
        for k, v in files.items():
            z.writestr(k, v)


def start_pypiserver(base: Path, n: int) -> tuple[subprocess.Popen[bytes], str, list[str]]:
    (base / "packages").mkdir(parents=True)
    names = [f"sbx-bench-{i}" for i in range(n)]
    for name in names:
        wheel(base / "packages", name)
    port = free_port()
    proc = subprocess.Popen([str(PYPI_SERVER), "run", "-i", "127.0.0.1", "-p", str(port), "-a", ".", "-P", ".",
                             "--cache-control", "3600", str(base / "packages")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/simple/"
    wait_http(url, proc)
    return proc, url, names


def stop(proc: subprocess.Popen[bytes]) -> None:
    """End a server this script started, by its own Popen."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> float:
    t = time.perf_counter()
    r = subprocess.run(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    dt = time.perf_counter() - t
    if r.returncode != 0:
        raise SystemExit(f"{cmd} in {cwd} exited {r.returncode}: {r.stderr[-2000:]}")
    return dt


class Tool:
    """One client: how to make a project, clean it, and install in it."""

    def __init__(self, name: str, preset: str, new: Callable[[Path], None], clean: Callable[[Path], None],
                 install: list[str], env: dict[str, str]) -> None:
        self.name, self.preset, self.new, self.clean, self.install, self.env = name, preset, new, clean, install, env


def npm_tool(url: str, names: list[str], lock: Path) -> Tool:
    def new(d: Path) -> None:
        d.mkdir(parents=True)
        (d / "package.json").write_text(json.dumps({"name": "proj", "version": "1.0.0",
                                                    "dependencies": {n: "1.0.0" for n in names}}))
        if lock.exists():
            shutil.copy(lock, d / "package-lock.json")

    def clean(d: Path) -> None:
        shutil.rmtree(d / "node_modules", ignore_errors=True)

    return Tool("npm install", "npm", new, clean, ["npm", "install", "--registry", url, "--no-audit", "--no-fund"],
                {})


def pip_tool(url: str, names: list[str]) -> Tool:
    def new(d: Path) -> None:
        d.mkdir(parents=True)

    def clean(d: Path) -> None:
        shutil.rmtree(d / "site", ignore_errors=True)

    # Debian's pip, into a target dir of the project: no venv to make per round.
    return Tool("pip install", "pip", new, clean,
                ["/usr/bin/python3", "-m", "pip", "install", "-q", "--no-deps", "--target", "site",
                 "--index-url", url, "--trusted-host", "127.0.0.1", *names],
                {"PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1",
                 "PIP_BREAK_SYSTEM_PACKAGES": "1", "PIP_NO_INPUT": "1"})


def bench(tool: Tool, binaries: dict[str, str], base: Path, rounds: int) -> dict[str, list[float]]:
    """Times of each variant over ``rounds`` interleaved rounds."""
    homes = {}
    for label in ("bare", *binaries):
        h = base / f"home-{label}-{tool.preset}"
        h.mkdir(parents=True)
        homes[label] = h
    bare_env = {"PATH": PATH, "HOME": str(homes["bare"]), "LC_ALL": "C", **tool.env}
    bare_proj = base / f"bare-{tool.preset}"
    tool.new(bare_proj)
    timed(tool.install, bare_proj, bare_env)  # warms the host's own cache
    variants: dict[str, Callable[[int], float]] = {}

    def bare(_: int) -> float:
        tool.clean(bare_proj)
        return timed(tool.install, bare_proj, bare_env)

    variants["bare (host, warm cache)"] = bare
    for label, sb in binaries.items():
        env = {"PATH": PATH, "HOME": str(homes[label]), "LC_ALL": "C", **tool.env}
        cmd = [sb, "exec", "-q", "--preset", tool.preset, "--allow-domain", "127.0.0.1", "--", *tool.install]
        proj = base / f"proj-{label}-{tool.preset}"
        tool.new(proj)
        timed(cmd, proj, env)  # the project's first run

        def second(_: int, proj: Path = proj, cmd: list[str] = cmd, env: dict[str, str] = env) -> float:
            tool.clean(proj)
            return timed(cmd, proj, env)

        def first(i: int, label: str = label, cmd: list[str] = cmd, env: dict[str, str] = env) -> float:
            d = base / f"new-{label}-{tool.preset}-{i}"
            tool.new(d)
            return timed(cmd, d, env)

        variants[f"{label}: second run, same project"] = second
        variants[f"{label}: first run of another project"] = first
    times: dict[str, list[float]] = {k: [] for k in variants}
    for i in range(rounds):
        for k, f in variants.items():
            times[k].append(f(i))
        print(f"  {tool.name}: round {i + 1}/{rounds}", file=sys.stderr)
    return times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--packages", type=int, default=20)
    ap.add_argument("--before", metavar="SAFEBOX", help="another installed safebox (caches shared by preset)")
    ap.add_argument("--write", type=Path)
    args = ap.parse_args()
    binaries = {**({"before": args.before} if args.before else {}), "after": AFTER}
    # Not under /tmp, which is private inside: the tests' choice too.
    base = Path(tempfile.mkdtemp(prefix="safebox-cachebench-", dir="/var/tmp"))
    base.chmod(0o755)
    procs = []
    results: dict[str, dict[str, list[float]]] = {}
    try:
        vp, vurl, vnames = start_verdaccio(base / "verdaccio", args.packages)
        procs.append(vp)
        pp, purl, pnames = start_pypiserver(base / "pypi", args.packages)
        procs.append(pp)
        lock_dir = base / "lock"
        npm = npm_tool(vurl, vnames, lock_dir / "package-lock.json")
        npm.new(lock_dir)
        subprocess.run([*npm.install, "--package-lock-only"], cwd=lock_dir, check=True, capture_output=True,
                       env={"PATH": PATH, "HOME": str(lock_dir), "npm_config_cache": str(lock_dir / "cache")})
        for tool in (npm, pip_tool(purl, pnames)):
            results[tool.name] = bench(tool, binaries, base, args.rounds)
    finally:
        for p in procs:
            stop(p)
        shutil.rmtree(base, ignore_errors=True)
    lines = [f"`.venv/bin/python benchmarks/bench_cache_reuse.py --rounds {args.rounds} --packages "
             f"{args.packages}{' --before SAFEBOX' if args.before else ''}`: {args.packages} packages of "
             f"{PAYLOAD // 1024} KiB each from a local registry, medians of {args.rounds} interleaved rounds; "
             "ratio to the bare install on the host (same run).", "",
             "| client | variant | median | ratio to bare |", "| --- | --- | --- | --- |"]
    for tool_name, times in results.items():
        bare = statistics.median(next(iter(times.values())))
        for k, v in times.items():
            m = statistics.median(v)
            lines.append(f"| {tool_name} | {k} | {m * 1000:.0f} ms | {m / bare:.2f}x |")
    text = "\n".join(lines)
    print(text)
    if args.write:
        doc = args.write.read_text()
        start, end = "<!-- cachebench:start -->", "<!-- cachebench:end -->"
        if start not in doc or end not in doc:
            raise SystemExit(f"{args.write}: no {start} ... {end} section")
        head, rest = doc.split(start, 1)
        args.write.write_text(f"{head}{start}\n{text}\n{rest[rest.index(end):]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

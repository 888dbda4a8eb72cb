#!/usr/bin/env python3
"""C tests for the helper (standard library only; called by ``build.py test``).

1. ``test_policy.c`` + ``helper/policy.c``, ``test_notify.c`` +
   ``helper/notify.c`` (the violations supervisor's pure parts) and
   ``test_mountplan.c`` + ``helper/mountplan.c`` (the mounter's plan) and
   ``test_dirkeys.c`` + ``helper/dirkeys.c`` (``--dir-keys``) under
   ASan+UBSan (gcc or clang, ``-fno-sanitize-recover=all``), run as TAP.
2. ``probe.c`` built into ``helper/out/probe`` (gitignored); the path is
   printed as ``probe: PATH`` and fixed, so pytest finds it there.
3. ``fuzz_policy.c``, ``fuzz_notify.c``, ``fuzz_mountplan.c`` and
   ``fuzz_dirkeys.c`` with libFuzzer (clang only), each for
   ``SAFEBOX_FUZZ_SECONDS`` (default 20) over a copy of
   ``tests/helper/corpus``, ``corpus-notify``, ``corpus-mountplan`` and
   ``corpus-dirkeys``.

Steps 1 and 3 run as independent jobs, one per core (a fuzzer uses one
core: on two cores, two fuzz at once for their full time each). Any
failure prints one ``tests/helper/run.py: ...`` line, naming every job
that failed, and exits 1.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
HELPER = ROOT / "helper"
OUT = HELPER / "out"
PROBE = OUT / "probe"
WARN = ["-std=gnu11", "-g", "-O1", "-Wall", "-Wextra", "-Werror", "-Wshadow", "-Wvla",
        "-Wformat=2", "-Wno-unused-parameter", "-D_GNU_SOURCE"]
SAN = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer"]


class Failure(Exception):
    """One failed step; the message is the line to print, ``output`` what the step printed."""

    def __init__(self, message: str, output: str = "") -> None:
        super().__init__(message)
        self.output = output


def _cc() -> str:
    for cc in (os.environ.get("CC"), "clang", "gcc", "cc"):
        if cc and shutil.which(cc):
            return cc
    raise Failure("no C compiler (install gcc or clang)")


def _compile(cmd: list[str], what: str) -> None:
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise Failure(f"compiling {what} failed: {' '.join(cmd)}", r.stderr)


# Each C unit test: its sources besides the test file.
UNIT_TESTS = {"test_policy": ["policy.c"], "test_notify": ["notify.c", "policy.c"],
              "test_mountplan": ["mountplan.c"], "test_dirkeys": ["dirkeys.c"]}


def _jobs() -> int:
    """Jobs at once: one per core. A fuzzer is one process on one core, so
    on two cores two of them fuzz for their ``SAFEBOX_FUZZ_SECONDS`` each in
    the wall time of one; the same CPU-seconds of fuzzing, half the wait."""
    return max(1, len(os.sched_getaffinity(0)))


def unit_test(tmp: Path, name: str, sources: list[str]) -> str:
    """Build one C unit test under sanitizers and run it; return its output."""
    exe = tmp / name
    _compile([_cc(), *WARN, *SAN, "-I", str(HELPER), *(str(HELPER / s) for s in sources),
              str(HERE / f"{name}.c"), "-o", str(exe)], f"{name}.c")
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0",
               UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1")
    # In a dir of its own under the temporary dir: what a test makes there
    # goes with it, even when the test dies half-way (test_dirkeys makes
    # 5,000 directories), and tests running at once do not meet.
    cwd = tmp / f"{name}.d"
    cwd.mkdir()
    r = subprocess.run([str(exe)], capture_output=True, text=True, env=env, cwd=cwd)
    if r.returncode != 0 or "not ok" in r.stdout:
        raise Failure(f"{name} failed (exit {r.returncode})", r.stdout + r.stderr)
    passed = r.stdout.count("\nok ") + r.stdout.startswith("ok ")
    return f"{r.stdout}{r.stderr}run.py: {name}: {passed} passed\n"


def build_probe() -> None:
    """Build the syscall probe at the fixed path helper/out/probe."""
    OUT.mkdir(exist_ok=True)
    tmp = PROBE.with_name("probe.tmp")
    _compile([_cc(), *WARN, str(HERE / "probe.c"), "-o", str(tmp)], "probe.c")
    os.chmod(tmp, 0o755)
    os.replace(tmp, PROBE)
    r = subprocess.run([str(PROBE), "getpid"], capture_output=True)
    if r.returncode != 0:
        raise Failure(f"probe getpid exited {r.returncode}")
    print(f"probe: {PROBE}")


#: Each fuzz target: its sources besides the harness, and its corpus.
FUZZERS = {"fuzz_policy": (["policy.c"], "corpus"),
           "fuzz_notify": (["notify.c", "policy.c"], "corpus-notify"),
           "fuzz_mountplan": (["mountplan.c"], "corpus-mountplan"),
           "fuzz_dirkeys": (["dirkeys.c"], "corpus-dirkeys")}


def fuzz_seconds() -> int:
    """``SAFEBOX_FUZZ_SECONDS`` (default 20); 0 when fuzzing is off or clang is missing."""
    seconds = int(os.environ.get("SAFEBOX_FUZZ_SECONDS", "20"))
    if seconds <= 0:
        print("run.py: fuzzing skipped (SAFEBOX_FUZZ_SECONDS=0)")
        return 0
    if shutil.which("clang") is None:
        if os.environ.get("SAFEBOX_MUST_WORK") == "1":
            raise Failure("clang not found; libFuzzer needs clang (apt-get install clang)")
        print("run.py: SKIP fuzzing: clang not found (apt-get install clang)")
        return 0
    return seconds


def fuzz_one(tmp: Path, name: str, seconds: int) -> str:
    """Build one libFuzzer harness and run it for ``seconds`` over a copy of its corpus."""
    sources, corpus_dir = FUZZERS[name]
    exe = tmp / name
    _compile(["clang", *WARN, "-fsanitize=fuzzer,address,undefined", "-fno-sanitize-recover=all",
              "-I", str(HELPER), *(str(HELPER / s) for s in sources), str(HERE / f"{name}.c"),
              "-o", str(exe)], f"{name}.c")
    corpus = tmp / corpus_dir
    shutil.copytree(HERE / corpus_dir, corpus)
    found = tmp / f"{name}-found"  # this fuzzer's crash inputs, apart from the others'
    found.mkdir()
    r = subprocess.run([str(exe), f"-max_total_time={seconds}", "-max_len=20000", "-timeout=10",
                        "-print_final_stats=0", f"-artifact_prefix={found}/", str(corpus)],
                       capture_output=True, text=True)
    tail = r.stderr.strip().splitlines()[-3:]
    if r.returncode != 0:
        keep = OUT / "fuzz-artifacts"
        keep.mkdir(parents=True, exist_ok=True)
        for crash in sorted(found.iterdir()):
            shutil.copy(crash, keep / crash.name)
        raise Failure(f"{name} found a failure (exit {r.returncode}); inputs in {keep}", r.stderr[-4000:])
    return f"run.py: {name} ran {seconds}s: {tail[-1] if tail else 'ok'}\n"


def run_all(tmp: Path) -> None:
    """The unit tests and the fuzzers as independent jobs, one per core;
    their outputs in a fixed order, and every failure named."""
    from concurrent.futures import ThreadPoolExecutor

    seconds = fuzz_seconds()
    with ThreadPoolExecutor(_jobs()) as pool:
        # The fuzzers first: they are the longest jobs, so none is left to run alone at the end.
        jobs = [pool.submit(fuzz_one, tmp, name, seconds) for name in FUZZERS if seconds] + \
               [pool.submit(unit_test, tmp, name, sources) for name, sources in UNIT_TESTS.items()]
        build_probe()
        failures = []
        for job in jobs:
            try:
                sys.stdout.write(job.result())
            except Failure as e:
                sys.stderr.write(e.output)
                failures.append(str(e))
    sys.stdout.flush()
    if failures:
        raise Failure("; ".join(failures))


def main() -> int:
    """Run every step; exit 1 at the first failure."""
    try:
        with tempfile.TemporaryDirectory(prefix="safebox-ctest-") as t:
            tmp = Path(t)
            run_all(tmp)
    except Failure as e:
        print(f"tests/helper/run.py: {e}", flush=True)
        return 1
    print("run.py: C tests passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

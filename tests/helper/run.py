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

Any failure prints one ``tests/helper/run.py: ...`` line and exits 1.
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
    """One failed step; the message is the line to print."""


def _cc() -> str:
    for cc in (os.environ.get("CC"), "clang", "gcc", "cc"):
        if cc and shutil.which(cc):
            return cc
    raise Failure("no C compiler (install gcc or clang)")


def _compile(cmd: list[str], what: str) -> None:
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stderr)
        raise Failure(f"compiling {what} failed: {' '.join(cmd)}")


# Each C unit test: its sources besides the test file.
UNIT_TESTS = {"test_policy": ["policy.c"], "test_notify": ["notify.c", "policy.c"],
              "test_mountplan": ["mountplan.c"], "test_dirkeys": ["dirkeys.c"]}


def unit_tests(tmp: Path) -> None:
    """Build and run the C unit tests under sanitizers."""
    for name, sources in UNIT_TESTS.items():
        exe = tmp / name
        _compile([_cc(), *WARN, *SAN, "-I", str(HELPER), *(str(HELPER / s) for s in sources),
                  str(HERE / f"{name}.c"), "-o", str(exe)], f"{name}.c")
        env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0",
                   UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1")
        # In the temporary dir: what a test makes there goes with it, even
        # when the test dies half-way (test_dirkeys makes 5,000 directories).
        r = subprocess.run([str(exe)], capture_output=True, text=True, env=env, cwd=tmp)
        sys.stdout.write(r.stdout)
        sys.stderr.write(r.stderr)
        if r.returncode != 0 or "not ok" in r.stdout:
            raise Failure(f"{name} failed (exit {r.returncode})")
        print(f"run.py: {name}: {r.stdout.count(chr(10) + 'ok ') + r.stdout.startswith('ok ')} passed")


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


def fuzz(tmp: Path) -> None:
    """Run the libFuzzer harness for a bounded time over a corpus copy."""
    seconds = int(os.environ.get("SAFEBOX_FUZZ_SECONDS", "20"))
    if seconds <= 0:
        print("run.py: fuzzing skipped (SAFEBOX_FUZZ_SECONDS=0)")
        return
    clang = shutil.which("clang")
    if clang is None:
        if os.environ.get("SAFEBOX_MUST_WORK") == "1":
            raise Failure("clang not found; libFuzzer needs clang (apt-get install clang)")
        print("run.py: SKIP fuzzing: clang not found (apt-get install clang)")
        return
    for name, sources, corpus_dir in (("fuzz_policy", ["policy.c"], "corpus"),
                                      ("fuzz_notify", ["notify.c", "policy.c"], "corpus-notify"),
                                      ("fuzz_mountplan", ["mountplan.c"], "corpus-mountplan"),
                                      ("fuzz_dirkeys", ["dirkeys.c"], "corpus-dirkeys")):
        _fuzz_one(tmp, clang, name, sources, corpus_dir, seconds)


def _fuzz_one(tmp: Path, clang: str, name: str, sources: list[str], corpus_dir: str, seconds: int) -> None:
    """Build one libFuzzer harness and run it for ``seconds`` over a copy of its corpus."""
    exe = tmp / name
    _compile([clang, *WARN, "-fsanitize=fuzzer,address,undefined", "-fno-sanitize-recover=all",
              "-I", str(HELPER), *(str(HELPER / s) for s in sources), str(HERE / f"{name}.c"),
              "-o", str(exe)], f"{name}.c")
    corpus = tmp / corpus_dir
    shutil.copytree(HERE / corpus_dir, corpus)
    r = subprocess.run([str(exe), f"-max_total_time={seconds}", "-max_len=20000", "-timeout=10",
                        "-print_final_stats=0", f"-artifact_prefix={tmp}/", str(corpus)],
                       capture_output=True, text=True)
    tail = r.stderr.strip().splitlines()[-3:]
    if r.returncode != 0:
        sys.stderr.write(r.stderr[-4000:])
        crashes = sorted(p.name for p in tmp.iterdir() if p.name.startswith(("crash-", "leak-", "timeout-")))
        keep = OUT / "fuzz-artifacts"
        keep.mkdir(parents=True, exist_ok=True)
        for name in crashes:
            shutil.copy(tmp / name, keep / name)
        raise Failure(f"{name} found a failure (exit {r.returncode}); inputs in {keep}")
    print(f"run.py: {name} ran {seconds}s: {tail[-1] if tail else 'ok'}")


def main() -> int:
    """Run every step; exit 1 at the first failure."""
    try:
        with tempfile.TemporaryDirectory(prefix="safebox-ctest-") as t:
            tmp = Path(t)
            unit_tests(tmp)
            build_probe()
            fuzz(tmp)
    except Failure as e:
        print(f"tests/helper/run.py: {e}", flush=True)
        return 1
    print("run.py: C tests passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

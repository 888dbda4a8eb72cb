"""The violations feed tells the truth (issue 26, "a truthful feed").

- No refusal is reported for an operation that worked: a write into every
  preset's cache, in every layer mode, is no event and no summary line,
  while a write the sandbox did refuse, in the same run, is.
- Every fix line the summary gives is applied and the command re-run: the
  fix works, or the line says the refusal stays.
- A PATH lookup of a file that does not exist (an exec failing with ENOENT
  inside a hidden directory that holds no such file on the host either) is
  no refused exec; one of a program that does exist there is.

Everything runs through the real ``safebox exec`` (bwrap, helper,
supervisor); the controls run the same command where nothing refuses it.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from safebox.policy.presets import PRESETS
from sbx import BOTH, BWRAP_ONLY, HELPER_ONLY, FakeHome, host, token

PY = "/usr/bin/python3"
ALL_MODES = [BOTH, HELPER_ONLY, BWRAP_ONLY]
#: The modes that observe (nothing is observed with --without helper).
OBSERVED = [BOTH, HELPER_ONLY]
WRITE_ERRNO = {BOTH: "EROFS", HELPER_ONLY: "EACCES", BWRAP_ONLY: "EROFS"}

#: Every cache variable of every preset, as (preset, variable).
CACHE_VARS = [(p.name, v.name) for p in PRESETS.values() for c in p.caches for v in c.env]


def denied(log: Path) -> list[dict[str, Any]]:
    return [ev for ev in map(json.loads, log.read_text().splitlines()) if ev["event"] == "denied"]


def refusal_lines(stderr: str) -> list[str]:
    """safebox's lines about refusals (the summary and the -v list)."""
    return [line for line in stderr.splitlines()
            if line.startswith(("safebox: refused", "safebox: denied", "safebox: to allow",
                                "safebox: the commonest"))]


def run(home: FakeHome, command: list[str], *, mode: str = BOTH, opts: tuple[str, ...] = (),
        env: dict[str, str] | None = None, cwd: Path | None = None) -> tuple[subprocess.CompletedProcess[str],
                                                                          list[dict[str, Any]]]:
    """``safebox exec --audit-log LOG -v``; the run and its denied events."""
    log = home.root / f"audit-{token()}.jsonl"
    r = home.run(command, mode=mode, opts=("--audit-log", str(log), "-v", *opts), env=env, cwd=cwd)
    return r, denied(log) if log.exists() else []


# --------------------------------------------------------------- caches

# Inside the sandbox: the cache dir a variable names (MAVEN_OPTS carries it
# as -Dmaven.repo.local=DIR), then the write-intent calls a package manager
# makes there (create, mkdir, rename, link, unlink, chmod), then the
# control: a write to the home, which is read-only.
CACHE_WRITES = r"""
import os, sys
var, control = sys.argv[1], sys.argv[2]
value = os.environ[var]
d = value
for word in value.split():
    if word.startswith("-Dmaven.repo.local="):
        d = word.split("=", 1)[1]
os.makedirs(os.path.join(d, "sub", "deeper"), exist_ok=True)
with open(os.path.join(d, "sub", "f.tmp"), "w") as f:
    f.write("x")
os.rename(os.path.join(d, "sub", "f.tmp"), os.path.join(d, "sub", "f"))
os.symlink("f", os.path.join(d, "sub", "l"))
os.chmod(os.path.join(d, "sub", "f"), 0o644)
os.unlink(os.path.join(d, "sub", "l"))
print("cache ok", d)
try:
    open(control, "a").close()
except OSError as e:
    print("control", e.errno)
"""


def test_every_preset_with_a_cache_is_covered() -> None:
    # The parametrisation below comes from PRESETS: a new preset's cache is
    # tested without editing this file. This pins that it is not empty.
    assert {p for p, _ in CACHE_VARS} == {"npm", "pip", "cargo", "go", "maven"}
    assert len(CACHE_VARS) == 10


@pytest.mark.parametrize("mode", ALL_MODES)
@pytest.mark.parametrize(("preset", "var"), CACHE_VARS)
def test_writes_into_a_preset_cache_are_no_refusal_while_a_refused_write_is_reported(
        shared_home: FakeHome, preset: str, var: str, mode: str) -> None:
    control = shared_home.root / "outside.txt"
    r, evs = run(shared_home, [PY, "-c", CACHE_WRITES, var, str(control)], mode=mode, opts=("--preset", preset))
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert out[0].startswith("cache ok /"), r.stdout
    cache = out[0].split(" ", 2)[2]
    # The control: the same run's write to the home was refused...
    assert out[1] == f"control {13 if mode == HELPER_ONLY else 30}", r.stdout
    if mode == BWRAP_ONLY:
        # ...and nothing is observed without the helper: no line at all.
        assert refusal_lines(r.stderr) == [], r.stderr
        assert evs == []
        return
    # ...and reported, alone: the cache's writes are not.
    assert [(ev["kind"], ev["path"], ev["errno"]) for ev in evs] == [("write", str(control), WRITE_ERRNO[mode])], evs
    assert "sandbox-caches" in cache and "sandbox-caches" not in r.stderr, r.stderr
    assert "safebox: refused 1 operation: 1 write (~/outside.txt)" in r.stderr, r.stderr

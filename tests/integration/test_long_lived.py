"""Long-lived use through the real CLI: the policy cache, run dirs and the
quarantine stay within their documented bounds (docs/index.md, "Where
things live") while runs come and go. The unit-level thousand-run checks
are in tests/unit/test_policy.py and tests/unit/test_state_bounds.py."""

from __future__ import annotations

import os
import time
from pathlib import Path

from sbx import FakeHome, kill_tree_by_arg, pids_with_arg, unique_sleep_arg, wait_for

CACHE_MAX_ENTRIES = 256  # docs/index.md
QUARANTINE_MAX_ENTRIES = 100  # docs/index.md, docs/policy-reference.md


def _policy_entries(home: FakeHome) -> list[Path]:
    cache = home.root / ".cache" / "safebox" / "cache"
    return sorted(p for p in cache.iterdir() if p.name.startswith("policy-") and p.name.endswith(".marshal"))


def test_real_runs_with_new_policies_evict_the_least_recently_used_cache_entries(fresh_home: FakeHome) -> None:
    assert fresh_home.run(["true"]).returncode == 0
    (mine,) = _policy_entries(fresh_home)
    cache = mine.parent
    # As if a harness had run 300 other tasks, each with a policy of its own, long ago.
    old = time.time() - 86400
    for i in range(300):
        fake = cache / f"policy-{i:032x}.marshal"
        fake.write_bytes(b"\0" * 1000)
        fake.chmod(0o600)
        os.utime(fake, (old + i, old + i))
    os.utime(mine, (old - 10, old - 10))  # the oldest of all, but used again below
    assert fresh_home.run(["true"]).returncode == 0  # a hit: marks it used, evicts nothing
    assert len(_policy_entries(fresh_home)) == 301
    for i in range(5):
        r = fresh_home.run(["true"], opts=["--deny-write", f"extra-{i}"])
        assert r.returncode == 0, r.stderr
    left = _policy_entries(fresh_home)
    assert len(left) == CACHE_MAX_ENTRIES
    assert mine in left
    assert not (cache / f"policy-{0:032x}.marshal").exists()  # the least recently used went first
    assert (cache / f"policy-{299:032x}.marshal").exists()


def _run_dirs(home: FakeHome) -> list[str]:
    try:
        return sorted(os.listdir(home.run_base))
    except FileNotFoundError:
        return []


def test_the_run_dirs_of_several_sigkilled_runs_are_all_swept_by_the_next_start(fresh_home: FakeHome) -> None:
    args = [unique_sleep_arg() for _ in range(4)]
    procs = [fresh_home.popen(["sleep", a]) for a in args]
    try:
        assert wait_for(lambda: all(pids_with_arg(a) for a in args), timeout=60)
        assert len(_run_dirs(fresh_home)) == 4  # control: one per live run
        for p in procs:
            p.kill()
            p.communicate()
        assert len(_run_dirs(fresh_home)) == 4  # SIGKILL: nothing could clean up
        r = fresh_home.run(["true"])
        assert r.returncode == 0, r.stderr
        assert _run_dirs(fresh_home) == []
    finally:
        for p in procs:
            p.kill()
            p.communicate()
        for a in args:
            kill_tree_by_arg(a)


def test_a_full_quarantine_makes_room_for_a_new_entry_and_says_so_once(fresh_home: FakeHome) -> None:
    qdir = fresh_home.root / ".cache" / "safebox" / "quarantine"
    names = [f"2001010{d}T0000{s:02d}" for d in range(1, 3) for s in range(50)]
    for name in names:
        (qdir / name).mkdir(parents=True)
        (qdir / name / "evidence").write_text("planted earlier\n")
    planted = fresh_home.work / ".envrc"
    r = fresh_home.run(["sh", "-c", f"echo evil > {planted}"])
    assert r.returncode == 0, r.stderr
    assert not planted.exists()
    notices = [ln for ln in r.stderr.splitlines() if "the quarantine keeps" in ln]
    assert notices == [f"safebox: the quarantine keeps the newest {QUARANTINE_MAX_ENTRIES} entries: removed 1 "
                       f"older one from {qdir} ({names[0]})"], r.stderr
    left = sorted(os.listdir(qdir))
    assert len(left) == QUARANTINE_MAX_ENTRIES and names[0] not in left and names[1] in left
    moved = next(ln for ln in r.stderr.splitlines() if ln.startswith("safebox: the command created protected file"))
    assert Path(moved.rsplit(" moved it to ", 1)[1]).read_text() == "evil\n"

"""safebox's own state (policy and seccomp caches, run dirs) and installation
stay read-only inside, even beneath a write root: a command that could write
them would control the next run."""

from __future__ import annotations

import pytest

from sbx import BOTH, HELPER_ONLY, FakeHome, host

EXPECTED = {BOTH: "Read-only file system", HELPER_ONLY: "Permission denied"}


@pytest.mark.parametrize("mode", [BOTH, HELPER_ONLY])
def test_the_state_dir_is_read_only_when_home_is_the_write_root(fresh_home: FakeHome, mode: str) -> None:
    fresh_home.run(["true"], mode=mode, cwd=fresh_home.root)  # creates ~/.cache/safebox and its caches
    cache = fresh_home.root / ".cache" / "safebox" / "cache"
    assert cache.is_dir()
    poison = cache / "planted"
    r = fresh_home.run(["sh", "-c", f"echo x > {poison}"], mode=mode, cwd=fresh_home.root)
    assert r.returncode != 0 and EXPECTED[mode] in r.stderr, r.stderr
    assert not poison.exists()
    # Control: the same write beside it, in the same write root, works. (On a
    # helper-only host ~/.cache itself, an ancestor of the state dir, refuses
    # new entries: Landlock cannot grant a directory without its subtree.)
    beside = fresh_home.root / ".cache" / "other"
    beside.mkdir()
    ok = fresh_home.run(["sh", "-c", f"echo x > {beside}/f"], mode=mode, cwd=fresh_home.root)
    assert ok.returncode == 0, ok.stderr
    # And without safebox the state dir is writable by its owner.
    assert host(["sh", "-c", f"echo x > {poison}"]).returncode == 0


@pytest.mark.parametrize("mode", [BOTH, HELPER_ONLY])
def test_a_cached_policy_cannot_be_replaced_from_inside(fresh_home: FakeHome, mode: str) -> None:
    fresh_home.run(["true"], mode=mode, cwd=fresh_home.root)
    cache = fresh_home.root / ".cache" / "safebox" / "cache"
    entries = sorted(p for p in cache.iterdir() if p.name.startswith("policy-"))
    assert entries
    r = fresh_home.run(["sh", "-c", f"rm -f {entries[0]}"], mode=mode, cwd=fresh_home.root)
    assert entries[0].exists(), r.stderr

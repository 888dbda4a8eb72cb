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


@pytest.mark.parametrize("mode", [BOTH, HELPER_ONLY])
def test_the_policy_file_given_with_p_is_read_only_inside_the_work_dir(fresh_home: FakeHome, mode: str) -> None:
    """A --policy file inside a write root would otherwise be rewritten for
    the next run (allowWrite "/", a domain to send the credentials to)."""
    pol = fresh_home.work / "mypolicy.json"
    pol.write_text('{"filesystem": {"denyWrite": []}}\n')
    # An existing file: on a helper-only host the work root, which now holds
    # an excluded file, can get no create right (Landlock grants subtrees).
    beside = fresh_home.work / "beside.json"
    beside.write_text("{}\n")
    attack = 'echo \'{"filesystem": {"allowWrite": ["/"]}}\' > "$1"'
    r = fresh_home.run(["sh", "-c", attack, "sh", str(pol)], mode=mode, opts=["-p", str(pol)])
    assert r.returncode != 0 and EXPECTED[mode] in r.stderr, r.stderr
    assert pol.read_text() == '{"filesystem": {"denyWrite": []}}\n'
    # Control: the same write to a file beside it, and to the policy file on the host.
    ok = fresh_home.run(["sh", "-c", attack, "sh", str(beside)], mode=mode, opts=["-p", str(pol)])
    assert ok.returncode == 0, ok.stderr
    assert host(["sh", "-c", attack, "sh", str(pol)]).returncode == 0


@pytest.mark.parametrize("mode", [BOTH, HELPER_ONLY])
def test_the_interpreters_import_path_is_read_only_inside_a_write_root(fresh_home: FakeHome, mode: str) -> None:
    """safebox imports from every sys.path entry (a pip --user site, the base
    installation behind a venv): code planted there runs at the next start."""
    lib = fresh_home.work / "pylib"
    lib.mkdir()
    planted = lib / "sitecustomize.py"
    r = fresh_home.run(["sh", "-c", f"echo 'import os' > {planted}"], mode=mode, env={"PYTHONPATH": str(lib)})
    assert r.returncode != 0 and EXPECTED[mode] in r.stderr, r.stderr
    assert not planted.exists()
    # Control: without it on the import path, the same directory is writable.
    ok = fresh_home.run(["sh", "-c", f"echo 'import os' > {planted}"], mode=mode)
    assert ok.returncode == 0 and planted.exists(), ok.stderr


def test_an_import_path_that_holds_the_work_dir_does_not_take_it_away(fresh_home: FakeHome) -> None:
    r = fresh_home.run(["sh", "-c", "echo x > written"], opts=["-v"], env={"PYTHONPATH": str(fresh_home.root)})
    assert r.returncode == 0, r.stderr
    assert (fresh_home.work / "written").exists()
    assert f"import path {fresh_home.root} holds a write root: not kept read-only inside" in r.stderr

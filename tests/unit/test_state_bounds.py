"""Long-lived use: what safebox keeps in its state dir stays bounded however
many runs a harness makes (run dirs, the quarantine, the remembered git dirs;
the policy cache is in test_policy.py). The bounds are in docs/index.md,
"Where things live"."""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

import pytest

from safebox.builder.resolve import read_known_git_dirs, remember_git_dirs
from safebox.run.protect import QUARANTINE_MAX_ENTRIES, bound_quarantine, quarantine
from safebox.run.rundir import sweep_stale

# ------------------------------------------------------------------ run dirs


def _dead_run(base: Path, name: str) -> Path:
    d = base / name
    d.mkdir(mode=0o700)
    (d / "lock").write_bytes(b"")
    (d / "policy").write_bytes(b"x")
    return d


def test_a_thousand_dead_run_dirs_are_swept_and_live_ones_kept(tmp_path: Path) -> None:
    base = tmp_path / "run"
    base.mkdir()
    for i in range(1000):
        _dead_run(base, f"{10000 + i}-dead")
    live = _dead_run(base, "1-live")
    fd = os.open(live / "lock", os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # another open file description: a live run's lock
    young = base / "2-starting"  # made, not yet locked: a run starting right now
    young.mkdir()
    old = base / "3-killed-before-locking"
    old.mkdir()
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    try:
        assert sweep_stale(str(base)) == []  # nothing to say: no watch lists
        assert sorted(os.listdir(base)) == ["1-live", "2-starting"]
    finally:
        os.close(fd)
    assert sweep_stale(str(base)) == []
    assert sorted(os.listdir(base)) == ["2-starting"]  # its owner is gone now


# ------------------------------------------------------------------ the quarantine


def _fill_quarantine(qdir: Path, n: int) -> list[str]:
    names = [time.strftime("%Y%m%dT%H%M%S", time.localtime(86400 * 365 * 30 + 60 * i)) for i in range(n)]
    for name in names:
        (qdir / name).mkdir(parents=True)
        (qdir / name / "home%u%proj%.envrc").write_text("planted\n")
    return names


def test_the_quarantine_keeps_the_newest_entries_and_never_the_one_just_filled(tmp_path: Path) -> None:
    qdir = tmp_path / "quarantine"
    names = _fill_quarantine(qdir, QUARANTINE_MAX_ENTRIES + 50)
    (qdir / "README-mine").write_text("not safebox's: left alone\n")
    keep = str(qdir / names[0])  # the oldest name, but the entry just filled
    removed = bound_quarantine(str(qdir), keep=keep)
    assert removed == names[1:51]
    assert sorted(os.listdir(qdir)) == sorted([names[0], *names[51:], "README-mine"])


def test_quarantining_past_the_bound_removes_the_oldest_with_one_notice(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state"
    names = _fill_quarantine(state / "quarantine", QUARANTINE_MAX_ENTRIES)
    planted = tmp_path / "proj" / ".envrc"
    planted.parent.mkdir()
    planted.write_text("evil\n")
    ((src, dest),) = quarantine((str(planted),), str(state))
    assert Path(dest).read_text() == "evil\n"
    err = capsys.readouterr().err.splitlines()
    assert err == [f"safebox: the quarantine keeps the newest {QUARANTINE_MAX_ENTRIES} entries: removed 1 older "
                   f"one from {state / 'quarantine'} ({names[0]})"]
    left = os.listdir(state / "quarantine")
    assert len(left) == QUARANTINE_MAX_ENTRIES and names[0] not in left


def test_quarantining_below_the_bound_removes_nothing_and_says_nothing(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state"
    _fill_quarantine(state / "quarantine", QUARANTINE_MAX_ENTRIES - 1)
    planted = tmp_path / ".envrc"
    planted.write_text("evil\n")
    quarantine((str(planted),), str(state))
    assert capsys.readouterr().err == ""
    assert len(os.listdir(state / "quarantine")) == QUARANTINE_MAX_ENTRIES


def test_the_same_path_quarantined_twice_in_one_second_keeps_both(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(time, "strftime", lambda _fmt, *_a: "20260101T000000")
    planted = tmp_path / ".envrc"
    planted.write_text("first\n")
    ((_, one),) = quarantine((str(planted),), str(tmp_path / "state"))
    planted.write_text("second\n")
    ((_, two),) = quarantine((str(planted),), str(tmp_path / "state"))
    assert one != two
    assert (Path(one).read_text(), Path(two).read_text()) == ("first\n", "second\n")


# ------------------------------------------------------------------ remembered git dirs


def _memory(tmp_path: Path) -> str:
    return str(tmp_path / "known-git-dirs")


def test_the_git_dir_memory_keeps_the_most_recently_seen_within_its_bound(tmp_path: Path) -> None:
    dirs = tmp_path / "repos"
    mem = _memory(tmp_path)
    recurring = ("git", str(dirs / "r0"))  # seen again now and then
    lengths = []
    for batch in range(60):  # 6000 dirs, 100 new ones a run
        seen = []
        for i in range(batch * 100, batch * 100 + 100):
            (dirs / f"r{i}").mkdir(parents=True)
            seen.append(("git", str(dirs / f"r{i}")))
        if batch % 10 == 9:
            seen.append(recurring)
        remember_git_dirs(mem, read_known_git_dirs(mem), tuple(seen))
        lengths.append(len(read_known_git_dirs(mem)))
    assert max(lengths) <= 4096
    assert 3072 in lengths  # swept once past the bound, down to three quarters
    known = read_known_git_dirs(mem)
    assert known[:100] == tuple(("git", str(dirs / f"r{i}")) for i in range(5900, 6000))
    assert recurring in known
    assert ("git", str(dirs / "r1")) not in known  # least recently seen: forgotten


def test_a_full_git_dir_memory_drops_vanished_dirs_before_live_ones(tmp_path: Path) -> None:
    mem = _memory(tmp_path)
    before = []
    for i in range(4096):
        d = tmp_path / f"r{i}"
        d.mkdir()
        before.append(("git", str(d)))
    remember_git_dirs(mem, (), tuple(before))
    for _, p in before[:2000]:
        os.rmdir(p)  # deleted worktrees, most recently seen first
    (tmp_path / "new").mkdir()
    remember_git_dirs(mem, read_known_git_dirs(mem), (("git", str(tmp_path / "new")),))
    known = read_known_git_dirs(mem)
    assert known == (("git", str(tmp_path / "new")), *before[2000:])  # 2097 entries: all the live ones


def test_the_git_dir_memory_is_bounded_in_bytes_and_never_cut_mid_line(tmp_path: Path) -> None:
    mem = _memory(tmp_path)
    long_parent = tmp_path / ("d" * 200) / ("e" * 200) / ("f" * 200)
    seen = []
    for i in range(1000):
        d = long_parent / f"repo-{i:04d}"
        d.mkdir(parents=True)
        seen.append(("git", str(d)))
    remember_git_dirs(mem, (), tuple(seen))
    raw = Path(mem).read_bytes()
    assert len(raw) <= 1 << 20 and raw.endswith(b"\n")
    known = read_known_git_dirs(mem)
    assert 0 < len(known) < 1000 and known == tuple(seen[:len(known)])


def test_a_memory_cut_short_is_read_without_its_partial_last_line(tmp_path: Path) -> None:
    mem = _memory(tmp_path)
    whole = f"git {b'/home/u/a.git'.hex()}\n"
    cut = f"git {b'/home/u/b.git'.hex()}"[:-6]  # the hex of /home/u/b: a shorter, wrong path
    Path(mem).write_text(whole + cut)
    assert read_known_git_dirs(mem) == (("git", "/home/u/a.git"),)


def test_the_git_dir_memory_is_not_rewritten_when_nothing_is_new(tmp_path: Path) -> None:
    mem = _memory(tmp_path)
    a, b = tmp_path / "a.git", tmp_path / "b.git"
    a.mkdir()
    b.mkdir()
    remember_git_dirs(mem, (), (("git", str(a)),))
    os.utime(mem, ns=(1, 1))
    remember_git_dirs(mem, read_known_git_dirs(mem), (("git", str(a)),))  # nothing new: no write
    assert os.stat(mem).st_mtime_ns == 1
    remember_git_dirs(mem, read_known_git_dirs(mem), (("git", str(b)),))  # control: something new is written
    assert os.stat(mem).st_mtime_ns != 1
    assert read_known_git_dirs(mem) == (("git", str(b)), ("git", str(a)))


# ------------------------------------------------------ watched symlinks


def test_a_watched_symlink_whose_directory_vanished_does_not_stop_the_next_start(tmp_path: Path) -> None:
    # A killed run's watch list can name a protected symlink in a temporary
    # tree that is gone by the next start (seen with pytest's /tmp trees in
    # helper-only runs). Nothing can stand at such a path: the sweep settles
    # it instead of failing every later start with 125.
    from safebox.run.protect import restore_links

    gone = tmp_path / "gone"
    state = tmp_path / "state"
    state.mkdir()
    assert restore_links(((str(gone / ".bashrc"), "dotfiles/bashrc"),), str(state)) == []
    assert not gone.exists()


def test_a_removed_watched_symlink_is_still_restored_when_its_directory_exists(tmp_path: Path) -> None:
    # The control: the directory is there, the link is gone, so it is put back.
    from safebox.run.protect import restore_links

    state = tmp_path / "state"
    state.mkdir()
    link = tmp_path / ".bashrc"
    assert restore_links(((str(link), "dotfiles/bashrc"),), str(state)) == [(str(link), None)]
    assert os.readlink(link) == "dotfiles/bashrc"

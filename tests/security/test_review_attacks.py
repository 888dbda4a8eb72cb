"""Attacks on ``safebox changes apply``'s move (docs/review.md, "Moved, not
copied"): what a command that is still running can do to a file once it is
the host's."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from sbx import BOTH, SAFEBOX, FakeHome, wait_for


def _changes(home: FakeHome, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SAFEBOX), "changes", *args], cwd=home.work, env=home.env(), capture_output=True,
                          text=True, timeout=60, check=False, stdin=subprocess.DEVNULL)


#: Writes a file, keeps it open, and once told (a line on stdin) writes more through that descriptor and
#: sets the set-user-ID bit: what it would do to the host's file had the apply moved its inode there.
_HOLDER = "exec 3>held.txt && echo reviewed >&3 && read x && echo unreviewed >&3 && chmod 4755 held.txt"


def test_an_apply_while_the_command_still_runs_copies_so_its_later_writes_never_reach_the_host(
        fresh_home: FakeHome) -> None:
    base = fresh_home.root / ".cache" / "safebox" / "review"
    p = fresh_home.popen(["sh", "-c", _HOLDER], mode=BOTH, opts=["--review"], stdin=subprocess.PIPE)
    try:
        assert wait_for(lambda: any(base.glob("*/layers/0/upper/held.txt")), timeout=30)
        rid = json.loads(_changes(fresh_home, "list", "--json").stdout)[-1]["id"]
        a = _changes(fresh_home, "apply", rid)
        assert a.returncode == 0, a.stderr
        out, err = p.communicate("go\n", timeout=30)
        assert p.returncode == 0, err
    finally:
        if p.returncode is None:
            p.kill()
            p.communicate(timeout=30)
    held = fresh_home.work / "held.txt"
    # Control: the command did write and chmod its own file after the apply (the layer's copy).
    assert held.read_text() == "reviewed\n"
    up = base / rid / "layers" / "0" / "upper" / "held.txt"
    assert up.read_text() == "reviewed\nunreviewed\n" and os.lstat(up).st_mode & 0o7777 == 0o4755
    assert os.lstat(held).st_mode & 0o7000 == 0 and os.lstat(held).st_ino != os.lstat(up).st_ino


def test_the_apis_apply_while_its_command_runs_is_a_snapshot(fresh_home: FakeHome) -> None:
    import safebox

    base = fresh_home.root / ".cache" / "safebox" / "review"
    with safebox.Sandbox(cwd=fresh_home.work, env=fresh_home.env(), review=True) as sb:
        p = sb.popen(["sh", "-c", _HOLDER], stdin=subprocess.PIPE)
        assert wait_for(lambda: any(base.glob("*/layers/0/upper/held.txt")), timeout=30)
        out = sb.apply()
        assert out["applied"] == [str(fresh_home.work / "held.txt")]
        p.communicate(b"go\n", timeout=30)
        assert p.returncode == 0
        assert (fresh_home.work / "held.txt").read_text() == "reviewed\n"
        assert os.lstat(fresh_home.work / "held.txt").st_mode & 0o7000 == 0


def test_names_of_multibyte_characters_and_newlines_are_applied_and_their_temporary_names_swept(
        fresh_home: FakeHome) -> None:
    long, nl = "é" * 120, "line\nbreak"  # 240 bytes (the limit is 255); a newline in a name
    script = f"for n in {[long, nl]!r}: open(n, 'w').write(n)\n"
    r = fresh_home.run(["python3", "-c", script], opts=["--review"])
    assert r.returncode == 0, r.stderr
    rid = json.loads(_changes(fresh_home, "list", "--json").stdout)[-1]["id"]
    up, w = fresh_home.root / ".cache" / "safebox" / "review" / rid / "layers" / "0" / "upper", fresh_home.work
    # What an apply killed after its link beside the target leaves (as in test_review.py).
    os.link(up / nl, w / f".{nl}.safebox-apply-0badf00d")
    a = _changes(fresh_home, "apply", rid)
    assert (a.returncode, a.stderr) == (0, "")
    assert (w / long).read_text() == long and (w / nl).read_text() == nl
    assert [n for n in os.listdir(w) if "safebox-apply" in n] == []


_FS_IOC_GETFLAGS, _FS_NODUMP_FL, _FS_SYNC_FL = 0x80086601, 0x40, 0x8


def _inode_flags(path: Path) -> int:
    import fcntl
    import sys

    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        return int.from_bytes(fcntl.ioctl(fd, _FS_IOC_GETFLAGS, bytes(8))[:4], sys.byteorder)
    finally:
        os.close(fd)


def test_inode_flags_the_command_set_never_reach_the_host(fresh_home: FakeHome) -> None:
    # nodump (backups skip the file) and sync: what chattr +d +S sets, no capability needed. As chattr does,
    # the word set is the file's flags read first and the two added: one without the flags the file system
    # set itself (ext4's extents) asks ext4 to convert the file to block maps, which it refuses (EOPNOTSUPP,
    # with the other flags set all the same) for a file past 12 blocks, and for a small one by the state of
    # its writeback (the flake of ci6). 64 KiB: the old word fails every time on ext4, not 1 run in 10.
    script = ("import fcntl, os, sys\nopen('flagged', 'w').write('f' * 65536)\nfd = os.open('flagged', os.O_RDONLY)\n"
              f"old = int.from_bytes(fcntl.ioctl(fd, {_FS_IOC_GETFLAGS:#x}, bytes(8))[:4], sys.byteorder)\n"
              f"fcntl.ioctl(fd, 0x40086602, (old | {_FS_NODUMP_FL | _FS_SYNC_FL}).to_bytes(8, sys.byteorder))\n")
    r = fresh_home.run(["python3", "-c", script], opts=["--review"])
    assert r.returncode == 0, r.stderr
    rid = json.loads(_changes(fresh_home, "list", "--json").stdout)[-1]["id"]
    up = fresh_home.root / ".cache" / "safebox" / "review" / rid / "layers" / "0" / "upper" / "flagged"
    assert _inode_flags(up) & (_FS_NODUMP_FL | _FS_SYNC_FL) == _FS_NODUMP_FL | _FS_SYNC_FL  # control: set
    a = _changes(fresh_home, "apply", rid)
    assert (a.returncode, a.stderr) == (0, "")
    host = fresh_home.work / "flagged"
    assert host.read_text() == "f" * 65536 and _inode_flags(host) & (_FS_NODUMP_FL | _FS_SYNC_FL) == 0


def test_a_run_that_changed_nothing_passes_nothing_to_the_next_through_its_spare_directories(
        fresh_home: FakeHome) -> None:
    # The write root's own directory is the layer's upper directory: its mode, times and attributes
    # are the command's to set, and no change a held run lists.
    a = fresh_home.run(["python3", "-c", "import os\nos.setxattr('.', 'user.msg', b'from A')\nos.chmod('.', 0o777)\n"
                        "os.utime('.', (1, 1))\nst = os.stat('.')\nprint(oct(st.st_mode & 0o777), st.st_mtime, "
                        "os.listxattr('.'))"], opts=["--review"])
    assert a.returncode == 0, a.stderr
    assert a.stdout.split("\n")[0] == "0o777 1.0 ['user.msg']"  # control: set, in run A's view
    assert (fresh_home.root / ".cache" / "safebox" / "review" / ".spare").is_dir()  # and left as the spare
    b = fresh_home.run(["python3", "-c", "import os\nst = os.stat('.')\nprint(oct(st.st_mode & 0o777), "
                        "st.st_mtime, os.listxattr('.'))"], opts=["--review"])
    assert b.returncode == 0, b.stderr
    mode, mtime, names = b.stdout.split("\n")[0].split(" ", 2)
    assert (mode, names) == ("0o700", "[]") and float(mtime) > 1.0

"""--review's decisions that need no kernel: where it is refused, which write
roots are held, and the plan (helper/review.c's format) read off a mount
table. The mounts themselves are tested in tests/security/test_review.py."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from safebox.builder.resolved import Layers, ResolvedPolicy
from safebox.errors import BuildError
from safebox.review import mounts


def _rp(**kw: Any) -> ResolvedPolicy:
    base: dict[str, Any] = dict(layers=Layers.BOTH, cwd="/home/u/proj", helper_path="/bin/true",
                                write_roots=("/home/u/proj", "/home/u/proj/sub", "/tmp", "/tmp/w", "/srv/o"),
                                private_tmp=("/tmp",), review_stage="/run/sb/cmd-1/review", read_only=(),
                                sealed_dirs=(), run_dir="/run/sb", policy_path="/run/sb/policy")
    base.update(kw)
    return ResolvedPolicy(**base)


def test_the_outermost_write_roots_are_held_and_the_private_tmp_is_not() -> None:
    assert mounts.roots(_rp()) == ("/home/u/proj", "/srv/o", "/tmp/w")


@pytest.mark.parametrize(("kw", "release", "why"), [
    ({"layers": Layers.HELPER_ONLY}, "6.8.0", "(helper-only mode)"),
    ({}, "5.10.0-28-amd64", "this kernel is 5.10.0-28-amd64"),
    ({"helper_path": "/nonexistent/helper"}, "6.8.0", "safebox-helper to mount its overlays"),
    ({"write_roots": ("/home/u/a,b",)}, "6.8.0", "cannot name a path with , : \\ or ="),
])
def test_review_is_refused_with_the_reason(monkeypatch: pytest.MonkeyPatch, kw: dict[str, Any], release: str,
                                           why: str) -> None:
    real = os.uname()
    monkeypatch.setattr(os, "uname", lambda: os.uname_result((real.sysname, real.nodename, release, real.version,
                                                              real.machine)))
    got = mounts.unsupported(_rp(**kw), bwrap="/usr/bin/bwrap")
    assert got is not None and why in got, got


def test_review_is_allowed_on_a_host_that_has_it(monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.uname()
    monkeypatch.setattr(os, "uname", lambda: os.uname_result((real.sysname, real.nodename, "6.8.0", real.version,
                                                              real.machine)))
    assert mounts.unsupported(_rp(), bwrap="/usr/bin/bwrap") is None  # control


def test_the_plan_puts_read_only_binds_and_masks_back_and_holds_read_write_ones() -> None:
    table = mounts.parse_mountinfo(
        "1 0 8:1 / / ro,nosuid - ext4 /dev/sda rw\n"
        "2 1 8:1 /home/u/proj /home/u/proj rw,nosuid,nodev - ext4 /dev/sda rw\n"
        "3 2 8:1 /home/u/proj/.git/hooks /home/u/proj/.git/hooks ro,nosuid,nodev - ext4 /dev/sda rw\n"
        "4 2 0:5 / /home/u/proj/secret rw,nosuid - tmpfs none rw\n"
        "5 2 8:1 /home/u/proj/pin /home/u/proj/pin rw,nosuid - ext4 /dev/sda rw\n"
        "6 2 8:1 /home/u/proj/a\\040b /home/u/proj/a\\040b ro - ext4 /dev/sda rw\n"
        "7 1 8:1 /srv/o /srv/o rw - ext4 /dev/sda rw\n")
    plan = mounts.plan(_rp(write_roots=("/home/u/proj", "/srv/o")), table, held=("/home/u/proj", "/srv/o"))
    assert plan.split(b"\0")[:-1] == [
        b"G", b"/run/sb/cmd-1/review", b"V", b"/home/u/proj", b"K", b"/home/u/proj/.git/hooks",
        b"K", b"/home/u/proj/secret", b"I", b"/home/u/proj/pin", b"K", b"/home/u/proj/a b", b"V", b"/srv/o"]


def test_a_held_root_that_is_not_a_mount_of_its_own_is_an_error() -> None:
    from safebox.errors import BuildError

    with pytest.raises(BuildError, match="cannot hold the writes to /srv/o"):
        mounts.plan(_rp(), [("/", True, "ext4")], held=("/srv/o",))


def _foreign_dir(parent: Path, name: str) -> Path:
    """A directory of another user's (uid 65534), made now: chown needs root."""
    from sbx import missing

    if os.geteuid() != 0:
        missing("root, to make a directory of another user's (chown)")
    d = parent / name
    d.mkdir()
    os.chown(d, 65534, 65534)
    return d


def test_an_allowed_socket_in_a_held_root_is_bound_onto_itself_when_every_directory_to_it_is_ours(
        tmp_path: Path) -> None:
    from safebox.review.run import _bind_held_sockets

    ours = tmp_path / "ours" / "s.sock"
    ours.parent.mkdir()
    theirs = _foreign_dir(tmp_path, "theirs") / "s.sock"
    rp = _rp(write_roots=(str(tmp_path),), sockets_allowed=(str(ours),))
    assert _bind_held_sockets(rp, (str(tmp_path),), all_unix_sockets=False).socket_binds == (str(ours),)
    # bubblewrap binds by name: another user could make their directory a
    # symlink before the mounts and have a file of ours elsewhere bound
    # read-write at that name. A named socket there is refused.
    rp = _rp(write_roots=(str(tmp_path),), sockets_allowed=(str(ours), str(theirs)))
    with pytest.raises(BuildError, match=f"network.allowUnixSockets {theirs}: --review binds it onto itself in "
                                         f"its held write root, and {theirs.parent} on the way to it is not "
                                         "yours nor root's"):
        _bind_held_sockets(rp, (str(tmp_path),), all_unix_sockets=False)
    # Control: one outside the held roots is not the review's to bind.
    assert _bind_held_sockets(rp, (str(tmp_path / "ours"),), all_unix_sockets=False).socket_binds == (str(ours),)


def test_the_first_directory_on_the_way_to_a_socket_that_is_not_ours_nor_roots_is_named(tmp_path: Path) -> None:
    from safebox.builder.sockets import foreign_on_the_way

    theirs = _foreign_dir(tmp_path, "theirs")
    (theirs / "deeper").mkdir()
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to("real")
    root = str(tmp_path)
    assert foreign_on_the_way(f"{root}/real/s.sock") is None
    assert foreign_on_the_way(f"{root}/link/s.sock") is None  # our own link
    assert foreign_on_the_way(f"{root}/theirs/deeper/s.sock") == f"{root}/theirs"
    assert foreign_on_the_way(f"{root}/gone/s.sock") == f"{root}/gone"
    # A link of root's on the way (/var/run -> /run) is followed, as the kernel does.
    assert foreign_on_the_way("/var/run/s.sock") is None


def test_an_allowed_socket_under_tmp_in_another_users_directory_is_refused_with_the_fix(tmp_path: Path) -> None:
    """Under bubblewrap an allowed socket under /tmp is bound into the
    private /tmp by its name (`--dry-run`: no sandbox starts). In another
    user's directory the start is refused, naming it; control: the same in
    a directory of ours runs."""
    import json
    import socket
    import subprocess
    import tempfile

    from sbx import SAFEBOX

    ours = Path(tempfile.mkdtemp(prefix="safebox-sock-ours-", dir="/tmp"))
    theirs = Path(tempfile.mkdtemp(prefix="safebox-sock-theirs-", dir="/tmp"))
    servers = []
    try:
        for d in (ours, theirs):
            d.chmod(0o755)
            s = socket.socket(socket.AF_UNIX)
            s.bind(str(d / "s.sock"))
            s.listen(1)
            servers.append(s)
        if os.geteuid() != 0:
            from sbx import missing

            missing("root, to make a directory of another user's (chown)")
        os.chown(theirs, 65534, 65534)
        got = {}
        for d in (ours, theirs):
            policy = tmp_path / f"{d.name}.json"
            policy.write_text(json.dumps({"network": {"allowUnixSockets": [str(d / "s.sock")]}}))
            got[d] = subprocess.run([str(SAFEBOX), "exec", "--without", "helper", "-p", str(policy), "--dry-run",
                                     "--", "true"], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                                    check=False, cwd=tmp_path)
    finally:
        for s in servers:
            s.close()
        for d in (ours, theirs):
            for f in d.iterdir():
                f.unlink()
            d.rmdir()
    assert got[ours].returncode == 0, got[ours].stderr  # control
    assert (got[theirs].returncode, got[theirs].stderr.splitlines()[0]) == (
        125, f"safebox: network.allowUnixSockets {theirs}/s.sock: it is bound into the sandbox by its name (under "
             f"/tmp or a mask), and {theirs} on the way to it is not yours nor root's: its owner could replace it "
             "with a link before the sandbox's mounts and have a file of yours bound there"), got[theirs].stderr

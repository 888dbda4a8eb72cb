"""--review's decisions that need no kernel: where it is refused, which write
roots are held, and the plan (helper/review.c's format) read off a mount
table. The mounts themselves are tested in tests/security/test_review.py."""

from __future__ import annotations

import os
from typing import Any

import pytest

from safebox.builder.resolved import Layers, ResolvedPolicy
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

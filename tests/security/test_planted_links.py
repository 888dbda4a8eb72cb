"""A write root redirected by an earlier run (issue 11 item 10).

Run 1 replaces ``build/`` in the work dir with a symlink to a folder outside
it; run 2 is given ``--allow-write ./build``. Before the fix run 2 followed the
link and its writes landed in the outside folder: one run could aim a later
run's grant anywhere the user can write. The rule (docs/policy-reference.md,
"Symlinks on the way to a write root"): a link on the way to a write root is
refused when it lies in a write root of this run, or in an earlier run's write
root and was made after that root was first granted; any other link is the
user's and is followed. Each refusal is checked with its control: the same
link made by the user where no sandbox could write is followed.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from sbx import BOTH, BWRAP_ONLY, HELPER_ONLY, FakeHome, host, token

ALL_MODES = [BOTH, BWRAP_ONLY, HELPER_ONLY]


def plant(home: FakeHome, mode: str) -> tuple[Path, Path]:
    """Run 1: the sandboxed command swaps ``build/`` for a link to ``outside/``."""
    build = home.work / "build"
    build.mkdir()
    outside = home.root / "outside-dir"
    outside.mkdir()
    r = home.run(["sh", "-c", f"rm -r build && ln -s {outside} build"], mode=mode)
    assert r.returncode == 0, r.stderr
    assert build.is_symlink() and os.path.realpath(build) == str(outside)  # the plant worked
    return build, outside


def one_safebox_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.startswith("safebox:")]
    assert len(lines) == 1, stderr
    return lines[0]


@pytest.mark.parametrize("mode", ALL_MODES)
def test_a_write_root_redirected_by_an_earlier_run_is_refused(fresh_home: FakeHome, mode: str) -> None:
    build, outside = plant(fresh_home, mode)
    # Control: through the link, writes land outside the work dir.
    assert host(["sh", "-c", f"echo probe > {build}/probe"]).returncode == 0
    assert (outside / "probe").exists()
    (outside / "probe").unlink()

    r = fresh_home.run(["sh", "-c", "echo pwned > build/x"], mode=mode, opts=["--allow-write", str(build)])
    assert r.returncode == 125, r.stdout + r.stderr
    line = one_safebox_line(r.stderr)
    assert line == (f"safebox: --allow-write {build}: {build} is a symlink (-> {outside}) in {fresh_home.work}, "
                    "a write root of this run: a sandboxed command could have planted it; refusing to follow it "
                    "into a write grant"), line
    assert f"hint: if you made that link, allow its target: --allow-write {outside}" in r.stderr
    assert not (outside / "x").exists()


@pytest.mark.parametrize("mode", ALL_MODES)
def test_a_link_planted_in_an_earlier_runs_write_root_is_refused_from_another_work_dir(fresh_home: FakeHome,
                                                                                      mode: str) -> None:
    build, outside = plant(fresh_home, mode)
    elsewhere = fresh_home.root / "elsewhere"
    elsewhere.mkdir()

    r = fresh_home.run(["sh", "-c", f"echo pwned > {build}/x"], mode=mode, opts=["--allow-write", str(build)],
                       cwd=elsewhere)
    assert r.returncode == 125, r.stdout + r.stderr
    line = one_safebox_line(r.stderr)
    assert f"{build} is a symlink (-> {outside}) in {fresh_home.work}, a write root since " in line, line
    assert "and made after that: a sandboxed command could have planted it" in line, line
    assert not (outside / "x").exists()

    # Control: without the memory of run 1's write roots the link cannot be
    # told from one the user made, and it is followed.
    (fresh_home.root / ".cache" / "safebox" / "write-roots").unlink()
    ok = fresh_home.run(["sh", "-c", f"echo pwned > {build}/x"], mode=mode, opts=["--allow-write", str(build)],
                        cwd=elsewhere)
    assert ok.returncode == 0, ok.stderr
    assert (outside / "x").read_text() == "pwned\n"


@pytest.mark.parametrize("mode", ALL_MODES)
def test_a_work_dir_reached_through_a_planted_link_is_refused(fresh_home: FakeHome, mode: str) -> None:
    build, outside = plant(fresh_home, mode)
    cmd = ["sh", "-c", "echo pwned > x"]

    # The shell names the work dir through the link ($PWD); the kernel gives its target.
    r = fresh_home.run(cmd, mode=mode, cwd=build, env={"PWD": str(build)})
    assert r.returncode == 125, r.stdout + r.stderr
    line = one_safebox_line(r.stderr)
    assert line.startswith(f"safebox: the work dir {build} is reached through the symlink {build} (-> {outside}) "
                           f"in {fresh_home.work}, a write root since "), line
    assert line.endswith(f"refusing to make its target {outside} writable"), line
    assert f"hint: if you made that link, cd {outside} first" in r.stderr
    assert not (outside / "x").exists()

    # Control: cd-ing to the target itself is the user's choice, and it runs.
    ok = fresh_home.run(cmd, mode=mode, cwd=outside, env={"PWD": str(outside)})
    assert ok.returncode == 0, ok.stderr
    assert (outside / "x").read_text() == "pwned\n"


@pytest.mark.parametrize("mode", ALL_MODES)
def test_a_link_the_user_made_outside_every_write_root_is_followed(fresh_home: FakeHome, mode: str) -> None:
    real = fresh_home.root / "real-cache"
    real.mkdir()
    link = fresh_home.root / "cache"
    link.symlink_to(real)
    mark = token()

    r = fresh_home.run(["sh", "-c", f"echo {mark} > {link}/f"], mode=mode, opts=["--allow-write", str(link)])
    assert r.returncode == 0, r.stderr
    assert (real / "f").read_text() == f"{mark}\n"


@pytest.mark.parametrize("mode", [BOTH])
def test_a_link_older_than_an_earlier_runs_grant_is_the_users(fresh_home: FakeHome, mode: str) -> None:
    """Rule 2 refuses only links made after the root was first granted (the
    link's ctime, which cannot be set back): one that was there before is
    the user's."""
    outside = fresh_home.root / "outside-dir"
    outside.mkdir()
    (fresh_home.work / "build").symlink_to(outside)
    time.sleep(1.2)  # past the second of slack for the coarse file clock
    first = fresh_home.run(["true"], mode=mode)  # the work dir becomes a remembered write root
    assert first.returncode == 0, first.stderr
    elsewhere = fresh_home.root / "elsewhere"
    elsewhere.mkdir()

    r = fresh_home.run(["sh", "-c", f"echo ok > {fresh_home.work}/build/x"], mode=mode,
                       opts=["--allow-write", str(fresh_home.work / "build")], cwd=elsewhere)
    assert r.returncode == 0, r.stderr
    assert (outside / "x").read_text() == "ok\n"


@pytest.mark.parametrize("mode", [BOTH])
def test_no_missing_write_root_is_created_through_a_planted_link(fresh_home: FakeHome, mode: str) -> None:
    """A missing allowWrite path is created before the run (issue 14); never
    through a link a sandbox planted, which would make a directory wherever
    the link points before the refusal."""
    build, outside = plant(fresh_home, mode)
    r = fresh_home.run(["true"], mode=mode, opts=["--allow-write", str(build / "new")])
    assert r.returncode == 125, r.stdout + r.stderr
    assert f"{build} is a symlink (-> {outside})" in one_safebox_line(r.stderr)
    assert not (outside / "new").exists()
    # Control: a missing write root beside the link is created and granted.
    ok = fresh_home.run(["true"], mode=mode, opts=["--allow-write", str(fresh_home.work / "new")])
    assert ok.returncode == 0, ok.stderr
    assert (fresh_home.work / "new").is_dir()

"""doctor and exec agree on a helper that a process other than root could replace (issue 11, item 9).

In a user's own venv the helper belongs to that user: ``safebox doctor``
failed its ``helper`` check, yet ``exec`` and ``exec --strict`` ran without a
word. Now one rule (``safebox.run.helper_binary.replaceable``) decides for both: doctor
fails, ``--strict`` refuses (125, one line), a plain run warns once.

The user-owned install is a copy of the real helper (``SAFEBOX_HELPER``,
which doctor and exec both honour) in a directory of its own: owned by the
user running the suite when that is not root (safebox-ci), else by nobody
(65534). Control: the installed, root-owned helper passes doctor and runs
silently, with and without ``--strict``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sbx import SAFEBOX, FakeHome, missing

NOBODY = 65534
INSTALLED = SAFEBOX.parent.parent / "lib"  # only to find the package's helper below


def _installed_helper() -> Path:
    found = sorted(INSTALLED.glob("python3*/site-packages/safebox/_bin/safebox-helper"))
    assert found, f"no helper installed under {INSTALLED}"
    return found[0]


@pytest.fixture
def user_owned_helper(scratch: Path) -> Iterator[Path]:
    """A copy of the helper in a directory of its own, both owned by a user other than root."""
    d = scratch / f"user-venv-{os.getpid()}" / "_bin"
    d.mkdir(parents=True)
    helper = d / "safebox-helper"
    shutil.copy2(_installed_helper(), helper)
    helper.chmod(0o755)
    d.chmod(0o755)
    if os.getuid() == 0:
        os.chown(helper, NOBODY, NOBODY)
        os.chown(d, NOBODY, NOBODY)
    yield helper
    shutil.rmtree(d.parent, ignore_errors=True)


def _owner() -> int:
    return os.getuid() or NOBODY


def _doctor_helper_check(home: FakeHome, helper: Path | None) -> tuple[int, dict]:
    env = home.env({"SAFEBOX_HELPER": str(helper)} if helper else None)
    r = subprocess.run([str(SAFEBOX), "doctor", "--json"], env=env, capture_output=True, text=True, timeout=120,
                       check=False)
    return r.returncode, next(c for c in json.loads(r.stdout)["checks"] if c["name"] == "helper")


def test_doctor_fails_a_helper_owned_by_a_user_and_says_what_it_checked(
        shared_home: FakeHome, user_owned_helper: Path) -> None:
    rc, check = _doctor_helper_check(shared_home, user_owned_helper)
    assert rc == 1
    assert check["status"] == "fail"
    assert check["found"].startswith(f"{user_owned_helper} is owned by uid {_owner()}, not root: a process "
                                     "other than root could replace the helper")


def test_exec_strict_refuses_the_helper_doctor_fails(shared_home: FakeHome, user_owned_helper: Path) -> None:
    marker = shared_home.work / f"ran-{os.getpid()}"
    r = shared_home.run(["touch", str(marker)], opts=("--strict",), env={"SAFEBOX_HELPER": str(user_owned_helper)})
    assert r.returncode == 125, r.stderr
    assert r.stderr.splitlines() == [
        f"safebox: --strict: refusing a helper that a process other than root could replace: {user_owned_helper} "
        f"is owned by uid {_owner()}, not root",
        "hint: install safebox as root, system-wide (`safebox doctor` shows the fix)"]
    assert not marker.exists()


@pytest.mark.parametrize("mode", ["both", "helper-only"])
def test_exec_warns_once_about_the_helper_doctor_fails(
        shared_home: FakeHome, user_owned_helper: Path, mode: str) -> None:
    r = shared_home.run(["echo", "ran"], mode=mode, env={"SAFEBOX_HELPER": str(user_owned_helper)})
    assert r.returncode == 0 and r.stdout == "ran\n", r.stderr
    assert r.stderr.splitlines() == [
        f"safebox: warning: a process other than root could replace the helper ({user_owned_helper} is owned by "
        f"uid {_owner()}, not root); `safebox doctor` fails on this and --strict refuses to run"]


def test_the_installed_root_owned_helper_passes_doctor_and_runs_silently(shared_home: FakeHome) -> None:
    """Control: the same checks with the helper the package installed (owned by root)."""
    helper = _installed_helper()
    assert helper.stat().st_uid == 0 and helper.parent.stat().st_uid == 0
    rc, check = _doctor_helper_check(shared_home, None)
    assert check["status"] == "ok", check
    assert "replaceable only by root" in check["found"]
    for opts in ((), ("--strict",)):
        r = shared_home.run(["echo", "ran"], opts=opts)
        assert r.returncode == 0 and r.stdout == "ran\n" and r.stderr == "", (opts, r.stderr)


def _replaceable_in_userns(helper: Path) -> str:
    code = f"from safebox.run.helper_binary import replaceable; print(replaceable({str(helper)!r}))"
    r = subprocess.run(["unshare", "-r", sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       check=False)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_in_a_user_namespace_the_owner_is_judged_as_the_host_sees_it(user_owned_helper: Path) -> None:
    """``unshare -r`` maps the invoking user to uid 0: unprivileged, the
    user's own helper shows as root-owned there and must still be reported
    by its real owner. As root, only uid 0 is mapped: nobody's copy shows as
    an unmapped owner, which cannot be told from root and counts as not root;
    the installed helper (root's) passes in both (the control)."""
    if shutil.which("unshare") is None:
        missing("unshare (util-linux) is needed to enter a user namespace")
    if os.getuid() != 0:
        assert _replaceable_in_userns(user_owned_helper) == (
            f"{user_owned_helper} is owned by uid {os.getuid()} (uid 0 in this user namespace), not root")
    else:
        assert _replaceable_in_userns(user_owned_helper) == (
            f"{user_owned_helper} is owned by a user this user namespace does not map (shown as uid {NOBODY}), "
            "which may not be root")
        assert _replaceable_in_userns(_installed_helper()) == "None"

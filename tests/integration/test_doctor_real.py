"""doctor on the real host: every check passes, as whichever user runs the suite.

The helper may not be built yet (it is compiled by ``python3 build.py helper``);
then its check is skipped loudly, and with ``SAFEBOX_MUST_WORK=1`` that skip is
a failure.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from safebox import doctor
from safebox.doctor import Status, host

REPO = Path(__file__).resolve().parents[2]
ALL_CHECKS = ["linux", "kernel", "bwrap", "socat", "ripgrep", "landlock", "seccomp",
              "libseccomp", "helper", "violations", "userns", "limits", "gpu"]


def _skip_or_fail(reason: str) -> None:
    # Never a skip: a host that cannot run the real doctor has not shown it works.
    pytest.fail(reason)


@pytest.fixture(scope="module")
def checks() -> dict[str, doctor.Check]:
    """One real run of every check against the package's own helper path."""
    return {c.name: c for c in doctor.run_checks(helper_path=None)}


def test_doctor_runs_every_check_in_order(checks):
    assert list(checks) == ALL_CHECKS


@pytest.mark.parametrize("name", [n for n in ALL_CHECKS if n != "helper"])
def test_this_host_passes_the_check(checks, name):
    check = checks[name]
    assert check.status is Status.OK, f"{check.name}: {check.found} (fix: {check.fix})"


def test_the_built_helper_matches_this_package_and_is_not_writable_by_this_user(checks):
    check = checks["helper"]
    if not doctor.default_helper_path().exists():
        _skip_or_fail("helper not built yet: run `python3 build.py helper`")
    assert check.status is Status.OK, f"{check.found} (fix: {check.fix})"


def test_landlock_abi_reported_matches_the_raw_syscall(checks):
    abi, _ = host.landlock_abi_syscall()
    assert f"ABI {abi} via" in checks["landlock"].found


def test_standalone_script_from_the_checkout_prints_the_json_schema():
    r = subprocess.run([sys.executable, str(REPO / "doctor"), "--json"],
                       capture_output=True, text=True, timeout=120, check=False)
    doc = json.loads(r.stdout)
    assert doc["schema"] == 1
    assert [c["name"] for c in doc["checks"]] == ALL_CHECKS
    assert r.returncode == (0 if doc["ok"] else 1)
    assert r.returncode == 0, r.stdout


def test_standalone_script_prints_a_table_without_a_traceback():
    r = subprocess.run([sys.executable, str(REPO / "doctor")],
                       capture_output=True, text=True, timeout=120, check=False)
    assert r.stdout.splitlines()[0].split() == ["STATUS", "CHECK", "FOUND"]
    assert "Traceback" not in r.stdout + r.stderr


def test_standalone_script_rejects_an_unknown_option_with_usage_status():
    r = subprocess.run([sys.executable, str(REPO / "doctor"), "--bogus"],
                       capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 2
    assert "usage: doctor" in r.stderr

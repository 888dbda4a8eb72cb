"""Unit tests for safebox.doctor: every check's failure modes, on a faked host.

Subprocesses are faked with pytest-subprocess (``fp``; an unregistered command
is an error), and every host read goes through the small functions
safebox/doctor/host.py exposes for this (``read_file``, ``which``, ``landlock_abi_syscall``, …).
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
from pathlib import Path

import pytest

from safebox import __version__, doctor
from safebox.doctor import Check, Status, common, host, info, kernel, system
from safebox.doctor import helper as doctor_helper

BWRAP = "/usr/bin/bwrap"
SMOKE = [BWRAP, *system.BWRAP_SMOKE_ARGS]
APPARMOR_STDERR = "bwrap: setting up uid map: Permission denied\n"


@pytest.fixture
def files(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The /proc and /sys files the checks read: an empty host unless a test adds some."""
    fake: dict[str, str] = {}
    monkeypatch.setattr(host, "read_file", lambda path: fake.get(path))
    monkeypatch.delenv("container", raising=False)
    return fake


@pytest.fixture
def tools(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Commands on PATH: bwrap, socat and rg unless a test removes them."""
    fake = {"bwrap": BWRAP, "socat": "/usr/bin/socat", "rg": "/usr/bin/rg"}
    monkeypatch.setattr(host, "which", lambda name: fake.get(name))
    return fake


@pytest.fixture
def helper(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An executable file standing in for the helper, owned (we pretend) by root, 0755."""
    path = tmp_path / "_bin" / "safebox-helper"
    path.parent.mkdir()
    path.write_text("#!/bin/sh\nexit 99\n")
    path.chmod(0o755)
    monkeypatch.setattr(host, "stat_path", lambda p: _fake_stat(0, 0o100755 if p == path else 0o40755))
    monkeypatch.setattr(host, "source_build_id", lambda: None)
    return path


def _register_bwrap_ok(fp) -> None:  # type: ignore[no-untyped-def]
    fp.register([BWRAP, "--version"], stdout="bubblewrap 0.8.0\n")
    fp.register(SMOKE)


def _register_helper_version(fp, helper: Path, line: str,  # type: ignore[no-untyped-def]
                             *, probe_build_id: str = "0123456789abcdef") -> None:
    fp.register([str(helper), "--version"], stdout=line + "\n")
    fp.register([str(helper), "--probe"],
                stdout=json.dumps({"v": 1, "version": __version__, "build_id": probe_build_id,
                                   "landlock_abi": 7, "seccomp": True, "nnp": True}) + "\n")


# ------------------------------------------------------------------- linux, kernel


def _uname(release: str, machine: str = "x86_64") -> os.uname_result:
    return os.uname_result(("Linux", "host", release, "#1", machine))


def test_current_kernel_is_ok(monkeypatch):
    monkeypatch.setattr(host, "uname", lambda: _uname("6.18.44"))
    assert system.check_kernel().status is Status.OK


def test_kernel_below_5_13_warns_that_landlock_is_missing(monkeypatch):
    monkeypatch.setattr(host, "uname", lambda: _uname("5.10.0-28-amd64"))
    check = system.check_kernel()
    assert check.status is Status.WARN
    assert "no Landlock" in check.found
    assert "5.13" in check.fix


def test_kernel_below_3_17_fails_for_lack_of_seccomp_syscall(monkeypatch):
    monkeypatch.setattr(host, "uname", lambda: _uname("3.10.0-1160.el7.x86_64"))
    check = system.check_kernel()
    assert check.status is Status.FAIL
    assert check.required


def test_unknown_architecture_warns(monkeypatch):
    monkeypatch.setattr(host, "uname", lambda: _uname("6.8.0", "ppc64le"))
    assert system.check_linux().status is Status.WARN


def test_non_linux_platform_fails(monkeypatch):
    monkeypatch.setattr(system.sys, "platform", "darwin")
    check = system.check_linux()
    assert check.status is Status.FAIL
    assert "darwin" in check.found


# ------------------------------------------------------------------------ bwrap


@pytest.mark.usefixtures('tools', 'files')
def test_bwrap_that_creates_a_sandbox_is_ok(fp):
    _register_bwrap_ok(fp)
    check = system.check_bwrap()
    assert check.status is Status.OK
    assert "bubblewrap 0.8.0" in check.found
    assert fp.call_count(SMOKE) == 1


@pytest.mark.usefixtures('fp', 'files')
def test_missing_bwrap_fails_with_the_package_to_install(tools):
    del tools["bwrap"]
    check = system.check_bwrap()
    assert check.status is Status.FAIL
    assert "apt-get install bubblewrap" in check.fix


@pytest.mark.usefixtures("tools")
def test_bwrap_blocked_by_apparmor_names_the_ubuntu_restriction_and_profile_fix(fp, files):
    fp.register([BWRAP, "--version"], stdout="bubblewrap 0.9.0\n")
    fp.register(SMOKE, returncode=1, stderr=APPARMOR_STDERR)
    files["/proc/sys/user/max_user_namespaces"] = "63260\n"
    files["/proc/sys/kernel/apparmor_restrict_unprivileged_userns"] = "1\n"
    check = system.check_bwrap()
    assert check.status is Status.FAIL
    assert "setting up uid map: Permission denied" in check.found
    assert "apparmor_restrict_unprivileged_userns = 1" in check.found
    assert "/etc/apparmor.d/bwrap" in check.fix
    assert "userns," in check.fix
    assert "apparmor_parser -r" in check.fix


@pytest.mark.usefixtures('tools')
def test_bwrap_with_user_namespaces_disabled_gives_the_sysctl_fix(fp, files):
    fp.register([BWRAP, "--version"], stdout="bubblewrap 0.8.0\n")
    fp.register(SMOKE, returncode=1,
                stderr="bwrap: No permissions to creating new namespace, likely because "
                       "the kernel does not allow non-privileged user namespaces.\n")
    files["/proc/sys/user/max_user_namespaces"] = "0\n"
    check = system.check_bwrap()
    assert check.status is Status.FAIL
    assert "user.max_user_namespaces = 0" in check.found
    assert "sysctl -w user.max_user_namespaces=15000" in check.fix


@pytest.mark.usefixtures('tools')
def test_bwrap_blocked_by_the_debian_userns_knob_gives_its_sysctl_fix(fp, files):
    fp.register([BWRAP, "--version"], stdout="bubblewrap 0.8.0\n")
    fp.register(SMOKE, returncode=1, stderr="bwrap: No permissions to creating new namespace\n")
    files["/proc/sys/user/max_user_namespaces"] = "63260"
    files["/proc/sys/kernel/unprivileged_userns_clone"] = "0"
    check = system.check_bwrap()
    assert "unprivileged_userns_clone = 0" in check.found
    assert "sysctl -w kernel.unprivileged_userns_clone=1" in check.fix


@pytest.mark.usefixtures('tools')
def test_bwrap_failing_inside_a_container_suggests_unconfined_or_helper_only(fp, files):
    fp.register([BWRAP, "--version"], stdout="bubblewrap 0.8.0\n")
    fp.register(SMOKE, returncode=1,
                stderr="bwrap: Creating new namespace failed: Operation not permitted\n")
    files["/.dockerenv"] = ""
    check = system.check_bwrap()
    assert "container" in check.found
    assert "docker" in check.found
    assert "seccomp=unconfined" in check.fix
    assert "--without bwrap" in check.fix


@pytest.mark.usefixtures('tools', 'files')
def test_bwrap_failing_for_an_unknown_reason_reports_its_message(fp):
    fp.register([BWRAP, "--version"], stdout="bubblewrap 0.8.0\n")
    fp.register(SMOKE, returncode=1, stderr="bwrap: something odd\n")
    check = system.check_bwrap()
    assert check.status is Status.FAIL
    assert "something odd" in check.found


@pytest.mark.usefixtures('tools', 'files')
def test_bwrap_hanging_times_out_as_a_failure(fp):
    def hang(_process):  # type: ignore[no-untyped-def]
        raise subprocess.TimeoutExpired(SMOKE, common.SANDBOX_TIMEOUT)

    fp.register([BWRAP, "--version"], stdout="bubblewrap 0.8.0\n")
    fp.register(SMOKE, callback=hang)
    check = system.check_bwrap()
    assert check.status is Status.FAIL
    assert "timed out" in check.found


# ------------------------------------------------------------------- socat, rg


@pytest.mark.usefixtures('fp')
def test_missing_socat_fails(tools):
    del tools["socat"]
    check = system.check_socat()
    assert check.status is Status.FAIL
    assert "apt-get install socat" in check.fix


@pytest.mark.usefixtures('tools')
def test_socat_version_is_reported(fp):
    fp.register(["/usr/bin/socat", "-V"],
                stdout="socat by Gerhard Rieger\nsocat version 1.7.4.4 on 06 Nov 2022\n")
    assert system.check_socat().found.startswith("socat version 1.7.4.4")


@pytest.mark.usefixtures('fp')
def test_missing_ripgrep_fails(tools):
    del tools["rg"]
    check = system.check_ripgrep()
    assert check.status is Status.FAIL
    assert "apt-get install ripgrep" in check.fix


@pytest.mark.usefixtures('tools')
def test_ripgrep_that_does_not_run_fails(fp):
    fp.register(["/usr/bin/rg", "--version"], returncode=127, stderr="rg: broken\n")
    assert system.check_ripgrep().status is Status.FAIL


# ---------------------------------------------------------------------- landlock


@pytest.mark.parametrize("err", [errno.ENOSYS, errno.EOPNOTSUPP])
def test_no_landlock_warns_that_writes_rely_on_bwrap_only(tmp_path, monkeypatch, err):
    monkeypatch.setattr(host, "landlock_abi_syscall", lambda: (0, err))
    check = kernel.check_landlock(tmp_path / "missing-helper")
    assert check.status is Status.WARN
    assert "bwrap's read-only mounts only" in check.found
    assert check.fix


def test_landlock_disabled_at_boot_names_the_lsm_parameter(tmp_path, monkeypatch):
    monkeypatch.setattr(host, "landlock_abi_syscall", lambda: (0, errno.EOPNOTSUPP))
    assert "lsm=landlock" in kernel.check_landlock(tmp_path / "none").fix


def test_landlock_abi_3_lists_every_missing_step(tmp_path, monkeypatch):
    monkeypatch.setattr(host, "landlock_abi_syscall", lambda: (3, 0))
    check = kernel.check_landlock(tmp_path / "none")
    assert check.status is Status.WARN
    for cost in ("no TCP port rules", "device ioctl", "scoping", "denial logging"):
        assert cost in check.found
    assert "truncate" not in check.found


def test_landlock_abi_6_is_ok_and_only_misses_logging(tmp_path, monkeypatch):
    monkeypatch.setattr(host, "landlock_abi_syscall", lambda: (6, 0))
    check = kernel.check_landlock(tmp_path / "none")
    assert check.status is Status.OK
    assert "denial logging" in check.found


def test_landlock_abi_comes_from_the_helper_probe_when_built(fp, helper, monkeypatch):
    monkeypatch.setattr(host, "landlock_abi_syscall", lambda: pytest.fail("raw syscall used"))
    fp.register([str(helper), "--probe"],
                stdout='{"v":1,"version":"0.1.0","landlock_abi":7,"seccomp":true,"nnp":true}\n')
    check = kernel.check_landlock(helper)
    assert check.status is Status.OK
    assert "ABI 7 via helper --probe" in check.found


def test_helper_probe_reporting_no_landlock_is_explained(fp, helper):
    fp.register([str(helper), "--probe"],
                stdout='{"v":1,"version":"0.1.0","landlock_abi":0,"landlock_errno":"ENOSYS",'
                       '"seccomp":true,"nnp":true}\n')
    check = kernel.check_landlock(helper)
    assert check.status is Status.WARN
    assert "ENOSYS" in check.found


def test_broken_helper_probe_falls_back_to_the_raw_syscall(fp, helper, monkeypatch):
    monkeypatch.setattr(host, "landlock_abi_syscall", lambda: (7, 0))
    fp.register([str(helper), "--probe"], stdout="not json\n")
    check = kernel.check_landlock(helper)
    assert check.status is Status.OK
    assert "landlock_create_ruleset" in check.found
    assert "no JSON" in check.found


# ----------------------------------------------------------------------- seccomp


def test_seccomp_filters_supported_is_ok(files, monkeypatch):
    files["/proc/self/status"] = "Name:\tpython\nSeccomp:\t0\nSeccomp_filters:\t0\n"
    monkeypatch.setattr(host, "seccomp_prctl", lambda: (0, 0, errno.EFAULT))
    assert kernel.check_seccomp().status is Status.OK


def test_kernel_without_config_seccomp_fails(files):
    files["/proc/self/status"] = "Name:\tpython\n"
    check = kernel.check_seccomp()
    assert check.status is Status.FAIL
    assert "CONFIG_SECCOMP" in check.fix


def test_kernel_without_seccomp_filter_fails(files, monkeypatch):
    files["/proc/self/status"] = "Seccomp:\t0\n"
    monkeypatch.setattr(host, "seccomp_prctl", lambda: (0, 0, errno.EINVAL))
    check = kernel.check_seccomp()
    assert check.status is Status.FAIL
    assert "CONFIG_SECCOMP_FILTER" in check.found


def test_seccomp_probe_blocked_by_an_outer_filter_warns(files, monkeypatch):
    files["/proc/self/status"] = "Seccomp:\t2\nSeccomp_filters:\t1\n"
    monkeypatch.setattr(host, "seccomp_prctl", lambda: (2, 0, errno.EPERM))
    check = kernel.check_seccomp()
    assert check.status is Status.WARN
    assert "EPERM" in check.found


def test_missing_libseccomp_fails(monkeypatch):
    monkeypatch.setattr(host, "libseccomp_version", lambda: (None, None))
    check = kernel.check_libseccomp()
    assert check.status is Status.FAIL
    assert "libseccomp2" in check.fix


def test_old_libseccomp_warns(monkeypatch):
    monkeypatch.setattr(host, "libseccomp_version", lambda: ("libseccomp.so.2", (2, 3, 3)))
    check = kernel.check_libseccomp()
    assert check.status is Status.WARN
    assert "2.3.3" in check.found


# ------------------------------------------------------------------------ helper


def test_helper_matching_this_version_and_not_writable_is_ok(fp, helper):
    _register_helper_version(fp, helper, f"safebox-helper {__version__} 0123456789abcdef")
    check = doctor_helper.check_helper(helper, standalone=False)
    assert check.status is Status.OK
    assert "0123456789abcdef" in check.found


def test_helper_not_built_warns_from_a_checkout(tmp_path):
    check = doctor_helper.check_helper(tmp_path / "safebox-helper", standalone=True)
    assert check.status is Status.WARN
    assert "not built yet" in check.found
    assert "python3 build.py setup" in check.fix


def test_helper_missing_fails_for_safebox_doctor(tmp_path):
    check = doctor_helper.check_helper(tmp_path / "safebox-helper", standalone=False)
    assert check.status is Status.FAIL


@pytest.mark.usefixtures('fp')
def test_helper_not_executable_fails(helper):
    helper.chmod(0o644)  # no x bit at all: not executable even for root
    assert doctor_helper.check_helper(helper, standalone=False).status is Status.FAIL


def test_helper_version_mismatch_fails(fp, helper):
    _register_helper_version(fp, helper, "safebox-helper 0.0.9 0123456789abcdef")
    check = doctor_helper.check_helper(helper, standalone=False)
    assert check.status is Status.FAIL
    assert "0.0.9" in check.found
    assert __version__ in check.found


def test_helper_printing_garbage_for_version_fails(fp, helper):
    _register_helper_version(fp, helper, "Segmentation fault")
    assert doctor_helper.check_helper(helper, standalone=False).status is Status.FAIL


def test_helper_owned_by_a_user_fails(fp, helper, monkeypatch):
    """A user's own venv: any process of that user could replace the helper."""
    _register_helper_version(fp, helper, f"safebox-helper {__version__}")
    monkeypatch.setattr(host, "stat_path", lambda p: _fake_stat(1000, 0o100755 if p == helper else 0o40755))
    check = doctor_helper.check_helper(helper, standalone=False)
    assert check.status is Status.FAIL
    assert check.found.startswith(f"{helper} is owned by uid 1000, not root: a process other than root could "
                                  "replace the helper")
    assert "chown root:root" in check.fix


@pytest.mark.parametrize("sudo", [True, False])
def test_a_user_owned_helpers_fix_says_sudo_only_where_there_is_sudo(fp, helper, monkeypatch, sudo: bool):
    import shutil

    _register_helper_version(fp, helper, f"safebox-helper {__version__}")
    monkeypatch.setattr(host, "stat_path", lambda p: _fake_stat(1000, 0o100755 if p == helper else 0o40755))
    real = shutil.which
    monkeypatch.setattr(shutil, "which", lambda c, *a, **k: (None if c == "sudo" else real(c, *a, **k))
                        if not sudo else ("/usr/bin/sudo" if c == "sudo" else real(c, *a, **k)))
    fix = doctor_helper.check_helper(helper, standalone=False).fix
    d = helper.parent
    assert fix == ("install safebox system-wide as root (from a checkout: `python3 build.py install`, root-owned in "
                   "/opt; docs/ci.md#self-hosted-runners), or "
                   + (f"`sudo chown root:root {helper} {d} && sudo chmod 0755 {helper} {d}`" if sudo else
                      f"as root (this host has no sudo): `chown root:root {helper} {d} && chmod 0755 {helper} {d}`"))


def test_helper_in_a_directory_owned_by_a_user_fails(fp, helper, monkeypatch):
    _register_helper_version(fp, helper, f"safebox-helper {__version__}")
    monkeypatch.setattr(host, "stat_path", lambda p: _fake_stat(0 if p == helper else 1000,
                                                                  0o100755 if p == helper else 0o40755))
    check = doctor_helper.check_helper(helper, standalone=False)
    assert check.status is Status.FAIL and check.found.startswith(f"{helper.parent} is owned by uid 1000")


def _fake_stat(uid: int, mode: int) -> os.stat_result:
    return os.stat_result((mode, 0, 0, 1, uid, 0, 0, 0, 0, 0))


def test_helper_group_writable_fails(fp, helper, monkeypatch):
    _register_helper_version(fp, helper, f"safebox-helper {__version__}")
    monkeypatch.setattr(host, "stat_path",
                        lambda p: _fake_stat(0, 0o100775 if p == helper else 0o40755))
    check = doctor_helper.check_helper(helper, standalone=False)
    assert check.status is Status.FAIL
    assert "0775" in check.found


def test_root_owned_helper_not_writable_by_others_is_ok(fp, helper, monkeypatch):
    """The OK line says what was checked (it said "not writable by this user",
    which as root was not what doctor checks)."""
    _register_helper_version(fp, helper, f"safebox-helper {__version__}")
    monkeypatch.setattr(host, "stat_path",
                        lambda p: _fake_stat(0, 0o100755 if p == helper else 0o40755))
    check = doctor_helper.check_helper(helper, standalone=False)
    assert check.status is Status.OK
    assert check.found.endswith(f"at {helper}, replaceable only by root "
                                "(it and its directory owned by root, not group- or world-writable)")


def test_helper_build_id_is_taken_from_probe_when_version_omits_it(fp, helper, monkeypatch):
    _register_helper_version(fp, helper, f"safebox-helper {__version__}",
                             probe_build_id="cccccccccccccccc")
    monkeypatch.setattr(host, "source_build_id", lambda: "cccccccccccccccc")
    check = doctor_helper.check_helper(helper, standalone=False)
    assert check.status is Status.OK
    assert "build cccccccccccccccc" in check.found


def test_helper_whose_probe_build_id_differs_from_the_sources_warns_stale(fp, helper, monkeypatch):
    _register_helper_version(fp, helper, f"safebox-helper {__version__}",
                             probe_build_id="aaaaaaaaaaaaaaaa")
    monkeypatch.setattr(host, "source_build_id", lambda: "bbbbbbbbbbbbbbbb")
    assert doctor_helper.check_helper(helper, standalone=False).status is Status.WARN


def test_helper_built_from_other_sources_warns_stale(fp, helper, monkeypatch):
    _register_helper_version(fp, helper, f"safebox-helper {__version__} aaaaaaaaaaaaaaaa")
    monkeypatch.setattr(host, "source_build_id", lambda: "bbbbbbbbbbbbbbbb")
    check = doctor_helper.check_helper(helper, standalone=False)
    assert check.status is Status.WARN
    assert "python3 build.py helper" in check.fix


# ------------------------------------------------------------------------ userns


def test_userns_reports_an_apparmor_restriction_as_a_non_required_warning(files):
    files["/proc/sys/kernel/apparmor_restrict_unprivileged_userns"] = "1"
    check = system.check_userns()
    assert check.status is Status.WARN
    assert not check.required


@pytest.mark.usefixtures('files')
def test_userns_names_the_container(monkeypatch):
    monkeypatch.setenv("container", "podman")
    assert "podman" in system.check_userns().found


# ---------------------------------------------------------- runner, rendering


CANNED = [
    Check("linux", Status.OK, "Linux x86_64", None, True),
    Check("landlock", Status.WARN, "ABI 3", "upgrade", True),
    Check("userns", Status.FAIL, "odd", "look", False),
]


def test_exit_code_is_zero_when_required_checks_are_ok_or_warn():
    assert doctor.exit_code(CANNED) == 0


def test_exit_code_is_one_when_a_required_check_fails():
    assert doctor.exit_code([*CANNED, Check("bwrap", Status.FAIL, "x", "y", True)]) == 1


def test_json_report_has_the_documented_schema():
    doc = json.loads(doctor.render_json(CANNED))
    assert set(doc) == {"schema", "ok", "checks"}
    assert doc["schema"] == 1
    assert doc["ok"] is True
    for item in doc["checks"]:
        assert list(item) == ["name", "status", "required", "found", "fix"]
        assert item["status"] in {"ok", "warn", "fail"}
        assert isinstance(item["required"], bool)
    assert doc["checks"][0] == {"name": "linux", "status": "ok", "required": True,
                                "found": "Linux x86_64", "fix": None}


def test_json_report_is_not_ok_when_a_required_check_fails():
    doc = json.loads(doctor.render_json([Check("bwrap", Status.FAIL, "x", "y", True)]))
    assert doc["ok"] is False


def test_text_report_puts_each_fix_on_its_own_indented_line():
    text = doctor.render_text(CANNED)
    lines = text.splitlines()
    assert lines[0].split() == ["STATUS", "CHECK", "FOUND"]
    warn = next(i for i, line in enumerate(lines) if line.startswith("warn"))
    assert lines[warn + 1].strip() == "fix: upgrade"
    assert lines[warn + 1].index("fix:") == lines[0].index("FOUND")
    assert "fix" not in lines[1]  # ok rows carry no fix


def test_a_crashing_check_becomes_a_failure_not_a_traceback(monkeypatch):
    def boom() -> Check:
        raise RuntimeError("kaboom")

    for module, name in ((system, "check_linux"), (system, "check_kernel"), (system, "check_bwrap"),
                         (system, "check_socat"), (system, "check_ripgrep"), (kernel, "check_seccomp"),
                         (kernel, "check_libseccomp"), (system, "check_userns"), (info, "check_limits"),
                         (info, "check_gpu")):
        monkeypatch.setattr(module, name, boom)
    monkeypatch.setattr(kernel, "check_landlock", lambda _helper: boom())
    monkeypatch.setattr(doctor_helper, "check_helper", lambda _helper, **_kw: boom())
    monkeypatch.setattr(kernel, "check_violations", lambda _helper: boom())
    checks = doctor.run_checks(helper_path=Path("/nonexistent"))
    assert [c.name for c in checks] == ["linux", "kernel", "bwrap", "socat", "ripgrep",
                                        "landlock", "seccomp", "libseccomp", "helper", "violations", "userns", "limits",
                                        "gpu"]
    assert all(c.status is Status.FAIL for c in checks)
    assert "RuntimeError: kaboom" in checks[0].found
    assert doctor.exit_code(checks) == 1


def test_main_prints_json_and_returns_the_exit_code(monkeypatch, capsys):
    monkeypatch.setattr(doctor, "run_checks", lambda **_kw: CANNED)
    assert doctor.main(["--json"]) == 0
    assert json.loads(capsys.readouterr().out)["schema"] == 1


def test_main_passes_helper_path_and_standalone_through(monkeypatch, capsys, tmp_path):
    seen = {}

    def fake(**kw):  # type: ignore[no-untyped-def]
        seen.update(kw)
        return [Check("helper", Status.FAIL, "x", "y", True)]

    monkeypatch.setattr(doctor, "run_checks", fake)
    assert doctor.main([], helper_path=tmp_path, standalone=True) == 1
    assert seen == {"helper_path": tmp_path, "standalone": True}
    assert "helper" in capsys.readouterr().out


def test_run_cannot_be_called_without_a_timeout():
    with pytest.raises(TypeError):
        host.run(["true"])  # type: ignore[call-arg]


def test_the_violations_check_is_ok_where_a_listener_can_be_had() -> None:
    # This host (the test runner) has no enclosing listener: the probe gets one.
    assert host.listener_errno() == 0
    check = kernel.check_violations(Path("/nonexistent"))
    assert check.status is Status.OK and not check.required


def test_the_violations_check_warns_once_a_listener_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    monkeypatch.setattr(host, "listener_errno", lambda: errno.EBUSY)
    check = kernel.check_violations(Path("/nonexistent"))
    assert check.status is Status.WARN and "EBUSY" in check.found and "not reported" in check.found
    monkeypatch.setattr(host, "probe_helper", lambda _helper: ({"landlock_abi": 7, "seccomp_notify": False}, ""))
    check = kernel.check_violations(Path("/nonexistent"))
    assert check.status is Status.WARN and "no seccomp user notification" in check.found

"""The helper's own inputs, with the helper alone: the policy file and the
seccomp program must be what safebox wrote (a regular file, not a symlink,
owned by the caller, mode 0600, bounded), and the helper refuses to run
setuid. Each refusal is exit 125 with the reason on the status descriptor,
and the command never runs; each has a control that runs the same command
with a well-formed input.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import HELPER, Sandbox, run_helper


def _marker_cmd(sandbox: Sandbox) -> tuple[list[str], Path]:
    marker = sandbox.write_root / "ran"
    return ["touch", str(marker)], marker


def test_control_a_well_formed_policy_runs_the_command(sandbox: Sandbox) -> None:
    cmd, marker = _marker_cmd(sandbox)
    rc, _, status = run_helper(sandbox.policy(), cmd)
    assert rc == 0 and status["ok"] is True and marker.exists()


def test_a_policy_file_behind_a_symlink_is_refused(sandbox: Sandbox) -> None:
    cmd, marker = _marker_cmd(sandbox)
    link = sandbox.tmp / "policy-link"
    link.symlink_to(sandbox.policy())
    rc, _, status = run_helper(link, cmd)
    assert rc == 125 and not marker.exists()
    assert "cannot open policy file" in status["error"] and "Too many levels of symbolic links" in status["error"]


def test_a_policy_file_readable_by_others_is_refused(sandbox: Sandbox) -> None:
    cmd, marker = _marker_cmd(sandbox)
    pol = sandbox.policy()
    pol.chmod(0o644)
    rc, _, status = run_helper(pol, cmd)
    assert rc == 125 and not marker.exists()
    assert "has mode 0644, expected 0600" in status["error"]


def test_a_policy_file_owned_by_someone_else_is_refused(sandbox: Sandbox) -> None:
    cmd, marker = _marker_cmd(sandbox)
    if os.geteuid() == 0:
        pol = sandbox.policy()
        os.chown(pol, 65534, 65534)
        owner = 65534
    else:
        # An unprivileged caller cannot give a file away; a root-owned 0600
        # file it can open does not exist, so use one it cannot open either
        # way: the refusal must still name the file and never run the command.
        pol = Path("/etc/shadow")
        owner = 0
    rc, _, status = run_helper(pol, cmd)
    assert rc == 125 and not marker.exists()
    if os.geteuid() == 0:
        assert f"is owned by uid {owner}, not by the caller (uid 0)" in status["error"]
    else:
        assert "cannot open policy file /etc/shadow" in status["error"]


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_policy_path_that_is_not_a_regular_file_is_refused_without_hanging(sandbox: Sandbox, kind: str) -> None:
    cmd, marker = _marker_cmd(sandbox)
    path = sandbox.tmp / f"policy-{kind}"
    if kind == "fifo":
        os.mkfifo(path, 0o600)  # opened without O_NONBLOCK this would wait for a writer forever
    else:
        path.mkdir(mode=0o700)
    rc, _, status = run_helper(path, cmd, timeout=20)
    assert rc == 125 and not marker.exists()
    assert f"policy file {path} is not a regular file" in status["error"]


def test_a_policy_file_over_the_size_limit_is_refused(sandbox: Sandbox) -> None:
    cmd, marker = _marker_cmd(sandbox)
    pol = sandbox.policy()
    with pol.open("ab") as f:
        f.write(b"#" * (16 * 1024 * 1024))
    rc, _, status = run_helper(pol, cmd)
    assert rc == 125 and not marker.exists()
    assert "is larger than 16777216 bytes" in status["error"]


@pytest.mark.parametrize("size", [7, 0, 8 * 4097])
def test_a_seccomp_program_of_a_bad_size_is_refused(sandbox: Sandbox, size: int) -> None:
    cmd, marker = _marker_cmd(sandbox)
    pol = sandbox.policy()
    bpf = next(sandbox.tmp.glob("filter-*.bpf"))
    bpf.write_bytes(b"\0" * size)
    rc, _, status = run_helper(pol, cmd)
    assert rc == 125 and not marker.exists()
    assert f"size {size} is not a non-zero multiple of 8" in status["error"]


def test_a_seccomp_program_behind_a_symlink_is_refused(sandbox: Sandbox) -> None:
    cmd, marker = _marker_cmd(sandbox)
    pol = sandbox.policy()
    bpf = next(sandbox.tmp.glob("filter-*.bpf"))
    real = bpf.with_name("real.bpf")
    bpf.rename(real)
    bpf.symlink_to(real)
    rc, _, status = run_helper(pol, cmd)
    assert rc == 125 and not marker.exists()
    assert "cannot open seccomp program" in status["error"]


def test_a_setuid_helper_refuses_to_run(sandbox: Sandbox, tmp_path: Path) -> None:
    cmd, marker = _marker_cmd(sandbox)
    copy = tmp_path / "setuid-helper"
    shutil.copy2(HELPER, copy)
    # On a nosuid mount the bit would be ignored and the test would prove nothing.
    assert not os.statvfs(tmp_path).f_flag & os.ST_NOSUID, f"{tmp_path} is mounted nosuid"
    if os.geteuid() == 0:
        os.chown(copy, 65534, 65534)
        copy.chmod(0o4755)
        tmp_path.chmod(0o755)
        r = subprocess.run([str(copy), "--policy-file", str(sandbox.policy()), "--", *cmd],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 125 and not marker.exists()
        assert "refusing to run setuid or setgid" in r.stderr, r.stderr
    else:
        # Without privileges the ids cannot be made to differ: a setuid copy
        # owned by the caller runs as the caller (control for the root case).
        copy.chmod(0o4755)
        r = subprocess.run([str(copy), "--policy-file", str(sandbox.policy()), "--", *cmd],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0 and marker.exists(), r.stderr

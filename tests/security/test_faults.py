"""Faults on the way to exec: missing or failing parts, a full disk, many
sandboxes at once. Each gives a clear error (exit 125, one `safebox:` line)
or a clearly announced degradation, and nothing is left behind."""

from __future__ import annotations

import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sbx import PATH, SAFEBOX, FakeHome


def _leftovers(home: FakeHome) -> list[str]:
    return sorted(os.listdir(home.run_base)) if home.run_base.exists() else []


def _outside(home: FakeHome) -> Path:
    """A directory outside every write root (not the work tree, not /tmp):
    safebox takes no tool from a PATH entry the sandbox could write."""
    d = home.root.parent / f"bin-{home.root.name}"
    d.mkdir(exist_ok=True)
    return d


def _fake_bin(tmp: Path, name: str, script: str) -> str:
    """A directory holding a fake `name`, placed first on PATH."""
    d = tmp / f"fake-{name}"
    d.mkdir(exist_ok=True)
    (d / name).write_text(f"#!/bin/sh\n{script}\n")
    (d / name).chmod(0o755)
    return f"{d}:{PATH}"


def _path_without(tmp: Path, name: str) -> str:
    """PATH with every tool linked except `name` (so `which name` fails)."""
    d = tmp / f"no-{name}"
    d.mkdir(exist_ok=True)
    for tool in ("sh", "true", "cat", "rg", "find", "socat", "bwrap", "python3", "env", "id", "echo"):
        if tool != name and shutil.which(tool, path=PATH):
            (d / tool).symlink_to(shutil.which(tool, path=PATH))
    return str(d)


def _safebox_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("safebox")]


def test_a_working_run_leaves_nothing_behind_control(fresh_home: FakeHome) -> None:
    r = fresh_home.run(["true"])
    assert r.returncode == 0 and _leftovers(fresh_home) == []


def test_without_bwrap_on_path_the_helper_runs_alone_and_says_so(fresh_home: FakeHome) -> None:
    r = fresh_home.run(["cat", str(fresh_home.root / ".ssh" / "id_rsa")],
                       env={"PATH": _path_without(_outside(fresh_home), "bwrap")})
    assert r.returncode == 1 and fresh_home.secret not in r.stdout
    assert "safebox: bubblewrap not found: running with the helper alone" in r.stderr
    assert "Permission denied" in r.stderr  # Landlock still keeps the credential unreadable


def test_without_bwrap_strict_refuses_to_run(fresh_home: FakeHome) -> None:
    marker = fresh_home.work / "ran"
    r = fresh_home.run(["touch", str(marker)], opts=["--strict"], env={"PATH": _path_without(_outside(fresh_home), "bwrap")})
    assert r.returncode == 125 and not marker.exists()
    assert _safebox_lines(r.stderr)[-1].startswith("safebox: --strict: refusing to run with helper-only")
    assert _leftovers(fresh_home) == []


@pytest.mark.parametrize(("tool", "message"), [
    ("rg", "safebox: ripgrep (rg) not found; it finds the files safebox must keep read-only"),
    ("find", "safebox: find not found; it finds symlinked files safebox must keep read-only"),
])
def test_without_a_tool_that_finds_protected_files_the_command_never_runs(fresh_home: FakeHome,
                                                                          tool: str, message: str) -> None:
    # Without the walk, protected files under the write roots would go unprotected: fail closed.
    marker = fresh_home.work / "ran"
    r = fresh_home.run(["touch", str(marker)], env={"PATH": _path_without(_outside(fresh_home), tool)})
    assert r.returncode == 125 and not marker.exists()
    assert _safebox_lines(r.stderr) == [message], r.stderr
    assert _leftovers(fresh_home) == []


def test_a_failing_bwrap_is_a_clear_error_and_the_command_never_runs(fresh_home: FakeHome) -> None:
    marker = fresh_home.work / "ran"
    path = _fake_bin(_outside(fresh_home), "bwrap", "echo 'bwrap: setting up uid map: Permission denied' >&2; exit 1")
    r = fresh_home.run(["touch", str(marker)], env={"PATH": path})
    assert r.returncode == 125 and not marker.exists()
    assert _safebox_lines(r.stderr) == ["safebox: bubblewrap could not create the sandbox (exit 1; its message is above)"]
    assert _leftovers(fresh_home) == []


def test_a_missing_helper_is_a_clear_error(fresh_home: FakeHome) -> None:
    marker = fresh_home.work / "ran"
    r = fresh_home.run(["touch", str(marker)], env={"SAFEBOX_HELPER": "/nonexistent/safebox-helper"})
    assert r.returncode == 125 and not marker.exists()
    assert _safebox_lines(r.stderr) == ["safebox: helper not found at /nonexistent/safebox-helper"]
    assert _leftovers(fresh_home) == []


def test_a_refusing_helper_is_one_line_and_the_command_never_runs(fresh_home: FakeHome) -> None:
    marker = fresh_home.work / "ran"
    r = fresh_home.run(["touch", str(marker)], opts=["--strict"], env={"SAFEBOX_TEST_ABI_MAX": "3"})
    assert r.returncode == 125 and not marker.exists()
    assert _safebox_lines(r.stderr) == [
        "safebox: helper refused: strict: Landlock TCP rules need ABI 4, have 3"]
    assert _leftovers(fresh_home) == []


def test_a_full_disk_for_the_run_dir_is_a_clear_error(fresh_home: FakeHome, tmp_path: Path) -> None:
    # A 64 KiB tmpfs, filled, as XDG_CACHE_HOME: in a private mount namespace
    # (unshare -m, with -r when unprivileged) so nothing on the host changes.
    cache = tmp_path / "cache"
    cache.mkdir()
    userns = [] if os.geteuid() == 0 else ["-r"]
    script = (f"mount -t tmpfs -o size=64k tmpfs {cache} && "
              f"(dd if=/dev/zero of={cache}/fill bs=4k >/dev/null 2>&1; true) && "
              f"XDG_CACHE_HOME={cache} {SAFEBOX} exec -- touch {fresh_home.work}/ran; echo rc=$?")
    r = subprocess.run(["unshare", *userns, "-m", "sh", "-c", script], capture_output=True, text=True,
                       env=fresh_home.env(), cwd=fresh_home.work, timeout=60)
    assert "rc=125" in r.stdout, r.stdout + r.stderr
    assert not (fresh_home.work / "ran").exists()
    lines = _safebox_lines(r.stderr)
    if userns:
        # In `unshare -r` the host's root-owned helper has an owner the namespace does not
        # map: exec cannot tell it is root and warns, as doctor fails (helper.replaceable).
        warning = "safebox: warning: a process other than root could replace the helper"
        assert lines[0].startswith(warning) and "does not map" in lines[0], r.stderr
        lines = lines[1:]
    assert len(lines) == 1 and "No space left on device" in lines[0], r.stderr


def test_twenty_sandboxes_at_once_all_run_and_leave_nothing(fresh_home: FakeHome) -> None:
    def one(i: int) -> subprocess.CompletedProcess[str]:
        return fresh_home.run(["sh", "-c", f"echo {i} > {fresh_home.work}/out-{i}; sleep 0.3; cat /proc/self/status"],
                              timeout=120)

    with ThreadPoolExecutor(max_workers=20) as pool:
        results = list(pool.map(one, range(20)))
    for i, r in enumerate(results):
        assert r.returncode == 0, r.stderr
        assert "NoNewPrivs:\t1" in r.stdout
        assert (fresh_home.work / f"out-{i}").read_text() == f"{i}\n"
    assert _leftovers(fresh_home) == []


def test_a_layer_part_the_kernel_cannot_enforce_is_announced(fresh_home: FakeHome) -> None:
    from conftest import landlock_abi

    abi = landlock_abi()
    parts = []
    if abi >= 4:
        parts.append(f"Landlock TCP (kernel ABI {abi}, used 3)")
    if abi >= 6:
        parts.append(f"Landlock scopes (kernel ABI {abi}, used 3)")
    if not parts:
        pytest.fail(f"kernel Landlock ABI {abi}: capping at 3 removes nothing to announce")
    # SAFEBOX_TEST_ABI_MAX caps Landlock as an older kernel would.
    r = fresh_home.run(["true"], env={"SAFEBOX_TEST_ABI_MAX": "3"})
    assert r.returncode == 0
    assert _safebox_lines(r.stderr) == [
        "safebox: not enforced on this host: " + "; ".join(parts) + " (--strict refuses to run so)"]
    quiet = fresh_home.run(["true"])  # control: at the kernel's ABI nothing is said
    assert quiet.returncode == 0 and _safebox_lines(quiet.stderr) == []

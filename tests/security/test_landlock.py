"""Landlock as the helper applies it, at every ABI from 1 to the kernel's.

``abi_max`` in the policy caps the ABI; the status line must report it, and
the confinement that ABI can express must hold (fs at 1+, TCP at 4+, signal
scope at 6+), each with a control.

The down-level tests pin what each ABI step adds, on both sides of the step:
cross-directory rename/link (REFER, 2+), truncate (TRUNCATE, 3+), device
ioctl (IOCTL_DEV, 5+), abstract unix and signal scopes (6+). Below a step the
tests assert the documented cost (e.g. truncate of a read-only file works),
so a change in the helper's cascade shows up here.
"""

from __future__ import annotations

import errno
import socket
import subprocess
from collections.abc import Iterator

import pytest

from conftest import Sandbox, landlock_abi, probe_argv, run_helper, run_plain
from netservers import abstract_unix_listener
from safebox.builder.helper_policy import FsAccess, NetMode, Scope

ABIS = list(range(1, max(landlock_abi(), 1) + 1))


@pytest.fixture
def listeners() -> Iterator[tuple[int, int]]:
    """Two listening TCP ports on 127.0.0.1: (allowed, other)."""
    socks = []
    for _ in range(2):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        socks.append(s)
    try:
        yield socks[0].getsockname()[1], socks[1].getsockname()[1]
    finally:
        for s in socks:
            s.close()


@pytest.mark.needs_landlock(1)
@pytest.mark.parametrize("abi", ABIS)
def test_writes_outside_the_write_roots_fail_with_eacces_at_every_abi(sandbox: Sandbox, abi: int) -> None:
    outside = sandbox.tmp / f"outside-{abi}"
    inside = sandbox.write_root / f"inside-{abi}"
    rc, _, status = run_helper(sandbox.policy(abi_max=abi), probe_argv("write", outside))
    assert status["ok"] is True
    assert status["landlock"]["abi"] == abi
    assert status["landlock"]["kernel_abi"] == landlock_abi()
    assert status["landlock"]["fs"] is True
    assert rc == errno.EACCES
    assert not outside.exists()
    assert run_helper(sandbox.policy(abi_max=abi), probe_argv("write", inside))[0] == 0
    assert run_helper(sandbox.policy(abi_max=abi), probe_argv("read", "/etc/hostname"))[0] == 0
    # Control: the same write without the helper works.
    assert run_plain(probe_argv("write", outside))[0] == 0


@pytest.mark.needs_landlock(1)
def test_landlock_off_leaves_the_filesystem_alone(sandbox: Sandbox) -> None:
    outside = sandbox.tmp / "outside-off"
    rc, _, status = run_helper(sandbox.policy(landlock=False), probe_argv("write", outside))
    assert rc == 0 and status["landlock"]["fs"] is not True


@pytest.mark.needs_landlock(4)
@pytest.mark.parametrize("abi", [a for a in ABIS if a >= 4])
def test_tcp_connect_only_to_allowed_ports(sandbox: Sandbox, listeners: tuple[int, int], abi: int) -> None:
    allowed, other = listeners
    pol = sandbox.policy(net=NetMode.PROXY, connect_ports=(allowed,), abi_max=abi)
    rc, _, status = run_helper(pol, probe_argv("connect", allowed))
    assert status["landlock"]["net"] is True and status["landlock"]["abi"] == abi
    assert rc == 0
    assert run_helper(pol, probe_argv("connect", other))[0] == errno.EACCES
    assert run_plain(probe_argv("connect", other))[0] == 0  # control


@pytest.mark.needs_landlock(4)
def test_below_abi_4_tcp_is_reported_unenforced(sandbox: Sandbox, listeners: tuple[int, int]) -> None:
    allowed, other = listeners
    pol = sandbox.policy(net=NetMode.PROXY, connect_ports=(allowed,), abi_max=3)
    rc, _, status = run_helper(pol, probe_argv("connect", other))
    assert status["landlock"]["net"] is False
    assert rc == 0


@pytest.mark.needs_landlock(6)
def test_signal_scope_blocks_kill_of_a_process_outside_the_domain(sandbox: Sandbox) -> None:
    outsider = subprocess.Popen(["sleep", "60"])
    try:
        rc, _, status = run_helper(sandbox.policy(scopes=(Scope.SIGNAL,)), probe_argv("kill", outsider.pid))
        assert status["landlock"]["scope"] is True
        assert rc == errno.EPERM
        # Controls: without the scope, and without the helper, the same kill(pid, 0) succeeds.
        assert run_helper(sandbox.policy(scopes=()), probe_argv("kill", outsider.pid))[0] == 0
        assert run_plain(probe_argv("kill", outsider.pid))[0] == 0
    finally:
        outsider.kill()
        outsider.wait()


# --- Down-level: each ABI step, on both sides --------------------------------

TCGETS = 0x5401  # a tty ioctl: ENOTTY on /dev/null, but it reaches the driver
FIOCLEX = 0x5451  # one of the ioctls Landlock's IOCTL_DEV always allows


def _read_and_write_root(sandbox: Sandbox) -> tuple[tuple[FsAccess, str], ...]:
    """Read everywhere, write in the write root, and no "dev" class on /dev."""
    return ((FsAccess.READ, "/"), (FsAccess.WRITE, str(sandbox.write_root)))


@pytest.mark.needs_landlock(1)
@pytest.mark.parametrize("abi", ABIS)
def test_cross_directory_rename_and_link_need_refer_abi_2(sandbox: Sandbox, abi: int) -> None:
    a, b = sandbox.write_root / "a", sandbox.write_root / "b"
    a.mkdir()
    b.mkdir()
    (a / "f").write_text("x")
    (a / "g").write_text("x")
    out_a, out_b = sandbox.tmp / "out-a", sandbox.tmp / "out-b"
    out_a.mkdir()
    out_b.mkdir()
    (out_a / "f").write_text("x")
    pol = sandbox.policy(abi_max=abi)
    # Same directory: no reparenting, allowed at every ABI (control for ABI 1).
    rc, _, status = run_helper(pol, probe_argv("rename", a / "g", a / "g2"))
    assert status["landlock"]["abi"] == abi
    assert rc == 0 and (a / "g2").exists()
    # Across directories inside the write root: ABI 1 cannot grant REFER, so the
    # kernel always refuses with EXDEV; from ABI 2 the write class grants it.
    want = errno.EXDEV if abi < 2 else 0
    assert run_helper(pol, probe_argv("rename", a / "f", b / "f"))[0] == want
    assert (b / "f").exists() is (abi >= 2)
    src = b / "f" if abi >= 2 else a / "f"
    assert run_helper(pol, probe_argv("link", src, sandbox.write_root / "l"))[0] == want
    # Both outside the write root: EACCES (Landlock prefers it over EXDEV).
    assert run_helper(pol, probe_argv("rename", out_a / "f", out_b / "f"))[0] == errno.EACCES
    assert (out_a / "f").exists()
    # Control: without the helper the outside rename works.
    assert run_plain(probe_argv("rename", out_a / "f", out_b / "f"))[0] == 0


@pytest.mark.needs_landlock(1)
@pytest.mark.parametrize("abi", ABIS)
def test_truncate_outside_the_write_roots_needs_truncate_abi_3(sandbox: Sandbox, abi: int) -> None:
    outside = sandbox.tmp / "readable"
    inside = sandbox.write_root / "writable"
    pol = sandbox.policy(abi_max=abi, fs_rules=_read_and_write_root(sandbox))
    for op in ("truncate", "open_trunc"):
        outside.write_text("data")
        inside.write_text("data")
        rc, _, status = run_helper(pol, probe_argv(op, outside))
        assert status["landlock"]["abi"] == abi
        if abi >= 3:
            assert rc == errno.EACCES
            assert outside.read_text() == "data"
        else:
            # The documented down-level cost: before ABI 3 Landlock does not see
            # truncation, so a file that is only readable can be emptied.
            assert rc == 0
            assert outside.read_text() == ""
        assert run_helper(pol, probe_argv(op, inside))[0] == 0
        assert inside.read_text() == ""
        # Control: without the helper.
        outside.write_text("data")
        assert run_plain(probe_argv(op, outside))[0] == 0
        assert outside.read_text() == ""


@pytest.mark.needs_landlock(1)
@pytest.mark.parametrize("abi", ABIS)
def test_device_ioctl_without_the_dev_class_needs_ioctl_dev_abi_5(sandbox: Sandbox, abi: int) -> None:
    pol = sandbox.policy(abi_max=abi, fs_rules=_read_and_write_root(sandbox))
    rc, _, status = run_helper(pol, probe_argv("ioctl", "/dev/null", TCGETS))
    assert status["landlock"]["abi"] == abi
    # /dev/null is no tty: the driver answers ENOTTY unless Landlock stops the
    # ioctl first, which it does from ABI 5 when /dev is not in the dev class.
    assert rc == (errno.EACCES if abi >= 5 else errno.ENOTTY)
    # FIOCLEX is always allowed; with the dev class the ioctl reaches the driver.
    assert run_helper(pol, probe_argv("ioctl", "/dev/null", FIOCLEX))[0] == 0
    assert run_helper(sandbox.policy(abi_max=abi), probe_argv("ioctl", "/dev/null", TCGETS))[0] == errno.ENOTTY
    # Control: without the helper.
    assert run_plain(probe_argv("ioctl", "/dev/null", TCGETS))[0] == errno.ENOTTY


@pytest.fixture
def abstract_listener() -> Iterator[str]:
    """A listening abstract unix socket outside any Landlock domain; yields its name."""
    with abstract_unix_listener() as name:
        yield name


@pytest.mark.needs_landlock(1)
@pytest.mark.parametrize("abi", ABIS)
@pytest.mark.parametrize("seccomp", [False, True])
def test_abstract_unix_scope_needs_abi_6(sandbox: Sandbox, abstract_listener: str, abi: int, seccomp: bool) -> None:
    # allow_unix_sockets: seccomp lets AF_UNIX through, so any EPERM is Landlock's.
    pol = sandbox.policy(abi_max=abi, scopes=(Scope.ABSTRACT_UNIX,), seccomp=seccomp, allow_unix_sockets=True)
    rc, _, status = run_helper(pol, probe_argv("connect_abstract", abstract_listener))
    assert status["landlock"]["abi"] == abi
    assert status["landlock"]["scope"] is (abi >= 6)
    assert rc == (errno.EPERM if abi >= 6 else 0)
    # Controls: without the scope, and without the helper.
    no_scope = sandbox.policy(abi_max=abi, scopes=(), seccomp=seccomp, allow_unix_sockets=True)
    assert run_helper(no_scope, probe_argv("connect_abstract", abstract_listener))[0] == 0
    assert run_plain(probe_argv("connect_abstract", abstract_listener))[0] == 0


@pytest.mark.needs_landlock(1)
@pytest.mark.parametrize("abi", ABIS)
def test_signal_scope_needs_abi_6(sandbox: Sandbox, abi: int) -> None:
    outsider = subprocess.Popen(["sleep", "60"])
    try:
        rc, _, status = run_helper(
            sandbox.policy(abi_max=abi, scopes=(Scope.SIGNAL,)), probe_argv("kill", outsider.pid)
        )
        assert status["landlock"]["abi"] == abi
        assert status["landlock"]["scope"] is (abi >= 6)
        assert rc == (errno.EPERM if abi >= 6 else 0)
        assert run_helper(sandbox.policy(abi_max=abi, scopes=()), probe_argv("kill", outsider.pid))[0] == 0
        assert run_plain(probe_argv("kill", outsider.pid))[0] == 0
    finally:
        outsider.kill()
        outsider.wait()

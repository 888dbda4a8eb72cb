"""Landlock as the helper applies it, at every ABI from 1 to the kernel's.

``abi_max`` in the policy caps the ABI; the status line must report it, and
the confinement that ABI can express must hold (fs at 1+, TCP at 4+, signal
scope at 6+), each with a control.
"""

from __future__ import annotations

import errno
import socket
import subprocess
from collections.abc import Iterator

import pytest

from conftest import Sandbox, landlock_abi, probe_argv, run_helper, run_plain
from safebox.builder.helper_policy import NetMode, Scope

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

"""The seccomp filter as the helper installs it: exact errnos, with controls.

Every case calls one syscall with harmless bad arguments through the probe.
Under the helper with the filter the call must fail with EPERM (clone3:
ENOSYS). The control is the same helper and policy with the filter left out:
the kernel then answers with the errno listed here. A few calls are gated by
capabilities that the helper drops, so their control is EPERM too; for those
the second control runs the probe without the helper, which as root shows the
kernel's own errno.
"""

from __future__ import annotations

import errno
import os
import signal
import socket
import sys

import pytest

from conftest import Sandbox, probe_argv, run_helper, run_plain
from safebox.builder.seccomp import InetMode

# The syscall numbers below are x86_64's. Elsewhere this file must fail loudly,
# never skip: a skipped security test is a failure.
if os.uname().machine != "x86_64":
    raise RuntimeError("tests/security: syscall numbers here are x86_64's; add this architecture's")

IS_ROOT = os.geteuid() == 0
E = errno
# (id, x86_64 nr, args, errno without the filter under the helper, errno as root without the helper)
CASES = [
    ("ptrace", 101, (2, 0x7FFFFFFF, 0, 0), E.ESRCH, E.ESRCH),
    ("process_vm_readv", 310, (0x7FFFFFFF, 0, 0, 0, 0, 1), E.EINVAL, E.EINVAL),
    ("process_vm_writev", 311, (0x7FFFFFFF, 0, 0, 0, 0, 1), E.EINVAL, E.EINVAL),
    ("pidfd_getfd", 438, (2**64 - 1, 0, 1), E.EINVAL, E.EINVAL),
    ("bpf", 321, (0xFFFF, 0, 0), E.EINVAL, E.EINVAL),
    ("perf_event_open", 298, (0, 0, 2**64 - 1, 2**64 - 1, 0), E.EFAULT, E.EFAULT),
    ("userfaultfd", 323, (0xFFFFFFFF,), E.EINVAL, E.EINVAL),
    ("io_uring_setup", 425, (0, 0), E.EFAULT, E.EFAULT),
    ("io_uring_enter", 426, (2**64 - 1, 0, 0, 0, 0, 0), E.EBADF, E.EBADF),
    ("io_uring_register", 427, (2**64 - 1, 0, 0, 0), E.EINVAL, E.EINVAL),
    ("keyctl", 250, (0xFFFF, 0, 0, 0, 0), E.EOPNOTSUPP, E.EOPNOTSUPP),
    ("add_key", 248, (0, 0, 0, 0, 0), E.EFAULT, E.EFAULT),
    ("request_key", 249, (0, 0, 0, 0), E.EFAULT, E.EFAULT),
    ("mount", 165, (0, 0, 0, 0, 0), E.EFAULT, E.EFAULT),
    ("umount2", 166, (0, 0xFFFF), E.EINVAL, E.EINVAL),
    ("move_mount", 429, (2**64 - 1, 0, 2**64 - 1, 0, 0xFFFFFFFF), E.EPERM, E.EINVAL),
    ("open_tree", 428, (2**64 - 1, 0, 0xFFFFFFFF), E.EINVAL, E.EINVAL),
    ("open_tree_attr", 467, (2**64 - 1, 0, 0xFFFFFFFF, 0, 0), E.EINVAL, E.EINVAL),
    ("fsopen", 430, (0, 0xFFFFFFFF), E.EPERM, E.EINVAL),
    ("fsconfig", 431, (2**64 - 1, 0, 0, 0, 0), E.EINVAL, E.EINVAL),
    ("fsmount", 432, (2**64 - 1, 0xFFFFFFFF, 0), E.EPERM, E.EINVAL),
    ("fspick", 433, (2**64 - 1, 0, 0xFFFFFFFF), E.EPERM, E.EINVAL),
    ("mount_setattr", 442, (2**64 - 1, 0, 0xFFFFFFFF, 0, 0), E.EINVAL, E.EINVAL),
    ("pivot_root", 155, (0, 0), E.EPERM, E.EFAULT),
    ("chroot", 161, (0,), E.EFAULT, E.EFAULT),
    ("setns", 308, (2**64 - 1, 0), E.EBADF, E.EBADF),
    ("unshare CLONE_NEWUSER", 272, (0x1000_0000 | 0x8000_0000,), E.EINVAL, E.EINVAL),
    ("clone CLONE_NEWUSER|CLONE_THREAD", 56, (0x1000_0000 | 0x1_0000,), E.EINVAL, E.EINVAL),
    ("ioctl TIOCSTI", 16, (2**64 - 1, 0x5412, 0), E.EBADF, E.EBADF),
    ("ioctl TIOCSTI junk upper bits", 16, (2**64 - 1, 0xFFFF_FFFF_0000_5412, 0), E.EBADF, E.EBADF),
    ("ioctl TIOCLINUX", 16, (2**64 - 1, 0x541C, 0), E.EBADF, E.EBADF),
    ("kexec_load", 246, (0, 0xFFFF, 0, 0xFFFFFFFF), E.ENOSYS, E.ENOSYS),
    ("kexec_file_load", 320, (2**64 - 1, 2**64 - 1, 0, 0, 0xFFFFFFFF), E.ENOSYS, E.ENOSYS),
    ("init_module", 175, (0, 0, 0), E.ENOSYS, E.ENOSYS),
    ("finit_module", 313, (2**64 - 1, 0, 0xFFFFFFFF), E.ENOSYS, E.ENOSYS),
    ("delete_module", 176, (0, 0), E.ENOSYS, E.ENOSYS),
    ("open_by_handle_at", 304, (2**64 - 1, 0, 0), E.EFAULT, E.EFAULT),
    ("acct", 163, (0,), E.EPERM, 0),
    ("quotactl", 179, (0xFFFFFFFF, 0, 0, 0), E.EINVAL, E.EINVAL),
    ("quotactl_fd", 443, (2**64 - 1, 0xFFFFFFFF, 0, 0), E.EBADF, E.EBADF),
    ("swapon", 167, (0, 0), E.EPERM, E.EFAULT),
    ("swapoff", 168, (0,), E.EPERM, E.EFAULT),
    ("reboot", 169, (0, 0, 0, 0), E.EPERM, E.EINVAL),
    ("syslog", 103, (0xFFFF, 0, 0), E.EPERM, E.EINVAL),
    ("lookup_dcookie", 212, (0, 0, 0), E.ENOSYS, E.ENOSYS),
    ("nfsservctl", 180, (0, 0, 0), E.ENOSYS, E.ENOSYS),
    ("ioperm", 173, (0xFFFFFFFF, 1, 1), E.ENOSYS, E.ENOSYS),
    ("iopl", 172, (0xFFFF,), E.ENOSYS, E.ENOSYS),
    ("sethostname", 170, (0, 0xFFFFFFFF), E.EPERM, E.EINVAL),
    ("setdomainname", 171, (0, 0xFFFFFFFF), E.EPERM, E.EINVAL),
    ("settimeofday", 164, (0, 0), E.EPERM, 0),
    ("clock_settime", 227, (0xFFFF, 0), E.EINVAL, E.EINVAL),
    ("uselib", 134, (0,), E.ENOSYS, E.ENOSYS),
    ("personality query", 135, (0xFFFFFFFF,), 0, 0),
]


def _sys(nr: int, args: tuple[int, ...]) -> list[str]:
    return probe_argv("sys", hex(nr), *(hex(a) for a in args))


@pytest.fixture
def policies(sandbox: Sandbox):
    """(with the filter, without it): same Landlock and capability drop."""
    return sandbox.policy(), sandbox.policy(seccomp=False)


@pytest.mark.parametrize(("nr", "args", "control", "root_plain"),
                         [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_denied_syscall_fails_with_eperm_and_the_control_does_not(policies, nr, args, control, root_plain) -> None:
    with_filter, without = policies
    rc, _, status = run_helper(with_filter, _sys(nr, args))
    assert status["ok"] is True and status["seccomp"] is True, status
    assert rc == errno.EPERM
    rc_control, _, status_control = run_helper(without, _sys(nr, args))
    assert status_control["seccomp"] is False, status_control
    assert rc_control == control
    if control == errno.EPERM and IS_ROOT:
        # Capability-gated: show the kernel's own answer, which is not EPERM.
        assert run_plain(_sys(nr, args))[0] == root_plain != errno.EPERM


def test_clone3_gets_enosys_and_fork_still_works(policies) -> None:
    with_filter, without = policies
    assert run_helper(with_filter, _sys(435, (0, 0)))[0] == errno.ENOSYS
    assert run_helper(without, _sys(435, (0, 0)))[0] == errno.EINVAL
    # glibc >= 2.34 tries clone3 first in posix_spawn/pthread_create, then falls back.
    rc, out, _ = run_helper(with_filter, [sys.executable, "-I", "-c",
                                          "import subprocess, threading; t = threading.Thread(target=print); "
                                          "t.start(); t.join(); print(subprocess.run(['true']).returncode)"])
    assert (rc, out) == (0, "\n0\n")


def test_x32_syscall_kills_the_process_with_sigsys(sandbox: Sandbox) -> None:
    # getpid (39) with the x32 bit. This kernel may lack CONFIG_X86_X32_ABI (then the
    # control is ENOSYS); the filter must kill regardless, before the kernel dispatches.
    argv = _sys(0x4000_0000 | 39, ())
    rc, _, status = run_helper(sandbox.policy(), argv)
    assert status["seccomp"] is True
    assert rc == -signal.SIGSYS
    assert run_helper(sandbox.policy(seccomp=False), argv)[0] in (0, errno.ENOSYS)


def test_int80_from_a_64_bit_process_kills_it_with_sigsys(sandbox: Sandbox) -> None:
    rc, _, _ = run_helper(sandbox.policy(), probe_argv("int80"))
    assert rc == -signal.SIGSYS
    # Control: with IA32 emulation the i386 getppid answers; without it, SIGSEGV.
    rc_control, _, _ = run_helper(sandbox.policy(seccomp=False), probe_argv("int80"))
    assert rc_control in (0, -signal.SIGSEGV)


AF_VSOCK, AF_PACKET, AF_ALG, AF_NETLINK = 40, 17, 38, 16
SOCK_STREAM, SOCK_DGRAM, SOCK_RAW = 1, 2, 3
SOCK_NONBLOCK, SOCK_CLOEXEC = 0o4000, 0o2000000


def _socket(domain: int, type_: int, proto: int = 0) -> list[str]:
    return _sys(41, (domain, type_, proto))


@pytest.mark.parametrize(("domain", "type_", "proto", "control"), [
    pytest.param(AF_VSOCK, SOCK_STREAM, 0, (0, errno.EAFNOSUPPORT), id="AF_VSOCK"),
    pytest.param(AF_ALG, 5, 0, (0, errno.EAFNOSUPPORT), id="AF_ALG"),
    pytest.param(AF_NETLINK, SOCK_RAW, 4, (0,), id="AF_NETLINK-sock_diag"),
    pytest.param(1 << 32 | socket.AF_UNIX, SOCK_STREAM, 0, (0,), id="AF_UNIX-junk-upper-bits"),
])
def test_socket_families_always_denied(sandbox: Sandbox, domain, type_, proto, control) -> None:
    assert run_helper(sandbox.policy(), _socket(domain, type_, proto))[0] == errno.EPERM
    assert run_helper(sandbox.policy(seccomp=False), _socket(domain, type_, proto))[0] in control


def test_af_packet_denied_by_the_filter_and_by_missing_capabilities(sandbox: Sandbox) -> None:
    assert run_helper(sandbox.policy(), _socket(AF_PACKET, SOCK_RAW))[0] == errno.EPERM
    if IS_ROOT:
        assert run_plain(_socket(AF_PACKET, SOCK_RAW))[0] == 0


def test_netlink_route_and_socketpair_stay_allowed(sandbox: Sandbox) -> None:
    pol = sandbox.policy(allow_unix_sockets=False)
    assert run_helper(pol, _socket(AF_NETLINK, SOCK_RAW, 0))[0] == 0
    assert run_helper(pol, _sys(53, (socket.AF_UNIX, SOCK_STREAM, 0, 0)))[0] == errno.EFAULT  # NULL sv: reached the kernel


def test_af_unix_follows_allow_unix_sockets(sandbox: Sandbox) -> None:
    args = (socket.AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC)
    assert run_helper(sandbox.policy(allow_unix_sockets=False), _socket(*args))[0] == errno.EPERM
    assert run_helper(sandbox.policy(allow_unix_sockets=True), _socket(*args))[0] == 0


@pytest.mark.parametrize("family", [socket.AF_INET, socket.AF_INET6])
def test_inet_modes(sandbox: Sandbox, family: int) -> None:
    tcp = _socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC)
    udp = _socket(family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC)
    sctp = _socket(family, SOCK_STREAM, 132)
    any_, tcp_only, none = (sandbox.policy(allow_inet=m) for m in (InetMode.ANY, InetMode.TCP_ONLY, InetMode.NONE))
    assert [run_helper(any_, a)[0] for a in (tcp, udp)] == [0, 0]
    assert [run_helper(tcp_only, a)[0] for a in (tcp, udp, sctp)] == [0, errno.EPERM, errno.EPERM]
    assert [run_helper(none, a)[0] for a in (tcp, udp)] == [errno.EPERM, errno.EPERM]


def test_tcp_fast_open_is_denied_in_tcp_only_mode(sandbox: Sandbox) -> None:
    # sendto(-1, NULL, 0, MSG_FASTOPEN, NULL, 0): the filter answers before the fd is looked at.
    argv = _sys(44, (2**64 - 1, 0, 0, 0x2000_0000, 0, 0))
    assert run_helper(sandbox.policy(allow_inet=InetMode.TCP_ONLY), argv)[0] == errno.EPERM
    assert run_helper(sandbox.policy(allow_inet=InetMode.ANY), argv)[0] == errno.EBADF

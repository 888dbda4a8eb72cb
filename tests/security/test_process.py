"""Process attacks through the real ``safebox exec``: privileges, namespaces, other processes, kernel interfaces.

Syscall checks use ``tests/helper/probe.c`` (compiled into a scratch dir): its
exit status is the errno of the one call it makes. Seccomp answers EPERM; the
host (control) answers the "harmless" errno of the invalid arguments.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sbx import (
    BOTH,
    BWRAP_ONLY,
    EPERM,
    ESRCH,
    HELPER_ONLY,
    FakeHome,
    host,
    missing,
    pids_with_arg,
    unique_sleep_arg,
    wait_for,
)

ALL_MODES = [BOTH, BWRAP_ONLY, HELPER_ONLY]
SECCOMP_MODES = [BOTH, HELPER_ONLY]  # the modes with the helper's seccomp filter
PID_NS_MODES = [BOTH, BWRAP_ONLY]    # the modes with bubblewrap's pid namespace
SIGSYS_EXIT = 128 + signal.SIGSYS


def _status(text: str) -> dict[str, str]:
    return {k: v.strip() for k, v in (line.split(":", 1) for line in text.splitlines() if ":" in line)}


@pytest.fixture
def host_sleeper() -> tuple[int, str]:
    """A host ``sleep`` with a unique argv; killed afterwards."""
    arg = unique_sleep_arg()
    proc = subprocess.Popen(["sleep", arg])
    assert wait_for(lambda: pids_with_arg(arg))
    yield proc.pid, arg
    proc.kill()
    proc.wait()


# ------------------------------------------------------------------ privileges

@pytest.mark.parametrize("mode", ALL_MODES)
def test_command_has_no_capabilities_and_no_new_privs(shared_home: FakeHome, mode: str) -> None:
    outside = _status(host(["cat", "/proc/self/status"]).stdout)
    if os.geteuid() == 0:
        assert int(outside["CapEff"], 16) != 0  # control: root on the host holds capabilities
    r = shared_home.run(["cat", "/proc/self/status"], mode=mode)
    assert r.returncode == 0, r.stderr
    st = _status(r.stdout)
    for key in ("CapInh", "CapPrm", "CapEff", "CapAmb"):
        assert int(st[key], 16) == 0, (key, st[key])
    assert st["NoNewPrivs"] == "1"
    if mode != BWRAP_ONLY:
        assert st["Seccomp"] == "2"


@pytest.mark.parametrize("mode", ALL_MODES)
def test_setuid_binary_does_not_elevate_inside(shared_home: FakeHome, own_probe: Path, scratch: Path,
                                                mode: str) -> None:
    if os.geteuid() == 0:
        # A setuid-root copy of the probe: run by an unprivileged user on the
        # host it becomes euid 0 with every capability (control); inside,
        # root's capabilities stay dropped.
        suid = scratch / f"suid-ids-{mode}"
        shutil.copy(own_probe, suid)
        os.chown(suid, 0, 0)
        suid.chmod(0o4755)
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            missing("setpriv (util-linux) is needed for the setuid control")
        control = host([setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", str(suid), "ids"])
        assert "euid=0" in control.stdout and "capeff=0000000000000000" not in control.stdout, control
        r = shared_home.run([str(suid), "ids"], mode=mode)
        assert r.returncode == 0, r.stderr
        assert "capeff=0000000000000000" in r.stdout, r.stdout
    else:
        # Unprivileged: the real /usr/bin/su, blocked on its password prompt;
        # its saved/effective uid shows whether the setuid bit took effect.
        su = shutil.which("su")
        if su is None or not os.stat(su).st_mode & 0o4000:
            missing("no setuid-root su on this host")
        script = f"sleep 5 | {su} root -c true 2>/dev/null & sleep 0.5; grep '^Uid:' /proc/$!/status"
        control = host(["sh", "-c", script])
        uid = os.getuid()
        assert control.stdout.split()[1:] == [str(uid), "0", "0", "0"], control
        r = shared_home.run(["sh", "-c", script], mode=mode)
        assert r.stdout.split()[1:] == [str(uid)] * 4, r


@pytest.mark.parametrize("mode", SECCOMP_MODES)
def test_nested_user_namespace_cannot_be_created(shared_home: FakeHome, mode: str) -> None:
    assert host(["unshare", "-U", "true"]).returncode == 0  # control
    r = shared_home.run(["unshare", "-U", "true"], mode=mode)
    assert r.returncode == 1
    assert "unshare failed: Operation not permitted" in r.stderr, r.stderr


@pytest.mark.parametrize("mode", SECCOMP_MODES)
@pytest.mark.parametrize("verb", ["unshare_user", "clone_newns", "int80_unshare"])
def test_namespace_creation_syscalls_are_refused(shared_home: FakeHome, probe: Path, mode: str, verb: str) -> None:
    # Control: in a user namespace of its own (as any user may get) the call succeeds.
    control = host(["unshare", "-Ur", str(probe), verb])
    assert control.returncode == 0, control.stdout
    r = shared_home.run([str(probe), verb], mode=mode)
    # A 32-bit system call from a 64-bit process kills it (SIGSYS): wrong architecture.
    assert r.returncode == (SIGSYS_EXIT if verb.startswith("int80") else EPERM), r.stdout + r.stderr


@pytest.mark.parametrize("mode", ALL_MODES)
def test_mounting_a_tmpfs_over_a_directory_is_refused(shared_home: FakeHome, own_probe: Path, mode: str) -> None:
    target = shared_home.work / "src"
    # Control: with a user+mount namespace of its own the same call succeeds.
    control = host(["unshare", "-Urm", str(own_probe), "mount_tmpfs", str(target)])
    assert control.returncode == 0, control.stdout + control.stderr
    r = shared_home.run([str(own_probe), "mount_tmpfs", str(target)], mode=mode)
    assert r.returncode == EPERM, r.stdout + r.stderr
    assert "mount: errno 1 (Operation not permitted)" in r.stdout


@pytest.mark.parametrize("mode", SECCOMP_MODES)
def test_mount_through_int80_kills_the_command(shared_home: FakeHome, probe: Path, mode: str) -> None:
    control = host([str(probe), "int80_mount"])
    assert control.returncode not in (0, EPERM, SIGSYS_EXIT), control.stdout
    r = shared_home.run([str(probe), "int80_mount"], mode=mode)
    assert r.returncode == SIGSYS_EXIT, r.stdout + r.stderr


# ------------------------------------------------------------------ other processes

@pytest.mark.parametrize("mode", SECCOMP_MODES)
@pytest.mark.parametrize("verb", ["ptrace", "process_vm_readv"])
def test_tracing_other_processes_is_refused(shared_home: FakeHome, probe: Path, mode: str, verb: str) -> None:
    assert host([str(probe), verb]).returncode == ESRCH  # control: reaches the pid lookup
    r = shared_home.run([str(probe), verb], mode=mode)
    assert r.returncode == EPERM, r.stdout + r.stderr


@pytest.mark.parametrize("mode", PID_NS_MODES)
def test_host_processes_are_not_listed_in_proc(shared_home: FakeHome, host_sleeper: tuple[int, str],
                                               mode: str) -> None:
    pid, arg = host_sleeper
    listing = "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done"
    control = host(["sh", "-c", listing])
    assert arg in control.stdout
    r = shared_home.run(["sh", "-c", listing], mode=mode)
    assert r.returncode == 0, r.stderr
    assert arg not in r.stdout
    assert len([line for line in r.stdout.splitlines() if line.strip()]) < 10  # only the sandbox's own


@pytest.fixture
def host_sleeper_with_secret() -> Iterator[tuple[int, str]]:
    """A host process of the same user with a secret in its environment."""
    secret = f"HOST-SECRET-{unique_sleep_arg()}"
    proc = subprocess.Popen(["sleep", "60"], env={"PATH": "/usr/bin:/bin", "SECRET": secret})
    try:
        yield proc.pid, secret
    finally:
        proc.kill()
        proc.wait()


# Without bwrap the host pid exists: Landlock refuses the ptrace-mode access
# that /proc/PID/environ and /proc/PID/root need (EACCES). Under bwrap the pid
# is not in the sandbox's pid namespace at all (ENOENT).
PROC_ERRNO = {BOTH: "No such file or directory", BWRAP_ONLY: "No such file or directory",
              HELPER_ONLY: "Permission denied"}


@pytest.mark.parametrize("mode", ALL_MODES)
def test_a_host_processs_environment_and_root_are_unreadable(shared_home: FakeHome,
                                                             host_sleeper_with_secret: tuple[int, str],
                                                             mode: str) -> None:
    pid, secret = host_sleeper_with_secret
    script = f"tr '\\0' '\\n' < /proc/{pid}/environ; ls /proc/{pid}/root/ >/dev/null && echo root-listed"
    control = host(["sh", "-c", script])
    assert f"SECRET={secret}" in control.stdout and "root-listed" in control.stdout

    r = shared_home.run(["sh", "-c", script], mode=mode)
    assert secret not in r.stdout and "root-listed" not in r.stdout, r.stdout
    # dash shortens ENOENT's text to "No such file".
    assert f"/proc/{pid}/environ: {PROC_ERRNO[mode].removesuffix(' or directory')}" in r.stderr, r.stderr
    assert f"/proc/{pid}/root/" in r.stderr and PROC_ERRNO[mode] in r.stderr.splitlines()[-1], r.stderr


@pytest.mark.parametrize("mode", PID_NS_MODES)
def test_neither_bwraps_reaper_nor_safebox_can_be_seen_in_proc(fresh_home: FakeHome, mode: str) -> None:
    """pid 1 is bubblewrap's reaper: its /proc/1 (command line with the run
    dir's policy path, environment, descriptors, mounts) is an empty
    read-only tmpfs. safebox and the proxy are outside the pid namespace."""
    script = ("cat /proc/1/cmdline; echo \"cmdline=$?\"; ls -A /proc/1 | wc -l; "
              "touch /proc/1/x 2>&1; for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done")
    # Control: bubblewrap alone, without safebox's mount, shows the reaper.
    bare = host(["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid",
                 "--die-with-parent", "sh", "-c", "tr '\\0' ' ' < /proc/1/cmdline"])
    assert bare.returncode == 0 and bare.stdout.startswith("bwrap "), bare.stdout + bare.stderr

    r = fresh_home.run(["sh", "-c", script], mode=mode)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0:2] == ["cmdline=1", "0"], r.stdout
    assert "/proc/1/cmdline: No such file or directory" in r.stderr
    assert lines[2] == "touch: cannot touch '/proc/1/x': Read-only file system"
    assert not any(w in r.stdout for w in ("bwrap", "safebox", "policy-file", "python")), r.stdout


@pytest.mark.parametrize("mode", ALL_MODES)
def test_host_processes_cannot_be_signalled(shared_home: FakeHome, probe: Path, host_sleeper: tuple[int, str],
                                            mode: str) -> None:
    pid, arg = host_sleeper
    assert host([str(probe), "kill", str(pid), "0"]).returncode == 0  # control: same uid may signal it
    r = shared_home.run([str(probe), "kill", str(pid), str(int(signal.SIGTERM))], mode=mode)
    # Pid namespace: the pid does not exist inside. Helper alone: Landlock's signal scope.
    assert r.returncode == (EPERM if mode == HELPER_ONLY else ESRCH), r.stdout + r.stderr
    assert pid in pids_with_arg(arg)


# ------------------------------------------------------------------ kernel interfaces

KERNEL_INTERFACES = ["bpf", "perf_event_open", "keyctl", "add_key", "request_key", "userfaultfd",
                     "io_uring_setup", "kexec_load", "init_module", "finit_module", "open_by_handle_at"]
# Unprivileged callers may get EPERM from the kernel itself for these (sysctls,
# CAP_SYS_BOOT/MODULE), so the control can only be exact as root.
PRIVILEGED_ONLY = {"bpf", "perf_event_open", "userfaultfd", "kexec_load", "init_module", "finit_module",
                   "open_by_handle_at"}


@pytest.mark.parametrize("mode", SECCOMP_MODES)
@pytest.mark.parametrize("verb", KERNEL_INTERFACES)
def test_dangerous_kernel_interface_is_refused_with_eperm(shared_home: FakeHome, probe: Path, mode: str,
                                                          verb: str) -> None:
    control = host([str(probe), verb]).returncode
    if os.geteuid() == 0 or verb not in PRIVILEGED_ONLY:
        assert control not in (0, EPERM), f"control: {verb} gave errno {control} on the host"
    r = shared_home.run([str(probe), verb], mode=mode)
    assert r.returncode == EPERM, r.stdout + r.stderr
    assert f"{verb}: errno 1 (EPERM)" in r.stdout

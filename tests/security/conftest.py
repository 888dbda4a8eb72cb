"""Shared fixtures for the security tests of the helper alone (no bwrap).

Each test writes a helper policy (0600) and a BPF program into ``tmp_path``,
runs ``safebox-helper --policy-file P --status-fd N -- PROBE ...`` and checks
the probe's exit status, which is the errno of the one operation it tried (0:
success), plus the helper's JSON status line. Controls run the same probe
without the helper, or with the layer under test left out of the policy.

The probe is :data:`PY_PROBE`, run by this interpreter: ctypes gives exact
control over raw syscall arguments (junk in upper bits, i386 ``int 0x80``,
x32 numbers). Nothing is written to the repository; everything lives in
``tmp_path``, so the tests also run as an unprivileged user.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from safebox.builder.bpf_compile import compile_program
from safebox.builder.helper_policy import FsAccess, HelperPolicy, NetMode, Scope, render, write_policy_file
from safebox.builder.seccomp import InetMode

REPO = Path(__file__).resolve().parents[2]


def landlock_abi() -> int:
    """The kernel's Landlock ABI, from ``tests/conftest.py`` (both modules are named conftest)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("safebox_tests_root_conftest", REPO / "tests" / "conftest.py")
    assert spec is not None and spec.loader is not None
    module = sys.modules.get(spec.name)
    if module is None:
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    return int(module.landlock_abi())
HELPER = Path(os.environ.get("SAFEBOX_HELPER", REPO / "python" / "safebox" / "_bin" / "safebox-helper"))

# The probe: one operation, exit status = its errno (0 on success).
PY_PROBE = r"""
import ctypes, errno, mmap, os, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
op, args = sys.argv[1], sys.argv[2:]

def sysc(nr, *a):
    r = libc.syscall(*(ctypes.c_long(int(x, 0) if isinstance(x, str) else x) for x in (nr, *a)))
    return 0 if r >= 0 else ctypes.get_errno()

def oserr(fn):
    try:
        fn()
        return 0
    except OSError as e:
        return e.errno

if op == "sys":
    # Raw 64-bit registers: ctypes.c_long wraps values >= 2**63 to negative, same bits.
    vals = [int(x, 0) for x in args]
    vals = [v - (1 << 64) if v >= 1 << 63 else v for v in vals]
    sys.exit(sysc(*vals))
elif op == "status":
    sys.stdout.write(open("/proc/self/status").read())
elif op == "write":
    sys.exit(oserr(lambda: os.close(os.open(args[0], os.O_WRONLY | os.O_CREAT, 0o600))))
elif op == "read":
    sys.exit(oserr(lambda: open(args[0], "rb").read()))
elif op == "connect":
    def conn():
        with socket.create_connection(("127.0.0.1", int(args[0])), timeout=5):
            pass
    sys.exit(oserr(conn))
elif op == "kill":
    sys.exit(oserr(lambda: os.kill(int(args[0]), 0)))
elif op == "rename":
    sys.exit(oserr(lambda: os.rename(args[0], args[1])))
elif op == "link":
    sys.exit(oserr(lambda: os.link(args[0], args[1])))
elif op == "truncate":
    sys.exit(oserr(lambda: os.truncate(args[0], 0)))
elif op == "open_trunc":
    # O_RDONLY | O_TRUNC: truncates without asking for write access to the file.
    sys.exit(oserr(lambda: os.close(os.open(args[0], os.O_RDONLY | os.O_TRUNC))))
elif op == "ioctl":
    # ioctl(open(path, O_RDONLY), cmd, buf): the errno of the ioctl alone.
    fd = os.open(args[0], os.O_RDONLY)
    buf = ctypes.create_string_buffer(256)
    r = libc.ioctl(fd, ctypes.c_ulong(int(args[1], 0)), buf)
    sys.exit(0 if r >= 0 else ctypes.get_errno())
elif op == "connect_abstract":
    def uconn():
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect("\0" + args[0])
    sys.exit(oserr(uconn))
elif op == "int80":
    # mov eax, 64 (i386 getppid); int 0x80; ret
    m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    m.write(bytes([0xB8, 64, 0, 0, 0, 0xCD, 0x80, 0xC3]))
    fn = ctypes.CFUNCTYPE(ctypes.c_long)(ctypes.addressof(ctypes.c_char.from_buffer(m)))
    r = fn()
    print(r)
    sys.exit(0 if r == os.getppid() else 99)
else:
    sys.exit(98)
"""


def probe_argv(*args: str | int) -> list[str]:
    """The argv that runs the probe with ``args``."""
    return [sys.executable, "-I", "-c", PY_PROBE, *(str(a) for a in args)]


@dataclass
class Sandbox:
    """Builds a helper policy in ``tmp`` and runs commands under the helper."""

    tmp: Path
    write_root: Path
    counter: int = 0
    extra_env: dict[str, str] = field(default_factory=dict)

    def policy(self, *, seccomp: bool = True, allow_unix_sockets: bool = True,
               allow_inet: InetMode = InetMode.ANY, net: NetMode = NetMode.HOST,
               connect_ports: tuple[int, ...] = (), scopes: tuple[Scope, ...] = (Scope.ABSTRACT_UNIX, Scope.SIGNAL),
               abi_max: int | None = None, landlock: bool = True,
               fs_rules: tuple[tuple[FsAccess, str], ...] | None = None) -> Path:
        """Write a policy (and the BPF program, when ``seccomp``); return its path."""
        self.counter += 1
        bpf_path = None
        if seccomp:
            bpf_path = self.tmp / f"filter-{self.counter}.bpf"
            write_policy_file(bpf_path, compile_program(allow_unix_sockets=allow_unix_sockets,
                                                        allow_inet=allow_inet))
        if fs_rules is None:
            fs_rules = ((FsAccess.READ, "/"), (FsAccess.DEV, "/dev"), (FsAccess.WRITE, str(self.write_root)))
        pol = HelperPolicy(fs_rules=fs_rules, net=net, connect_ports=connect_ports, scopes=scopes,
                           seccomp_path=str(bpf_path) if bpf_path else None, abi_max=abi_max,
                           landlock=landlock)
        path = self.tmp / f"policy-{self.counter}"
        write_policy_file(path, render(pol))
        return path


def run_helper(policy: Path, argv: list[str], *, timeout: float = 60) -> tuple[int, str, dict[str, Any]]:
    """Run ``safebox-helper --policy-file policy --status-fd N -- argv``.

    Returns ``(returncode, stdout, status)`` where ``status`` is the parsed
    JSON status line (``{}`` if the helper wrote none).
    """
    rfd, wfd = os.pipe()
    try:
        proc = subprocess.run([str(HELPER), "--policy-file", str(policy), "--status-fd", str(wfd), "--", *argv],
                              pass_fds=(wfd,), capture_output=True, text=True, timeout=timeout, check=False)
    finally:
        os.close(wfd)
    with os.fdopen(rfd, "r") as f:
        raw = f.read()
    lines = raw.splitlines()
    assert len(lines) <= 1, f"more than one status line: {raw!r}"
    status: dict[str, Any] = json.loads(lines[0]) if lines else {}
    if status:
        assert status.get("v") == 1, status
    if proc.returncode == 125:
        print("helper stderr:", proc.stderr, file=sys.stderr)
    return proc.returncode, proc.stdout, status


def run_plain(argv: list[str], *, timeout: float = 60) -> tuple[int, str]:
    """Control: run ``argv`` without the helper."""
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    return proc.returncode, proc.stdout


@pytest.fixture(scope="session")
def helper_path() -> Path:
    """The built helper; a failure when missing."""
    if not (HELPER.is_file() and os.access(HELPER, os.X_OK)):
        pytest.fail(f"helper not built at {HELPER}: run `python3 build.py helper`")
    return HELPER


@pytest.fixture(scope="session")
def helper_probe(helper_path: Path) -> dict[str, Any]:
    """``safebox-helper --probe``: what this kernel offers."""
    out = subprocess.run([str(helper_path), "--probe"], capture_output=True, text=True, check=True).stdout
    probe: dict[str, Any] = json.loads(out)
    return probe


@pytest.fixture
def sandbox(helper_path: Path, tmp_path: Path) -> Sandbox:
    """A :class:`Sandbox` whose only write root is ``tmp_path/w``."""
    del helper_path  # requested for its skip when the helper is not built; Sandbox runs HELPER
    write_root = tmp_path / "w"
    write_root.mkdir()
    return Sandbox(tmp=tmp_path, write_root=write_root)

"""Everything doctor's checks read from the host, each a small function that
tests replace with monkeypatch (the checks call ``host.read_file(...)``, so a
replacement here is the one they see).

Standard library only, imported inside each function (safebox/doctor/__init__.py).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from safebox.doctor.common import VERSION_TIMEOUT, first_line

if TYPE_CHECKING:  # pragma: no cover - typing only
    import ctypes
    import subprocess

# landlock_create_ruleset: 444 on every architecture that uses the unified
# syscall table added in Linux 5.1 (x86_64, aarch64, riscv64, ...).
NR_LANDLOCK_CREATE_RULESET = 444
LANDLOCK_CREATE_RULESET_VERSION = 1
PR_GET_SECCOMP = 21
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2


def read_file(path: str) -> str | None:
    """Return the text of a small /proc or /sys file, or None if unreadable."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(65536)
    except OSError:
        return None


def which(name: str) -> str | None:
    """``shutil.which``, imported lazily."""
    import shutil

    return shutil.which(name)


def run(argv: list[str], *, timeout: float) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` with a timeout, capturing text output in the C locale.

    Raises ``OSError`` when it cannot start and ``subprocess.TimeoutExpired``.
    """
    import subprocess

    env = dict(os.environ, LC_ALL="C", LANG="C")
    return subprocess.run(
        argv, capture_output=True, text=True, errors="replace", timeout=timeout,
        stdin=subprocess.DEVNULL, env=env, check=False,
    )


def uname() -> os.uname_result:
    """``os.uname()``; a function so tests can pretend to be another kernel."""
    return os.uname()


def _libc() -> ctypes.CDLL:
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def landlock_abi_syscall() -> tuple[int, int]:
    """Ask the kernel for its Landlock ABI: ``(abi, errno)``, abi 0 on error.

    ``landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)``.
    """
    import ctypes

    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    ctypes.set_errno(0)
    ret = libc.syscall(
        ctypes.c_long(NR_LANDLOCK_CREATE_RULESET), None, ctypes.c_size_t(0),
        ctypes.c_uint32(LANDLOCK_CREATE_RULESET_VERSION),
    )
    if ret < 0:
        return 0, ctypes.get_errno()
    return int(ret), 0


def seccomp_prctl() -> tuple[int, int, int]:
    """Return ``(mode, mode_errno, filter_errno)`` from two harmless prctl calls.

    ``prctl(PR_GET_SECCOMP)`` gives this process's seccomp mode (EINVAL: no
    CONFIG_SECCOMP).  ``prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, NULL)`` fails
    with EFAULT when CONFIG_SECCOMP_FILTER is built in (the kernel copies the
    NULL program before anything else, so nothing is installed) and with EINVAL
    when it is not — the probe Chromium's and libseccomp's callers use.
    """
    import ctypes

    libc = _libc()
    ctypes.set_errno(0)
    mode = libc.prctl(PR_GET_SECCOMP, 0, 0, 0, 0)
    mode_errno = ctypes.get_errno() if mode < 0 else 0
    ctypes.set_errno(0)
    ret = libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, None, 0, 0)
    filter_errno = ctypes.get_errno() if ret < 0 else 0
    return mode, mode_errno, filter_errno


def libseccomp_version() -> tuple[str | None, tuple[int, int, int] | None]:
    """Locate libseccomp and call its ``seccomp_version()``: ``(soname, version)``."""
    import ctypes
    import ctypes.util

    soname = ctypes.util.find_library("seccomp")
    if soname is None:
        return None, None
    lib = ctypes.CDLL(soname)

    class _Version(ctypes.Structure):
        _fields_ = [("major", ctypes.c_uint), ("minor", ctypes.c_uint),
                    ("micro", ctypes.c_uint)]

    try:
        fn = lib.seccomp_version  # libseccomp >= 2.3
    except AttributeError:
        return soname, None
    fn.restype = ctypes.POINTER(_Version)
    v = fn().contents
    return soname, (v.major, v.minor, v.micro)


def listener_errno() -> int:
    """Try what the helper does for the violations feed, in a child: no_new_privs,
    then a filter that allows everything, with a seccomp listener. Returns 0
    when the kernel gives one, else the errno (EBUSY: a listener of an
    enclosing sandbox is already on this process; EINVAL: Linux < 5.0).
    Changes nothing in this process."""
    import ctypes
    import struct

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child only reports
        code = 255
        try:
            os.close(r)
            libc = ctypes.CDLL(None, use_errno=True)
            libc.syscall.restype = ctypes.c_long
            if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
                code = ctypes.get_errno()
            else:
                insn = ctypes.create_string_buffer(struct.pack("HBBI", 0x06, 0, 0, 0x7FFF0000))  # RET ALLOW
                prog = ctypes.create_string_buffer(struct.pack("HxxxxxxQ", 1, ctypes.addressof(insn)))
                nr = {"x86_64": 317, "aarch64": 277, "riscv64": 277}.get(os.uname().machine, -1)
                # seccomp(SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog)
                fd = libc.syscall(ctypes.c_long(nr), ctypes.c_long(1), ctypes.c_long(8), prog)
                code = 0 if fd >= 0 else ctypes.get_errno()
            os.write(w, bytes([min(code, 255)]))
        finally:
            os._exit(0)
    os.close(w)
    try:
        got = os.read(r, 1)
    finally:
        os.close(r)
        os.waitpid(pid, 0)
    return got[0] if got else 255


def stat_path(path: Path) -> os.stat_result:
    """``os.stat``; a function so tests can fake ownership."""
    return os.stat(path)


def source_build_id() -> str | None:
    """The build id the helper should carry, when helper/ sources sit next door.

    From a checkout (or an editable install) ``<repo>/helper/*.[ch]`` exist and
    their digest is what ``build.py`` embeds (this mirrors
    ``build.py:_source_digest``; doctor cannot import build.py, which is not
    installed with the package).  None when there are no sources (installed).
    """
    import hashlib

    helper_dir = Path(__file__).resolve().parents[3] / "helper"
    srcs = sorted(helper_dir.glob("*.[ch]")) if helper_dir.is_dir() else []
    if not srcs:
        return None
    h = hashlib.sha256()
    for p in srcs:
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def default_helper_path() -> Path:
    """Where the package keeps its helper (same as ``safebox.run.helper_binary.find_helper``)."""
    return Path(__file__).resolve().parent.parent / "_bin" / "safebox-helper"


def probe_helper(helper: Path) -> tuple[dict[str, object] | None, str]:
    """Run ``helper --probe``: (parsed JSON or None, why not)."""
    import json
    import subprocess

    if not (helper.is_file() and os.access(helper, os.X_OK)):
        return None, "helper not built"
    try:
        r = run([str(helper), "--probe"], timeout=VERSION_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"helper --probe failed: {e}"
    if r.returncode != 0:
        return None, f"helper --probe exited {r.returncode}: {first_line(r.stderr)}"
    try:
        data = json.loads(first_line(r.stdout))
    except ValueError:
        return None, "helper --probe printed no JSON"
    if not isinstance(data, dict) or not isinstance(data.get("landlock_abi"), int):
        return None, "helper --probe JSON has no landlock_abi"
    return data, ""


def detect_container() -> str | None:
    """Name the container runtime this process runs in, or None on a plain host."""
    if read_file("/.dockerenv") is not None:
        return "docker (/.dockerenv)"
    if read_file("/run/.containerenv") is not None:
        return "podman (/run/.containerenv)"
    env = os.environ.get("container")
    if env:
        return f"{env} ($container)"
    cgroup = read_file("/proc/1/cgroup") or ""
    for marker in ("docker", "kubepods", "containerd", "libpod", "lxc"):
        if marker in cgroup:
            return f"{marker} (/proc/1/cgroup)"
    return None

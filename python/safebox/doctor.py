"""Host checks behind ``safebox doctor`` and the top-level ``doctor`` script.

Standard library only, and every import beyond the basics is made inside the
function that needs it: the top-level ``doctor`` script runs this module from a
fresh checkout, before ``pip install`` has brought in anything.

Each check returns one :class:`Check` (name, status, what was found, the exact
fix, whether safebox needs it).  A check never raises: :func:`run_checks` turns
an unexpected exception into a ``fail`` carrying the exception text, and every
subprocess runs with a timeout.  Everything the checks read from the host goes
through a few small functions (:func:`read_file`, :func:`which`, :func:`run`,
:func:`landlock_abi_syscall`, …) so that tests can replace them.

The output formats are documented in ``docs/doctor.md``; the JSON schema is
stable (``"schema": 1``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover - typing only
    import ctypes
    import subprocess

__all__ = [
    "Check",
    "Status",
    "default_helper_path",
    "exit_code",
    "main",
    "main_standalone",
    "render_json",
    "render_text",
    "run_checks",
]

JSON_SCHEMA_VERSION = 1
# Seconds: version queries are instant; creating a sandbox may page in bwrap.
VERSION_TIMEOUT = 5.0
SANDBOX_TIMEOUT = 15.0

# The smoke test: the namespaces and mounts that `safebox exec` asks bwrap for.
BWRAP_SMOKE_ARGS = (
    "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
    "--unshare-all", "--die-with-parent", "--new-session", "true",
)

# Landlock ABI → (first kernel with it, what a host below that ABI loses).
# Sources: Documentation/userspace-api/landlock.rst and the sandboxer.c cascade.
LANDLOCK_STEPS: tuple[tuple[int, str, str], ...] = (
    (1, "5.13", "no Landlock: writes are confined by bwrap's read-only mounts only"),
    (2, "5.19", "file reparenting (REFER) not controllable: renames and links "
                "across directories are always denied inside write roots"),
    (3, "6.2", "truncate not controlled"),
    (4, "6.7", "no TCP port rules: helper-only hosts cannot confine the network"),
    (5, "6.10", "device ioctl not controlled"),
    (6, "6.12", "no abstract-unix-socket or signal scoping"),
    (7, "6.15", "no denial logging"),
)
# Every enforcement feature safebox uses is in ABI 6; ABI 7 adds only logging.
LANDLOCK_ABI_OK = 6
LANDLOCK_CREATE_RULESET_VERSION = 1
# landlock_create_ruleset: 444 on every architecture that uses the unified
# syscall table added in Linux 5.1 (x86_64, aarch64, riscv64, ...).
NR_LANDLOCK_CREATE_RULESET = 444

PR_GET_SECCOMP = 21
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2

MIN_LIBSECCOMP = (2, 5, 0)

_INSTALL_HINT = {
    # command: (Debian/Ubuntu, Fedora, Arch) package
    "bwrap": "bubblewrap",
    "socat": "socat",
    "rg": "ripgrep",
}

_SYSCTL_PERSIST = "/etc/sysctl.d/90-safebox-userns.conf"


class Status(StrEnum):
    """Outcome of one check."""

    OK = "ok"
    WARN = "warn"
    FAIL = "fail"


@dataclass(frozen=True)
class Check:
    """The result of one host check.

    ``found`` says what is on the host, ``fix`` the exact command or step that
    makes a non-ok check pass (``None`` when ok), and ``required`` whether a
    ``fail`` here makes :func:`exit_code` return 1.
    """

    name: str
    status: Status
    found: str
    fix: str | None
    required: bool


# ------------------------------------------------------------ host access
# Everything the checks read from the host goes through these, so tests can
# replace each one with monkeypatch.


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


# ----------------------------------------------------------------- helpers


def default_helper_path() -> Path:
    """Where the package keeps its helper (same as ``safebox.run.helper_binary.find_helper``)."""
    return Path(__file__).resolve().parent / "_bin" / "safebox-helper"


def _errno_name(err: int) -> str:
    import errno

    return errno.errorcode.get(err, str(err))


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


def _package_hint(cmd: str) -> str:
    pkg = _INSTALL_HINT[cmd]
    return (f"install it: `sudo apt-get install {pkg}` (Debian/Ubuntu), "
            f"`sudo dnf install {pkg}` (Fedora), `sudo pacman -S {pkg}` (Arch)")


def _sysctl(path: str) -> str | None:
    text = read_file(path)
    return None if text is None else text.strip()


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


def _version_tuple(text: str) -> tuple[int, ...] | None:
    import re

    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not m:
        return None
    return tuple(int(g) for g in m.groups() if g is not None)


# ------------------------------------------------------------------ checks


def check_linux() -> Check:
    """safebox is Linux-only; other architectures than x86_64/aarch64 are untested."""
    if not sys.platform.startswith("linux"):
        return Check("linux", Status.FAIL, f"platform {sys.platform}",
                     "run safebox on Linux (a Linux VM or WSL2 on other systems)", True)
    machine = uname().machine
    if machine not in ("x86_64", "aarch64"):
        return Check("linux", Status.WARN, f"Linux {machine} (untested architecture)",
                     "safebox is tested on x86_64 and aarch64; report problems on this one",
                     True)
    return Check("linux", Status.OK, f"Linux {machine}", None, True)


def check_kernel() -> Check:
    """Kernel version: < 3.17 has no seccomp(2) (fail), < 5.13 has no Landlock (warn)."""
    release = uname().release
    v = _version_tuple(release)
    if v is None:
        return Check("kernel", Status.WARN, f"unparsable release {release!r}",
                     "safebox needs Linux >= 5.13 (Landlock); >= 6.12 for every feature", True)
    if v[:2] < (3, 17):
        return Check("kernel", Status.FAIL, f"{release} (no seccomp(2), added in 3.17)",
                     "upgrade to Linux >= 5.13; >= 6.12 for every feature", True)
    if v[:2] < (5, 13):
        return Check("kernel", Status.WARN, f"{release} (no Landlock, added in 5.13)",
                     "upgrade to Linux >= 5.13 for Landlock; >= 6.12 for every feature", True)
    return Check("kernel", Status.OK, release, None, True)


def _explain_bwrap_failure(bwrap: str, stderr: str) -> tuple[str, str]:
    """Name why bwrap could not create a sandbox, with the command that fixes it."""
    msg = _first_line(stderr) or "no error message"
    persist = "echo {kv} | sudo tee " + _SYSCTL_PERSIST
    if _sysctl("/proc/sys/user/max_user_namespaces") == "0":
        return (f"{msg}; user namespaces are disabled (user.max_user_namespaces = 0)",
                "sudo sysctl -w user.max_user_namespaces=15000 && "
                + persist.format(kv="user.max_user_namespaces=15000"))
    if _sysctl("/proc/sys/kernel/unprivileged_userns_clone") == "0":
        return (f"{msg}; unprivileged user namespaces are disabled "
                "(kernel.unprivileged_userns_clone = 0, a Debian/Ubuntu knob)",
                "sudo sysctl -w kernel.unprivileged_userns_clone=1 && "
                + persist.format(kv="kernel.unprivileged_userns_clone=1"))
    if _sysctl("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == "1":
        # Ubuntu >= 23.10: bwrap then says "setting up uid map: Permission
        # denied" or "No permissions to creating new namespace".  The targeted
        # fix is an AppArmor profile that grants bwrap (only) `userns`.
        real = os.path.realpath(bwrap)
        profile = ("abi <abi/4.0>,\\ninclude <tunables/global>\\n"
                   f"profile bwrap {real} flags=(unconfined) {{\\n  userns,\\n}}\\n")
        return (f"{msg}; AppArmor restricts unprivileged user namespaces "
                "(kernel.apparmor_restrict_unprivileged_userns = 1, Ubuntu >= 23.10/24.04)",
                f"printf '{profile}' | sudo tee /etc/apparmor.d/bwrap && "
                "sudo apparmor_parser -r /etc/apparmor.d/bwrap")
    container = detect_container()
    if container:
        return (f"{msg}; running inside a container ({container}) whose seccomp or "
                "AppArmor profile forbids creating namespaces",
                "start the container with `--security-opt seccomp=unconfined "
                "--security-opt apparmor=unconfined` (docker/podman), or run "
                "`safebox exec --without bwrap` (helper only: Landlock + seccomp)")
    return (msg, "read bwrap's message above; `safebox exec --without bwrap` runs the "
                 "helper layer (Landlock + seccomp) alone")


def check_bwrap() -> Check:
    """bwrap is installed, reports its version, and really creates a sandbox."""
    import subprocess

    bwrap = which("bwrap")
    if bwrap is None:
        return Check("bwrap", Status.FAIL, "not found on PATH", _package_hint("bwrap"), True)
    try:
        version = _first_line(run([bwrap, "--version"], timeout=VERSION_TIMEOUT).stdout)
    except (OSError, subprocess.TimeoutExpired) as e:
        return Check("bwrap", Status.FAIL, f"{bwrap}: --version failed: {e}",
                     _package_hint("bwrap"), True)
    version = version or "unknown version"
    try:
        r = run([bwrap, *BWRAP_SMOKE_ARGS], timeout=SANDBOX_TIMEOUT)
    except subprocess.TimeoutExpired:
        return Check("bwrap", Status.FAIL,
                     f"{version} at {bwrap}: creating a test sandbox timed out "
                     f"after {SANDBOX_TIMEOUT:g}s", "run the command by hand: "
                     f"{bwrap} {' '.join(BWRAP_SMOKE_ARGS)}", True)
    except OSError as e:
        return Check("bwrap", Status.FAIL, f"{version} at {bwrap}: cannot run: {e}",
                     _package_hint("bwrap"), True)
    if r.returncode != 0:
        reason, fix = _explain_bwrap_failure(bwrap, r.stderr)
        return Check("bwrap", Status.FAIL,
                     f"{version} at {bwrap} cannot create a sandbox: {reason}", fix, True)
    return Check("bwrap", Status.OK, f"{version} at {bwrap}, creates a sandbox", None, True)


def _tool_check(name: str, cmd: str, argv_tail: list[str], *, pick: Callable[[str], str]) -> Check:
    import subprocess

    path = which(cmd)
    if path is None:
        return Check(name, Status.FAIL, f"{cmd} not found on PATH", _package_hint(cmd), True)
    try:
        r = run([path, *argv_tail], timeout=VERSION_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as e:
        return Check(name, Status.FAIL, f"{path} does not run: {e}", _package_hint(cmd), True)
    if r.returncode != 0:
        return Check(name, Status.FAIL,
                     f"{path} {' '.join(argv_tail)} exited {r.returncode}: "
                     f"{_first_line(r.stderr)}", _package_hint(cmd), True)
    return Check(name, Status.OK, f"{pick(r.stdout) or 'unknown version'} at {path}", None, True)


def check_socat() -> Check:
    """socat bridges the proxy's unix sockets to 127.0.0.1 inside the sandbox."""
    def pick(out: str) -> str:
        for line in out.splitlines():
            if line.startswith("socat version"):
                return " ".join(line.split()[:3])
        return _first_line(out)

    return _tool_check("socat", "socat", ["-V"], pick=pick)


def check_ripgrep() -> Check:
    """ripgrep finds the mandatory-protected files under the write roots."""
    return _tool_check("ripgrep", "rg", ["--version"], pick=_first_line)


def _probe_helper(helper: Path) -> tuple[dict[str, object] | None, str]:
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
        return None, f"helper --probe exited {r.returncode}: {_first_line(r.stderr)}"
    try:
        data = json.loads(_first_line(r.stdout))
    except ValueError:
        return None, "helper --probe printed no JSON"
    if not isinstance(data, dict) or not isinstance(data.get("landlock_abi"), int):
        return None, "helper --probe JSON has no landlock_abi"
    return data, ""


def check_landlock(helper: Path) -> Check:
    """Landlock ABI, from the helper's ``--probe`` when built, else the raw syscall."""
    import errno

    data, why = _probe_helper(helper)
    if data is not None:
        # The probe's JSON is untyped (object); int() refuses what is not a number.
        abi = int(data["landlock_abi"])  # type: ignore[call-overload]
        err_name = str(data.get("landlock_errno") or "")
        source = "helper --probe"
    else:
        abi, err = landlock_abi_syscall()
        err_name = _errno_name(err) if err else ""
        source = f"landlock_create_ruleset ({why})" if why != "helper not built" \
            else "landlock_create_ruleset"

    if abi <= 0:
        if err_name == errno.errorcode[errno.EOPNOTSUPP] or err_name == "ENOTSUP":
            found = "Landlock is built in but disabled at boot (EOPNOTSUPP)"
            fix = ("add landlock to the lsm= boot parameter, e.g. "
                   "GRUB_CMDLINE_LINUX=\"lsm=landlock,lockdown,yama,integrity,apparmor,bpf\" "
                   "in /etc/default/grub, then `sudo update-grub` and reboot")
        elif err_name == "ENOSYS":
            found = "kernel has no Landlock (ENOSYS)"
            fix = "use a kernel >= 5.13 built with CONFIG_SECURITY_LANDLOCK=y (>= 6.12 for ABI 6)"
        else:
            found = f"Landlock unavailable ({err_name or 'ABI 0'})"
            fix = "use a kernel >= 6.12 with Landlock enabled"
        costs = LANDLOCK_STEPS[0][2]
        return Check("landlock", Status.WARN, f"{found} via {source}; {costs}", fix, True)

    missing = [(step, kernel, cost) for step, kernel, cost in LANDLOCK_STEPS if abi < step]
    found = f"ABI {abi} via {source}"
    if missing:
        found += "; missing: " + "; ".join(f"{cost} (ABI {step})" for step, _, cost in missing)
    if abi >= LANDLOCK_ABI_OK:
        return Check("landlock", Status.OK, found, None, True)
    return Check("landlock", Status.WARN, found,
                 f"upgrade to Linux >= {LANDLOCK_STEPS[LANDLOCK_ABI_OK - 1][1]} "
                 f"for Landlock ABI {LANDLOCK_ABI_OK}", True)


def check_seccomp() -> Check:
    """CONFIG_SECCOMP (the /proc status field) and CONFIG_SECCOMP_FILTER (prctl)."""
    import errno

    status = read_file("/proc/self/status") or ""
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    if "Seccomp" not in fields:
        return Check("seccomp", Status.FAIL, "no Seccomp: field in /proc/self/status "
                     "(kernel built without CONFIG_SECCOMP)",
                     "use a kernel built with CONFIG_SECCOMP=y and CONFIG_SECCOMP_FILTER=y", True)
    mode_field = fields["Seccomp"].strip()
    filters = fields.get("Seccomp_filters", "").strip() or "?"
    mode, mode_err, filter_err = seccomp_prctl()
    if filter_err == errno.EINVAL:
        return Check("seccomp", Status.FAIL,
                     "seccomp filter mode unsupported (kernel built without CONFIG_SECCOMP_FILTER)",
                     "use a kernel built with CONFIG_SECCOMP_FILTER=y", True)
    if filter_err != errno.EFAULT:
        # A filter already on this process (a container) may block prctl.
        return Check("seccomp", Status.WARN,
                     f"mode {mode_field}, {filters} filter(s); the filter-mode probe "
                     f"returned {_errno_name(filter_err) if filter_err else 'success'}",
                     "run `safebox doctor` outside any seccomp-confined container to confirm",
                     True)
    mode_txt = {"0": "none", "1": "strict", "2": "filter"}.get(mode_field, mode_field)
    extra = "" if mode_err == 0 else f"; PR_GET_SECCOMP failed: {_errno_name(mode_err)}"
    return Check("seccomp", Status.OK,
                 f"filters supported; this process: mode {mode_txt}, "
                 f"{filters} filter(s){extra}", None, True)


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


def check_violations(helper: Path) -> Check:
    """Whether refusals can be reported (docs/violations.md): seccomp user
    notification in the kernel, and a listener this process may have."""
    import errno

    data, _ = _probe_helper(helper)
    if data is not None and data.get("seccomp_notify") is False:
        return Check("violations", Status.WARN,
                     "the kernel has no seccomp user notification: refusals are enforced but not reported",
                     "use Linux >= 5.0 (>= 6.6 for the fast wake-up the feed's cost figures assume)", False)
    err = listener_errno()
    if err == 0:
        return Check("violations", Status.OK, "seccomp listener available: every refusal is reported",
                     None, False)
    if err == errno.EBUSY:
        return Check("violations", Status.WARN,
                     "a seccomp listener is already on this process (an enclosing sandbox, or a "
                     "container runtime's supervisor): refusals are enforced but not reported (EBUSY)",
                     "run safebox outside the enclosing sandbox to get the refusal feed", False)
    return Check("violations", Status.WARN,
                 f"no seccomp listener ({_errno_name(err) if err != 255 else 'probe failed'}): "
                 "refusals are enforced but not reported",
                 "use Linux >= 5.0 with seccomp filter mode", False)


def check_libseccomp() -> Check:
    """libseccomp, which pyseccomp uses to compile the BPF program."""
    soname, version = libseccomp_version()
    fix = ("install it: `sudo apt-get install libseccomp2` (Debian/Ubuntu), "
           "`sudo dnf install libseccomp` (Fedora), `sudo pacman -S libseccomp` (Arch)")
    if soname is None:
        return Check("libseccomp", Status.FAIL, "not found (ctypes.util.find_library)", fix, True)
    if version is None:
        return Check("libseccomp", Status.WARN, f"{soname}, older than 2.3 (no seccomp_version)",
                     fix.replace("install it", "upgrade it"), True)
    text = ".".join(map(str, version))
    if version < MIN_LIBSECCOMP:
        return Check("libseccomp", Status.WARN,
                     f"{soname} {text}, older than {'.'.join(map(str, MIN_LIBSECCOMP))}: "
                     "syscalls newer than it may be unknown to the filter",
                     fix.replace("install it", "upgrade it"), True)
    return Check("libseccomp", Status.OK, f"{soname} {text}", None, True)


def source_build_id() -> str | None:
    """The build id the helper should carry, when helper/ sources sit next door.

    From a checkout (or an editable install) ``<repo>/helper/*.[ch]`` exist and
    their digest is what ``build.py`` embeds (this mirrors
    ``build.py:_source_digest``; doctor cannot import build.py, which is not
    installed with the package).  None when there are no sources (installed).
    """
    import hashlib

    helper_dir = Path(__file__).resolve().parents[2] / "helper"
    srcs = sorted(helper_dir.glob("*.[ch]")) if helper_dir.is_dir() else []
    if not srcs:
        return None
    h = hashlib.sha256()
    for p in srcs:
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def stat_path(path: Path) -> os.stat_result:
    """``os.stat``; a function so tests can fake ownership."""
    return os.stat(path)


def _writable_reason(helper: Path) -> str | None:
    """Why a process other than root could replace the helper, or None if
    only root can: the rule ``safebox exec`` applies too (``helper.replaceable``)."""
    from safebox.run.helper_binary import replaceable

    return replaceable(str(helper), stat=lambda p: stat_path(Path(p)))


def check_helper(helper: Path, *, standalone: bool) -> Check:
    """The helper exists, runs, matches this package's version, and cannot be replaced."""
    import subprocess

    from safebox import __version__

    build = "run `python3 build.py setup` (or `python3 build.py helper`)"
    if not helper.exists():
        return Check("helper", Status.WARN if standalone else Status.FAIL,
                     f"not built yet: {helper}", build, True)
    if not helper.is_file() or not os.access(helper, os.X_OK):
        return Check("helper", Status.FAIL, f"{helper} is not an executable file",
                     f"`chmod 0755 {helper}` or {build}", True)
    try:
        r = run([str(helper), "--version"], timeout=VERSION_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as e:
        return Check("helper", Status.FAIL, f"{helper} --version failed: {e}", build, True)
    words = _first_line(r.stdout).split()
    if r.returncode != 0 or len(words) < 2 or words[0] != "safebox-helper":
        return Check("helper", Status.FAIL,
                     f"{helper} --version printed {_first_line(r.stdout)!r} "
                     f"(exit {r.returncode})", build, True)
    version, build_id = words[1], (words[2] if len(words) > 2 else None)
    if build_id is None:
        # Helpers that print only "safebox-helper VERSION" report the build id
        # in their --probe JSON instead.
        data, _ = _probe_helper(helper)
        probed = data.get("build_id") if data is not None else None
        build_id = probed if isinstance(probed, str) and probed else None
    if version != __version__:
        return Check("helper", Status.FAIL,
                     f"helper {version} does not match safebox {__version__}", build, True)
    reason = _writable_reason(helper)
    if reason is not None:
        import shutil

        own = f"chown root:root {helper} {helper.parent} && chmod 0755 {helper} {helper.parent}"
        # A self-hosted CI runner often has no sudo: then the fix is an administrator's, said so.
        own = (f"`sudo {own.replace(' && ', ' && sudo ')}`" if shutil.which("sudo")
               else f"as root (this host has no sudo): `{own}`")
        return Check("helper", Status.FAIL,
                     f"{reason}: a process other than root could replace the helper, and with it the "
                     "inner layer (`exec --strict` refuses to run, `exec` warns)",
                     "install safebox system-wide as root (from a checkout: `python3 build.py install`, root-owned "
                     f"in /opt; docs/ci.md#self-hosted-runners), or {own}", True)
    found = f"safebox-helper {version}" + (f" build {build_id}" if build_id else "")
    # From a checkout the sources are next door: another digest means the
    # helper was built from other (usually older) sources.
    expected = source_build_id()
    if expected is not None and build_id not in (None, "unknown") and build_id != expected:
        return Check("helper", Status.WARN,
                     f"{found} is stale: helper/ sources are build {expected}",
                     "rebuild: `python3 build.py helper`", True)
    return Check("helper", Status.OK, f"{found} at {helper}, replaceable only by root "
                 "(it and its directory owned by root, not group- or world-writable)", None, True)


def check_userns() -> Check:
    """Informational: the user-namespace knobs and any container around us."""
    knobs = []
    restricted = []
    for label, path, bad in (
        ("user.max_user_namespaces", "/proc/sys/user/max_user_namespaces", "0"),
        ("kernel.unprivileged_userns_clone", "/proc/sys/kernel/unprivileged_userns_clone", "0"),
        ("kernel.apparmor_restrict_unprivileged_userns",
         "/proc/sys/kernel/apparmor_restrict_unprivileged_userns", "1"),
    ):
        value = _sysctl(path)
        if value is None:
            continue
        knobs.append(f"{label}={value}")
        if value == bad:
            restricted.append(label)
    container = detect_container()
    found = ", ".join(knobs) or "no user-namespace sysctls"
    if container:
        found += f"; container: {container}"
    if restricted:
        return Check("userns", Status.WARN, f"{found}; restricted by {', '.join(restricted)}",
                     "see the bwrap check: it names the command that lifts the restriction",
                     False)
    return Check("userns", Status.OK, found, None, False)


def check_limits() -> Check:
    """Informational: what enforces each per-sandbox limit here, as ``safebox exec`` decides it
    (``safebox/run/limits.py``, the same code). Warns when a default limit cannot be enforced
    (processes as root without a cgroup; /tmp without bubblewrap's ``--size``)."""
    from safebox.policy import limit_values
    from safebox.run import limits

    bwrap = which("bwrap")
    # memory: an example value, to show what a limits.memory would use.
    values = {"processes": (float(limit_values.DEFAULT_PROCESSES), False), "memory": (float(limit_values.GiB), False),
              "tmpSize": (float(limit_values.default("tmpSize")), False), "wallTime": (0.0, False)}
    host = limits.probe(values, bwrap=bwrap, cache_dir=None)
    plan = limits.plan(values, host, bwrap=bwrap is not None, helper=True, strict=False)
    why = {c: w for c, site, w in host.cgroups if site is None}
    parts, short = [], []
    for lim, label in ((plan.get("processes"), "processes"), (plan.get("memory"), "memory"),
                       (plan.get("tmpSize"), "/tmp size")):
        if lim.scope:
            parts.append(f"{label}: {lim.how}")
        else:
            parts.append(f"{label}: not enforced ({lim.how})")
            short.append(label)
    if plan.get("memory").scope == "process":
        parts[1] += f" (no cgroup: {why.get('memory', '')})"
    parts.append("wall time: safebox")
    found = "; ".join(parts)
    if short:
        fix = ("processes as root need a cgroup: run safebox where it can create one, or as an unprivileged user "
               "(docs/layers.md, \"Resource limits\")" if "processes" in short else
               "install a bubblewrap with --size (0.8.0 or newer)")
        return Check("limits", Status.WARN, found, fix, False)
    return Check("limits", Status.OK, found, None, False)


# ------------------------------------------------------------------ runner


def check_gpu() -> Check:
    """Informational: what ``--allow-gpu`` would bind here (builder/devices.py)."""
    from safebox.builder.devices import find_gpu_nodes
    from safebox.errors import BuildError

    try:
        nodes = find_gpu_nodes(None)
    except BuildError as e:
        return Check("gpu", Status.OK, f"no GPU device node: --allow-gpu would be refused ({e.message})", None, False)
    return Check("gpu", Status.OK, "--allow-gpu would bind " + ", ".join(n.inside for n in nodes), None, False)


def run_checks(*, helper_path: Path | None, standalone: bool = False) -> list[Check]:
    """Run every check in a fixed order; a crashing check becomes a ``fail``.

    ``helper_path`` None means the helper inside this package
    (:func:`default_helper_path`).  ``standalone`` is True for the top-level
    ``doctor`` script, where a helper not built yet is a ``warn``.
    """
    helper = helper_path if helper_path is not None else default_helper_path()
    checks: list[tuple[str, bool, Callable[[], Check]]] = [
        ("linux", True, check_linux),
        ("kernel", True, check_kernel),
        ("bwrap", True, check_bwrap),
        ("socat", True, check_socat),
        ("ripgrep", True, check_ripgrep),
        ("landlock", True, lambda: check_landlock(helper)),
        ("seccomp", True, check_seccomp),
        ("libseccomp", True, check_libseccomp),
        ("helper", True, lambda: check_helper(helper, standalone=standalone)),
        ("violations", False, lambda: check_violations(helper)),
        ("userns", False, check_userns),
        ("limits", False, check_limits),
        ("gpu", False, check_gpu),
    ]
    results = []
    for name, required, fn in checks:
        try:
            results.append(fn())
        except Exception as e:  # noqa: BLE001 - a check must never print a traceback
            results.append(Check(name, Status.FAIL, f"check crashed: {type(e).__name__}: {e}",
                                 "report this as a safebox bug, with this line", required))
    return results


def exit_code(checks: list[Check]) -> int:
    """0 when every required check is ok or warn, 1 otherwise."""
    return int(any(c.required and c.status is Status.FAIL for c in checks))


def render_text(checks: list[Check]) -> str:
    """An aligned table (status, check, found) with each fix on its own line."""
    name_w = max([len("CHECK"), *(len(c.name) for c in checks)])
    status_w = len("STATUS")
    lines = [f"{'STATUS':<{status_w}}  {'CHECK':<{name_w}}  FOUND"]
    indent = " " * (status_w + 2 + name_w + 2)
    for c in checks:
        found = c.found if c.required else f"{c.found} (informational)"
        lines.append(f"{c.status.value:<{status_w}}  {c.name:<{name_w}}  {found}")
        if c.status is not Status.OK and c.fix:
            lines.append(f"{indent}fix: {c.fix}")
    failed = [c.name for c in checks if c.required and c.status is Status.FAIL]
    warned = [c.name for c in checks if c.status is Status.WARN]
    lines.append("")
    if failed:
        lines.append(f"safebox cannot run here: {', '.join(failed)} failed")
    elif warned:
        lines.append(f"no required check failed; warnings: {', '.join(warned)}")
    else:
        lines.append("every check passed")
    return "\n".join(lines) + "\n"


def render_json(checks: list[Check]) -> str:
    """The stable ``--json`` document (schema 1, see ``docs/doctor.md``)."""
    import json

    doc = {
        "schema": JSON_SCHEMA_VERSION,
        "ok": exit_code(checks) == 0,
        "checks": [
            {"name": c.name, "status": c.status.value, "required": c.required,
             "found": c.found, "fix": c.fix}
            for c in checks
        ],
    }
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None, *, helper_path: Path | None = None,
         standalone: bool = False) -> int:
    """Parse ``[--json]``, run the checks, print the report; return the exit code."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="doctor" if standalone else "safebox doctor",
        description="Check that this host can run safebox's sandbox layers.")
    parser.add_argument("--json", action="store_true",
                        help="print the stable JSON report (docs/doctor.md)")
    args = parser.parse_args(argv)
    checks = run_checks(helper_path=helper_path, standalone=standalone)
    out = render_json(checks) if args.json else render_text(checks)
    sys.stdout.write(out)
    sys.stdout.flush()
    return exit_code(checks)


def main_standalone(argv: list[str] | None = None) -> int:
    """Entry point of the top-level ``doctor`` script (fresh checkout, nothing installed)."""
    return main(argv, helper_path=default_helper_path(), standalone=True)

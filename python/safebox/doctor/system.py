"""doctor's checks of the system safebox runs on: Linux and its version,
bubblewrap (and the user namespaces it needs), socat, ripgrep, and the
user-namespace knobs (informational)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from safebox.doctor import host
from safebox.doctor.common import SANDBOX_TIMEOUT, VERSION_TIMEOUT, Check, Status, first_line, version_tuple

# The smoke test: the namespaces and mounts that `safebox exec` asks bwrap for.
BWRAP_SMOKE_ARGS = (
    "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
    "--unshare-all", "--die-with-parent", "--new-session", "true",
)
_INSTALL_HINT = {
    # command: (Debian/Ubuntu, Fedora, Arch) package
    "bwrap": "bubblewrap",
    "socat": "socat",
    "rg": "ripgrep",
}
_SYSCTL_PERSIST = "/etc/sysctl.d/90-safebox-userns.conf"


def _package_hint(cmd: str) -> str:
    pkg = _INSTALL_HINT[cmd]
    return (f"install it: `sudo apt-get install {pkg}` (Debian/Ubuntu), "
            f"`sudo dnf install {pkg}` (Fedora), `sudo pacman -S {pkg}` (Arch)")


def _sysctl(path: str) -> str | None:
    text = host.read_file(path)
    return None if text is None else text.strip()


def check_linux() -> Check:
    """safebox is Linux-only; other architectures than x86_64/aarch64 are untested."""
    if not sys.platform.startswith("linux"):
        return Check("linux", Status.FAIL, f"platform {sys.platform}",
                     "run safebox on Linux (a Linux VM or WSL2 on other systems)", True)
    machine = host.uname().machine
    if machine not in ("x86_64", "aarch64"):
        return Check("linux", Status.WARN, f"Linux {machine} (untested architecture)",
                     "safebox is tested on x86_64 and aarch64; report problems on this one",
                     True)
    return Check("linux", Status.OK, f"Linux {machine}", None, True)


def check_kernel() -> Check:
    """Kernel version: < 3.17 has no seccomp(2) (fail), < 5.13 has no Landlock (warn)."""
    release = host.uname().release
    v = version_tuple(release)
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
    msg = first_line(stderr) or "no error message"
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
    container = host.detect_container()
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

    bwrap = host.which("bwrap")
    if bwrap is None:
        return Check("bwrap", Status.FAIL, "not found on PATH", _package_hint("bwrap"), True)
    try:
        version = first_line(host.run([bwrap, "--version"], timeout=VERSION_TIMEOUT).stdout)
    except (OSError, subprocess.TimeoutExpired) as e:
        return Check("bwrap", Status.FAIL, f"{bwrap}: --version failed: {e}",
                     _package_hint("bwrap"), True)
    version = version or "unknown version"
    try:
        r = host.run([bwrap, *BWRAP_SMOKE_ARGS], timeout=SANDBOX_TIMEOUT)
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

    path = host.which(cmd)
    if path is None:
        return Check(name, Status.FAIL, f"{cmd} not found on PATH", _package_hint(cmd), True)
    try:
        r = host.run([path, *argv_tail], timeout=VERSION_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as e:
        return Check(name, Status.FAIL, f"{path} does not run: {e}", _package_hint(cmd), True)
    if r.returncode != 0:
        return Check(name, Status.FAIL,
                     f"{path} {' '.join(argv_tail)} exited {r.returncode}: "
                     f"{first_line(r.stderr)}", _package_hint(cmd), True)
    return Check(name, Status.OK, f"{pick(r.stdout) or 'unknown version'} at {path}", None, True)


def check_socat() -> Check:
    """socat bridges the proxy's unix sockets to 127.0.0.1 inside the sandbox."""
    def pick(out: str) -> str:
        for line in out.splitlines():
            if line.startswith("socat version"):
                return " ".join(line.split()[:3])
        return first_line(out)

    return _tool_check("socat", "socat", ["-V"], pick=pick)


def check_ripgrep() -> Check:
    """ripgrep finds the mandatory-protected files under the write roots."""
    return _tool_check("ripgrep", "rg", ["--version"], pick=first_line)


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
    container = host.detect_container()
    found = ", ".join(knobs) or "no user-namespace sysctls"
    if container:
        found += f"; container: {container}"
    if restricted:
        return Check("userns", Status.WARN, f"{found}; restricted by {', '.join(restricted)}",
                     "see the bwrap check: it names the command that lifts the restriction",
                     False)
    return Check("userns", Status.OK, found, None, False)

"""doctor's checks of the kernel's enforcement features: Landlock (and what
each missing ABI costs), seccomp filters, libseccomp, and the seccomp
listener the violations feed needs."""

from __future__ import annotations

from pathlib import Path

from safebox.doctor import host
from safebox.doctor.common import Check, Status, errno_name

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
MIN_LIBSECCOMP = (2, 5, 0)


def check_landlock(helper: Path) -> Check:
    """Landlock ABI, from the helper's ``--probe`` when built, else the raw syscall."""
    import errno

    data, why = host.probe_helper(helper)
    if data is not None:
        # The probe's JSON is untyped (object); int() refuses what is not a number.
        abi = int(data["landlock_abi"])  # type: ignore[call-overload]
        err_name = str(data.get("landlock_errno") or "")
        source = "helper --probe"
    else:
        abi, err = host.landlock_abi_syscall()
        err_name = errno_name(err) if err else ""
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

    status = host.read_file("/proc/self/status") or ""
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    if "Seccomp" not in fields:
        return Check("seccomp", Status.FAIL, "no Seccomp: field in /proc/self/status "
                     "(kernel built without CONFIG_SECCOMP)",
                     "use a kernel built with CONFIG_SECCOMP=y and CONFIG_SECCOMP_FILTER=y", True)
    mode_field = fields["Seccomp"].strip()
    filters = fields.get("Seccomp_filters", "").strip() or "?"
    mode, mode_err, filter_err = host.seccomp_prctl()
    if filter_err == errno.EINVAL:
        return Check("seccomp", Status.FAIL,
                     "seccomp filter mode unsupported (kernel built without CONFIG_SECCOMP_FILTER)",
                     "use a kernel built with CONFIG_SECCOMP_FILTER=y", True)
    if filter_err != errno.EFAULT:
        # A filter already on this process (a container) may block prctl.
        return Check("seccomp", Status.WARN,
                     f"mode {mode_field}, {filters} filter(s); the filter-mode probe "
                     f"returned {errno_name(filter_err) if filter_err else 'success'}",
                     "run `safebox doctor` outside any seccomp-confined container to confirm",
                     True)
    mode_txt = {"0": "none", "1": "strict", "2": "filter"}.get(mode_field, mode_field)
    extra = "" if mode_err == 0 else f"; PR_GET_SECCOMP failed: {errno_name(mode_err)}"
    return Check("seccomp", Status.OK,
                 f"filters supported; this process: mode {mode_txt}, "
                 f"{filters} filter(s){extra}", None, True)


def check_libseccomp() -> Check:
    """libseccomp, which pyseccomp uses to compile the BPF program."""
    soname, version = host.libseccomp_version()
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


def check_violations(helper: Path) -> Check:
    """Whether refusals can be reported (docs/violations.md): seccomp user
    notification in the kernel, and a listener this process may have."""
    import errno

    data, _ = host.probe_helper(helper)
    if data is not None and data.get("seccomp_notify") is False:
        return Check("violations", Status.WARN,
                     "the kernel has no seccomp user notification: refusals are enforced but not reported",
                     "use Linux >= 5.0 (>= 6.6 for the fast wake-up the feed's cost figures assume)", False)
    err = host.listener_errno()
    if err == 0:
        return Check("violations", Status.OK, "seccomp listener available: every refusal is reported",
                     None, False)
    if err == errno.EBUSY:
        return Check("violations", Status.WARN,
                     "a seccomp listener is already on this process (an enclosing sandbox, or a "
                     "container runtime's supervisor): refusals are enforced but not reported (EBUSY)",
                     "run safebox outside the enclosing sandbox to get the refusal feed", False)
    return Check("violations", Status.WARN,
                 f"no seccomp listener ({errno_name(err) if err != 255 else 'probe failed'}): "
                 "refusals are enforced but not reported",
                 "use Linux >= 5.0 with seccomp filter mode", False)

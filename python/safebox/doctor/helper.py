"""doctor's check of the helper binary: it exists, runs, is this package's
version and build, and only root can replace it."""

from __future__ import annotations

import os
from pathlib import Path

from safebox.doctor import host
from safebox.doctor.common import VERSION_TIMEOUT, Check, Status, first_line


def _writable_reason(helper: Path) -> str | None:
    """Why a process other than root could replace the helper, or None if
    only root can: the rule ``safebox exec`` applies too (``helper.replaceable``)."""
    from safebox.run.helper_binary import replaceable

    return replaceable(str(helper), stat=lambda p: host.stat_path(Path(p)))


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
        r = host.run([str(helper), "--version"], timeout=VERSION_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as e:
        return Check("helper", Status.FAIL, f"{helper} --version failed: {e}", build, True)
    words = first_line(r.stdout).split()
    if r.returncode != 0 or len(words) < 2 or words[0] != "safebox-helper":
        return Check("helper", Status.FAIL,
                     f"{helper} --version printed {first_line(r.stdout)!r} "
                     f"(exit {r.returncode})", build, True)
    version, build_id = words[1], (words[2] if len(words) > 2 else None)
    if build_id is None:
        # Helpers that print only "safebox-helper VERSION" report the build id
        # in their --probe JSON instead.
        data, _ = host.probe_helper(helper)
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
    expected = host.source_build_id()
    if expected is not None and build_id not in (None, "unknown") and build_id != expected:
        return Check("helper", Status.WARN,
                     f"{found} is stale: helper/ sources are build {expected}",
                     "rebuild: `python3 build.py helper`", True)
    return Check("helper", Status.OK, f"{found} at {helper}, replaceable only by root "
                 "(it and its directory owned by root, not group- or world-writable)", None, True)

"""Generic test markers and the "skips are failures" switch.

* ``needs_bwrap``: the test fails (never skips) unless bubblewrap can create
  a sandbox here, naming what is missing.
* ``needs_landlock(abi)``: the test fails unless the kernel's Landlock ABI is
  >= abi.
* ``SAFEBOX_MUST_WORK=1`` (CI): every skip is turned into a failure, as
  bubblewrap's ``BWRAP_MUST_WORK`` does — a missing helper, probe, bwrap or
  Landlock must not make a green run.
* ``SAFEBOX_TEST_LANDLOCK_ABI=N``: the run is refused unless the kernel's
  Landlock ABI is exactly N (as rust-landlock's ``LANDLOCK_CRATE_TEST_ABI``),
  so a CI runner on an unexpected kernel cannot quietly test less.
"""

from __future__ import annotations

import ctypes
import functools
import os
import shutil
import subprocess
from collections.abc import Generator

import pytest

try:
    from hypothesis import settings as _hypothesis_settings
except ImportError:  # hypothesis is in the [test] extra; only the property tests need it
    _hypothesis_settings = None

# The black-box fixtures (fake homes, probes) for tests/integration and tests/security.
pytest_plugins = ("sbx",)

_SYS_LANDLOCK_CREATE_RULESET = {"x86_64": 444, "aarch64": 444}
_LANDLOCK_CREATE_RULESET_VERSION = 1


def must_work() -> bool:
    """True when skips must fail (``SAFEBOX_MUST_WORK=1``)."""
    return os.environ.get("SAFEBOX_MUST_WORK") == "1"


@functools.cache
def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 when Landlock is unavailable."""
    nr = _SYS_LANDLOCK_CREATE_RULESET.get(os.uname().machine)
    if nr is None:
        return 0
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    abi = libc.syscall(ctypes.c_long(nr), None, ctypes.c_size_t(0), ctypes.c_uint32(_LANDLOCK_CREATE_RULESET_VERSION))
    return max(int(abi), 0)


@functools.cache
def bwrap_works() -> bool:
    """True when ``bwrap`` exists and can run ``true`` in a new namespace."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return False
    try:
        done = subprocess.run([bwrap, "--ro-bind", "/", "/", "--unshare-all", "true"],
                              capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _private_tmpdir(config: pytest.Config) -> None:
    """The tests' temporary files (``tmp_path``, ``tempfile``) live under
    /var/tmp, in directories of this user's, not in /tmp. Without bubblewrap
    a sandbox's write roots include the host's /tmp, and its watch takes a
    protected name that appears there during the run (``.git/hooks``,
    ``.envrc``) for the command's and moves it to the quarantine, and a
    directory another test made unlistable there fails its walk: with xdist
    the tests side by side saw each other's files. ``tmp_path`` comes from a
    short ``--basetemp`` (a unix socket's path under it must stay within the
    kernel's 107 bytes: ``/tmp/pytest-of-USER/pytest-N`` was as long), the
    one xdist's workers take theirs from. The sandboxes the tests start get
    no TMPDIR (``FakeHome.env``). Both are named after the user and the
    checkout: pytest empties its basetemp when a session starts, and two
    sessions of one user in two worktrees wiped each other's."""
    import binascii
    import tempfile

    uid = os.geteuid()
    where = binascii.crc32(os.fsencode(str(config.rootpath))) & 0xFFFF
    if config.option.basetemp is None and "PYTEST_XDIST_WORKER" not in os.environ:
        config.option.basetemp = f"/var/tmp/sbt{uid}-{where:04x}"
    scratch = f"/var/tmp/sbt{uid}-{where:04x}.tmp"
    os.makedirs(scratch, mode=0o700, exist_ok=True)
    os.environ["TMPDIR"] = scratch
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again


def pytest_configure(config: pytest.Config) -> None:
    """Refuse the run when ``SAFEBOX_TEST_LANDLOCK_ABI`` disagrees with the kernel.

    Hypothesis keeps no example database: the suite runs as root and then as
    an unprivileged user over the same checkout, and the second run cannot
    write the root-owned ``.hypothesis/`` the first one left (it fails, not
    skips). Every property test must find its failures from scratch anyway.
    """
    _private_tmpdir(config)
    if _hypothesis_settings is not None:
        _hypothesis_settings.register_profile("safebox", database=None)
        _hypothesis_settings.load_profile("safebox")
    wanted = os.environ.get("SAFEBOX_TEST_LANDLOCK_ABI")
    if wanted is not None and wanted.strip() != str(landlock_abi()):
        raise pytest.UsageError(
            f"SAFEBOX_TEST_LANDLOCK_ABI={wanted} but this kernel's Landlock ABI is {landlock_abi()}")


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Fail tests whose ``needs_*`` markers this host does not satisfy: a
    security test that cannot run has shown nothing, so it is never a skip."""
    if item.get_closest_marker("needs_bwrap") and not bwrap_works():
        pytest.fail("needs_bwrap: bubblewrap is missing or cannot create namespaces here")
    for mark in item.iter_markers("needs_landlock"):
        need = int(mark.args[0]) if mark.args else 1
        if landlock_abi() < need:
            pytest.fail(f"needs_landlock({need}): kernel Landlock ABI is {landlock_abi()}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport() -> Generator[None, None, None]:
    """With ``SAFEBOX_MUST_WORK=1`` a skip (from a marker, fixture or test) is a failure."""
    outcome = yield
    report = outcome.get_result()
    if must_work() and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"SAFEBOX_MUST_WORK=1 forbids skips: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, None, None]:
    """With ``SAFEBOX_TEST_PROFILE=PREFIX``, one JSON line per test appended
    to ``PREFIX.UID.jsonl`` (a file per user: the root and the unprivileged
    passes each write their own): its wall time and the CPU it and its
    waited-for children used (set-up and teardown included). CPU is the
    figure that says where a 2-core run's time goes: the wall time of a test
    beside others is theirs too. `python3 tests/profile_report.py FILE...`
    sums it per file."""
    path = os.environ.get("SAFEBOX_TEST_PROFILE")
    if not path:
        yield
        return
    import json
    import resource
    import time

    def cpu() -> float:
        own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime

    wall, used = time.monotonic(), cpu()
    yield
    line = json.dumps({"test": item.nodeid, "wall": round(time.monotonic() - wall, 4),
                       "cpu": round(cpu() - used, 4), "uid": os.getuid()})
    fd = os.open(f"{path}.{os.getuid()}.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)

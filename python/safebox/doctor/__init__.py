"""Host checks behind ``safebox doctor`` and the top-level ``doctor`` script.

Standard library only, and every import beyond the basics is made inside the
function that needs it: the top-level ``doctor`` script runs this package from a
fresh checkout, before ``pip install`` has brought in anything.

Each check returns one :class:`Check` (name, status, what was found, the exact
fix, whether safebox needs it).  A check never raises: :func:`run_checks` turns
an unexpected exception into a ``fail`` carrying the exception text, and every
subprocess runs with a timeout.

One module per group of checks, and one for what they read:

* :mod:`~safebox.doctor.host`: everything the checks read from the host
  (:func:`~safebox.doctor.host.read_file`, ``which``, ``run``,
  ``landlock_abi_syscall``, ``helper --probe``, …), so that tests can
  replace each one; the checks call them through the module
  (``host.read_file``), never a copy of the name;
* :mod:`~safebox.doctor.common`: :class:`Check`, :class:`Status` and the
  wording the checks share;
* :mod:`~safebox.doctor.system`: Linux, the kernel's version, bwrap (and the
  user namespaces it needs), socat, ripgrep;
* :mod:`~safebox.doctor.kernel`: the kernel's enforcement features: Landlock,
  seccomp, libseccomp, the violations feed's listener;
* :mod:`~safebox.doctor.helper`: the helper binary (version, build, who can
  replace it);
* :mod:`~safebox.doctor.info`: what ``safebox exec`` would decide here, from
  safebox's own code (limits, GPU nodes);
* this module: the checks in their fixed order, the exit status, the text and
  JSON reports, and the entry points.

The output formats are documented in ``docs/doctor.md``; the JSON schema is
stable (``"schema": 1``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from safebox.doctor import helper, host, info, kernel, system
from safebox.doctor.common import Check, Status
from safebox.doctor.host import default_helper_path

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


def run_checks(*, helper_path: Path | None, standalone: bool = False) -> list[Check]:
    """Run every check in a fixed order; a crashing check becomes a ``fail``.

    ``helper_path`` None means the helper inside this package
    (:func:`~safebox.doctor.host.default_helper_path`).  ``standalone`` is True for the top-level
    ``doctor`` script, where a helper not built yet is a ``warn``.
    """
    path = helper_path if helper_path is not None else host.default_helper_path()
    checks: list[tuple[str, bool, Callable[[], Check]]] = [
        ("linux", True, system.check_linux),
        ("kernel", True, system.check_kernel),
        ("bwrap", True, system.check_bwrap),
        ("socat", True, system.check_socat),
        ("ripgrep", True, system.check_ripgrep),
        ("landlock", True, lambda: kernel.check_landlock(path)),
        ("seccomp", True, kernel.check_seccomp),
        ("libseccomp", True, kernel.check_libseccomp),
        ("helper", True, lambda: helper.check_helper(path, standalone=standalone)),
        ("violations", False, lambda: kernel.check_violations(path)),
        ("userns", False, system.check_userns),
        ("limits", False, info.check_limits),
        ("gpu", False, info.check_gpu),
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
    return main(argv, helper_path=host.default_helper_path(), standalone=True)

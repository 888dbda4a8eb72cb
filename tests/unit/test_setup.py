"""The set-up is idempotent: a second `python3 build.py setup` installs,
compiles and rewrites nothing (the README promises it is quick and changes
nothing). Runs the real set-up on this checkout, already set up by the test
command itself."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _state() -> dict[str, int]:
    paths = [ROOT / "python" / "safebox" / "_bin" / "safebox-helper", ROOT / ".venv" / ".safebox-stamp",
             ROOT / ".venv" / "bin" / "safebox"]
    return {str(p): p.stat().st_mtime_ns for p in paths}


def test_running_setup_again_changes_nothing() -> None:
    before = _state()
    r = subprocess.run([sys.executable, str(ROOT / "build.py"), "setup"], capture_output=True, text=True,
                       timeout=120, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "installing" not in r.stdout and "creating" not in r.stdout, r.stdout
    assert r.stdout.strip() == f"build.py: ready: {ROOT / '.venv' / 'bin' / 'safebox'}"
    assert _state() == before

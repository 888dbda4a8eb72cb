"""The sdist carries the helper sources; a wheel built from it has the helper;
a missing compiler is one clear line."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def backend(call: str, tmp: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    # build.py is the PEP 517 backend (backend-path = ["."]); call it as pip would.
    code = f"import sys; sys.path.insert(0, {str(ROOT)!r}); import build; print(build.{call})"
    return subprocess.run([sys.executable, "-c", code], cwd=tmp, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=300)


@pytest.fixture(scope="module")
def dists(tmp_path_factory) -> tuple[Path, Path]:
    """pypa/build makes the sdist, then the wheel *from that sdist*, as a user's pip would."""
    out = tmp_path_factory.mktemp("dist")
    # Build from a copy: setuptools writes egg-info into the source tree, which
    # must stay untouched (and is read-only for the unprivileged test user).
    src = tmp_path_factory.mktemp("src") / "safebox"
    keep = {"pyproject.toml", "build.py", "MANIFEST.in", "README.md", "doctor", "helper", "python", "docs"}

    def ignore(directory: str, names: list[str]) -> set[str]:
        if Path(directory) == ROOT:
            return {n for n in names if n not in keep}
        return {n for n in names if n in ("out", "_bin", "__pycache__") or n.endswith(".egg-info")}

    shutil.copytree(ROOT, src, ignore=ignore)
    r = subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(src)],
                       cwd=out, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    (sd,) = out.glob("*.tar.gz")
    (wh,) = out.glob("*.whl")
    return sd, wh


@pytest.fixture(scope="module")
def sdist(dists: tuple[Path, Path]) -> Path:
    return dists[0]


def test_the_sdist_carries_every_helper_source_and_no_binary(sdist: Path) -> None:
    with tarfile.open(sdist) as t:
        names = t.getnames()
    top = names[0].split("/")[0]
    for src in sorted((ROOT / "helper").glob("*.[ch]")):
        assert f"{top}/helper/{src.name}" in names
    assert f"{top}/build.py" in names
    assert not any(n.endswith("_bin/safebox-helper") for n in names)


def test_the_wheel_is_tagged_for_this_platform_because_it_carries_a_native_helper(dists: tuple[Path, Path]) -> None:
    import platform

    name = dists[1].name
    assert name.endswith(f"-py3-none-linux_{platform.machine()}.whl"), name
    with zipfile.ZipFile(dists[1]) as z:
        wheel_meta = next(n for n in z.namelist() if n.endswith(".dist-info/WHEEL"))
        meta = z.read(wheel_meta).decode()
    assert f"Tag: py3-none-linux_{platform.machine()}" in meta


def test_a_wheel_built_from_the_sdist_contains_a_working_helper(dists: tuple[Path, Path], tmp_path: Path) -> None:
    with zipfile.ZipFile(dists[1]) as z:
        info = z.getinfo("safebox/_bin/safebox-helper")
        assert (info.external_attr >> 16) & 0o111, "helper is not executable in the wheel"
        z.extract(info, tmp_path / "x")
    helper = tmp_path / "x" / "safebox" / "_bin" / "safebox-helper"
    helper.chmod(0o755)
    out = subprocess.run([str(helper), "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith("safebox-helper 0.1.0")


def test_a_missing_compiler_is_one_line_naming_the_fix(tmp_path: Path) -> None:
    r = backend(f"build_wheel({str(tmp_path)!r})", tmp_path, env={"CC": "/nonexistent/cc"})
    assert r.returncode == 1
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert lines == ["safebox build: C compiler '/nonexistent/cc' not found; install gcc"]

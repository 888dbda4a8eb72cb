"""Shared helpers for the black-box tests: run the real ``safebox`` CLI.

Every test here drives ``.venv/bin/safebox exec`` in a subprocess against the
real kernel, bubblewrap and helper. Each run gets a throwaway ``HOME`` holding
fake credentials laid out like a developer's machine:

* ``~/.ssh/id_rsa`` (a default credential path),
* ``~/.aws -> ~/.aws-real`` (a symlinked credential dir, as on WSL2),
* ``~/.bashrc`` (a protected shell rc file),
* ``~/outside.txt`` (writable on the host, outside every write root),
* ``~/proj``: a git work tree (``.git/config``, ``.git/hooks``, ``.mcp.json``),
  the working directory and so the default write root.

The fake homes live under ``/var/tmp`` (never ``/tmp``: inside the sandbox
``/tmp`` is a private tmpfs, which would hide them and make every "cannot
read" assertion vacuous). Nothing is written into the repository, so the
tests run as root and as an unprivileged user.

Skips go through :func:`missing`, which fails instead when
``SAFEBOX_MUST_WORK=1``.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import pytest

REPO = Path(__file__).resolve().parents[1]
SAFEBOX = REPO / ".venv" / "bin" / "safebox"
PROBE_SRC = REPO / "tests" / "helper" / "probe.c"
OWN_PROBES = REPO / "tests" / "security" / "probes"
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# Layer modes of `safebox exec`: both layers, the helper alone (what a host
# without user namespaces gets), bubblewrap alone.
BOTH = "both"
HELPER_ONLY = "helper-only"
BWRAP_ONLY = "bwrap-only"
MODE_FLAGS: dict[str, tuple[str, ...]] = {
    BOTH: (),
    HELPER_ONLY: ("--without", "bwrap"),
    BWRAP_ONLY: ("--without", "helper"),
}

EPERM, ENOENT, ESRCH, EACCES, EBUSY, EROFS, ECONNREFUSED, ENETUNREACH = 1, 2, 3, 13, 16, 30, 111, 101


def missing(reason: str) -> NoReturn:
    """Fail for a missing precondition: `build.py setup --tests` installs every
    one, and a test that cannot run has not shown what it claims."""
    pytest.fail(f"precondition missing: {reason} (run `python3 build.py setup --tests`)")


def token() -> str:
    """A unique marker for argv, file contents and names."""
    return secrets.token_hex(6)


def unique_sleep_arg() -> str:
    """A ``sleep`` duration (~10 min) that is unique, so ``ps`` can find exactly our process."""
    return f"600.{secrets.randbelow(10**8):08d}1"


def pids_with_arg(arg: str, argv0: str = "sleep") -> list[int]:
    """Host pids of ``argv0`` (basename) whose argv contains ``arg``, excluding zombies.

    Filtering on ``argv0`` keeps out safebox and bwrap, whose own argv holds
    the command's too."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            argv = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
            state = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if argv and os.path.basename(argv[0]) == argv0.encode() and arg.encode() in argv and state != "Z":
            found.append(int(name))
    return found


def supervisor_of(parent: int) -> int | None:
    """The ``safebox-helper --supervise`` child of ``parent``, found by /proc."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            argv = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
            ppid = int(Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == parent and b"--supervise" in argv:
            return int(name)
    return None


def wait_for(pred: Any, timeout: float = 10.0, step: float = 0.05) -> bool:
    """Poll ``pred()`` until true or ``timeout`` seconds passed."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(step)
    return bool(pred())


@dataclass
class FakeHome:
    """A throwaway HOME with fake credentials and a git work tree."""

    root: Path
    secret: str

    @property
    def work(self) -> Path:
        """The git work tree; the default working directory (and write root)."""
        return self.root / "proj"

    @property
    def run_base(self) -> Path:
        """Where safebox keeps its per-run dirs for this HOME."""
        return self.root / ".cache" / "safebox" / "run"

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """A minimal, deterministic environment pointing HOME at the fake home."""
        env = {"PATH": PATH, "HOME": str(self.root), "LC_ALL": "C", "LANG": "C"}
        env.update(extra or {})
        return env

    def argv(self, command: Sequence[str], *, mode: str = BOTH, opts: Sequence[str] = ()) -> list[str]:
        """The full ``safebox exec`` argv."""
        return [str(SAFEBOX), "exec", *MODE_FLAGS[mode], *opts, "--", *command]

    def run(self, command: Sequence[str], *, mode: str = BOTH, opts: Sequence[str] = (), cwd: Path | None = None,
            env: dict[str, str] | None = None, pass_fds: Sequence[int] = (), input: str | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run ``safebox exec [mode flags] [opts] -- command``; never raises on exit status."""
        return subprocess.run(self.argv(command, mode=mode, opts=opts), cwd=cwd or self.work, env=self.env(env),
                              pass_fds=tuple(pass_fds), input=input, capture_output=True, text=True,
                              timeout=timeout, check=False, stdin=None if input is not None else subprocess.DEVNULL)

    def popen(self, command: Sequence[str], *, mode: str = BOTH, opts: Sequence[str] = (),
              env: dict[str, str] | None = None, cwd: Path | None = None, **kw: Any) -> subprocess.Popen[str]:
        """Start ``safebox exec`` without waiting (for signal and leftover tests)."""
        kw.setdefault("stdin", subprocess.DEVNULL)
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.PIPE)
        return subprocess.Popen(self.argv(command, mode=mode, opts=opts), cwd=cwd or self.work, env=self.env(env),
                                text=True, **kw)


def host(command: Sequence[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    """Control: run ``command`` on the host, without safebox."""
    kw.setdefault("stdin", subprocess.DEVNULL)
    return subprocess.run(list(command), capture_output=True, text=True, timeout=60, check=False, **kw)


def make_home(base: Path) -> FakeHome:
    """Create a fresh fake home under ``base``, its caches warm as after a user's first run."""
    home = _bare_home(base)
    warm_policy_cache(home)
    warm_program_cache(home, base)
    return home


def _bare_home(base: Path) -> FakeHome:
    root = Path(tempfile.mkdtemp(prefix="home-", dir=base))
    root.chmod(0o755)
    secret = f"FAKE-CREDENTIAL-{token()}"
    (root / ".ssh").mkdir(mode=0o700)
    (root / ".ssh" / "id_rsa").write_text(f"-----BEGIN OPENSSH PRIVATE KEY-----\n{secret}\n")
    (root / ".ssh" / "id_rsa").chmod(0o600)
    (root / ".aws-real").mkdir()
    (root / ".aws-real" / "credentials").write_text(f"[default]\naws_secret_access_key = {secret}\n")
    (root / ".aws").symlink_to(root / ".aws-real")  # absolute, as WSL2's ~/.aws -> /mnt/c/Users/...
    (root / ".netrc").write_text(f"machine example.com login me password {secret}\n")
    (root / ".bashrc").write_text("# fake rc\n")
    (root / "outside.txt").write_text("outside\n")
    work = root / "proj"
    git = work / ".git"
    for d in ("hooks", "objects", "refs/heads", "info"):
        (git / d).mkdir(parents=True)
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    (git / "config").write_text("[core]\n\trepositoryformatversion = 0\n")
    (git / "hooks" / "pre-commit.sample").write_text("#!/bin/sh\n")
    (git / "description").write_text("fake\n")
    (work / "README.md").write_text("hello\n")
    (work / ".mcp.json").write_text("{}\n")
    (work / "src").mkdir()
    (work / "src" / "main.c").write_text("int main(void) { return 0; }\n")
    return FakeHome(root=root, secret=secret)


#: What a first run compiles into its home's cache and every later run
#: reads: the seccomp programs (``bpf-*.bin``, about 60 ms of CPU: a first
#: run took 115 ms of CPU, a second 55) and bwrap's answer to its size
#: probe. Made once per test process, in a home of its own, by a plain and
#: a networked run, then copied into each new home, as the policy cache is
#: warmed above: a user pays it on their first run ever, and the suite paid
#: it in every fresh home. A run with other options still compiles its own
#: (test_seccomp_rules.py and test_state_never_writable.py test the miss and
#: the cache's checks).
_warm_files: list[Path] | None = None


def warm_program_cache(home: FakeHome, base: Path) -> None:
    global _warm_files
    if _warm_files is None:
        _warm_files = []
        if not SAFEBOX.is_file():
            return  # the `scratch` fixture names the missing install
        first = _bare_home(base)
        warm_policy_cache(first)
        for opts in ([], ["--allow-domain", "example.com"]):
            # A failed run leaves nothing to copy: each test then pays its
            # own first run, and the tests that need bwrap say why it failed.
            subprocess.run([str(SAFEBOX), "exec", *opts, "--", "true"], cwd=first.work, env=first.env(),
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=120, check=False)
        kept = first.root / ".cache" / "safebox" / "cache"
        _warm_files = sorted(p for p in kept.iterdir() if p.name.startswith(("bpf-", "bwrap-size-")))
    cache = home.root / ".cache" / "safebox" / "cache"
    for f in _warm_files:
        shutil.copy2(f, cache / f.name)


def warm_policy_cache(home: FakeHome) -> None:
    """Write the policy cache entry a plain ``safebox exec`` in ``home.work``
    looks up, as the first run there would (``policy.load.load_cached``, in
    this process, where pydantic is loaded once): each new home's first run
    is then warm, not 200-260 ms of pydantic in a fresh interpreter. The
    entry is the one that run computes (test_long_lived.py counts entries:
    a key that differed would leave two)."""
    from safebox.policy.defaults import credential_env
    from safebox.policy.load import Context, Flags, load_cached, state_dir

    env = home.env()
    # As in the run's environment (FakeHome.env): neither is set.
    saved = {k: os.environ.pop(k) for k in ("XDG_CONFIG_HOME", "XDG_CACHE_HOME") if k in os.environ}
    try:
        ctx = Context(cwd=os.path.realpath(home.work), home=str(home.root), credential_env=credential_env(env))
        load_cached(ctx, policy_files=(), flags=Flags(), cache_dir=os.path.join(state_dir(str(home.root)), "cache"))
    finally:
        os.environ.update(saved)


def tree_listing(top: Path, *, exclude: Sequence[Path] = ()) -> dict[str, tuple[int, int, str]]:
    """Every entry below ``top``: relative path → (mode, size, link target)."""
    out: dict[str, tuple[int, int, str]] = {}
    skip = {str(p) for p in exclude}
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = [d for d in dirnames if os.path.join(dirpath, d) not in skip]
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            link = os.readlink(p) if os.path.islink(p) else ""
            out[os.path.relpath(p, top)] = (st.st_mode, st.st_size if not os.path.isdir(p) else 0, link)
    return out


def compile_c(src: Path, out: Path) -> Path:
    """Compile one C file with the host compiler (a missing compiler is a missing precondition)."""
    cc = next((c for c in (os.environ.get("CC"), "cc", "gcc", "clang") if c and shutil.which(c)), None)
    if cc is None:
        missing("no C compiler to build the probes")
    r = subprocess.run([cc, "-O1", "-D_GNU_SOURCE", "-o", str(out), str(src)], capture_output=True, text=True,
                       check=False)
    assert r.returncode == 0, r.stderr
    out.chmod(0o755)
    return out


def remove_tree(d: Path) -> None:
    """Remove a test's tree, including directories left without permissions:
    as an unprivileged user, a held run's overlay work dir (mode 000, the
    kernel's) and a test's unlistable directory were left behind in
    /var/tmp by ``ignore_errors`` (root's DAC override hid it)."""

    def open_up(_func: object, path: str, _exc: object) -> None:
        parent = os.path.dirname(path)
        with contextlib.suppress(OSError):
            os.chmod(parent, 0o700)
            if os.path.isdir(path) and not os.path.islink(path):
                os.chmod(path, 0o700)
                _rmtree(Path(path), open_up)
            else:
                os.unlink(path)

    _rmtree(d, open_up)


def _rmtree(d: Path, handler: Callable[[object, str, object], None]) -> None:
    """shutil.rmtree with ``handler`` for errors (``onexc`` from 3.12, where ``onerror`` warns)."""
    if sys.version_info >= (3, 12):
        shutil.rmtree(d, onexc=handler)
    else:
        shutil.rmtree(d, onerror=handler)


@pytest.fixture(scope="session")
def scratch() -> Iterator[Path]:
    """A session scratch dir outside /tmp, visible (read-only) inside the sandbox."""
    if not (SAFEBOX.is_file() and os.access(SAFEBOX, os.X_OK)):
        missing(f"safebox is not installed at {SAFEBOX}: run `python3 build.py setup`")
    base = Path("/var/tmp")
    if not (base.is_dir() and os.access(base, os.W_OK)):
        base = Path.home() / ".cache"
        base.mkdir(parents=True, exist_ok=True)
    d = Path(tempfile.mkdtemp(prefix="safebox-tests-", dir=base))
    d.chmod(0o755)
    yield d
    remove_tree(d)


@pytest.fixture(scope="session")
def shared_home(scratch: Path) -> FakeHome:
    """A fake home shared by tests that only read or write scratch files under ``work``."""
    return make_home(scratch)


@pytest.fixture
def fresh_home(scratch: Path) -> Iterator[FakeHome]:
    """A fake home of the test's own (for tests that change the tree)."""
    h = make_home(scratch)
    yield h
    remove_tree(h.root)


@pytest.fixture(scope="session")
def probe(scratch: Path) -> Path:
    """``tests/helper/probe.c`` compiled into the scratch dir (one syscall, exit status = errno)."""
    if not PROBE_SRC.is_file():
        missing(f"{PROBE_SRC} is missing")
    return compile_c(PROBE_SRC, scratch / "probe")


@pytest.fixture(scope="session")
def own_probe(scratch: Path) -> Path:
    """``tests/security/probes/sbprobe.c`` compiled into the scratch dir."""
    return compile_c(OWN_PROBES / "sbprobe.c", scratch / "sbprobe")


def kill_tree_by_arg(arg: str) -> None:
    """Clean-up: SIGKILL every host process whose argv holds ``arg`` (only ours: unique)."""
    for pid in pids_with_arg(arg):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


#: GPU stand-ins (tests/integration/test_gpu.py, tests/unit/test_gpu_devices.py):
#: character devices with /dev/null's numbers, laid out as /dev would hold a
#: GPU's nodes, plus a DRM primary node that must never be bound. Made by
#: `build.py test` as root before the unprivileged pass (a user cannot mknod).
GPU_STANDINS = Path("/var/tmp/safebox-gpu-standins")
#: Beside it, a directory of root with no node at all (the refusal's test).
GPU_NO_NODES = Path("/var/tmp/safebox-gpu-none")
GPU_STANDIN_NODES = ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools",
                     "nvidia-caps/nvidia-cap1", "dri/renderD128", "dri/card0")


#: A directory of another user's that nobody else may list, in a directory of
#: its own: root makes it (chown needs root) before the unprivileged pass.
FOREIGN_PARENT = Path("/var/tmp/safebox-foreign")
FOREIGN_PRIVATE = FOREIGN_PARENT / "private"
FOREIGN_UID = 65534  # nobody: neither root nor the test user


#: Another such directory whose name holds a newline, in a parent of its own
#: (ripgrep's refusal of it is two lines).
FOREIGN_NL_PRIVATE = Path("/var/tmp/safebox-foreign-nl") / "pri\nvate"


def foreign_private_dir(private: Path = FOREIGN_PRIVATE) -> Path:
    """``private`` (mode 0700, owned by ``FOREIGN_UID``), made now when this is root."""
    try:
        st = private.lstat()
        if stat.S_ISDIR(st.st_mode) and st.st_uid == FOREIGN_UID and stat.S_IMODE(st.st_mode) == 0o700:
            return private
    except FileNotFoundError:
        pass
    if os.geteuid() != 0:
        missing(f"{private!r} is missing: `python3 build.py test` makes it as root (chown needs root)")
    private.parent.mkdir(mode=0o755, exist_ok=True)
    private.parent.chmod(0o755)
    with contextlib.suppress(FileExistsError):  # another xdist worker made it first
        private.mkdir(mode=0o700)
    os.chown(private, FOREIGN_UID, FOREIGN_UID)
    private.chmod(0o700)
    return private


def gpu_standins() -> Path:
    """The stand-in node directory, made now when this is root."""
    if all((GPU_STANDINS / n).exists() for n in GPU_STANDIN_NODES) and GPU_NO_NODES.is_dir():
        return GPU_STANDINS
    if os.geteuid() != 0:
        missing(f"{GPU_STANDINS} is missing: `python3 build.py test` makes it as root (mknod needs root)")
    for n in GPU_STANDIN_NODES:
        p = GPU_STANDINS / n
        p.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(p.parent, 0o755)
        if not p.exists():
            with contextlib.suppress(FileExistsError):  # another xdist worker made it first
                os.mknod(p, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        os.chmod(p, 0o666)
    GPU_STANDINS.chmod(0o755)
    GPU_NO_NODES.mkdir(mode=0o755, exist_ok=True)
    return GPU_STANDINS

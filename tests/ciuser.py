"""A CI runner's user for the tests that run the GitHub Action and the
GitLab template as a runner runs them: as root, a fresh unprivileged user
(with passwordless sudo, as a GitHub-hosted runner's `runner`, or without,
as a self-hosted runner's or `gitlab-runner`), removed after; as anyone
else, that user, who has no passwordless sudo."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from sbx import PATH, missing, token


@dataclass(frozen=True)
class CiUser:
    name: str
    home: Path
    sudo: bool

    def own(self, top: Path) -> None:
        """Make ``top`` and everything under it this user's (as the runner's own files are)."""
        if os.geteuid() != 0:
            return
        pw = pwd.getpwnam(self.name)
        for d, dirs, files in os.walk(top):
            for n in (d, *(os.path.join(d, x) for x in (*dirs, *files))):
                os.lchown(n, pw.pw_uid, pw.pw_gid)

    def run(self, argv: Sequence[str], env: dict[str, str], *, cwd: Path, timeout: float = 600,
            ) -> subprocess.CompletedProcess[str]:
        """``argv`` as this user with exactly ``env``."""
        pre = ["runuser", "-u", self.name, "--"] if os.geteuid() == 0 else []
        return subprocess.run([*pre, "env", "-i", *[f"{k}={v}" for k, v in env.items()], *argv], cwd=cwd,
                              capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=timeout, check=False)

    def env(self, **extra: str) -> dict[str, str]:
        return {"HOME": str(self.home), "USER": self.name, "LOGNAME": self.name, "LANG": "C.UTF-8", "PATH": PATH,
                **extra}


def me() -> str:
    return pwd.getpwuid(os.geteuid()).pw_name


@contextlib.contextmanager
def ci_user(*, sudo: bool) -> Iterator[CiUser]:
    if os.geteuid() != 0:
        home = Path(tempfile.mkdtemp(prefix="safebox-ciuser-", dir="/var/tmp"))
        try:
            yield CiUser(me(), home, sudo=False)
        finally:
            shutil.rmtree(home, ignore_errors=True)
        return
    if shutil.which("sudo") is None:
        missing("sudo is not installed (apt-get install sudo)")
    name = f"sbx-ci-{token()[:6]}"
    subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", name], check=True, capture_output=True)
    sudoers = Path(f"/etc/sudoers.d/{name}")
    try:
        if sudo:
            sudoers.write_text(f"{name} ALL=(ALL) NOPASSWD:ALL\n")
            sudoers.chmod(0o440)
        home = Path(pwd.getpwnam(name).pw_dir)
        home.chmod(0o755)  # root reads the user's files through it (sudo), as on a runner
        yield CiUser(name, home, sudo=sudo)
    finally:
        sudoers.unlink(missing_ok=True)
        subprocess.run(["userdel", "--force", "--remove", name], capture_output=True, check=False)


@contextlib.contextmanager
def install_root() -> Iterator[Path]:
    """A root-owned directory for root-owned installations (root), or /opt (anyone else: never written)."""
    if os.geteuid() != 0:
        yield Path("/opt")
        return
    root = Path(tempfile.mkdtemp(prefix="safebox-ci-test-", dir="/opt"))
    root.chmod(0o755)
    try:
        yield root
    finally:
        shutil.rmtree(root)

"""Package registries the toolchain and CI tests run on 127.0.0.1 (the
real ones are out of reach, and a test must not depend on them): a
verdaccio holding one package published from the host, and the helpers to
start, wait for and stop such a server process."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from sbx import REPO, missing

TOOLS_BIN = REPO / ".tools" / "node_modules" / ".bin"

_VERDACCIO_CONFIG = """
storage: {base}/storage
auth:
  htpasswd:
    file: {base}/htpasswd
    max_users: -1
uplinks: {{}}
packages:
  '**':
    access: $all
    publish: $all
log: {{ type: stdout, format: pretty, level: warn }}
web: {{ enable: false }}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tool(path: Path) -> str:
    """``path``, an executable that ``build.py setup --tests`` installs (its absence fails the test)."""
    if not (path.is_file() and os.access(path, os.X_OK)):
        missing(f"{path} is not installed: run `python3 build.py setup --tests`")
    return str(path)


def wait_http(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 60) -> None:
    """Wait until ``url`` answers; fail with the server's log if it exits or takes longer than ``timeout``."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            pytest.fail(f"{url}: server exited {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    pytest.fail(f"{url}: server not ready in {timeout} s: {log.read_text()[-2000:]}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    """End a server this test started (by its own Popen, never by name)."""
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


@contextmanager
def npm_registry(base: Path, package: dict[str, object], files: dict[str, str]) -> Iterator[str]:
    """A verdaccio in ``base`` with no uplink, holding the one package whose
    ``package.json`` is ``package`` and whose other files are ``files``
    (name: text), published from the host with npm; yields its URL."""
    exe = tool(TOOLS_BIN / "verdaccio")
    (base / "pkg").mkdir(parents=True)
    (base / "config.yaml").write_text(_VERDACCIO_CONFIG.format(base=base))
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    log = base / "log"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(base)}
    with open(log, "wb") as out:
        proc = subprocess.Popen([exe, "--config", str(base / "config.yaml"), "--listen", f"127.0.0.1:{port}"],
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    try:
        wait_http(url + "-/ping", proc, log)
        (base / "pkg" / "package.json").write_text(json.dumps(package))
        for name, text in files.items():
            (base / "pkg" / name).write_text(text)
        (base / "npmrc").write_text(f"//127.0.0.1:{port}/:_authToken=test-only\n")
        pub = subprocess.run(["npm", "publish", "--registry", url], cwd=base / "pkg", capture_output=True, text=True,
                             env={**env, "npm_config_userconfig": str(base / "npmrc"),
                                  "npm_config_cache": str(base / "npm-cache")}, timeout=120, check=False)
        assert pub.returncode == 0, pub.stderr
        yield url
    finally:
        stop(proc)

"""Real package managers inside the sandbox, against real registries the test
starts on 127.0.0.1 (offline: nothing leaves the machine).

Each client shows three things (docs/toolchains.md):

1. the install works inside, with only the registry allowed
   (``--preset X --allow-domain 127.0.0.1``: the registry is local, so its
   address is allowed literally);
2. the host's own cache (the fake home's ``~/.npm``, ``~/.cache/pip``, ...)
   is byte for byte what it was;
3. a second run reuses the sandbox's private cache: it works with the
   registry unreachable (``--offline`` and 127.0.0.1 no longer allowed), or
   the client says it used its cache.

The registries: verdaccio (npm, yarn, pnpm), pypiserver (pip, uv), git
http-backend behind a small WSGI wrapper (git). ``python3 build.py setup
--tests`` installs verdaccio, yarn and pnpm into ``.tools/`` and pypiserver
and uv into ``.venv``; a missing one fails the run under SAFEBOX_MUST_WORK=1.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sbx import REPO, FakeHome, missing, token

pytestmark = pytest.mark.needs_bwrap

TOOLS_BIN = REPO / ".tools" / "node_modules" / ".bin"
VENV_BIN = REPO / ".venv" / "bin"
LOCAL = ["--allow-domain", "127.0.0.1"]
PKG = "sbx-tiny"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 60) -> None:
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


def tool(path: Path) -> str:
    if not (path.is_file() and os.access(path, os.X_OK)):
        missing(f"{path} is not installed: run `python3 build.py setup --tests`")
    return str(path)


def snapshot(top: Path) -> dict[str, str]:
    """Every entry below ``top``: relative path -> content digest, link target or 'dir'."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(top):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, top)
            if os.path.islink(p):
                out[rel] = "-> " + os.readlink(p)
            elif os.path.isdir(p):
                out[rel] = "dir"
            else:
                with open(p, "rb") as f:
                    out[rel] = hashlib.sha256(f.read()).hexdigest()
    return out


def seed_host_cache(home: FakeHome, rel: str) -> tuple[Path, dict[str, str]]:
    """A host cache with an entry in it, and its snapshot."""
    d = home.root / rel
    d.mkdir(parents=True, exist_ok=True)
    (d / "host-entry").write_text(f"the host's own {token()}\n")
    return d, snapshot(d)


def sandbox_cache(home: FakeHome, preset: str, name: str) -> Path:
    return home.root / ".cache" / "safebox" / "sandbox-caches" / preset / name


# ------------------------------------------------------------------ npm, yarn, pnpm

@pytest.fixture(scope="module")
def verdaccio(scratch: Path) -> Iterator[str]:
    """A verdaccio on 127.0.0.1 with no uplink, holding ``sbx-tiny@1.0.0``
    published from the host; yields its URL."""
    exe = tool(TOOLS_BIN / "verdaccio")
    base = scratch / f"verdaccio-{token()}"
    (base / "pkg").mkdir(parents=True)
    (base / "config.yaml").write_text(f"""
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
""")
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    log = base / "log"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(base)}
    with open(log, "wb") as out:
        proc = subprocess.Popen([exe, "--config", str(base / "config.yaml"), "--listen", f"127.0.0.1:{port}"],
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    try:
        wait_http(url + "-/ping", proc, log)
        (base / "pkg" / "package.json").write_text(json.dumps({"name": PKG, "version": "1.0.0", "main": "index.js"}))
        (base / "pkg" / "index.js").write_text('module.exports = "tiny-ok";\n')
        (base / "npmrc").write_text(f"//127.0.0.1:{port}/:_authToken=test-only\n")
        pub = subprocess.run(["npm", "publish", "--registry", url], cwd=base / "pkg", capture_output=True, text=True,
                             env={**env, "npm_config_userconfig": str(base / "npmrc"),
                                  "npm_config_cache": str(base / "npm-cache")}, timeout=120, check=False)
        assert pub.returncode == 0, pub.stderr
        yield url
    finally:
        stop(proc)


def npm_project(home: FakeHome) -> None:
    (home.work / "package.json").write_text(json.dumps({"name": "proj", "version": "1.0.0",
                                                         "dependencies": {PKG: "1.0.0"}}))


def installed_value(home: FakeHome) -> str:
    r = subprocess.run(["node", "-e", f"console.log(require('{PKG}'))"], cwd=home.work, capture_output=True,
                       text=True, timeout=60, check=False)
    return r.stdout.strip()


def test_npm_install_works_inside_leaves_the_host_cache_and_reuses_its_own(
        fresh_home: FakeHome, verdaccio: str) -> None:
    npm_project(fresh_home)
    host_cache, before = seed_host_cache(fresh_home, ".npm")
    cmd = ["npm", "install", "--registry", verdaccio, "--no-audit", "--no-fund"]
    r = fresh_home.run(cmd, opts=["--preset", "npm", *LOCAL], timeout=180)
    assert r.returncode == 0, r.stderr
    assert installed_value(fresh_home) == "tiny-ok"
    assert snapshot(host_cache) == before
    leaf = sandbox_cache(fresh_home, "npm", "npm")
    assert (leaf / "_cacache" / "index-v5").is_dir()

    # Second run: the registry is not even allowed; only the sandbox's cache can serve it.
    shutil.rmtree(fresh_home.work / "node_modules")
    offline = [*cmd, "--offline"]
    r2 = fresh_home.run(offline, opts=["--preset", "npm"], timeout=180)
    assert r2.returncode == 0, r2.stderr
    assert installed_value(fresh_home) == "tiny-ok"
    assert snapshot(host_cache) == before

    # Control: the same offline install with an empty sandbox cache fails.
    shutil.rmtree(fresh_home.work / "node_modules")
    leaf.rename(leaf.with_name("npm.kept"))
    r3 = fresh_home.run(offline, opts=["--preset", "npm"], timeout=180)
    assert r3.returncode != 0
    assert "ENOTCACHED" in r3.stderr


def test_npm_against_a_registry_that_is_not_allowed_is_refused_and_explained(
        fresh_home: FakeHome, verdaccio: str) -> None:
    npm_project(fresh_home)
    port = verdaccio.rsplit(":", 1)[1].strip("/")
    r = fresh_home.run(["npm", "install", "--registry", verdaccio, "--no-audit", "--no-fund", "--fetch-retries=0"],
                       opts=["--preset", "npm"], timeout=180)
    assert r.returncode != 0
    assert (f"safebox: refused HTTP to 127.0.0.1:{port} (IP address 127.0.0.1 is not listed literally in "
            "network.allowedDomains); fix: --allow-domain 127.0.0.1 (network.allowedDomains in a policy file)"
            ) in r.stderr.splitlines()


def test_yarn_install_works_inside_leaves_the_host_cache_and_reuses_its_own(
        fresh_home: FakeHome, verdaccio: str) -> None:
    yarn = tool(TOOLS_BIN / "yarn")
    npm_project(fresh_home)
    host_cache, before = seed_host_cache(fresh_home, ".cache/yarn")
    cmd = [yarn, "install", "--registry", verdaccio, "--non-interactive"]
    r = fresh_home.run(cmd, opts=["--preset", "npm", *LOCAL], timeout=180)
    assert r.returncode == 0, r.stderr
    assert installed_value(fresh_home) == "tiny-ok"
    assert snapshot(host_cache) == before
    assert any(sandbox_cache(fresh_home, "npm", "yarn").rglob("package.json"))

    shutil.rmtree(fresh_home.work / "node_modules")
    r2 = fresh_home.run([*cmd, "--offline"], opts=["--preset", "npm"], timeout=180)
    assert r2.returncode == 0, r2.stderr
    assert installed_value(fresh_home) == "tiny-ok"
    assert snapshot(host_cache) == before


def test_pnpm_install_works_inside_leaves_the_host_store_and_reuses_its_own(
        fresh_home: FakeHome, verdaccio: str) -> None:
    pnpm = tool(TOOLS_BIN / "pnpm")
    npm_project(fresh_home)
    host_store, before = seed_host_cache(fresh_home, ".local/share/pnpm")
    cmd = [pnpm, "install", "--registry", verdaccio]
    r = fresh_home.run(cmd, opts=["--preset", "npm", *LOCAL], timeout=180)
    assert r.returncode == 0, r.stderr
    assert installed_value(fresh_home) == "tiny-ok"
    assert snapshot(host_store) == before
    assert (sandbox_cache(fresh_home, "npm", "pnpm") / "store").is_dir()

    shutil.rmtree(fresh_home.work / "node_modules")
    r2 = fresh_home.run([*cmd, "--offline"], opts=["--preset", "npm"], timeout=180)
    assert r2.returncode == 0, r2.stderr
    assert installed_value(fresh_home) == "tiny-ok"
    assert snapshot(host_store) == before


# ------------------------------------------------------------------ pip, uv

def tiny_wheel(dest: Path) -> Path:
    """A pure-Python wheel ``sbx_tiny-1.0.0`` whose module holds VALUE = 'tiny-ok'."""
    name, ver = "sbx_tiny", "1.0.0"
    files = {
        f"{name}/__init__.py": b"VALUE = 'tiny-ok'\n",
        f"{name}-{ver}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: sbx-tiny\nVersion: {ver}\n".encode(),
        f"{name}-{ver}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: safebox-tests\nRoot-Is-Purelib: true\n"
                                         b"Tag: py3-none-any\n",
    }
    record = [f"{k},sha256={base64.urlsafe_b64encode(hashlib.sha256(v).digest()).rstrip(b'=').decode()},{len(v)}"
              for k, v in files.items()]
    files[f"{name}-{ver}.dist-info/RECORD"] = ("\n".join([*record, f"{name}-{ver}.dist-info/RECORD,,"]) + "\n").encode()
    path = dest / f"{name}-{ver}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for k, v in files.items():
            z.writestr(k, v)
    return path


@pytest.fixture(scope="module")
def pypiserver(scratch: Path) -> Iterator[str]:
    """pypiserver on 127.0.0.1 serving the tiny wheel; yields its index URL.
    ``--cache-control``: pip caches only what the server lets it cache."""
    exe = tool(VENV_BIN / "pypi-server")
    base = scratch / f"pypi-{token()}"
    (base / "packages").mkdir(parents=True)
    tiny_wheel(base / "packages")
    port = free_port()
    log = base / "log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([exe, "run", "-i", "127.0.0.1", "-p", str(port), "-a", ".", "-P", ".",
                                 "--cache-control", "3600", str(base / "packages")],
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}/simple/"
        wait_http(url, proc, log)
        yield url
    finally:
        stop(proc)


# Neither the machine's pip.conf (extra indexes, find-links) nor uv's
# downloads of interpreters: the tests use the local index only.
PY_ENV = {"PIP_CONFIG_FILE": os.devnull, "UV_PYTHON_DOWNLOADS": "never", "UV_NO_CONFIG": "1"}


def new_venv(home: FakeHome, name: str) -> Path:
    py = shutil.which("python3", path="/usr/bin:/bin") or "python3"
    subprocess.run([py, "-m", "venv", "--without-pip" if name.startswith("uv") else "--clear",
                    str(home.work / name)], check=True, timeout=120, capture_output=True)
    return home.work / name / "bin" / "python"


def imports_tiny(python: Path) -> bool:
    r = subprocess.run([str(python), "-c", "import sbx_tiny; print(sbx_tiny.VALUE)"], capture_output=True,
                       text=True, timeout=60, check=False)
    return r.stdout.strip() == "tiny-ok"


def test_pip_install_works_inside_leaves_the_host_cache_and_hits_its_own(
        fresh_home: FakeHome, pypiserver: str) -> None:
    host_cache, before = seed_host_cache(fresh_home, ".cache/pip")
    runs = []
    for name in ("venv1", "venv2"):
        py = new_venv(fresh_home, name)
        # --trusted-host: pip caches nothing from an http:// index it does not trust.
        r = fresh_home.run([str(py), "-m", "pip", "install", "--index-url", pypiserver, "--trusted-host",
                            "127.0.0.1", "sbx-tiny"], opts=["--preset", "pip", *LOCAL], env=PY_ENV, timeout=180)
        assert r.returncode == 0, r.stderr
        assert imports_tiny(py)
        runs.append(r.stdout)
    assert snapshot(host_cache) == before
    assert "Downloading http://127.0.0.1" in runs[0]
    assert "Using cached http://127.0.0.1" in runs[1]  # the second run's wheel came from the sandbox's cache
    assert (sandbox_cache(fresh_home, "pip", "pip") / "http-v2").is_dir() or \
        (sandbox_cache(fresh_home, "pip", "pip") / "http").is_dir()


def test_uv_install_works_inside_leaves_the_host_cache_and_reuses_its_own(
        fresh_home: FakeHome, pypiserver: str) -> None:
    uv = tool(VENV_BIN / "uv")
    host_cache, before = seed_host_cache(fresh_home, ".cache/uv")
    py = new_venv(fresh_home, "uv1")
    r = fresh_home.run([uv, "pip", "install", "--python", str(py), "--index-url", pypiserver, "sbx-tiny"],
                       opts=["--preset", "pip", *LOCAL], env=PY_ENV, timeout=180)
    assert r.returncode == 0, r.stderr
    assert imports_tiny(py)
    assert snapshot(host_cache) == before

    # Second run, into a new venv, with the index not allowed at all.
    py2 = new_venv(fresh_home, "uv2")
    r2 = fresh_home.run([uv, "pip", "install", "--offline", "--python", str(py2), "--index-url", pypiserver,
                         "sbx-tiny"], opts=["--preset", "pip"], env=PY_ENV, timeout=180)
    assert r2.returncode == 0, r2.stderr
    assert imports_tiny(py2)
    assert snapshot(host_cache) == before


# ------------------------------------------------------------------ git

def git_http_backend() -> str:
    out = subprocess.run(["git", "--exec-path"], capture_output=True, text=True, check=False).stdout.strip()
    backend = os.path.join(out, "git-http-backend")
    if not os.access(backend, os.X_OK):
        missing(f"git http-backend not found at {backend}")
    return backend


def git_app(root: Path, backend: str):  # -> WSGI application
    """``git http-backend`` (CGI) behind WSGI: smart HTTP, read-only."""
    def app(environ, start_response):  # type: ignore[no-untyped-def]
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        env = {"GIT_PROJECT_ROOT": str(root), "GIT_HTTP_EXPORT_ALL": "1", "GATEWAY_INTERFACE": "CGI/1.1",
               "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "REMOTE_ADDR": "127.0.0.1",
               "REQUEST_METHOD": environ["REQUEST_METHOD"], "PATH_INFO": environ.get("PATH_INFO", ""),
               "QUERY_STRING": environ.get("QUERY_STRING", ""), "CONTENT_TYPE": environ.get("CONTENT_TYPE", ""),
               "CONTENT_LENGTH": str(length)}
        if environ.get("HTTP_CONTENT_ENCODING"):
            env["HTTP_CONTENT_ENCODING"] = environ["HTTP_CONTENT_ENCODING"]
        if environ.get("HTTP_GIT_PROTOCOL"):
            env["GIT_PROTOCOL"] = environ["HTTP_GIT_PROTOCOL"]
        out = subprocess.run([backend], input=body, env=env, capture_output=True, timeout=60, check=False).stdout
        head, _, rest = out.partition(b"\r\n\r\n")
        status, headers = "200 OK", []
        for line in head.decode("latin-1").split("\r\n"):
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = value.strip()
            elif name:
                headers.append((name, value.strip()))
        start_response(status, headers)
        return [rest]
    return app


@pytest.fixture(scope="module")
def git_server(scratch: Path) -> Iterator[tuple[str, str]]:
    """A bare repository served over smart HTTP on 127.0.0.1; (clone URL, file content)."""
    from socketserver import ThreadingMixIn
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

    backend = git_http_backend()
    root = scratch / f"git-{token()}"
    src = root / "src"
    src.mkdir(parents=True)
    content = f"hello over http {token()}\n"
    (src / "README").write_text(content)
    genv = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(root), "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t.invalid", "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@t.invalid"}
    for cmd in (["git", "init", "-q", "-b", "main"], ["git", "add", "README"], ["git", "commit", "-qm", "one"],
                ["git", "clone", "-q", "--bare", ".", str(root / "repo.git")]):
        subprocess.run(cmd, cwd=src, env=genv, check=True, capture_output=True, timeout=60)

    class Quiet(WSGIRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    class Threading(ThreadingMixIn, WSGIServer):
        daemon_threads = True

    srv = make_server("127.0.0.1", 0, git_app(root, backend), server_class=Threading, handler_class=Quiet)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/repo.git", content
    finally:
        srv.shutdown()
        srv.server_close()


def test_git_clone_over_http_works_inside_and_leaves_the_host_git_config(
        fresh_home: FakeHome, git_server: tuple[str, str]) -> None:
    url, content = git_server
    (fresh_home.root / ".gitconfig").write_text("[user]\n\tname = host\n")
    before = (fresh_home.root / ".gitconfig").read_bytes()
    r = fresh_home.run(["git", "clone", "-q", url, "clone"], opts=LOCAL, env={"GIT_CONFIG_NOSYSTEM": "1"})
    assert r.returncode == 0, r.stderr
    assert (fresh_home.work / "clone" / "README").read_text() == content
    assert (fresh_home.root / ".gitconfig").read_bytes() == before
    # Control: without the server's address allowed, the clone is refused (and explained).
    r2 = fresh_home.run(["git", "clone", "-q", url, "clone2"], opts=["--preset", "github"],
                        env={"GIT_CONFIG_NOSYSTEM": "1"})
    assert r2.returncode != 0
    assert any(ln.startswith("safebox: refused HTTP to 127.0.0.1:") for ln in r2.stderr.splitlines())

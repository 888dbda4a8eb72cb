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
import subprocess
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from netservers import files_below, serving
from registries import TOOLS_BIN, free_port, npm_registry, stop, tool, wait_http
from safebox.policy.presets import project_key
from sbx import REPO, FakeHome, missing, token

# xdist_group: the module's fixtures cost the registries (verdaccio, pypiserver, ...), about 5 s (measured with
# --durations); the tests of one group share a worker under `build.py test`'s --dist loadgroup, so they are made
# once a pass, not once a worker.
pytestmark = [pytest.mark.needs_bwrap, pytest.mark.xdist_group("toolchains")]

VENV_BIN = REPO / ".venv" / "bin"
LOCAL = ["--allow-domain", "127.0.0.1"]
PKG = "sbx-tiny"


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
    """The cache leaf of the runs in ``home.work`` (each work dir has its own)."""
    return home.root / ".cache" / "safebox" / "sandbox-caches" / project_key(str(home.work)) / preset / name


# ------------------------------------------------------------------ npm, yarn, pnpm

@pytest.fixture(scope="module")
def verdaccio(scratch: Path) -> Iterator[str]:
    """A verdaccio on 127.0.0.1 with no uplink, holding ``sbx-tiny@1.0.0``
    published from the host; yields its URL."""
    with npm_registry(scratch / f"verdaccio-{token()}", {"name": PKG, "version": "1.0.0", "main": "index.js"},
                      {"index.js": 'module.exports = "tiny-ok";\n'}) as url:
        yield url


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


# ------------------------------------------------------------------ go

@pytest.fixture(scope="module")
def goproxy(scratch: Path) -> Iterator[str]:
    """A static Go module proxy (GOPROXY protocol: list, .info, .mod, .zip)
    on 127.0.0.1 serving ``example.com/tiny v1.0.0``; yields the GOPROXY URL.

    The URL names ``localhost.`` (with the dot): Go never sends requests for
    ``localhost`` or a loopback address through a proxy (net/http's
    ProxyFromEnvironment), and inside the sandbox loopback is the sandbox's
    own. The proxy normalises the name to ``localhost``."""
    root = scratch / f"goproxy-{token()}"
    d = root / "example.com" / "tiny" / "@v"
    d.mkdir(parents=True)
    mod = "module example.com/tiny\n\ngo 1.19\n"
    (d / "list").write_text("v1.0.0\n")
    (d / "v1.0.0.info").write_text(json.dumps({"Version": "v1.0.0", "Time": "2024-01-01T00:00:00Z"}))
    (d / "v1.0.0.mod").write_text(mod)
    with zipfile.ZipFile(d / "v1.0.0.zip", "w") as z:
        z.writestr("example.com/tiny@v1.0.0/go.mod", mod)
        z.writestr("example.com/tiny@v1.0.0/tiny.go", 'package tiny\n\nconst Value = "tiny-ok"\n')

    with serving(reply=files_below(root)) as srv:
        yield f"http://localhost.:{srv.port}"


def local_policy(home: FakeHome) -> list[str]:
    """A policy allowing ``localhost`` (which resolves to loopback)."""
    path = home.root / "local.json"
    path.write_text(json.dumps({"network": {"allowedDomains": ["localhost"], "allowLocalDestinations": True}}))
    return ["-p", str(path)]


def test_go_build_works_inside_leaves_the_host_module_cache_and_reuses_its_own(
        fresh_home: FakeHome, goproxy: str) -> None:
    go = shutil.which("go", path="/usr/lib/go/bin:/usr/local/go/bin:/usr/bin")
    if go is None:
        missing("go is not installed (apt-get install golang-go; build.py setup --tests does it)")
    (fresh_home.work / "go.mod").write_text("module proj\n\ngo 1.19\n\nrequire example.com/tiny v1.0.0\n")
    (fresh_home.work / "main.go").write_text('package main\n\nimport (\n\t"fmt"\n\n\t"example.com/tiny"\n)\n\n'
                                             "func main() { fmt.Println(tiny.Value) }\n")
    host_cache, before = seed_host_cache(fresh_home, "go/pkg/mod")
    # -modcacherw: Go makes its module cache read-only; the test's clean-up must remove it.
    env = {"GOPROXY": goproxy, "GOSUMDB": "off", "GOFLAGS": "-mod=mod -modcacherw", "GOTOOLCHAIN": "local"}
    r = fresh_home.run([go, "build", "-o", "tinybin", "."], opts=["--preset", "go", *local_policy(fresh_home)],
                       env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert subprocess.run([str(fresh_home.work / "tinybin")], capture_output=True, text=True,
                          timeout=30).stdout == "tiny-ok\n"
    assert snapshot(host_cache) == before
    assert (sandbox_cache(fresh_home, "go", "gomodcache") / "example.com" / "tiny@v1.0.0" / "tiny.go").is_file()

    # Second run: no proxy reachable at all (GOPROXY=off, nothing allowed but the preset).
    (fresh_home.work / "tinybin").unlink()
    r2 = fresh_home.run([go, "build", "-o", "tinybin", "."], opts=["--preset", "go"],
                        env={**env, "GOPROXY": "off"}, timeout=300)
    assert r2.returncode == 0, r2.stderr
    assert snapshot(host_cache) == before


# ------------------------------------------------------------------ maven

MOJO = """package sbx;

import org.apache.maven.artifact.Artifact;
import org.apache.maven.plugin.AbstractMojo;
import org.apache.maven.project.MavenProject;

public class ResolveMojo extends AbstractMojo {
    private MavenProject project;

    public void execute() {
        for (Artifact a : project.getArtifacts()) {
            getLog().info("SBX-RESOLVED " + a.getId() + " " + a.getFile());
        }
    }
}
"""

PLUGIN_XML = """<plugin>
  <name>sbx</name><groupId>org.sbx</groupId><artifactId>sbx-maven-plugin</artifactId><version>1.0</version>
  <goalPrefix>sbx</goalPrefix><isolatedRealm>false</isolatedRealm><inheritedByDefault>true</inheritedByDefault>
  <mojos><mojo>
    <goal>resolve</goal><requiresDependencyResolution>compile</requiresDependencyResolution>
    <requiresProject>true</requiresProject><implementation>sbx.ResolveMojo</implementation><language>java</language>
    <instantiationStrategy>per-lookup</instantiationStrategy><executionStrategy>once-per-session</executionStrategy>
    <threadSafe>true</threadSafe>
    <parameters><parameter><name>project</name><type>org.apache.maven.project.MavenProject</type>
      <required>true</required><editable>false</editable><description>the project</description></parameter></parameters>
    <configuration><project implementation="org.apache.maven.project.MavenProject">${project}</project></configuration>
  </mojo></mojos>
  <dependencies/>
</plugin>
"""


def _pom(group: str, artifact: str, packaging: str, deps: str = "") -> str:
    return (f'<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
            f"<groupId>{group}</groupId><artifactId>{artifact}</artifactId><version>1.0</version>"
            f"<packaging>{packaging}</packaging>{deps}</project>\n")


def _publish(repo: Path, group: str, artifact: str, files: dict[str, bytes]) -> None:
    d = repo / group.replace(".", "/") / artifact / "1.0"
    d.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (d / name).write_bytes(data)
        (d / f"{name}.sha1").write_text(hashlib.sha1(data).hexdigest())  # noqa: S324 — Maven's own checksum


@pytest.fixture(scope="module")
def maven_repo(scratch: Path) -> Iterator[str]:
    """A static Maven repository on 127.0.0.1 holding a plugin of our own
    (compiled here against Debian's maven libs: Maven Central is out of
    reach, and every Maven build needs some plugin) and ``org.sbx:tiny:1.0``,
    the dependency the plugin makes Maven resolve; yields its URL."""
    javac, jar_libs = shutil.which("javac"), Path("/usr/share/maven/lib")
    if javac is None or not shutil.which("mvn") or not (jar_libs / "maven-core-3.x.jar").is_file():
        missing("maven and a JDK are not installed (apt-get install maven default-jdk-headless)")
    root = scratch / f"maven-{token()}"
    src = root / "src" / "sbx"
    src.mkdir(parents=True)
    (src / "ResolveMojo.java").write_text(MOJO)
    classes = root / "classes"
    cp = ":".join(str(jar_libs / j) for j in ("maven-plugin-api-3.x.jar", "maven-core-3.x.jar",
                                               "maven-artifact-3.x.jar", "maven-model-3.x.jar"))
    subprocess.run([javac, "-d", str(classes), "-cp", cp, "--release", "8", str(src / "ResolveMojo.java")],
                   check=True, capture_output=True, timeout=120)
    plugin = root / "plugin.jar"
    with zipfile.ZipFile(plugin, "w") as z:
        z.write(classes / "sbx" / "ResolveMojo.class", "sbx/ResolveMojo.class")
        z.writestr("META-INF/maven/plugin.xml", PLUGIN_XML)
    tiny = root / "tiny.jar"
    with zipfile.ZipFile(tiny, "w") as z:
        z.writestr("sbx/tiny.txt", "tiny-ok\n")
    repo = root / "repo"
    # Maven adds plexus-utils to a plugin that does not depend on it; it is
    # served from here too (Debian's copy, under version 1.0).
    _publish(repo, "org.codehaus.plexus", "plexus-utils", {
        "plexus-utils-1.0.pom": _pom("org.codehaus.plexus", "plexus-utils", "jar").encode(),
        "plexus-utils-1.0.jar": (jar_libs / "plexus-utils.jar").read_bytes()})
    utils = ("<dependencies><dependency><groupId>org.codehaus.plexus</groupId><artifactId>plexus-utils</artifactId>"
             "<version>1.0</version></dependency></dependencies>")
    _publish(repo, "org.sbx", "sbx-maven-plugin", {
        "sbx-maven-plugin-1.0.pom": _pom("org.sbx", "sbx-maven-plugin", "maven-plugin", utils).encode(),
        "sbx-maven-plugin-1.0.jar": plugin.read_bytes()})
    _publish(repo, "org.sbx", "tiny", {"tiny-1.0.pom": _pom("org.sbx", "tiny", "jar").encode(),
                                       "tiny-1.0.jar": tiny.read_bytes()})

    with serving(reply=files_below(repo)) as srv:
        yield f"http://127.0.0.1:{srv.port}/"


def test_maven_resolves_inside_leaves_the_host_repository_and_reuses_its_own(
        fresh_home: FakeHome, maven_repo: str) -> None:
    repos = "".join(f"<{ks}><{k}><id>central</id><url>{maven_repo}</url></{k}></{ks}>"
                    for k, ks in (("repository", "repositories"), ("pluginRepository", "pluginRepositories")))
    (fresh_home.work / "pom.xml").write_text(
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        "<groupId>t</groupId><artifactId>proj</artifactId><version>1</version><packaging>pom</packaging>"
        f"{repos}<dependencies><dependency><groupId>org.sbx</groupId><artifactId>tiny</artifactId>"
        "<version>1.0</version></dependency></dependencies><build><plugins><plugin><groupId>org.sbx</groupId>"
        "<artifactId>sbx-maven-plugin</artifactId><version>1.0</version><executions><execution>"
        "<phase>validate</phase><goals><goal>resolve</goal></goals></execution></executions></plugin></plugins>"
        "</build></project>\n")
    host_repo, before = seed_host_cache(fresh_home, ".m2/repository")
    leaf = sandbox_cache(fresh_home, "maven", "m2-repository")
    r = fresh_home.run(["mvn", "-B", "validate"], opts=["--preset", "maven", *LOCAL], timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr
    assert f"SBX-RESOLVED org.sbx:tiny:jar:1.0 {leaf}/org/sbx/tiny/1.0/tiny-1.0.jar" in r.stdout
    assert snapshot(host_repo) == before

    # Second run offline (-o) with the repository not allowed: the sandbox's own repository serves it.
    r2 = fresh_home.run(["mvn", "-B", "-o", "validate"], opts=["--preset", "maven"], timeout=300)
    assert r2.returncode == 0, r2.stdout[-3000:] + r2.stderr
    assert "SBX-RESOLVED org.sbx:tiny:jar:1.0" in r2.stdout
    assert snapshot(host_repo) == before


# ------------------------------------------------------------------ cargo

def _crate(name: str, version: str) -> bytes:
    """A ``.crate``: a gzipped tar of ``NAME-VERSION/`` with a library in it."""
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for rel, text in ((f"{name}-{version}/Cargo.toml",
                           f'[package]\nname = "{name}"\nversion = "{version}"\nedition = "2018"\n'),
                          (f"{name}-{version}/src/lib.rs", 'pub const VALUE: &str = "tiny-ok";\n')):
            data = text.encode()
            info = tarfile.TarInfo(rel)
            info.size = len(data)
            info.mtime = 1700000000
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.fixture(scope="module")
def cargo_registry(scratch: Path) -> Iterator[str]:
    """A cargo registry on 127.0.0.1: its index a git repository served by
    git http-backend (Debian's cargo 1.65 predates sparse HTTP indexes), its
    crates static files; yields the index URL. Holds ``sbx_tiny 1.0.0``."""
    from socketserver import ThreadingMixIn
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

    backend = git_http_backend()
    root = scratch / f"cargo-{token()}"
    index = root / "index-src"
    (index / "sb" / "x_").mkdir(parents=True)
    crate = _crate("sbx_tiny", "1.0.0")
    (root / "dl").mkdir()
    (root / "dl" / "sbx_tiny-1.0.0.crate").write_bytes(crate)
    (index / "sb" / "x_" / "sbx_tiny").write_text(json.dumps({
        "name": "sbx_tiny", "vers": "1.0.0", "deps": [], "cksum": hashlib.sha256(crate).hexdigest(),
        "features": {}, "yanked": False}) + "\n")
    holder: dict[str, int] = {}

    def app(environ, start_response):  # type: ignore[no-untyped-def]
        path = environ.get("PATH_INFO", "")
        if path.startswith("/dl/"):
            data = (root / "dl" / os.path.basename(path)).read_bytes()
            start_response("200 OK", [("Content-Type", "application/octet-stream"),
                                      ("Content-Length", str(len(data)))])
            return [data]
        return git_app(root, backend)(environ, start_response)

    class Quiet(WSGIRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    class Threading(ThreadingMixIn, WSGIServer):
        daemon_threads = True

    srv = make_server("127.0.0.1", 0, app, server_class=Threading, handler_class=Quiet)
    holder["port"] = srv.server_address[1]
    base = f"http://127.0.0.1:{holder['port']}"
    (index / "config.json").write_text(json.dumps({"dl": f"{base}/dl/{{crate}}-{{version}}.crate", "api": None}))
    genv = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(root), "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t.invalid", "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@t.invalid"}
    for cmd in (["git", "init", "-q", "-b", "master"], ["git", "add", "."], ["git", "commit", "-qm", "index"],
                ["git", "clone", "-q", "--bare", ".", str(root / "index.git")]):
        subprocess.run(cmd, cwd=index, env=genv, check=True, capture_output=True, timeout=60)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"{base}/index.git"
    finally:
        srv.shutdown()
        srv.server_close()


def test_cargo_build_works_inside_leaves_the_host_registry_and_reuses_its_own(
        fresh_home: FakeHome, cargo_registry: str) -> None:
    # Debian's cargo: root's rustup cargo (~/.cargo/bin) is not the unprivileged user's.
    cargo = "/usr/bin/cargo"
    if not os.access(cargo, os.X_OK):
        missing("cargo is not installed at /usr/bin/cargo (apt-get install cargo; build.py setup --tests does it)")
    (fresh_home.work / "src").mkdir(exist_ok=True)
    (fresh_home.work / "Cargo.toml").write_text('[package]\nname = "proj"\nversion = "0.1.0"\nedition = "2018"\n\n'
                                               '[dependencies]\nsbx_tiny = "1.0"\n')
    (fresh_home.work / "src" / "main.rs").write_text('fn main() { println!("{}", sbx_tiny::VALUE); }\n')
    (fresh_home.work / ".cargo").mkdir()
    # The project's own config names the registry: cargo reads it whatever CARGO_HOME is.
    (fresh_home.work / ".cargo" / "config.toml").write_text(
        f'[source.crates-io]\nreplace-with = "local"\n\n[source.local]\nregistry = "{cargo_registry}"\n\n'
        "[net]\ngit-fetch-with-cli = true\n")
    host_registry, before = seed_host_cache(fresh_home, ".cargo/registry")
    env = {"CARGO_TARGET_DIR": str(fresh_home.work / "target")}
    r = fresh_home.run([cargo, "build", "-q"], opts=["--preset", "cargo", *LOCAL], env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    out = subprocess.run([str(fresh_home.work / "target" / "debug" / "proj")], capture_output=True, text=True,
                         timeout=30)
    assert out.stdout == "tiny-ok\n"
    assert snapshot(host_registry) == before
    home = sandbox_cache(fresh_home, "cargo", "cargo-home")
    assert list((home / "registry" / "src").glob("*/sbx_tiny-1.0.0/src/lib.rs"))

    # Second run: offline, the registry not allowed; the sandbox's CARGO_HOME serves it.
    shutil.rmtree(fresh_home.work / "target")
    r2 = fresh_home.run([cargo, "build", "-q", "--offline"], opts=["--preset", "cargo"], env=env, timeout=600)
    assert r2.returncode == 0, r2.stderr
    assert snapshot(host_registry) == before

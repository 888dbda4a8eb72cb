"""TCP services by host:port and by address, through capture (docs/network.md,
"TCP services by host:port and by address"), with real servers the tests
start on the host's 127.0.0.1 and stop: OpenSSH's sshd (``ssh`` and
``git clone ssh://`` from inside), PostgreSQL (``psql``) and a Go program
that ignores the proxy variables.

Inside, the service is reached by the name ``localhost.`` (the trailing dot
keeps /etc/hosts from answering, so the lookup goes to the sandbox's DNS).
The policy allows ``localhost:PORT`` and ``network.allowedAddresses``
``127.0.0.1/32:PORT``, never ``allowLocalDestinations``: each refusal test
is the same command with one of the two missing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from netservers import serving
from sbx import FakeHome, token, wait_for

# xdist_group: the module's fixtures cost a Go build and a PostgreSQL server, about 11 s (measured with
# --durations); the tests of one group share a worker under `build.py test`'s --dist loadgroup, so they are made
# once a pass, not once a worker.
pytestmark = [pytest.mark.needs_bwrap, pytest.mark.xdist_group("capture-services")]

IS_ROOT = os.geteuid() == 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), 0.5).close()
        return True
    except OSError:
        return False


def _policy(home: FakeHome, port: int, *, domain: bool = True, address: bool = True) -> list[str]:
    net: dict[str, object] = {"allowedDomains": [f"localhost:{port}"] if domain else ["unrelated.example"]}
    if address:
        net["allowedAddresses"] = [f"127.0.0.1/32:{port}"]
    path = home.root / f"policy-{token()}.json"
    path.write_text(json.dumps({"network": net}))
    return ["-p", str(path)]


# -- sshd ----------------------------------------------------------------------


class Sshd:
    def __init__(self, port: int, key: Path, repo: Path, proc: subprocess.Popen[bytes]) -> None:
        self.port, self.key, self.repo, self.proc = port, key, repo, proc


@pytest.fixture(scope="module")
def sshd(scratch: Path) -> Iterator[Sshd]:
    d = scratch / f"sshd-{token()}"
    d.mkdir()
    d.chmod(0o755)
    for name in ("host", "client"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / name)], check=True)
    (d / "authorized_keys").write_text((d / "client.pub").read_text())
    (d / "authorized_keys").chmod(0o600)
    repo = d / "repo.git"
    subprocess.run(["git", "init", "-q", "--bare", str(repo)], check=True)
    src = d / "src"
    subprocess.run(["git", "init", "-q", str(src)], check=True)
    (src / "hello.txt").write_text("over ssh\n")
    git = ["git", "-C", str(src), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "add", "hello.txt"], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    subprocess.run([*git, "push", "-q", str(repo), "HEAD:refs/heads/main"], check=True)
    subprocess.run(["git", "-C", str(repo), "symbolic-ref", "HEAD", "refs/heads/main"], check=True)
    port = _free_port()
    (d / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {d / 'host'}\nAuthorizedKeysFile {d / 'authorized_keys'}\n"
        f"PidFile {d / 'sshd.pid'}\nUsePAM no\nStrictModes no\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nLogLevel ERROR\n")
    if IS_ROOT:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation dir, as root
    proc = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", str(d / "sshd_config")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: _listening(port), 10), "sshd did not start"
        yield Sshd(port, d / "client", repo, proc)
    finally:
        proc.terminate()
        proc.wait(10)


def _ssh(s: Sshd) -> list[str]:
    return ["ssh", "-F", "none", "-i", str(s.key), "-p", str(s.port), "-o", "StrictHostKeyChecking=no",
            "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
            "-o", "LogLevel=ERROR"]


def _user() -> str:
    import pwd

    return pwd.getpwuid(os.geteuid()).pw_name


def test_ssh_from_inside_reaches_an_allowed_host_port_without_the_proxy(shared_home: FakeHome, sshd: Sshd) -> None:
    r = shared_home.run([*_ssh(sshd), f"{_user()}@localhost.", "echo", "hello-from-sshd"],
                        opts=_policy(shared_home, sshd.port))
    assert (r.returncode, r.stdout) == (0, "hello-from-sshd\n"), r.stderr


def test_git_clone_over_ssh_from_inside_works_with_git_ssh_command_unset(fresh_home: FakeHome, sshd: Sshd) -> None:
    # GIT_SSH_COMMAND (set by safebox: ssh through the proxy) is removed, so
    # git's ssh dials directly and is captured.
    ssh = " ".join(_ssh(sshd))
    script = (f"unset GIT_SSH_COMMAND; GIT_SSH_COMMAND='{ssh}' git clone -q "
              f"ssh://{_user()}@localhost.:{sshd.port}{sshd.repo} cloned && cat cloned/hello.txt")
    r = fresh_home.run(["sh", "-c", script], opts=_policy(fresh_home, sshd.port))
    assert (r.returncode, r.stdout) == (0, "over ssh\n"), r.stderr


@pytest.mark.parametrize(("domain", "address", "line"), [
    (False, True, "refused the DNS lookup of localhost (localhost is not in network.allowedDomains)"),
    (True, False, "localhost resolves to 127.0.0.1, a loopback address; local destinations need "
                  "network.allowLocalDestinations"),
])
def test_ssh_from_inside_is_refused_with_the_line_when_the_policy_lacks_either_entry(
        shared_home: FakeHome, sshd: Sshd, domain: bool, address: bool, line: str) -> None:
    r = shared_home.run([*_ssh(sshd), f"{_user()}@localhost.", "echo", "hello-from-sshd"],
                        opts=_policy(shared_home, sshd.port, domain=domain, address=address))
    assert r.returncode == 255 and "hello-from-sshd" not in r.stdout, (r.stdout, r.stderr)
    assert line in r.stderr, r.stderr


SSH_REASON = "SSH to this host is blocked here; use the https remote"


def _ssh_without_port(s: Sshd) -> str:
    argv = _ssh(s)
    at = argv.index("-p")
    return " ".join(argv[:at] + argv[at + 2:])


def _denied_policy(home: FakeHome, port: int, *, reasons: bool) -> list[str]:
    # localhost is allowed on sshd's port and denied on 22 and 2200 (each
    # with a reason, or none): one name, three verdicts by port.
    net: dict[str, object] = {"allowedDomains": [f"localhost:{port}"],
                              "allowedAddresses": [f"127.0.0.1/32:{port}"],
                              "deniedDomains": ["localhost:22", "localhost:2200"]}
    if reasons:
        net["deniedDomainReasons"] = {"localhost:22": SSH_REASON, "localhost:2200": SSH_REASON}
    path = home.root / f"policy-{token()}.json"
    path.write_text(json.dumps({"network": net}))
    return ["-p", str(path)]


def test_a_captured_ssh_to_a_name_denied_with_a_reason_on_port_22_prints_the_reason_as_a_disconnect(
        shared_home: FakeHome, sshd: Sshd) -> None:
    # The same name in one sandbox: port 22 gets the SSH disconnect with the
    # reason; port 2200 (denied with the same reason) is refused with EACCES
    # like any refusal; sshd's port, allowed, reaches sshd.
    ssh = _ssh_without_port(sshd)
    script = (f"{ssh} -p 22 {_user()}@localhost. true; echo rc22=$?; "
              f"{ssh} -p 2200 {_user()}@localhost. true; echo rc2200=$?; "
              f"{ssh} -p {sshd.port} {_user()}@localhost. echo hello-from-sshd")
    audit = shared_home.root / f"audit-{token()}.jsonl"
    r = shared_home.run(["sh", "-c", script],
                        opts=["--audit-log", str(audit), *_denied_policy(shared_home, sshd.port, reasons=True)])
    assert r.stdout == "rc22=255\nrc2200=255\nhello-from-sshd\n", (r.stdout, r.stderr)
    told = [line for line in r.stderr.splitlines() if line.startswith("Received disconnect from ")]
    assert len(told) == 1 and re.fullmatch(rf"Received disconnect from 127\.0\.0\.1 port \d+:1: {re.escape(SSH_REASON)}",
                                           told[0]), r.stderr
    assert "ssh: connect to host localhost. port 2200: Permission denied" in r.stderr, r.stderr
    # Both are refusals, with the same line and audit record as any other.
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    for port in (22, 2200):
        assert (f"safebox: refused TCP connect to localhost:{port} (localhost matches 'localhost:{port}' in "
                f"network.deniedDomains: {SSH_REASON}); fix: localhost is denied on purpose") in r.stderr, r.stderr
        assert [(x["verdict"], x["rule"]) for x in records if x.get("event") == "network" and x.get("port") == port
                and x.get("protocol") == "capture"] == [("deny", "network.deniedDomains")], records


def test_a_captured_ssh_to_a_name_denied_without_a_reason_is_refused_at_the_lookup_with_no_disconnect(
        shared_home: FakeHome, sshd: Sshd) -> None:
    ssh = _ssh_without_port(sshd)
    r = shared_home.run(["sh", "-c", f"{ssh} -p 22 {_user()}@localhost. true"],
                        opts=_denied_policy(shared_home, sshd.port, reasons=False))
    assert r.returncode == 255 and "Received disconnect" not in r.stderr, r.stderr
    assert "Could not resolve hostname localhost.: Name or service not known" in r.stderr, r.stderr
    assert ("safebox: refused the DNS lookup of localhost (localhost matches 'localhost:22' in "
            "network.deniedDomains)") in r.stderr, r.stderr


# -- PostgreSQL ------------------------------------------------------------------


def _pg_bin(name: str) -> str:
    found = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))
    assert found, f"PostgreSQL's {name} is missing: python3 build.py setup --tests installs it"
    return str(found[-1])


@pytest.fixture(scope="module")
def postgres(scratch: Path) -> Iterator[tuple[int, str]]:
    d = scratch / f"pg-{token()}"
    d.mkdir()
    # initdb refuses to run as root: as root, the cluster is safebox-ci's.
    as_user = ["runuser", "-u", "safebox-ci", "--"] if IS_ROOT else []
    user = "safebox-ci" if IS_ROOT else _user()
    if IS_ROOT:
        shutil.chown(d, "safebox-ci", "safebox-ci")
    subprocess.run([*as_user, _pg_bin("initdb"), "--no-sync", "-A", "trust", "-U", user, "-D", str(d / "data")],
                   check=True, stdout=subprocess.DEVNULL)
    port = _free_port()
    proc = subprocess.Popen([*as_user, _pg_bin("postgres"), "-D", str(d / "data"), "-p", str(port),
                             "-h", "127.0.0.1", "-k", str(d)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: _listening(port), 30), "postgres did not start"
        yield port, user
    finally:
        proc.terminate()
        proc.wait(20)


def test_psql_from_inside_queries_an_allowed_database_and_is_refused_without_the_address(
        shared_home: FakeHome, postgres: tuple[int, str]) -> None:
    port, user = postgres
    argv = ["psql", f"host=localhost. port={port} user={user} dbname=postgres connect_timeout=10",
            "-XAtc", "select 40 + 2"]
    r = shared_home.run(argv, opts=_policy(shared_home, port))
    assert (r.returncode, r.stdout) == (0, "42\n"), r.stderr
    refused = shared_home.run(argv, opts=_policy(shared_home, port, address=False))
    assert refused.returncode == 2 and refused.stdout == "", refused.stderr
    assert "local destinations need network.allowLocalDestinations" in refused.stderr, refused.stderr


# -- a Go program that ignores the proxy ------------------------------------------

GO_SRC = """package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
)

func main() {
	client := &http.Client{Transport: &http.Transport{Proxy: nil}}
	resp, err := client.Get(os.Args[1])
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(3)
	}
	body, _ := io.ReadAll(resp.Body)
	fmt.Printf("%d %s\\n", resp.StatusCode, body)
}
"""


@pytest.fixture(scope="module")
def go_client(scratch: Path) -> Path:
    d = scratch / f"go-{token()}"
    d.mkdir()
    (d / "main.go").write_text(GO_SRC)
    env = {**os.environ, "GOCACHE": str(d / "cache"), "GOPATH": str(d / "gopath"), "GO111MODULE": "off",
           "CGO_ENABLED": "0"}
    subprocess.run(["go", "build", "-o", str(d / "noproxy"), str(d / "main.go")], check=True, env=env, cwd=d,
                   timeout=300)
    return d / "noproxy"


@pytest.fixture(scope="module")
def web() -> Iterator[int]:
    with serving(body=b"go-ok!") as srv:
        yield srv.port


def test_a_go_program_that_ignores_the_proxy_reaches_an_allowed_host_and_not_a_refused_one(
        shared_home: FakeHome, go_client: Path, web: int) -> None:
    opts = _policy(shared_home, web)
    r = shared_home.run([str(go_client), f"http://localhost.:{web}/"], opts=opts)
    assert (r.returncode, r.stdout) == (0, "200 go-ok!\n"), r.stdout + r.stderr
    start = time.monotonic()
    refused = shared_home.run([str(go_client), f"http://refused.example:{web}/"], opts=opts)
    assert refused.returncode == 3 and "no such host" in refused.stdout, refused.stdout + refused.stderr
    assert "safebox: refused the DNS lookup of refused.example" in refused.stderr
    assert time.monotonic() - start < 20  # NXDOMAIN at once, not a resolver timeout

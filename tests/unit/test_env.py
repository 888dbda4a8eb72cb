"""Credential scrubbing and proxy variables."""

from __future__ import annotations

import fnmatch

import pytest
from hypothesis import given
from hypothesis import strategies as st

from safebox._record import glob_match
from safebox.builder.env import build_env, scrub
from safebox.builder.resolved import Bridge
from safebox.policy.defaults import ENV_DENY_PATTERNS


@pytest.mark.parametrize("name", [
    "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "ACTIONS_RUNTIME_TOKEN", "NPM_TOKEN", "MY_SERVICE_TOKEN",
    "DB_PASSWORD", "STRIPE_SECRET_KEY", "OPENAI_API_KEY", "SSH_AUTH_SOCK", "LD_PRELOAD", "SAFEBOX_HELPER",
    "HTTPS_PROXY", "no_proxy",
])
def test_credential_and_steering_variables_are_removed(name: str) -> None:
    kept, removed = scrub({name: "x", "PATH": "/bin"}, deny=ENV_DENY_PATTERNS, allow=())
    assert name in removed and name not in kept and kept["PATH"] == "/bin"


@pytest.mark.parametrize("name", ["PATH", "HOME", "LANG", "TERM", "TOKENIZERS_PARALLELISM", "EDITOR"])
def test_ordinary_variables_are_kept(name: str) -> None:
    kept, _ = scrub({name: "v"}, deny=ENV_DENY_PATTERNS, allow=())
    assert kept == {name: "v"}


def test_the_allow_list_exempts_a_name_from_the_deny_patterns() -> None:
    kept, _ = scrub({"CI_JOB_TOKEN": "t"}, deny=ENV_DENY_PATTERNS, allow=("CI_JOB_TOKEN",))
    assert kept == {"CI_JOB_TOKEN": "t"}


def test_proxy_variables_point_at_the_bridges_and_nothing_bypasses_them() -> None:
    env, _ = build_env({"NO_PROXY": "internal.corp"}, deny=(), allow=(), private_tmp=True,
                       bridges=(Bridge(port=3128, socket_path="/s", scheme="http"),
                                Bridge(port=1080, socket_path="/t", scheme="socks5h")))
    assert env["HTTP_PROXY"] == env["https_proxy"] == "http://127.0.0.1:3128"
    assert env["ALL_PROXY"] == "socks5h://127.0.0.1:1080"
    assert env["NO_PROXY"] == env["no_proxy"] == ""
    assert env["TMPDIR"] == "/tmp"


@given(st.text(alphabet="AB_*?", max_size=8), st.text(alphabet="AB_", max_size=10))
def test_glob_match_agrees_with_fnmatch(pattern: str, name: str) -> None:
    assert glob_match(name, pattern) == fnmatch.fnmatchcase(name, pattern)


def test_common_credentials_found_in_review_are_scrubbed_whatever_their_case() -> None:
    from safebox.builder.env import scrub
    from safebox.policy.defaults import ENV_DENY_PATTERNS

    environ = {"PGPASSWORD": "x", "MYSQL_PWD": "x", "SECRET_KEY": "x", "API_KEY": "x",
               "DATABASE_URL": "postgres://u:pw@h/db", "NPM_CONFIG__AUTH": "x", "github_token": "x",
               "KUBECONFIG": "/etc/k.conf", "PATH": "/usr/bin", "HOME": "/home/u", "EDITOR": "vi"}
    kept, removed = scrub(environ, deny=ENV_DENY_PATTERNS, allow=())
    assert kept == {"PATH": "/usr/bin", "HOME": "/home/u", "EDITOR": "vi"}
    assert "github_token" in removed and "PGPASSWORD" in removed


# Issue 11, item 4: CI secrets by name, by pattern and by value shape.
CI_SECRETS = ["CI_JOB_JWT", "CI_JOB_JWT_V2", "CI_REPOSITORY_URL", "SYSTEM_ACCESSTOKEN", "AZURE_DEVOPS_EXT_PAT",
              "AZURE_STORAGE_CONNECTION_STRING", "GITHUB_PAT", "GOOGLE_GHA_CREDS_PATH", "KAGGLE_KEY",
              "NEW_RELIC_LICENSE_KEY", "SENTRY_DSN", "SLACK_WEBHOOK_URL", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
              # by pattern: *_JWT*, *_PAT, *ACCESSTOKEN*, *_DSN
              "VAULT_ID_JWT", "MY_JWT_TOKEN_V3", "GITLAB_PAT", "BUILD_ACCESSTOKEN_2", "DB_DSN"]


@pytest.mark.parametrize("name", CI_SECRETS)
def test_ci_secrets_are_removed_by_name_or_pattern(name: str) -> None:
    kept, removed = scrub({name: "plain-value", "PATH": "/bin"}, deny=ENV_DENY_PATTERNS, allow=())
    assert removed == [name] and kept == {"PATH": "/bin"}


SECRET_URLS = ["redis://:pw@h", "mongodb://u:pw@h:27017/db", "amqp://u:pw@h", "https://user:tok@host/x",
               "https://k3y@o0.ingest.sentry.io/1", "mongodb+srv://u:p@cluster0.example.net",
               "git+https://tok@github.com/o/r", "https://a.example https://u:tok@b.example/simple",
               "ssh://git@github.com/o/r.git", "postgres://u:p%40ss@h/db"]


@pytest.mark.parametrize("value", SECRET_URLS)
def test_a_variable_whose_value_is_a_url_with_userinfo_is_removed_whatever_its_name(value: str) -> None:
    kept, removed = scrub({"INNOCENT_LOOKING": value, "PATH": "/bin"}, deny=ENV_DENY_PATTERNS, allow=())
    assert removed == ["INNOCENT_LOOKING"] and kept == {"PATH": "/bin"}


@pytest.mark.parametrize(("name", "value"), [
    ("DATABASE_HOST", "db.internal"), ("GITHUB_SHA", "0123abcd"), ("PATH", "/usr/bin:/bin"),
    ("HOMEPAGE", "https://example.com/x"), ("QUERY", "https://h/p?to=a@b"), ("FRAGMENT", "https://h/p#a@b"),
    ("PATHAT", "https://h/users/@me"), ("EMAIL", "me@example.com"), ("GIT_SCP", "git@github.com:o/r.git"),
    ("SPACED", "see https:// a@b"), ("NOSCHEME", "://u:p@h"), ("GOPATH", "/home/u/go"),
    ("CI_PIPELINE_URL", "https://gitlab.com/g/p/-/pipelines/1"), ("PATCH", "1"), ("DSN_HOST", "h"),
])
def test_look_alikes_that_are_not_secrets_are_kept(name: str, value: str) -> None:
    kept, removed = scrub({name: value}, deny=ENV_DENY_PATTERNS, allow=())
    assert kept == {name: value} and removed == []


def test_env_allow_keeps_a_url_with_userinfo_too() -> None:
    kept, _ = scrub({"GIT_REMOTE": "ssh://git@github.com/o/r.git"}, deny=ENV_DENY_PATTERNS, allow=("GIT_REMOTE",))
    assert kept == {"GIT_REMOTE": "ssh://git@github.com/o/r.git"}


def test_the_value_rule_is_linear_on_a_long_value() -> None:
    import time

    from safebox.builder.env import url_with_userinfo

    value = "x://" + "a" * 1_000_000 + "@h"
    t = time.perf_counter()
    assert url_with_userinfo(value)
    assert not url_with_userinfo("a://" * 30_000 + "@")  # every authority ends at the next slash
    assert time.perf_counter() - t < 0.5


def test_ssh_through_the_proxy_never_shares_a_connection() -> None:
    # sandbox-runtime's override: a ControlPath from ~/.ssh/config cannot be
    # bound inside (ssh would exit after authenticating), and an existing
    # master was opened outside the sandbox, past the proxy.
    env, _ = build_env({}, deny=(), allow=(), private_tmp=True,
                       bridges=(Bridge(port=3128, socket_path="/s", scheme="http"),
                                Bridge(port=1080, socket_path="/t", scheme="socks5h")))
    cmd = env["GIT_SSH_COMMAND"]
    assert cmd.startswith("ssh -o ControlMaster=no -o ControlPath=none ")
    assert "ProxyCommand='socat - PROXY:127.0.0.1:%h:%p,proxyport=3128'" in cmd

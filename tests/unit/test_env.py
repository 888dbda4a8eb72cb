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

"""Credential scrubbing and proxy variables."""

from __future__ import annotations

import fnmatch

import pytest
from hypothesis import given
from hypothesis import strategies as st

from safebox._record import glob_match
from safebox.builder.env import build_env, scrub
from safebox.builder.resolved import Bridge
from safebox.policy.defaults import ENV_DENY_PATTERNS, ENV_LOOKALIKES


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


# Issue 22 item 7: the scrub goes by the word a secret's name holds.
REVIEW_SECRETS = ["PASSWORD", "TOKEN", "SECRET", "GPG_PASSPHRASE", "DOCKER_PASS", "DB_PASS", "DEPLOY_KEY",
                  "SIGNING_KEY", "OPENAI_KEY", "STRIPE_SK",
                  # pointers to secrets
                  "GIT_ASKPASS", "PGPASSFILE", "GPG_AGENT_INFO", "SSH_ASKPASS", "SSH_AUTH_SOCK", "SUDO_ASKPASS",
                  "KRB5CCNAME", "GNOME_KEYRING_CONTROL", "VSCODE_GIT_IPC_HANDLE", "BW_SESSION", "OP_SESSION_my",
                  "SSHPASS", "TWINE_PASSWORD", "DB_PASSWD", "SLACK_WEBHOOK", "SERVICE_CREDENTIAL",
                  "DEPLOY_KEY_FILE", "TLS_KEYFILE", "R2_ACCESS_KEY_ID", "PRIVATE_KEY_PEM", "REDIS_AUTH",
                  "PASSWORD_STORE_DIR"]


@pytest.mark.parametrize("name", [*REVIEW_SECRETS, *(n.lower() for n in REVIEW_SECRETS)])
def test_the_reviews_secret_names_and_pointers_are_scrubbed_whatever_their_case(name: str) -> None:
    kept, removed = scrub({name: "s3cr3t", "PATH": "/bin"}, deny=ENV_DENY_PATTERNS, allow=())
    assert removed == [name] and kept == {"PATH": "/bin"}


ORDINARY = ["TOKENIZERS_PARALLELISM", "KEY_LENGTH_BITS", "XDG_RUNTIME_DIR", "XDG_CONFIG_HOME", "XDG_SESSION_TYPE",
            "SSH_TTY", "SSH_CONNECTION", "SSH_CLIENT", "SSH_AGENT_PID", "GPG_TTY", "TIKTOKEN_CACHE_DIR",
            "CLAUDE_CODE_MAX_OUTPUT_TOKENS", "MAX_THINKING_TOKENS", "PATCH_LEVEL", "KEYTIMEOUT", "LESSKEY",
            "BYPASS_CACHE", "PASSES", "COMPASS_DIR", "DISK", "AUTHOR", "GIT_AUTHOR_NAME", "OAUTH_CLIENT_ID",
            "DATABASE_HOST", "GITHUB_SHA", "RUNNER_TEMP", "GITHUB_WORKSPACE", "HOME", "PATH", "LANG"]


@pytest.mark.parametrize("name", ORDINARY)
def test_ordinary_look_alikes_reach_the_command(name: str) -> None:
    kept, removed = scrub({name: "v"}, deny=ENV_DENY_PATTERNS, allow=())
    assert kept == {name: "v"} and removed == []


@pytest.mark.parametrize("name", sorted(ENV_LOOKALIKES))
def test_each_listed_look_alike_matches_a_pattern_and_is_kept_unless_env_deny_names_it(name: str) -> None:
    assert any(fnmatch.fnmatchcase(name, p) for p in ENV_DENY_PATTERNS)  # else it need not be listed
    assert scrub({name: "v"}, deny=ENV_DENY_PATTERNS, allow=()) == ({name: "v"}, [])
    # The user's own deny entry for the name itself wins.
    assert scrub({name: "v"}, deny=(*ENV_DENY_PATTERNS, name), allow=()) == ({}, [name])


def test_env_allow_passes_a_scrubbed_variable_on_purpose() -> None:
    environ = {"DEPLOY_KEY": "k", "SIGNING_KEY": "s"}
    assert scrub(environ, deny=ENV_DENY_PATTERNS, allow=("DEPLOY_KEY",)) == ({"DEPLOY_KEY": "k"}, ["SIGNING_KEY"])


_NAME_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_"
_ALWAYS = ("LD_PRELOAD", "LD_AUDIT", "SAFEBOX_*", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY",
           "FTP_PROXY", "GRPC_PROXY")


def _oracle_removes(name: str, deny: tuple[str, ...] = ENV_DENY_PATTERNS) -> bool:
    """The rule, stated the slow way: each pattern by fnmatch, one by one."""
    key = name.upper()
    if any(fnmatch.fnmatchcase(key, p) for p in _ALWAYS):
        return True
    return any(fnmatch.fnmatchcase(key, p.upper()) for p in deny) and (
        key not in ENV_LOOKALIKES or key in {p.upper() for p in deny})


@st.composite
def _matching_name(draw: st.DrawFn) -> str:
    """A name made from a pattern, each ``*`` replaced by any name text, in any case."""
    pattern = draw(st.sampled_from(ENV_DENY_PATTERNS))
    parts = pattern.split("*")
    fill = [draw(st.text(alphabet=_NAME_CHARS, max_size=6)) for _ in parts[1:]]
    name = parts[0] + "".join(f + p for f, p in zip(fill, parts[1:], strict=True))
    return draw(st.sampled_from([name, name.lower(), name.capitalize()]))


@given(_matching_name())
def test_a_name_made_to_match_a_pattern_is_scrubbed(name: str) -> None:
    if name.upper() in ENV_LOOKALIKES:
        return  # made to look like one by chance: the look-alike test covers it
    kept, removed = scrub({name: "v", "PATH": "/bin"}, deny=ENV_DENY_PATTERNS, allow=())
    assert removed == [name] and kept == {"PATH": "/bin"}


#: Fragments of secret words and of their look-alikes, so that generated
#: names come near the patterns from both sides.
_FRAGMENTS = ["_", "A", "S", "X", "1", "TOK", "EN", "TOKEN", "IZERS", "S_", "KEY", "KEY_", "_KEY", "PASS", "WORD",
              "WD", "PHRASE", "SK", "_SK", "DI", "AUTH", "_AUTH", "OR", "SECRET", "CRED", "ENTIAL", "WEB", "HOOK",
              "ASK", "FILE", "JWT", "PAT", "CH", "DSN", "XDG", "SSH", "TTY", "LENGTH", "BITS", "SAFEBOX_", "LD_",
              "PRELOAD", "PROXY", "HTTP"]


@given(st.lists(st.sampled_from(_FRAGMENTS), min_size=1, max_size=6).map("".join))
def test_a_name_is_scrubbed_exactly_when_a_pattern_matches_it(name: str) -> None:
    kept, removed = scrub({name: "v"}, deny=ENV_DENY_PATTERNS, allow=())
    assert (removed == [name]) == _oracle_removes(name), name
    assert (kept == {name: "v"}) == (not _oracle_removes(name)), name


@given(st.text(alphabet="ABCDFGHIJLMNOQRUVWXYZ0123456789_", min_size=1, max_size=20))
def test_a_name_from_the_safe_alphabet_reaches_the_command(name: str) -> None:
    # Without E, K, P, S and T no pattern's fixed part can be spelt.
    assert scrub({name: "v"}, deny=ENV_DENY_PATTERNS, allow=()) == ({name: "v"}, [])


@given(st.lists(st.lists(st.sampled_from(_FRAGMENTS), min_size=1, max_size=5).map("".join), max_size=12,
                unique=True))
def test_a_whole_environment_scrubs_as_each_name_alone(names: list[str]) -> None:
    # Every *WORD* pattern searches all the names joined at once: a word
    # never spans two names, and every name it is in is found.
    environ = {n: "v" for n in names}
    kept, removed = scrub(environ, deny=ENV_DENY_PATTERNS, allow=())
    assert sorted(removed) == sorted(n for n in names if _oracle_removes(n))
    assert kept == {n: "v" for n in names if not _oracle_removes(n)}


def test_a_name_holding_the_separator_is_matched_on_its_own() -> None:
    # Not from a real environment (a name ends at the first `=`), but a
    # Mapping may hold one: it is tested alone, never split.
    environ = {"A=TOKEN": "v", "X=Y": "v", "B": "v"}
    assert scrub(environ, deny=ENV_DENY_PATTERNS, allow=()) == ({"X=Y": "v", "B": "v"}, ["A=TOKEN"])


@given(st.lists(st.lists(st.sampled_from([*_FRAGMENTS, "="]), min_size=1, max_size=5).map("".join), max_size=8,
                unique=True))
def test_names_that_hold_the_separator_scrub_as_the_slow_rule_says(names: list[str]) -> None:
    environ = {n: "v" for n in names}
    kept, removed = scrub(environ, deny=ENV_DENY_PATTERNS, allow=())
    assert sorted(removed) == sorted(n for n in names if _oracle_removes(n))

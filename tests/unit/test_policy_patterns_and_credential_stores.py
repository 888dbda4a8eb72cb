"""Issue 11, items 2, 3 and 5 at the policy and resolve level (with issue
16's patterns): glob patterns are kept apart for expansion where srt takes
them and refused naming the key or flag where it does not, the caller's environment
moves credential stores onto the deny list (and keys the policy cache),
``allowRead`` takes a whole entry off it, and the directories of PATH inside
a write root are found with the symlinks on the way to them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from safebox.builder.resolve import links_on_the_way, path_dirs_in_write_roots
from safebox.errors import PolicyError
from safebox.policy import defaults
from safebox.policy.load import Context, Flags, Layer, load, load_cached, policy_document, validate_layer
from safebox.policy.model import GLOB_CHARS

LITERAL_KEYS = [("filesystem", "allowWrite"), ("network", "allowUnixSockets")]
PATTERN_KEYS = [("filesystem", "denyRead"), ("filesystem", "allowRead"), ("filesystem", "denyWrite")]
GLOBS = ["**/.env", "~/.ssh/id_*", "secret?.txt", "key[12].pem", "certs/*.{pem,key}", "a]b"]


def _ctx(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, env: dict[str, str] | None = None) -> Context:
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    home, cwd = tmp_path / "home", tmp_path / "proj"
    home.mkdir(exist_ok=True)
    cwd.mkdir(exist_ok=True)
    return Context(cwd=str(cwd), home=str(home), credential_env=defaults.credential_env(env or {}))


# ---------------------------------------------------------------- item 2

def test_the_glob_characters_are_srts() -> None:
    # sandbox-runtime's containsGlobChars (POSIX): * ? [ ]. Braces are
    # literal there; a pattern holding one is refused (builder/globs.py).
    assert GLOB_CHARS == frozenset("*?[]")


@pytest.mark.parametrize("key", LITERAL_KEYS, ids=lambda k: ".".join(k))
@pytest.mark.parametrize("entry", GLOBS)
def test_a_glob_in_a_list_of_literal_paths_is_refused_naming_the_key(key: tuple[str, str], entry: str) -> None:
    with pytest.raises(PolicyError) as e:
        validate_layer(Layer(name="p.toml", data={key[0]: {key[1]: ["/ok", entry]}}))
    assert e.value.message.startswith(f"p.toml: {key[0]}.{key[1]}[1] = {json.dumps(entry)}: "
                                      f"glob patterns are not supported here (it has one of * ? [ ]): {key[1]} "
                                      "takes paths")
    # srt's literal form is the way to name such a path.
    validate_layer(Layer(name="p.toml", data={key[0]: {key[1]: [{"path": entry, "literal": True}]}}))


@pytest.mark.parametrize("key", PATTERN_KEYS, ids=lambda k: ".".join(k))
@pytest.mark.parametrize("entry", [g for g in GLOBS if "{" not in g])
def test_a_glob_in_a_read_or_deny_write_list_is_a_pattern(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          key: tuple[str, str], entry: str) -> None:
    ctx = _ctx(tmp_path, monkeypatch)
    (Path(ctx.cwd) / "p.json").write_text(json.dumps({key[0]: {key[1]: [entry]}}))
    eff = load(ctx, policy_files=("p.json",), flags=Flags())
    field = {"denyRead": "deny_read", "allowRead": "allow_read", "denyWrite": "deny_write"}[key[1]]
    expanded = os.path.normpath(os.path.join(ctx.cwd, entry.replace("~", ctx.home, 1) if entry.startswith("~")
                                             else entry))
    assert getattr(eff, field + "_globs") == (expanded,)
    assert expanded not in getattr(eff, field)


def test_the_literal_form_keeps_glob_characters_plain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = _ctx(tmp_path, monkeypatch)
    (Path(ctx.cwd) / "p.json").write_text(json.dumps({"filesystem": {"denyRead": [
        {"path": "build[1]/*.log", "literal": True}, {"path": "*.pem", "literal": False}]}}))
    eff = load(ctx, policy_files=("p.json",), flags=Flags())
    assert f"{ctx.cwd}/build[1]/*.log" in eff.deny_read and eff.deny_read_globs == (f"{ctx.cwd}/*.pem",)
    # `policy show --json` writes it back in the same form.
    doc = policy_document(eff)
    assert {"path": f"{ctx.cwd}/build[1]/*.log", "literal": True} in doc["filesystem"]["denyRead"]
    assert f"{ctx.cwd}/*.pem" in doc["filesystem"]["denyRead"]
    validate_layer(Layer(name="shown.json", data=json.loads(json.dumps(doc))))


@pytest.mark.parametrize(("entry", "words"), [
    ("certs/*.{pem,key}", "braces are not expanded in glob patterns"),
    ("a**b", "'**' must be a whole path component"),
    ("key[12.pem", "an unclosed '['"),
    ("/**/.env", "a glob pattern must start below /"),
    ({"path": "x", "literal": "yes"}, '`literal` must be true or false, not the string "yes"'),
    ({"path": "x", "literl": True}, "unknown key `literl` in a path entry"),
    (3, 'must be a path or { "path": ..., "literal": true }, not the number 3'),
])
def test_a_pattern_safebox_cannot_honour_is_refused_naming_the_key(entry: object, words: str) -> None:
    with pytest.raises(PolicyError) as e:
        validate_layer(Layer(name="p.toml", data={"filesystem": {"denyRead": [entry]}}))
    assert e.value.message.startswith("p.toml: filesystem.denyRead[0]") and words in e.value.message


@pytest.mark.parametrize(("field", "flag"), [("allow_write", "--allow-write")])
def test_a_glob_shaped_write_root_flag_is_refused_naming_the_flag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  field: str, flag: str) -> None:
    ctx = _ctx(tmp_path, monkeypatch)
    with pytest.raises(PolicyError) as e:
        load(ctx, policy_files=(), flags=Flags(**{field: ("**/.env",)}))
    assert e.value.message.startswith(f"{flag} '**/.env': glob patterns are not supported here")
    assert "\n" not in e.value.message


@pytest.mark.parametrize(("field", "flag"), [("deny_read", "--deny-read"), ("allow_read", "--allow-read"),
                                             ("deny_write", "--deny-write")])
def test_a_glob_flag_value_is_a_pattern(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, field: str,
                                        flag: str) -> None:
    ctx = _ctx(tmp_path, monkeypatch)
    eff = load(ctx, policy_files=(), flags=Flags(**{field: ("**/.env",)}))
    assert getattr(eff, field + "_globs") == (f"{ctx.cwd}/**/.env",)
    with pytest.raises(PolicyError) as e:
        load(ctx, policy_files=(), flags=Flags(**{field: ("*.{a,b}",)}))
    assert e.value.message.startswith(f"{flag} '*.{{a,b}}': braces are not expanded")


@pytest.mark.parametrize("entry", ["~/.ssh", "./.env", "/etc/ssh/ssh_host_ed25519_key", "dir with space/f",
                                   "a+b(c)=d", "~/.config/op"])
def test_control_a_literal_path_is_accepted(entry: str) -> None:
    validate_layer(Layer(name="p.toml", data={"filesystem": {"denyRead": [entry]}}))


# ---------------------------------------------------------------- item 3

def test_every_new_default_credential_path_is_denied_by_default(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = _ctx(tmp_path, monkeypatch)
    deny = load(ctx, policy_files=(), flags=Flags()).deny_read
    for p in ("~/.claude/.credentials.json", "~/.codex/auth.json", "~/.config/git/credentials", "~/.pgpass",
              "~/.my.cnf", "~/.m2/settings.xml", "~/.gradle/gradle.properties", "~/.config/containers/auth.json",
              "~/.boto", "~/.s3cfg", "~/.vault-token", "~/.terraformrc", "~/.terraform.d/credentials.tfrc.json",
              "~/.kaggle", "~/.databrickscfg", "~/.oci", "~/.pulumi/credentials.json", "~/.gem/credentials",
              "~/.composer/auth.json", "~/.config/op", "~/.config/github-copilot", "~/.fly", "~/.snowsql"):
        assert ctx.home + p[1:] in deny, p


ENV_STORES = {
    "CARGO_HOME": ("/c/cargo", ["/c/cargo/credentials.toml", "/c/cargo/credentials"]),
    "GNUPGHOME": ("/c/gnupg", ["/c/gnupg"]),
    "DOCKER_CONFIG": ("/c/docker", ["/c/docker"]),
    "REGISTRY_AUTH_FILE": ("/c/auth.json", ["/c/auth.json"]),
    "XDG_RUNTIME_DIR": ("/run/user/1000", ["/run/user/1000/containers/auth.json"]),
    "AWS_SHARED_CREDENTIALS_FILE": ("/c/aws-creds", ["/c/aws-creds"]),
    "AWS_CONFIG_FILE": ("/c/aws-config", ["/c/aws-config"]),
    "AWS_WEB_IDENTITY_TOKEN_FILE": ("/c/token", ["/c/token"]),
    "KUBECONFIG": ("/c/k1:/c/k2::rel/k3", ["/c/k1", "/c/k2", "{cwd}/rel/k3"]),
    "NETRC": ("/c/netrc", ["/c/netrc"]),
    "AZURE_CONFIG_DIR": ("/c/azure", ["/c/azure"]),
    "GH_CONFIG_DIR": ("/c/gh", ["/c/gh"]),
    "CLOUDSDK_CONFIG": ("/c/gcloud", ["/c/gcloud"]),
    "GOOGLE_APPLICATION_CREDENTIALS": ("/c/sa.json", ["/c/sa.json"]),
    "GOOGLE_GHA_CREDS_PATH": ("gha-creds-1.json", ["{cwd}/gha-creds-1.json"]),
}


def test_the_env_store_table_covers_every_variable() -> None:
    assert set(ENV_STORES) == set(defaults.CREDENTIAL_ENV_VARIABLES)


@pytest.mark.parametrize("var", sorted(ENV_STORES))
def test_a_store_moved_by_an_environment_variable_is_denied_and_named_by_its_variable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, var: str) -> None:
    value, expected = ENV_STORES[var]
    ctx = _ctx(tmp_path, monkeypatch, env={var: value, "UNRELATED": "/c/x"})
    eff = load(ctx, policy_files=(), flags=Flags())
    for p in expected:
        p = p.format(cwd=ctx.cwd)
        assert p in eff.deny_read
        assert ("filesystem.denyRead", p, f"${var}") in (eff.sources or ())
    # Control: without the variable, none of these is on the list.
    plain = load(_ctx(tmp_path, monkeypatch), policy_files=(), flags=Flags())
    assert not any(p.format(cwd=ctx.cwd) in plain.deny_read for p in expected)


def test_an_empty_credential_variable_adds_nothing() -> None:
    assert defaults.credential_env({"GNUPGHOME": "", "KUBECONFIG": ""}) == ()


def test_env_store_paths_are_literal_not_globs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = _ctx(tmp_path, monkeypatch, env={"GNUPGHOME": "/c/gnupg[1]"})
    assert "/c/gnupg[1]" in load(ctx, policy_files=(), flags=Flags()).deny_read


def test_the_policy_cache_is_keyed_on_the_credential_variables(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    cache = str(tmp_path / "cache")
    first = load_cached(_ctx(tmp_path, monkeypatch, env={"GNUPGHOME": "/c/one"}), policy_files=(),
                        flags=Flags(), cache_dir=cache)
    second = load_cached(_ctx(tmp_path, monkeypatch, env={"GNUPGHOME": "/c/two"}), policy_files=(),
                         flags=Flags(), cache_dir=cache)
    assert "/c/one" in first.deny_read and "/c/one" not in second.deny_read
    assert "/c/two" in second.deny_read
    # Control: the same variables are a cache hit (one entry per distinct value).
    load_cached(_ctx(tmp_path, monkeypatch, env={"GNUPGHOME": "/c/two"}), policy_files=(), flags=Flags(),
                cache_dir=cache)
    assert len(os.listdir(cache)) == 2


def test_allow_read_takes_a_whole_default_entry_off_the_deny_list(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = _ctx(tmp_path, monkeypatch, env={"GNUPGHOME": "/c/gnupg"})
    eff = load(ctx, policy_files=(), flags=Flags(allow_read=("~/.m2/settings.xml", "/c/gnupg")))
    assert f"{ctx.home}/.m2/settings.xml" not in eff.deny_read and "/c/gnupg" not in eff.deny_read
    assert f"{ctx.home}/.ssh" in eff.deny_read  # the rest stays
    assert ("filesystem.denyRead", f"{ctx.home}/.m2/settings.xml",
            "defaults (re-allowed by filesystem.allowRead from command line)") in (eff.sources or ())
    # The document `policy show --json` prints passes `policy check` and
    # means the same.
    doc = policy_document(eff)
    validate_layer(Layer(name="shown.json", data=json.loads(json.dumps(doc))))
    assert doc["filesystem"]["allowWritePathDirs"] is False


def test_allow_read_inside_a_denied_directory_is_kept_for_the_builder(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # A carve-out is decided against the host (builder/regions.py): the deny stays, the allow joins it.
    ctx = _ctx(tmp_path, monkeypatch)
    eff = load(ctx, policy_files=(), flags=Flags(allow_read=("~/.ssh/config",)))
    assert f"{ctx.home}/.ssh" in eff.deny_read and eff.allow_read == (f"{ctx.home}/.ssh/config",)


def test_an_allow_read_pattern_takes_the_same_deny_pattern_off(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = _ctx(tmp_path, monkeypatch)
    eff = load(ctx, policy_files=(), flags=Flags(deny_read=("**/.env", "*.pem"), allow_read=("**/.env",)))
    assert eff.deny_read_globs == (f"{ctx.cwd}/*.pem",)
    assert ("filesystem.denyRead", f"{ctx.cwd}/**/.env",
            "command line (re-allowed by filesystem.allowRead from command line)") in (eff.sources or ())


def test_allow_read_of_a_path_that_is_not_denied_changes_nothing(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = _ctx(tmp_path, monkeypatch)
    base = load(ctx, policy_files=(), flags=Flags())
    assert load(ctx, policy_files=(), flags=Flags(allow_read=("~", "/usr"))).deny_read == base.deny_read


@pytest.mark.parametrize("doc", [{"filesystem": {"allowRead": ["~/.pgpass"]}},
                                 {"filesystem": {"allowWritePathDirs": True}}])
def test_a_project_file_cannot_re_allow_or_open_path_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          doc: dict) -> None:
    ctx = _ctx(tmp_path, monkeypatch)
    (Path(ctx.cwd) / ".safebox.json").write_text(json.dumps(doc))
    with pytest.raises(PolicyError, match="a project file may not widen the sandbox"):
        load(ctx, policy_files=(), flags=Flags())


# ---------------------------------------------------------------- item 5

def test_links_on_the_way_lists_every_symlink_followed(tmp_path: Path) -> None:
    (tmp_path / "dots" / "bin").mkdir(parents=True)
    (tmp_path / "d").symlink_to("dots")
    (tmp_path / "bin").symlink_to("d/bin")
    assert links_on_the_way(str(tmp_path / "bin")) == [(str(tmp_path / "bin"), "d/bin"),
                                                       (str(tmp_path / "d"), "dots")]
    assert links_on_the_way(str(tmp_path / "dots" / "bin")) == []


def test_path_dirs_in_a_write_root_are_found_resolved_and_missing_ones_watched(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".local" / "bin").mkdir(parents=True)
    (home / "dots" / "bin").mkdir(parents=True)
    (home / "bin").symlink_to("dots/bin")
    found = path_dirs_in_write_roots(
        (f"{home}/.local/bin", f"{home}/bin", f"{home}/.cargo/bin", "/usr/bin", ".", "", "bin",
         f"{home}/.local/bin/"), [str(home)])
    assert found.existing == [f"{home}/.local/bin", f"{home}/dots/bin"]
    assert found.missing == [f"{home}/.cargo/bin"]
    assert found.links == [(f"{home}/bin", "dots/bin")]
    # Control: no write root holds them, nothing is found.
    none = path_dirs_in_write_roots((f"{home}/.local/bin", f"{home}/bin"), [str(tmp_path / "elsewhere")])
    assert (none.existing, none.missing, none.links) == ([], [], [])


def test_the_policy_cache_is_keyed_on_the_built_in_lists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 22 item 7: a safebox upgraded in place (same version) with more
    # scrub patterns must not be served the old list from its cache.
    cache = str(tmp_path / "cache")
    first = load_cached(_ctx(tmp_path, monkeypatch), policy_files=(), flags=Flags(), cache_dir=cache)
    assert "*NEW_SECRET_WORD*" not in first.env_deny
    monkeypatch.setattr(defaults, "ENV_DENY_PATTERNS", (*defaults.ENV_DENY_PATTERNS, "*NEW_SECRET_WORD*"))
    monkeypatch.setattr(defaults, "CREDENTIAL_PATHS", (*defaults.CREDENTIAL_PATHS, "~/.new-store"))
    second = load_cached(_ctx(tmp_path, monkeypatch), policy_files=(), flags=Flags(), cache_dir=cache)
    assert "*NEW_SECRET_WORD*" in second.env_deny
    assert str(tmp_path / "home" / ".new-store") in second.deny_read
    # Control: unchanged lists are a cache hit.
    load_cached(_ctx(tmp_path, monkeypatch), policy_files=(), flags=Flags(), cache_dir=cache)
    assert len(os.listdir(cache)) == 2

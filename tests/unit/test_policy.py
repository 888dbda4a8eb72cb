"""Policy validation, layering and path expansion."""

from __future__ import annotations

import json
import os

import pytest

from safebox.errors import PolicyError
from safebox.policy.load import Context, Flags, Layer, _load_from, expand_path, load, load_cached, validate_layer

CTX = Context(cwd="/work/proj", home="/home/u")


def layer(data: dict, name: str = "p.json", project: bool = False) -> Layer:
    return Layer(name=name, data=data, project=project)


@pytest.mark.parametrize("data, where", [
    ({"network": {"allowedDomain": ["x.com"]}}, "network.allowedDomain: unknown key"),
    ({"filesystem": {"allowWrites": ["."]}}, "filesystem.allowWrites: unknown key"),
    ({"bogus": 1}, "bogus: unknown key"),
    ({"network": {"allowedDomains": ["http://x.com"]}}, "network.allowedDomains[0]"),
    ({"network": {"allowedDomains": ["x.com", "*.com"]}}, "network.allowedDomains[1]"),
    ({"network": {"allowedDomains": ["*"]}}, "network.allowedDomains[0]"),
    ({"network": {"allowedDomains": ["x.com:0"]}}, "network.allowedDomains[0]"),
    ({"network": {"allowedDomains": "x.com"}}, "network.allowedDomains"),
    ({"network": {"allowLocalBinding": "yes"}}, "network.allowLocalBinding"),
    ({"filesystem": {"denyRead": [""]}}, "filesystem.denyRead[0]"),
    ({"filesystem": {"denyRead": ["~root/.ssh"]}}, "filesystem.denyRead[0]"),
    ({"env": {"deny": ["A B"]}}, "env.deny[0]"),
    ({"mandatoryDenySearchDepth": 0}, "mandatoryDenySearchDepth"),
    ({"network": {"httpProxyPort": 8080}}, "network.httpProxyPort"),
    ({"enableWeakerNestedSandbox": True}, "enableWeakerNestedSandbox"),
])
def test_invalid_policies_are_refused_naming_the_file_and_key(data: dict, where: str) -> None:
    with pytest.raises(PolicyError) as e:
        validate_layer(layer(data))
    assert e.value.message.startswith("p.json: ")
    assert where in e.value.message


def test_an_srt_settings_file_is_accepted_unchanged() -> None:
    srt = {
        "network": {"allowedDomains": ["github.com", "*.npmjs.org"], "deniedDomains": ["evil.com"],
                    "allowUnixSockets": ["/var/run/docker.sock"], "allowLocalBinding": False},
        "filesystem": {"denyRead": ["~/.ssh"], "allowWrite": [".", "/tmp"], "denyWrite": [".env"]},
        "ignoreViolations": {"*": ["/usr/bin"]},
        "enableWeakerNestedSandbox": False,
    }
    doc = validate_layer(layer(srt))
    assert doc["network"]["allowedDomains"] == ["github.com", "*.npmjs.org"]


@pytest.mark.parametrize("raw, expected", [
    ("~", "/home/u"), ("~/.ssh", "/home/u/.ssh"), (".", "/work/proj"), ("sub/../x", "/work/proj/x"),
    ("/etc//shadow", "/etc/shadow"), ("//x", "/x"),
])
def test_paths_expand_relative_to_the_working_directory_and_home(raw: str, expected: str) -> None:
    assert expand_path(raw, CTX) == expected


def _home(tmp_path, monkeypatch, user: dict | None = None, project: dict | None = None):
    home = tmp_path / "home"
    cwd = tmp_path / "proj"
    home.mkdir()
    cwd.mkdir()
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    if user is not None:
        (home / ".config" / "safebox").mkdir(parents=True)
        (home / ".config" / "safebox" / "policy.json").write_text(json.dumps(user))
    if project is not None:
        (cwd / ".safebox.json").write_text(json.dumps(project))
    return Context(cwd=str(cwd), home=str(home))


def test_layers_concatenate_lists_in_order_and_later_scalars_win(tmp_path, monkeypatch) -> None:
    ctx = _home(tmp_path, monkeypatch, user={"network": {"allowedDomains": ["a.com"], "allowLocalBinding": True}},
                project={"network": {"deniedDomains": ["b.com"], "allowLocalBinding": False}})
    pfile = tmp_path / "extra.toml"
    pfile.write_text('[network]\nallowedDomains = ["c.com"]\n')
    eff = load(ctx, policy_files=(str(pfile),), flags=Flags(allow_domains=("d.com",)))
    assert eff.allowed_domains == ("a.com", "c.com", "d.com")
    assert eff.denied_domains == ("b.com",)
    assert eff.allow_local_binding is False
    assert f"{ctx.home}/.ssh" in eff.deny_read
    assert eff.allow_write[:2] == (ctx.cwd, "/tmp")


def test_a_project_file_cannot_widen_the_sandbox_without_trust(tmp_path, monkeypatch) -> None:
    ctx = _home(tmp_path, monkeypatch, project={"network": {"allowedDomains": ["evil.com"]}})
    with pytest.raises(PolicyError) as e:
        load(ctx, policy_files=(), flags=Flags())
    assert "network.allowedDomains: a project file may not widen the sandbox" in e.value.message


def test_a_project_file_may_widen_when_the_user_trusts_project_files(tmp_path, monkeypatch) -> None:
    ctx = _home(tmp_path, monkeypatch, user={"trustProjectFiles": True},
                project={"network": {"allowedDomains": ["ok.com"]}})
    assert load(ctx, policy_files=(), flags=Flags()).allowed_domains == ("ok.com",)


def test_a_project_file_may_narrow_without_trust(tmp_path, monkeypatch) -> None:
    ctx = _home(tmp_path, monkeypatch, project={"filesystem": {"denyRead": ["secrets"]}})
    assert f"{ctx.cwd}/secrets" in load(ctx, policy_files=(), flags=Flags()).deny_read


def test_malformed_files_name_the_file(tmp_path, monkeypatch) -> None:
    ctx = _home(tmp_path, monkeypatch)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(PolicyError) as e:
        load(ctx, policy_files=(str(bad),), flags=Flags())
    assert e.value.message.startswith(f"{bad}: invalid JSON")
    with pytest.raises(PolicyError, match="policy file not found"):
        load(ctx, policy_files=(str(tmp_path / "missing.toml"),), flags=Flags())


def test_the_cache_returns_the_same_policy_and_follows_file_changes(tmp_path, monkeypatch) -> None:
    ctx = _home(tmp_path, monkeypatch)
    pfile = tmp_path / "p.json"
    pfile.write_text(json.dumps({"network": {"allowedDomains": ["a.com"]}}))
    cache = str(tmp_path / "cache")
    first = load_cached(ctx, policy_files=(str(pfile),), flags=Flags(), cache_dir=cache)
    again = load_cached(ctx, policy_files=(str(pfile),), flags=Flags(), cache_dir=cache)
    assert first == again == load(ctx, policy_files=(str(pfile),), flags=Flags())
    pfile.write_text(json.dumps({"network": {"allowedDomains": ["b.com"]}}))
    assert load_cached(ctx, policy_files=(str(pfile),), flags=Flags(), cache_dir=cache).allowed_domains == ("b.com",)


def test_a_cache_file_that_is_not_private_is_ignored(tmp_path, monkeypatch) -> None:
    ctx = _home(tmp_path, monkeypatch)
    cache = tmp_path / "cache"
    load_cached(ctx, policy_files=(), flags=Flags(), cache_dir=str(cache))
    (entry,) = cache.iterdir()
    entry.write_bytes(b"garbage")
    entry.chmod(0o644)
    assert load_cached(ctx, policy_files=(), flags=Flags(), cache_dir=str(cache)) == load(
        ctx, policy_files=(), flags=Flags())


def test_a_project_file_cannot_lower_the_search_depth_or_turn_strict_off(tmp_path, monkeypatch) -> None:
    ctx = _home(tmp_path, monkeypatch, user={"strict": True}, project={"mandatoryDenySearchDepth": 1})
    with pytest.raises(PolicyError, match="mandatoryDenySearchDepth: a project file may not lower it"):
        load(ctx, policy_files=(), flags=Flags())
    (tmp_path / "proj" / ".safebox.json").write_text(json.dumps({"strict": False}))
    with pytest.raises(PolicyError, match="strict: a project file may not turn strict mode off"):
        load(ctx, policy_files=(), flags=Flags())
    (tmp_path / "proj" / ".safebox.json").write_text(json.dumps({"mandatoryDenySearchDepth": 9}))
    assert load(ctx, policy_files=(), flags=Flags()).search_depth == 9  # raising is fine


# ------------------------------------------------------------------ messages in the user's words

def _pydantic_phrases() -> list[str]:
    """The fixed opening of every message pydantic can produce ("Input should
    be a valid list", "Value error, ", "Extra inputs are not permitted"):
    none may reach the user."""
    from pydantic_core import _pydantic_core

    out = []
    for err in _pydantic_core.list_all_errors():
        fixed = err["message_template_python"].split("{", 1)[0].strip()
        if len(fixed) >= 10:
            out.append(fixed)
    return out


PYDANTIC_PHRASES = _pydantic_phrases()


def _nest(key: str, value: object) -> dict:
    doc: dict = {}
    node = doc
    parts = key.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return doc


# Every key, with a wrong type and (where the type allows one) a wrong value,
# and the message safebox gives for it.
WRONG: list[tuple[str, object, str]] = [
    ("network", "yes", 'network: must be a table/object, not the string "yes"'),
    ("filesystem", ["."], "filesystem: must be a table/object, not a list"),
    ("env", 1, "env: must be a table/object, not the number 1"),
    ("ripgrep", "rg", 'ripgrep: must be a table/object, not the string "rg"'),
    ("network.allowedDomains", "x.com", 'network.allowedDomains: must be a list of domain names, not the string "x.com"'),
    ("network.allowedDomains", [3], "network.allowedDomains[0]: must be a domain name, not the number 3"),
    ("network.allowedDomains", ["http://x.com"], 'network.allowedDomains[0] = "http://x.com": not a domain name: '
                                                 "give the name alone (or name:port), without a scheme, path or user"),
    ("network.allowedDomains", ["[zz]"], 'network.allowedDomains[0] = "[zz]": not an IPv6 address between the brackets'),
    ("network.deniedDomains", {"a": 1}, "network.deniedDomains: must be a list of domain names (or '*'), "
                                        "not a table/object"),
    ("network.deniedDomains", ["*.com"], 'network.deniedDomains[0] = "*.com": too broad: it covers a whole '
                                         "top-level domain"),
    ("network.allowUnixSockets", "/s", 'network.allowUnixSockets: must be a list of paths, not the string "/s"'),
    ("network.allowUnixSockets", [""], 'network.allowUnixSockets[0] = "": a path must be non-empty'),
    ("network.allowAllUnixSockets", "true", 'network.allowAllUnixSockets: must be true or false, not the string "true"'),
    ("network.allowAllUnixSockets", 1, "network.allowAllUnixSockets: must be true or false, not the number 1"),
    ("network.allowLocalBinding", "yes", 'network.allowLocalBinding: must be true or false, not the string "yes"'),
    ("network.allowLocalBinding", None, None),  # null: not set (valid)
    ("network.allowLocalDestinations", [True], "network.allowLocalDestinations: must be true or false, not a list"),
    ("network.allowedAddresses", ["10.0.0.5/24"], 'network.allowedAddresses[0] = "10.0.0.5/24": \'10.0.0.5/24\' is '
                                                  "not an address or CIDR (10.0.0.5/24 has host bits set)"),
    ("network.allowedAddresses", ["10.0.0.0/8:0"], 'network.allowedAddresses[0] = "10.0.0.0/8:0": \'10.0.0.0/8:0\': '
                                                   "the port must be a number in 1-65535"),
    ("network.httpProxyPort", "8080", 'network.httpProxyPort: must be a port number from 1 to 65535, not the string'),
    ("network.httpProxyPort", 0, "network.httpProxyPort: must be a port number from 1 to 65535, not the number 0"),
    ("network.httpProxyPort", 8080, "network.httpProxyPort: an external proxy would bypass safebox's filtering proxy"),
    ("network.socksProxyPort", True, "network.socksProxyPort: must be a port number from 1 to 65535, not true"),
    ("network.socksProxyPort", 70000, "network.socksProxyPort: must be a port number from 1 to 65535, "
                                      "not the number 70000"),
    ("filesystem.denyRead", "~/.ssh", 'filesystem.denyRead: must be a list of paths or glob patterns, '
                                      'not the string "~/.ssh"'),
    ("filesystem.denyRead", ["~root/.ssh"], 'filesystem.denyRead[0] = "~root/.ssh": only \'~\' and \'~/...\' '
                                            "are supported, not '~user'"),
    ("filesystem.allowRead", "~/.pgpass", 'filesystem.allowRead: must be a list of paths or glob patterns, '
                                          'not the string "~/.pgpass"'),
    ("filesystem.allowRead", ["*.{a,b}"], 'filesystem.allowRead[0] = "*.{a,b}": braces are not expanded in glob '
                                          "patterns"),
    ("filesystem.allowWrite", ["**/.env"], 'filesystem.allowWrite[0] = "**/.env": glob patterns are not supported '
                                           "here"),
    ("filesystem.allowGitConfig", "yes", 'filesystem.allowGitConfig: must be true or false, not the string "yes"'),
    ("filesystem.disabled", True, "filesystem.disabled: srt key not supported by safebox: safebox never switches "
                                  "its filesystem rules off"),
    ("bwrapPath", "/usr/bin/bwrap", "bwrapPath: srt key not supported by safebox: safebox runs bwrap from PATH"),
    ("allowAppleEvents", "no", 'allowAppleEvents: must be true or false, not the string "no"'),
    ("enableWeakerNetworkIsolation", 1, "enableWeakerNetworkIsolation: must be true or false, not the number 1"),
    ("ripgrep.argv0", [], "ripgrep.argv0: must be a string, not a list"),
    ("filesystem.allowWritePathDirs", "yes", 'filesystem.allowWritePathDirs: must be true or false, '
                                             'not the string "yes"'),
    ("filesystem.allowWrite", ".", 'filesystem.allowWrite: must be a list of paths, not the string "."'),
    ("filesystem.allowWrite", ["a\0b"], 'filesystem.allowWrite[0] = "a\\u0000b": a path must be non-empty and '
                                        "contain no NUL byte"),
    ("filesystem.denyWrite", [1.5], 'filesystem.denyWrite[0]: must be a path or { "path": ..., "literal": true }, '
                                    "not the number 1.5"),
    ("filesystem.denyWrite", [""], 'filesystem.denyWrite[0] = "": a path must be non-empty'),
    ("env.deny", "X", 'env.deny: must be a list of environment variable patterns, not the string "X"'),
    ("env.deny", ["A B"], 'env.deny[0] = "A B": an environment variable pattern uses only letters'),
    ("env.allow", [None], "env.allow[0]: must be an environment variable pattern, not null"),
    ("env.allow", ["A-B"], 'env.allow[0] = "A-B": an environment variable pattern uses only letters'),
    ("ci", ["VERSION"], "ci: must be a table/object, not a list"),
    ("devices", True, "devices: must be a table/object, not true"),
    ("devices.gpu", "yes", "devices.gpu = \"yes\": must be true, false, or a non-empty list of GPU indices"),
    ("devices.gpu", [64], "devices.gpu: must be true, false, or a non-empty list of GPU indices from 0 to 63"),
    ("devices.gpu", [0, 2], None),
    ("ci.passEnv", "VERSION", 'ci.passEnv: must be a list of environment variable patterns, not the string "VERSION"'),
    ("ci.passEnv", ["A=B"], 'ci.passEnv[0] = "A=B": an environment variable pattern uses only letters'),
    ("ci.passEnv", ["*"], 'ci.passEnv[0] = "*": a pattern starts with at least two letters before its first'),
    ("ci.passEnv", ["I*"], 'ci.passEnv[0] = "I*": a pattern starts with at least two letters before its first'),
    ("ci.passPath", "/opt/bin", 'ci.passPath: must be a list of paths, not the string "/opt/bin"'),
    ("ci.passPath", [""], 'ci.passPath[0] = "": a path must be non-empty'),
    ("strict", "yes", 'strict: must be true or false, not the string "yes"'),
    ("trustProjectFiles", 0, "trustProjectFiles: must be true or false, not the number 0"),
    ("mandatoryDenySearchDepth", "6", 'mandatoryDenySearchDepth: must be a whole number from 1 to 20, '
                                      'not the string "6"'),
    ("mandatoryDenySearchDepth", 21, "mandatoryDenySearchDepth: must be a whole number from 1 to 20, not the number 21"),
    ("mandatoryDenySearchDepth", 2.5, "mandatoryDenySearchDepth: must be a whole number from 1 to 20, "
                                      "not the number 2.5"),
    ("ignoreViolations", ["x"], "ignoreViolations: must be a table/object whose values are lists of strings, not a list"),
    ("ignoreViolations", {"*": "x"}, 'ignoreViolations.*: must be a list of strings, not the string "x"'),
    ("allowPty", "no", 'allowPty: must be true or false, not the string "no"'),
    ("ripgrep.command", 1, "ripgrep.command: must be a string, not the number 1"),
    ("ripgrep.args", "-uu", 'ripgrep.args: must be a list of strings, not the string "-uu"'),
    ("ripgrep.args", [{}], "ripgrep.args[0]: must be a string, not a table/object"),
    ("network.tlsTerminate", True, "network.tlsTerminate: must be a table/object, not true"),
    ("network.tlsTerminate", {}, None),  # an empty table turns termination on with a per-run CA
    ("network.tlsTerminate", {"caCertPath": 1}, "network.tlsTerminate.caCertPath: must be a path, not the number 1"),
    ("network.tlsTerminate", {"excludeDomains": ["http://x.com"]},
     'network.tlsTerminate.excludeDomains[0] = "http://x.com": not a domain name'),
    ("network.tlsTerminate", {"extraCaCertPaths": "/ca.pem"},
     'network.tlsTerminate.extraCaCertPaths: must be a list of paths, not the string "/ca.pem"'),
    ("network.tlsTerminate", {"filterRequest": "x"}, "network.tlsTerminate.filterRequest: unknown key"),
    ("network.parentProxy", "http://p:3128", 'network.parentProxy: must be a table/object, not the string '
                                             '"http://p:3128"'),
    ("network.parentProxy", {"http": "socks5://p:1080"}, 'network.parentProxy.http = "socks5://p:1080": the proxy '
                                                         "URL must start with http:// or https://, not 'socks5'"),
    ("network.parentProxy", {"https": "http://p:99999"}, 'network.parentProxy.https = "http://p:99999": not a '
                                                         "proxy URL"),
    ("network.parentProxy", {"noProxy": ["a.com"]}, "network.parentProxy.noProxy: must be a string, not a list"),
    # srt 0.0.83's network keys (policy/srtnet.py).
    ("network.deniedResolvedAddresses", "10.0.0.0/8", "network.deniedResolvedAddresses: must be a list of IP "
                                                      'addresses or CIDR ranges, not the string "10.0.0.0/8"'),
    ("network.deniedResolvedAddresses", ["[fc00::]/7"], 'network.deniedResolvedAddresses[0] = "[fc00::]/7": '
                                                        "'[fc00::]/7' is not an IP address or CIDR range"),
    ("network.deniedResolvedAddresses", ["10.0.0.0/8", "fc00::/7", "192.0.2.7"], None),
    ("network.deniedDomainReasons", ["x"], "network.deniedDomainReasons: must be a table/object whose values are "
                                           "reasons (text), not a list"),
    ("network.deniedDomainReasons", {"a.com": ""}, "network.deniedDomainReasons.a.com = \"\": a reason must be a "
                                                   "non-empty string"),
    ("network.strictAllowlist", "yes", 'network.strictAllowlist: must be true or false, not the string "yes"'),
    ("network.requireHostMatch", 1, "network.requireHostMatch: must be true or false, not the number 1"),
    ("network.refuseOpaqueTunnels", "no", 'network.refuseOpaqueTunnels: must be true or false, not the string "no"'),
    ("network.stripResponseHeaders", ["set cookie"], 'network.stripResponseHeaders[0] = "set cookie": '
                                                     "'set cookie' is not an HTTP header name"),
    ("network.allowPlaintextHeaderSet", None, None),
    ("network.allowPlaintextHeaderSet", "on", 'network.allowPlaintextHeaderSet: must be true or false, not the '
                                              'string "on"'),
    ("network.mitmProxy", {"socketPath": "/tmp/m.sock", "domains": ["a.com"]},
     "network.mitmProxy: srt key not supported by safebox: safebox does not hand connections to another proxy"),
    ("credentials", [], "credentials: must be a table/object, not a list"),
    ("credentials.envVars", [{"name": "GH_TOKEN"}], "credentials.envVars[0].mode: must be"),
    ("credentials.envVars", [{"name": "GH TOKEN", "mode": "deny"}], 'credentials.envVars[0].name = "GH TOKEN": '
                                                                    "an environment variable name uses only"),
    ("credentials.envVars", [{"name": "T", "mode": "hide"}], 'credentials.envVars[0].mode: must be "deny" or '
                                                             '"mask", not the string "hide"'),
    ("credentials.envVars", [{"name": "T", "mode": "mask", "injectHosts": ["*"]}],
     'credentials.envVars[0].injectHosts[0] = "*"'),
    ("credentials.envVars", [{"name": "T", "mode": "mask", "decode": "jwt"}],
     "credentials.envVars[0].decode: srt key not supported by safebox: safebox masks the whole "
     "value only"),
    ("credentials.files", [{"path": "", "mode": "deny"}], 'credentials.files[0].path = "": a path must be non-empty'),
    ("credentials.files", [{"path": "~/.netrc", "mode": "mask", "extract": "password (\\S+)"}],
     "credentials.files[0].extract: srt key not supported by safebox"),
    ("credentials.allowPlaintextInject", "yes", 'credentials.allowPlaintextInject: must be true or false, '
                                                'not the string "yes"'),
    ("credentials.awsPairs", [], "credentials.awsPairs: srt key not supported by safebox"),
    ("enableWeakerNestedSandbox", "no", 'enableWeakerNestedSandbox: must be true or false, not the string "no"'),
    ("enableWeakerNestedSandbox", True, "enableWeakerNestedSandbox: safebox never weakens its sandbox"),
    ("presets", "npm", 'presets: must be a list of preset names, not the string "npm"'),
    ("presets", ["nmp"], 'presets[0] = "nmp": unknown preset \'nmp\' (did you mean npm?); known: npm, pip, cargo'),
    ("limits", 64, "limits: must be a table/object, not the number 64"),
    ("limits.processes", "many", 'limits.processes = "many": not a number of processes: give a whole number'),
    ("limits.processes", 2, "limits.processes: 2 is out of range: give a whole number from 8 to 4194304"),
    ("limits.memory", "2 gigs", 'limits.memory = "2 gigs": not a size: give bytes, or a number with a unit'),
    ("limits.memory", [1], "limits.memory: must be a size, not a list: give bytes"),
    ("limits.tmpSize", 0, 'limits.tmpSize: must be more than 0 (no limit is "unlimited")'),
    ("limits.tmpSize", "unlimited", None),
    ("limits.wallTime", "30m1h", 'limits.wallTime = "30m1h": not a duration: give seconds, or a duration'),
    ("limits.wallTime", True, "limits.wallTime: must be a duration, not true/false"),
]


def test_the_table_of_wrong_values_covers_every_key() -> None:
    from safebox.policy.load import _known_keys

    assert "network" in _known_keys() and "filesystem.allowWrite" in _known_keys()
    assert set(_known_keys()) <= {key for key, _, _ in WRONG}


@pytest.mark.parametrize("key, value, message", WRONG, ids=[f"{k}={v!r}" for k, v, _ in WRONG])
def test_every_key_with_a_wrong_type_or_value_is_explained_in_safebox_words(key: str, value: object,
                                                                            message: str | None) -> None:
    if message is None:
        validate_layer(layer(_nest(key, value)))
        return
    with pytest.raises(PolicyError) as e:
        validate_layer(layer(_nest(key, value)))
    assert e.value.message.startswith(f"p.json: {message}"), e.value.message
    leaked = [p for p in PYDANTIC_PHRASES if p in e.value.message]
    assert not leaked, e.value.message


def test_the_pydantic_phrase_list_would_catch_the_old_wording() -> None:
    # Control: the list holds what used to leak.
    assert "Input should be a valid list" in PYDANTIC_PHRASES
    assert any(p.startswith("Value error") for p in PYDANTIC_PHRASES)


@pytest.mark.parametrize("data, suggestion", [
    ({"filesystem": {"allowWrites": ["."]}}, "filesystem.allowWrites: unknown key (did you mean `filesystem.allowWrite`?)"),
    ({"network": {"allowedDomain": ["x.com"]}},
     "network.allowedDomain: unknown key (did you mean `network.allowedDomains`?)"),
    ({"network": {"allowUnixSocket": ["/s"]}},
     "network.allowUnixSocket: unknown key (did you mean `network.allowUnixSockets`?)"),
    ({"stirct": True}, "stirct: unknown key (did you mean `strict`?)"),
    ({"netwrok": {}}, "netwrok: unknown key (did you mean `network`?)"),
    ({"allowWrite": ["."]}, "allowWrite: unknown key (did you mean `filesystem.allowWrite`?)"),
    ({"network": {"denyRead": ["x"]}}, "network.denyRead: unknown key (did you mean `filesystem.denyRead`?)"),
    ({"bogus": 1}, "bogus: unknown key (the keys are listed in docs/policy-reference.md)"),
])
def test_an_unknown_key_suggests_the_nearest_known_one(data: dict, suggestion: str) -> None:
    with pytest.raises(PolicyError) as e:
        validate_layer(layer(data))
    assert e.value.message == f"p.json: {suggestion}"


@pytest.mark.parametrize(("doc", "key"), [({"filesystem": {"disabled": False}}, "filesystem.disabled"),
                                          ({"seccomp": {"applyPath": "/x"}}, "seccomp"),
                                          ({"git": {"safeDirectories": ["/w"]}}, "git"),
                                          ({"windows": {}}, "windows"), ({"socatPath": "/s"}, "socatPath"),
                                          ({"javaAgentJarPath": "/j.jar"}, "javaAgentJarPath")])
def test_an_srt_key_safebox_does_not_support_says_so_and_why(doc: dict, key: str) -> None:
    from safebox.policy.model import SRT_KEYS_NOT_SUPPORTED

    with pytest.raises(PolicyError) as e:
        validate_layer(layer(doc))
    assert e.value.message == f"p.json: {key}: srt key not supported by safebox: {SRT_KEYS_NOT_SUPPORTED[key]}"


@pytest.mark.parametrize("flags, message", [
    (Flags(allow_domains=("http://x.com",)),
     "--allow-domain http://x.com: not a domain name: give the name alone (or name:port), without a scheme, path or user"),
    (Flags(allow_domains=("ok.com", "*.com")), "--allow-domain '*.com': too broad: it covers a whole top-level domain"),
    (Flags(deny_domains=("x.com:https",)), "--deny-domain x.com:https: not a domain name"),
    (Flags(allow_domains=("x.com:70000",)), "--allow-domain x.com:70000: port 70000 is out of range (1 to 65535)"),
    (Flags(allow_write=("~root/x",)), "--allow-write '~root/x': only '~' and '~/...' are supported, not '~user'"),
    (Flags(deny_read=("",)), "--deny-read '': a path must be non-empty and contain no NUL byte"),
    (Flags(deny_write=("a\0b",)), "--deny-write 'a\\x00b': a path must be non-empty and contain no NUL byte"),
])
def test_a_bad_flag_value_is_reported_with_the_flag_the_user_typed(flags: Flags, message: str) -> None:
    with pytest.raises(PolicyError) as e:
        load(CTX, policy_files=(), flags=flags)
    assert e.value.message.startswith(message), e.value.message
    assert "command line" not in e.value.message and "network." not in e.value.message


def test_every_flag_that_feeds_a_policy_key_has_its_name_for_messages() -> None:
    from safebox.cli import EXEC_OPTIONS
    from safebox.policy.load import FLAG_FOR_KEY, flags_layer

    flag_of = {o.dest: o.long for o in EXEC_OPTIONS}
    for field in Flags.__fields__:
        value = True if field == "strict" else "all" if field == "allow_gpu" else ("x.com",)
        data = flags_layer(Flags(**{field: value})).data
        key: tuple[str, ...] = ()
        node = data
        while isinstance(node, dict):
            (name,) = node
            key, node = (*key, name), node[name]
        assert FLAG_FOR_KEY[key] == flag_of[field], field


@pytest.mark.parametrize("name, raw", [("p.toml", b""), ("p.json", b""), ("p.json", b"  \n\t\n"),
                                       ("p.toml", b"# only a comment\n"), ("p", b"")])
def test_an_empty_file_is_an_empty_policy_in_json_as_in_toml(name: str, raw: bytes) -> None:
    from safebox.policy.load import parse_document

    assert parse_document(name, raw) == {}
    assert validate_layer(layer({}, name=name)) == {}


# ------------------------------------------------------------------ the policy cache's bound

def _entries(cache) -> list:
    return sorted(p for p in cache.iterdir() if p.name.endswith(".marshal"))


def test_a_thousand_distinct_policies_stay_within_the_cache_bound(tmp_path, monkeypatch) -> None:
    from safebox.policy.load import POLICY_CACHE_MAX_BYTES, POLICY_CACHE_MAX_ENTRIES

    ctx = _home(tmp_path, monkeypatch)
    cache = tmp_path / "cache"
    first = Flags(deny_write=("first",))
    load_cached(ctx, policy_files=(), flags=first, cache_dir=str(cache))
    (first_entry,) = _entries(cache)
    for i in range(1000):
        flags = Flags(deny_write=(f"d{i}",))
        assert load_cached(ctx, policy_files=(), flags=flags, cache_dir=str(cache)).deny_write[-1].endswith(f"/d{i}")
        if i % 100 == 0:
            # Used again now and then, each time after a minute's rest (an
            # mtime long past): a hit marks it used, so it outlives the
            # entries written with it.
            os.utime(first_entry, (1, 1))
            assert load_cached(ctx, policy_files=(), flags=first, cache_dir=str(cache)).deny_write[-1].endswith("/first")
            assert first_entry.stat().st_mtime > 1
    entries = _entries(cache)
    assert len(entries) == POLICY_CACHE_MAX_ENTRIES
    assert sum(p.stat().st_size for p in entries) <= POLICY_CACHE_MAX_BYTES
    assert first_entry in entries
    # The newest are kept: the last policy is a hit (its entry is unchanged).
    last = Flags(deny_write=("d999",))
    before = {p: p.stat().st_mtime_ns for p in entries}
    load_cached(ctx, policy_files=(), flags=last, cache_dir=str(cache))
    assert {p: p.stat().st_mtime_ns for p in _entries(cache)} == before
    assert not [p for p in cache.iterdir() if p.name.endswith(".tmp")]


def test_the_cache_is_bounded_by_size_too_and_never_evicts_the_entry_just_written(tmp_path) -> None:
    from safebox.policy.load import evict_policy_cache

    cache = tmp_path / "cache"
    cache.mkdir()
    for i in range(10):
        p = cache / f"policy-{i:032x}.marshal"
        p.write_bytes(b"x" * 1000)
        os.utime(p, (1000 + i, 1000 + i))
    (cache / "bpf-0123.bin").write_bytes(b"y" * 5000)  # not a policy entry: never touched
    stale_tmp = cache / f"policy-{0:032x}.marshal.4242.tmp"
    stale_tmp.write_bytes(b"half")
    os.utime(stale_tmp, (1, 1))
    keep = str(cache / f"policy-{0:032x}.marshal")  # the oldest, but just written
    removed = evict_policy_cache(str(cache), keep=keep, max_entries=100, max_bytes=3500)
    left = sorted(p.name for p in cache.iterdir())
    assert left == ["bpf-0123.bin", f"policy-{0:032x}.marshal", f"policy-{8:032x}.marshal",
                    f"policy-{9:032x}.marshal"]
    assert stale_tmp.name in removed and len(removed) == 8


def test_a_cache_hit_does_not_scan_the_cache_dir(tmp_path, monkeypatch) -> None:
    ctx = _home(tmp_path, monkeypatch)
    cache = str(tmp_path / "cache")
    load_cached(ctx, policy_files=(), flags=Flags(), cache_dir=cache)
    from safebox.policy import load as load_mod

    def boom(*_a, **_k):
        raise AssertionError("evicted on a hit")

    monkeypatch.setattr(load_mod, "evict_policy_cache", boom)
    load_cached(ctx, policy_files=(), flags=Flags(), cache_dir=cache)


def test_the_srt_network_and_credential_keys_merge_and_show_as_a_policy_that_validates(tmp_path) -> None:
    """Lists concatenate, scalars later wins, a credential named again is
    replaced; `policy show --json`'s document passes validation again."""
    from safebox.policy.load import policy_document
    from safebox.policy.model import validate

    first = tmp_path / "a.json"
    first.write_text(json.dumps({
        "network": {"allowedDomains": ["api.example.com:443"],
                    "tlsTerminate": {"excludeDomains": ["mtls.example.com"], "extraCaCertPaths": ["~/ca.pem"]},
                    "parentProxy": {"https": "http://p.corp:3128"}},
        "credentials": {"envVars": [{"name": "T", "mode": "mask"}], "files": [{"path": "~/tok", "mode": "deny"}]}}))
    ctx = Context(cwd=str(tmp_path), home="/home/u")
    eff = load(ctx, policy_files=(str(first),), flags=Flags(allow_domains=("b.example.com",)))
    assert eff.allowed_domains == ("api.example.com:443", "b.example.com")
    assert eff.tls_terminate and eff.tls_exclude_domains == ("mtls.example.com",)
    assert eff.tls_extra_ca_cert_paths == ("/home/u/ca.pem",)
    assert eff.parent_proxy_https == "http://p.corp:3128" and eff.parent_proxy_http is None
    assert eff.credential_env_vars == (("T", "mask", None),)
    assert eff.credential_files == (("/home/u/tok", "deny", None),)
    doc = policy_document(eff)
    assert doc["network"]["tlsTerminate"]["excludeDomains"] == ["mtls.example.com"]
    assert doc["credentials"]["envVars"] == [{"name": "T", "mode": "mask"}]
    validate(json.loads(json.dumps(doc)))
    # A later layer's entry for the same name replaces the earlier one.
    second = tmp_path / "b.json"
    second.write_text(json.dumps({"credentials": {"envVars": [{"name": "T", "mode": "deny"}]}}))
    merged = _load_from([(str(first), False, first.read_bytes()), (str(second), False, second.read_bytes())],
                        ctx, Flags())
    assert merged.credential_env_vars == (("T", "deny", None),)

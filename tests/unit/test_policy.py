"""Policy validation, layering and path expansion."""

from __future__ import annotations

import json

import pytest

from safebox.errors import PolicyError
from safebox.policy.load import Context, Flags, Layer, expand_path, load, load_cached, validate_layer

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
    ({"network": {"allowedDomains": ["x.com:443"]}}, "network.allowedDomains[0]"),
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
    eff = load(ctx, policy_file=str(pfile), flags=Flags(allow_domains=("d.com",)))
    assert eff.allowed_domains == ("a.com", "c.com", "d.com")
    assert eff.denied_domains == ("b.com",)
    assert eff.allow_local_binding is False
    assert f"{ctx.home}/.ssh" in eff.deny_read
    assert eff.allow_write[:2] == (ctx.cwd, "/tmp")


def test_a_project_file_cannot_widen_the_sandbox_without_trust(tmp_path, monkeypatch) -> None:
    ctx = _home(tmp_path, monkeypatch, project={"network": {"allowedDomains": ["evil.com"]}})
    with pytest.raises(PolicyError) as e:
        load(ctx, policy_file=None, flags=Flags())
    assert "network.allowedDomains: a project file may not widen the sandbox" in e.value.message


def test_a_project_file_may_widen_when_the_user_trusts_project_files(tmp_path, monkeypatch) -> None:
    ctx = _home(tmp_path, monkeypatch, user={"trustProjectFiles": True},
                project={"network": {"allowedDomains": ["ok.com"]}})
    assert load(ctx, policy_file=None, flags=Flags()).allowed_domains == ("ok.com",)


def test_a_project_file_may_narrow_without_trust(tmp_path, monkeypatch) -> None:
    ctx = _home(tmp_path, monkeypatch, project={"filesystem": {"denyRead": ["secrets"]}})
    assert f"{ctx.cwd}/secrets" in load(ctx, policy_file=None, flags=Flags()).deny_read


def test_malformed_files_name_the_file(tmp_path, monkeypatch) -> None:
    ctx = _home(tmp_path, monkeypatch)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(PolicyError) as e:
        load(ctx, policy_file=str(bad), flags=Flags())
    assert e.value.message.startswith(f"{bad}: invalid JSON")
    with pytest.raises(PolicyError, match="policy file not found"):
        load(ctx, policy_file=str(tmp_path / "missing.toml"), flags=Flags())


def test_the_cache_returns_the_same_policy_and_follows_file_changes(tmp_path, monkeypatch) -> None:
    ctx = _home(tmp_path, monkeypatch)
    pfile = tmp_path / "p.json"
    pfile.write_text(json.dumps({"network": {"allowedDomains": ["a.com"]}}))
    cache = str(tmp_path / "cache")
    first = load_cached(ctx, policy_file=str(pfile), flags=Flags(), cache_dir=cache)
    again = load_cached(ctx, policy_file=str(pfile), flags=Flags(), cache_dir=cache)
    assert first == again == load(ctx, policy_file=str(pfile), flags=Flags())
    pfile.write_text(json.dumps({"network": {"allowedDomains": ["b.com"]}}))
    assert load_cached(ctx, policy_file=str(pfile), flags=Flags(), cache_dir=cache).allowed_domains == ("b.com",)


def test_a_cache_file_that_is_not_private_is_ignored(tmp_path, monkeypatch) -> None:
    ctx = _home(tmp_path, monkeypatch)
    cache = tmp_path / "cache"
    load_cached(ctx, policy_file=None, flags=Flags(), cache_dir=str(cache))
    (entry,) = cache.iterdir()
    entry.write_bytes(b"garbage")
    entry.chmod(0o644)
    assert load_cached(ctx, policy_file=None, flags=Flags(), cache_dir=str(cache)) == load(
        ctx, policy_file=None, flags=Flags())


def test_a_project_file_cannot_lower_the_search_depth_or_turn_strict_off(tmp_path, monkeypatch) -> None:
    ctx = _home(tmp_path, monkeypatch, user={"strict": True}, project={"mandatoryDenySearchDepth": 1})
    with pytest.raises(PolicyError, match="mandatoryDenySearchDepth: a project file may not lower it"):
        load(ctx, policy_file=None, flags=Flags())
    (tmp_path / "proj" / ".safebox.json").write_text(json.dumps({"strict": False}))
    with pytest.raises(PolicyError, match="strict: a project file may not turn strict mode off"):
        load(ctx, policy_file=None, flags=Flags())
    (tmp_path / "proj" / ".safebox.json").write_text(json.dumps({"mandatoryDenySearchDepth": 9}))
    assert load(ctx, policy_file=None, flags=Flags()).search_depth == 9  # raising is fine

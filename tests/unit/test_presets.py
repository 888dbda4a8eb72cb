"""Toolchain presets: the table, how layers expand them, the sandbox-private
cache leaves, the refusal lines and the missing write roots (pure or on
``tmp_path`` only; the end-to-end runs are in tests/integration)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from safebox.builder.bwrap import mount_args
from safebox.builder.caches import cache_env, prepare
from safebox.builder.resolved import Layers, ResolvedPolicy
from safebox.builder.write_roots import create_missing
from safebox.errors import BuildError, PolicyError
from safebox.policy.load import Context, Flags, Layer, _load_from, merge, policy_document, validate_layer
from safebox.policy.model import _check_domain_pattern
from safebox.policy.presets import PRESETS, active, describe, presets_for_host, project_key
from safebox.proxy.explain import MAX_LINES, Explainer, refusal_line
from safebox.proxy.rules import NetworkRules
from safebox.run.host import hidden_tmp_hint

CTX = Context(cwd="/work/proj", home="/home/u")


@pytest.mark.parametrize("name", list(PRESETS))
def test_every_preset_domain_is_a_valid_allowed_domain_pattern(name: str) -> None:
    for d in PRESETS[name].domains:
        assert _check_domain_pattern(d) == d
        assert NetworkRules.from_policy([d]).check_host(d).allowed


def test_cache_leaves_are_distinct_and_never_nested() -> None:
    leaves = [(p.name, c.name) for p in PRESETS.values() for c in p.caches]
    assert len(leaves) == len(set(leaves))
    assert all("/" not in c and c not in (".", "..") for _, c in leaves)


def test_the_issue_names_six_presets() -> None:
    assert set(PRESETS) == {"npm", "pip", "cargo", "go", "maven", "github"}


def test_a_preset_flag_expands_into_allowed_domains_with_its_source() -> None:
    eff = _load_from([], CTX, Flags(presets=("pip",)))
    assert eff.presets == ("pip",)
    assert eff.allowed_domains == ("pypi.org", "files.pythonhosted.org")
    assert ("network.allowedDomains", "pypi.org", "preset pip (command line)") in eff.sources
    assert ("presets", "pip", "command line") in eff.sources


def test_a_presets_key_in_a_policy_file_expands_like_the_flag() -> None:
    raw = json.dumps({"presets": ["npm", "github"], "network": {"allowedDomains": ["example.com"]}}).encode()
    eff = _load_from([("/p.json", False, raw)], CTX, Flags())
    assert eff.presets == ("npm", "github")
    assert eff.allowed_domains[0] == "example.com"
    assert {"registry.npmjs.org", "github.com", "objects.githubusercontent.com"} <= set(eff.allowed_domains)
    assert ("network.allowedDomains", "github.com", "preset github (/p.json)") in eff.sources


def test_an_unknown_preset_in_a_file_is_an_error_naming_the_key_and_the_near_miss() -> None:
    with pytest.raises(PolicyError) as e:
        validate_layer(Layer(name="p.toml", data={"presets": ["npm", "pipp"]}))
    assert e.value.message.startswith('p.toml: presets[1] = "pipp": unknown preset \'pipp\' (did you mean pip?); ')


def test_an_unknown_preset_flag_is_an_error_naming_the_flag() -> None:
    with pytest.raises(PolicyError) as e:
        _load_from([], CTX, Flags(presets=("nmp",)))
    assert e.value.message.startswith("--preset nmp: unknown preset 'nmp' (did you mean npm?)")


def test_a_project_file_may_not_name_a_preset_without_trust() -> None:
    layers = [Layer(name="defaults", data={}), Layer(name=".safebox.toml", data={"presets": ["npm"]}, project=True)]
    with pytest.raises(PolicyError) as e:
        merge([(la, validate_layer(la)) for la in layers], CTX)
    assert "presets: a project file may not widen the sandbox" in e.value.message


def test_policy_show_json_with_presets_passes_policy_check() -> None:
    eff = _load_from([], CTX, Flags(presets=("cargo",)))
    doc = policy_document(eff)
    assert doc["presets"] == ["cargo"]
    assert validate_layer(Layer(name="saved.json", data=json.loads(json.dumps(doc))))["presets"] == ["cargo"]


def test_a_registry_allowed_by_hand_activates_its_presets_caches() -> None:
    # The README's `--allow-domain registry.npmjs.org -- npm install`.
    assert active((), ("registry.npmjs.org",)) == ("npm",)
    assert active((), ("*.npmjs.org",)) == ("npm",)
    assert active((), ("pypi.org", "example.com")) == ("pip",)
    assert active(("github",), ()) == ("github",)
    assert active((), ("example.com", "files.pythonhosted.org")) == ()  # not the registry itself
    # Decided when the layers merge, so that the run itself never needs the table.
    assert _load_from([], CTX, Flags(allow_domains=("registry.npmjs.org",))).cache_presets == ("npm",)
    assert _load_from([], CTX, Flags(presets=("go", "github"))).cache_presets == ("go", "github")
    assert _load_from([], CTX, Flags(allow_domains=("example.com",))).cache_presets == ()


def test_policy_show_describes_each_presets_caches(tmp_path: Path) -> None:
    out = describe(("maven",), (), state=str(tmp_path), home="/home/u", work_dir=WORK)
    cache = out["maven"]["caches"][0]
    assert cache["dir"] == str(tmp_path / "sandbox-caches" / project_key(WORK) / "maven" / "m2-repository")
    assert cache["env"]["MAVEN_OPTS"].startswith(f"... -Dmaven.repo.local={cache['dir']} ")
    assert cache["hostPaths"] == ["/home/u/.m2/repository"]


def test_a_refused_hosts_preset_is_suggested() -> None:
    assert presets_for_host("files.pythonhosted.org") == ("pip",)
    assert presets_for_host("example.com") == ()


# ------------------------------------------------------------------ caches

WORK = "/srv/proj"


def test_cache_leaves_are_created_private_and_named_by_variables(tmp_path: Path) -> None:
    plan = prepare(("pip",), state=str(tmp_path), home="/home/u", work_dir=WORK)
    base = tmp_path / "sandbox-caches"
    project = base / project_key(WORK)
    assert plan.dirs == (str(project / "pip" / "pip"), str(project / "pip" / "uv"))
    for d in (base, project, project / "pip", *map(Path, plan.dirs)):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700
    assert cache_env(plan, {}, proxy=None) == {"PIP_CACHE_DIR": plan.dirs[0], "UV_CACHE_DIR": plan.dirs[1]}
    assert plan.host_paths == ("/home/u/.cache/pip", "/home/u/.cache/uv")


def test_a_cache_leaf_loosened_by_the_command_is_made_private_again(tmp_path: Path) -> None:
    plan = prepare(("go",), state=str(tmp_path), home="/h", work_dir=WORK)
    os.chmod(plan.dirs[0], 0o777)
    prepare(("go",), state=str(tmp_path), home="/h", work_dir=WORK)
    assert stat.S_IMODE(os.stat(plan.dirs[0]).st_mode) == 0o700


def test_a_cache_leaf_replaced_by_a_symlink_is_refused(tmp_path: Path) -> None:
    plan = prepare(("npm",), state=str(tmp_path), home="/h", work_dir=WORK)
    target = tmp_path / "elsewhere"
    target.mkdir()
    os.rmdir(plan.dirs[0])
    os.symlink(target, plan.dirs[0])
    with pytest.raises(BuildError, match="is not a directory owned by you"):
        prepare(("npm",), state=str(tmp_path), home="/h", work_dir=WORK)


@pytest.mark.parametrize("level", ["sandbox-caches", "project", "preset"])
def test_a_cache_level_above_the_leaf_replaced_by_a_symlink_is_refused(tmp_path: Path, level: str) -> None:
    plan = prepare(("npm",), state=str(tmp_path), home="/h", work_dir=WORK)
    preset = Path(plan.dirs[0]).parent
    d = {"sandbox-caches": preset.parent.parent, "project": preset.parent, "preset": preset}[level]
    moved = d.with_name(d.name + ".moved")
    d.rename(moved)
    d.symlink_to(moved)
    with pytest.raises(BuildError, match=f"sandbox cache {d} is not a directory owned by you"):
        prepare(("npm",), state=str(tmp_path), home="/h", work_dir=WORK)


def test_a_cache_level_that_is_a_file_is_refused(tmp_path: Path) -> None:
    plan = prepare(("go",), state=str(tmp_path), home="/h", work_dir=WORK)
    os.rmdir(plan.dirs[1])
    Path(plan.dirs[1]).write_text("")
    with pytest.raises(BuildError, match="is not a directory owned by you"):
        prepare(("go",), state=str(tmp_path), home="/h", work_dir=WORK)


def test_each_work_dir_has_caches_of_its_own(tmp_path: Path) -> None:
    a = prepare(("cargo",), state=str(tmp_path), home="/h", work_dir="/srv/a")
    b = prepare(("cargo",), state=str(tmp_path), home="/h", work_dir="/srv/b")
    again = prepare(("cargo",), state=str(tmp_path), home="/h", work_dir="/srv/a")
    assert a.dirs != b.dirs and again.dirs == a.dirs
    # A subdirectory is a project of its own: it writes less than its parent.
    assert prepare(("cargo",), state=str(tmp_path), home="/h", work_dir="/srv/a/sub").dirs != a.dirs


def test_a_project_key_is_the_work_dirs_real_path_digested(tmp_path: Path) -> None:
    real = tmp_path / "proj"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    assert project_key(str(tmp_path / "link")) == project_key(str(real))
    key = project_key(str(real))
    assert key.startswith("proj-") and len(key) == len("proj-") + 32
    # The readable part is for ls only: odd characters become _, / is "root".
    assert project_key("/srv/a b$(x)").startswith("a_b__x_-")
    assert project_key("/").startswith("root-")
    assert project_key("/srv/.hidden").startswith("hidden-")


def test_a_dry_run_creates_no_cache(tmp_path: Path) -> None:
    plan = prepare(("cargo",), state=str(tmp_path), home="/h", work_dir=WORK, create=False)
    assert plan.dirs == (str(tmp_path / "sandbox-caches" / project_key(WORK) / "cargo" / "cargo-home"),)
    assert not (tmp_path / "sandbox-caches").exists()


def test_mavens_options_are_appended_with_the_proxy_filled_in(tmp_path: Path) -> None:
    plan = prepare(("maven",), state=str(tmp_path), home="/h", work_dir=WORK)
    env = cache_env(plan, {"MAVEN_OPTS": "-Xmx1g"}, proxy=("127.0.0.1", 3128))
    assert env["MAVEN_OPTS"] == (f"-Xmx1g -Dmaven.repo.local={plan.dirs[0]} -Dhttp.proxyHost=127.0.0.1 "
                                 "-Dhttp.proxyPort=3128 -Dhttps.proxyHost=127.0.0.1 -Dhttps.proxyPort=3128 "
                                 "-Dhttp.nonProxyHosts=")


def test_github_has_no_cache(tmp_path: Path) -> None:
    assert prepare(("github",), state=str(tmp_path), home="/h", work_dir=WORK).dirs == ()


def test_cache_binds_come_after_the_read_only_rebinds_of_the_state_dir() -> None:
    rp = ResolvedPolicy(layers=Layers.BOTH, cwd="/home/u", write_roots=("/home/u",),
                        read_only=("/home/u/.cache/safebox",), sealed_dirs=(),
                        cache_dirs=("/home/u/.cache/safebox/sandbox-caches/npm/npm",))
    a = mount_args(rp)
    ro = a.index("/home/u/.cache/safebox")
    bind = a.index("/home/u/.cache/safebox/sandbox-caches/npm/npm")
    assert a[ro - 1] == "--ro-bind" and a[bind - 1] == "--bind" and bind > ro


# ------------------------------------------------------------------ refusals

def _decision(host: str, **kw: object):
    rules = NetworkRules.from_policy(kw.get("allowed", ("example.com",)), kw.get("denied", ()))  # type: ignore[arg-type]
    return rules.check_host(host)


@pytest.mark.parametrize("host, kw, expect", [
    ("pypi.org", {}, "safebox: refused CONNECT to pypi.org:443 (pypi.org is not in network.allowedDomains); "
                     "fix: --allow-domain pypi.org or --preset pip (network.allowedDomains in a policy file)"),
    ("evil.example.com", {"allowed": ("*.example.com",), "denied": ("evil.example.com",)},
     "safebox: refused CONNECT to evil.example.com:443 (evil.example.com matches 'evil.example.com' in "
     "network.deniedDomains); fix: evil.example.com is denied on purpose: remove the matching --deny-domain "
     "or network.deniedDomains entry"),
    ("10.0.0.5", {}, "safebox: refused CONNECT to 10.0.0.5:443 (IP address 10.0.0.5 is not listed literally in "
                     "network.allowedDomains); fix: --allow-domain 10.0.0.5 (network.allowedDomains in a policy file)"),
])
def test_a_refusal_line_names_the_host_the_rule_and_the_fix(host: str, kw: dict, expect: str) -> None:
    assert refusal_line(host, 443, "connect", _decision(host, **kw)) == expect + "\n"


def test_a_local_destination_refusal_names_allow_local_destinations() -> None:
    import ipaddress

    d = NetworkRules.from_policy(["localhost"]).check_address(ipaddress.ip_address("127.0.0.1"), host="localhost")
    line = refusal_line("localhost", 80, "http", d)
    assert line.startswith("safebox: refused HTTP to localhost:80 (localhost resolves to 127.0.0.1, a loopback ")
    assert "fix: set network.allowLocalDestinations = true in a policy file" in line


def test_a_refusal_line_cannot_carry_escape_sequences() -> None:
    host = "\x1b]0;pwned\x07evil.com"
    line = refusal_line(host, 1080, "socks5", _decision(host))
    assert "\x1b" not in line and "\x07" not in line
    assert line.startswith("safebox: refused SOCKS5 to ")
    assert "no policy change allows it" in line


def test_refusals_are_explained_once_per_host_and_port_and_then_capped() -> None:
    r, w = os.pipe()
    try:
        ex = Explainer(fd=w)
        for _ in range(3):
            ex("pypi.org", 443, "connect", _decision("pypi.org"))
        ex("pypi.org", 80, "http", _decision("pypi.org"))
        for i in range(MAX_LINES + 10):
            ex(f"h{i}.org", 443, "connect", _decision(f"h{i}.org"))
        os.close(w)
        w = -1
        lines = os.read(r, 1 << 20).decode().splitlines()
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)
    assert lines[0].startswith("safebox: refused CONNECT to pypi.org:443 ")
    assert lines[1].startswith("safebox: refused HTTP to pypi.org:80 ")
    assert len(lines) == MAX_LINES + 1
    assert lines[-1].startswith(f"safebox: more than {MAX_LINES} destinations refused")


def test_the_hidden_tmp_hint_names_a_host_tmp_path_only_when_it_exists_and_is_not_bound() -> None:
    import tempfile

    with tempfile.NamedTemporaryFile(dir="/tmp", prefix="sbx-hint-") as f:
        rp = ResolvedPolicy(layers=Layers.BOTH, cwd="/w", write_roots=("/w",), read_only=(), sealed_dirs=())
        assert hidden_tmp_hint(("cat", f.name), rp) == (
            f"hint: {f.name} exists on the host, but the sandbox has a private /tmp that hides it; "
            f"use --allow-write {f.name} to bind it in, or a path outside /tmp")
        assert hidden_tmp_hint(("tool", f"--in={f.name}"), rp) is not None
        assert hidden_tmp_hint(("cat", f.name + "-missing"), rp) is None
        assert hidden_tmp_hint(("cat", f.name), rp.replace(write_roots=("/w", f.name))) is None


# ------------------------------------------------------------------ missing write roots

def test_a_missing_write_root_is_created_when_its_parent_is_ours(tmp_path: Path) -> None:
    want = tmp_path / "cache"
    msgs = create_missing((str(want),), skip=(), never_under=(), dry_run=False)
    assert want.is_dir()
    assert msgs == [f"created the missing write root {want} (--allow-write)"]


def test_a_dry_run_creates_no_write_root(tmp_path: Path) -> None:
    msgs = create_missing((str(tmp_path / "x"),), skip=(), never_under=(), dry_run=True)
    assert not (tmp_path / "x").exists() and msgs[0].startswith("would create")


@pytest.mark.parametrize("rel, why", [
    ("a/b", "neither does its parent"),
    ("proj/.git/hooks", "protected name"),
    (".vscode", "protected name"),
    ("denied/sub", "lies inside"),
])
def test_a_missing_write_root_is_refused_when_unsafe(tmp_path: Path, rel: str, why: str) -> None:
    (tmp_path / "proj" / ".git").mkdir(parents=True)
    (tmp_path / "denied").mkdir()
    with pytest.raises(BuildError) as e:
        create_missing((str(tmp_path / rel),), skip=(), never_under=(str(tmp_path / "denied"),), dry_run=False)
    assert e.value.message.startswith(f"--allow-write/filesystem.allowWrite {tmp_path / rel} does not exist and ")
    assert why in e.value.message
    assert not (tmp_path / rel).exists()


@pytest.mark.parametrize("path", ["/usr/local/sbx-never", "/etc/sbx-never", "/sbx-never"])
def test_a_missing_write_root_in_a_system_location_is_refused(path: str) -> None:
    with pytest.raises(BuildError, match="system location"):
        create_missing((path,), skip=(), never_under=(), dry_run=False)
    assert not os.path.exists(path)


def test_a_dangling_symlink_write_root_is_refused(tmp_path: Path) -> None:
    (tmp_path / "link").symlink_to(tmp_path / "gone")
    with pytest.raises(BuildError, match="dangling symlink"):
        create_missing((str(tmp_path / "link"),), skip=(), never_under=(), dry_run=False)


def test_docs_toolchains_names_every_preset_domain_variable_and_host_cache() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "toolchains.md").read_text()
    for p in PRESETS.values():
        assert f"`{p.name}`" in doc
        for d in p.domains:
            assert f"`{d}`" in doc
        for c in p.caches:
            assert f"`{c.name}/`" in doc
            for v in c.env:
                assert f"`{v.name}`" in doc
            for h in c.host_paths:
                assert f"`{h}`" in doc


def test_a_missing_write_root_inside_a_re_allowed_path_is_created(tmp_path: Path) -> None:
    # denyRead ~, allowRead ~/proj: a write root ~/proj/build may be created; ~/other/build may not.
    (tmp_path / "proj").mkdir()
    (tmp_path / "other").mkdir()
    want = tmp_path / "proj" / "build"
    create_missing((str(want),), skip=(), never_under=(), dry_run=False, deny_read=(str(tmp_path),),
                   allow_read=(str(tmp_path / "proj"),))
    assert want.is_dir()
    with pytest.raises(BuildError) as e:
        create_missing((str(tmp_path / "other" / "build"),), skip=(), never_under=(), dry_run=False,
                       deny_read=(str(tmp_path),), allow_read=(str(tmp_path / "proj"),))
    assert f"lies inside {tmp_path}, which the sandbox may not read (denyRead)" in e.value.message

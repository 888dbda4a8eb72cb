"""Learn, then enforce (safebox/learn.py and the proxy's learn rule): what a
suggested policy contains, and that learning opens public names only."""

from __future__ import annotations

import ipaddress

import pytest

from safebox.learn import collapse, suggest
from safebox.policy.load import Layer, validate_layer
from safebox.proxy.rules import RULE_DENIED, RULE_LEARN, RULE_LOCAL, NetworkRules
from safebox.report import Run


def test_names_stay_exact_until_several_siblings_were_seen() -> None:
    assert collapse({"a.x.com", "b.x.com"}) == ["a.x.com", "b.x.com"]
    assert collapse({"a.x.com", "b.x.com", "c.x.com", "x.com", "other.org"}) == ["*.x.com", "x.com", "other.org"]


def test_a_wildcard_never_spans_a_top_level_domain_or_a_shared_hosting_suffix() -> None:
    assert collapse({"a.com", "b.com", "c.com"}) == ["a.com", "b.com", "c.com"]
    pages = {"one.github.io", "two.github.io", "three.github.io"}
    assert collapse(pages) == sorted(pages, key=lambda d: (d.split(".")[::-1], d))
    assert collapse({"a.s3.amazonaws.com", "b.s3.amazonaws.com", "c.s3.amazonaws.com"}) == [
        "a.s3.amazonaws.com", "b.s3.amazonaws.com", "c.s3.amazonaws.com"]


def run_with(hosts: list[tuple[str, str]], denied: list[dict[str, object]] = ()) -> Run:  # type: ignore[assignment]
    return Run(run="r", hosts=[{"host": h, "port": 443, "verdict": v, "count": 1, "rule": "r", "reason": f"why {h}"}
                               for h, v in hosts], denied=list(denied))


def test_runs_merge_into_one_policy_and_refused_hosts_are_left_out_with_a_note() -> None:
    doc, notes = suggest([run_with([("registry.npmjs.org", "allow"), ("evil.example", "deny")]),
                          run_with([("pypi.org", "allow"), ("files.pythonhosted.org", "allow")])], home="/home/u")
    assert doc == {"network": {"allowedDomains": ["registry.npmjs.org", "pypi.org", "files.pythonhosted.org"]}}
    assert notes == ["not suggested: evil.example was refused (why evil.example)"]


def test_refused_writes_outside_the_write_roots_become_allow_write_and_nothing_protected_does() -> None:
    denied = [
        {"kind": "write", "path": "/home/u/.cache/tool/x/a.bin", "rule": "filesystem.allowWrite"},
        {"kind": "write", "path": "/home/u/.cache/tool/b.bin", "rule": "filesystem.allowWrite"},
        {"kind": "write", "path": "/data/out/out.txt", "rule": "filesystem.allowWrite"},
        {"kind": "write", "path": "/home/u/.bashrc", "rule": "protected file"},
        {"kind": "write", "path": "/home/u/.ssh/known_hosts", "rule": "filesystem.denyRead (built-in credential list)"},
        {"kind": "read", "path": "/home/u/.npmrc", "rule": "filesystem.denyRead"},
    ]
    doc, _ = suggest([run_with([], denied)], home="/home/u")
    assert doc["filesystem"] == {"allowWrite": ["/data/out", "~/.cache/tool"]}
    assert doc["network"] == {"allowedDomains": []}


def _writes(*paths: str) -> Run:
    return run_with([], [{"kind": "write", "path": p, "rule": "filesystem.allowWrite"} for p in paths])


def test_learn_never_suggests_a_system_directory_the_home_or_a_directory_above_it() -> None:
    # Issue 22 item 6, the review's reproduction: `touch /etc/cron.d/x
    # /usr/local/bin/git ~/x` learned allowWrite ["/etc", "/usr/local/bin", "~"].
    doc, notes = suggest([_writes("/etc/cron.d/x", "/usr/local/bin/git", "/home/u/x", "/home/v", "/x",
                                  "/opt/tool/bin/x", "/var/lib/dpkg/status", "/lib64/x.so")], home="/home/u")
    assert "filesystem" not in doc
    tail = "; safebox never suggests it (write under $TMPDIR or the work dir instead)"
    assert notes == [
        f"not suggested: /x: / is the whole system{tail}",
        f"not suggested: /etc/cron.d/x: /etc/cron.d is a system directory{tail}",
        f"not suggested: /home/v: /home holds the home{tail}",
        f"not suggested: ~/x: ~ is the home itself, with its dotfiles{tail}",
        f"not suggested: /lib64/x.so: /lib64 is a system directory{tail}",
        f"not suggested: /opt/tool/bin/x: /opt/tool/bin is a system directory{tail}",
        f"not suggested: /usr/local/bin/git: /usr/local/bin is a system directory{tail}",
        f"not suggested: /var/lib/dpkg/status: /var/lib/dpkg is a system directory{tail}",
    ]


def test_control_learn_suggests_a_directory_beside_them_and_a_left_out_one_swallows_nothing() -> None:
    # ~ left out must not hide ~/.cache/tool (it would have covered it), and
    # the caches under /var are not system directories.
    doc, notes = suggest([_writes("/home/u/x", "/home/u/.cache/tool/a", "/var/tmp/t/f", "/var/cache/c/f",
                                  "/srv2/out/f")], home="/home/u")
    assert doc["filesystem"] == {"allowWrite": ["/srv2/out", "/var/cache/c", "/var/tmp/t", "~/.cache/tool"]}
    assert [n.split(":")[1] for n in notes] == [" ~/x"]


def test_learn_and_the_summary_share_one_rule_for_what_is_never_suggested() -> None:
    from types import SimpleNamespace

    from safebox.learn import _never_suggested
    from safebox.violations.feed import Feed

    summary = SimpleNamespace(home="/home/u")
    for d in ("/etc", "/etc/cron.d", "/usr/local/bin", "/home/u", "/home", "/", "/opt/x", "/srv/y", "/data/out",
              "/var/cache/x", "/home/u/.cache"):
        assert _never_suggested(d, home="/home/u") == Feed._never_writable(summary, d), d  # type: ignore[arg-type]


def test_learn_leaves_out_a_directory_that_resolves_to_a_system_one(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # A link the command planted in its work dir must not smuggle /etc in
    # under another name.
    (tmp_path / "link").symlink_to("/etc")
    doc, notes = suggest([_writes(f"{tmp_path}/link/x")], home="/home/u")
    assert "filesystem" not in doc
    assert notes == [f"not suggested: {tmp_path}/link/x: /etc is a system directory; safebox never suggests it "
                     "(write under $TMPDIR or the work dir instead)"]


def test_a_suggested_policy_is_a_valid_policy_file() -> None:
    doc, _ = suggest([run_with([("a.x.com", "allow"), ("b.x.com", "allow"), ("c.x.com", "allow"),
                                ("203.0.113.7", "allow")],
                               [{"kind": "write", "path": "/data/out/f", "rule": "filesystem.allowWrite"}])],
                     home="/home/u")
    doc["presets"] = ["npm"]
    validate_layer(Layer(name="suggested.json", data=doc))


LEARN = NetworkRules.from_policy([], ["blocked.example"], learn=True)


@pytest.mark.parametrize("host", ["anything.example.org", "registry.npmjs.org", "93.184.216.34"])
def test_learning_lets_any_name_past_the_name_check(host: str) -> None:
    d = LEARN.check_host(host)
    assert (d.allowed, d.rule) == (True, RULE_LEARN)


def test_learning_does_not_lift_denied_domains() -> None:
    d = LEARN.check_host("blocked.example")
    assert (d.allowed, d.rule) == (False, RULE_DENIED)


@pytest.mark.parametrize("addr, cls", [("127.0.0.1", "loopback"), ("10.1.2.3", "private"),
                                       ("169.254.169.254", "metadata"), ("::1", "loopback")])
def test_learning_still_refuses_local_and_metadata_addresses(addr: str, cls: str) -> None:
    d = LEARN.check_address(ipaddress.ip_address(addr), host="inward.example")
    assert not d.allowed
    assert cls in d.reason
    # Control: a public address passes, and so does a local one the policy allows.
    assert LEARN.check_address(ipaddress.ip_address("93.184.216.34")).allowed
    if cls != "metadata":
        local = NetworkRules.from_policy([], [], learn=True, allow_local_destinations=True)
        assert (local.check_address(ipaddress.ip_address(addr)).rule, True) == (RULE_LOCAL, True)


def test_without_learning_an_unlisted_name_is_refused() -> None:
    assert not NetworkRules.from_policy([], []).check_host("anything.example.org").allowed


def _log(tmp_path, name: str, run: str, hosts: list[tuple[str, str]]):  # type: ignore[no-untyped-def]
    import json

    p = tmp_path / name
    stop = {"event": "stop", "run": run, "exit": 0,
            "hosts": [{"host": h, "port": 443, "verdict": v, "count": 1, "rule": "r", "reason": f"why {h}"}
                      for h, v in hosts]}
    p.write_text(json.dumps({"event": "start", "run": run, "schema": 2, "command": ["x"], "presets": ["npm"]})
                 + "\n" + json.dumps(stop) + "\n")
    return p


def test_policy_suggest_merges_logs_to_stdout_or_a_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    from click.testing import CliRunner

    from safebox.cli import _click_app

    a = _log(tmp_path, "a.jsonl", "1", [("registry.npmjs.org", "allow"), ("evil.example", "deny")])
    b = _log(tmp_path, "b.jsonl", "2", [("a.cdn.example", "allow"), ("b.cdn.example", "allow"),
                                         ("c.cdn.example", "allow")])
    r = CliRunner().invoke(_click_app(), ["policy", "suggest", str(a), str(b)])
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert json.loads(out) == {"network": {"allowedDomains": ["*.cdn.example", "registry.npmjs.org"]},
                               "presets": ["npm"]}
    assert "safebox: not suggested: evil.example was refused (why evil.example)" in r.stderr
    dest = tmp_path / "policy.json"
    r2 = CliRunner().invoke(_click_app(), ["policy", "suggest", str(a), "-o", str(dest)])
    assert r2.exit_code == 0 and json.loads(dest.read_text())["network"]["allowedDomains"] == ["registry.npmjs.org"]
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    r3 = CliRunner().invoke(_click_app(), ["policy", "suggest", str(empty)])
    assert r3.exit_code == 125
    assert f"safebox: no run found in {empty}" in r3.output

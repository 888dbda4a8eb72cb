"""Layered policies (``-p base.json -p learned.json``), the complete policy
``--learn`` writes, and ``policy diff``. Where learn output may be written
(never over a device, a link or another's file) is safebox/hostio.py's, tested
in tests/security/test_host_side_handling.py.

The runs themselves are in tests/integration/test_policy_layers_exec.py.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from safebox.learn import complete, shell_line
from safebox.policy.diff import diff, render_text
from safebox.policy.layers import merge_documents, replaced_values
from safebox.policy.load import Context, Flags, Layer, load, load_with_document, validate_layer


def _ctx(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Context:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return Context(cwd=str(work), home=str(tmp_path / "home"))


# ------------------------------------------------------------------ merging documents

def test_lists_add_up_without_duplicates_in_first_seen_order_and_scalars_take_the_last_value() -> None:
    base = {"network": {"allowedDomains": ["a.com", "b.com"], "allowLocalDestinations": True},
            "filesystem": {"denyRead": ["~/secret"]}, "strict": True}
    more = {"network": {"allowedDomains": ["c.com", "a.com"], "allowLocalDestinations": False},
            "limits": {"memory": "1GiB"}}
    assert merge_documents([base, more]) == {
        "network": {"allowedDomains": ["a.com", "b.com", "c.com"], "allowLocalDestinations": False},
        "filesystem": {"denyRead": ["~/secret"]}, "strict": True, "limits": {"memory": "1GiB"}}
    # The inputs are not changed (the base policy may be merged again).
    assert base["network"]["allowedDomains"] == ["a.com", "b.com"]


def test_nested_tables_merge_by_key_and_entries_that_are_tables_dedupe_by_value() -> None:
    a = {"ignoreViolations": {"*": ["/x"]}, "filesystem": {"denyRead": [{"path": "x[1]", "literal": True}]},
         "network": {"tlsTerminate": {"excludeDomains": ["a.com"]}}}
    b = {"ignoreViolations": {"*": ["/y"], "git": ["/z"]},
         "filesystem": {"denyRead": [{"literal": True, "path": "x[1]"}, "**/.env"]},
         "network": {"tlsTerminate": {"caCertPath": "/ca.pem"}}}
    assert merge_documents([a, b]) == {
        "ignoreViolations": {"*": ["/x", "/y"], "git": ["/z"]},
        "filesystem": {"denyRead": [{"path": "x[1]", "literal": True}, "**/.env"]},
        "network": {"tlsTerminate": {"excludeDomains": ["a.com"], "caCertPath": "/ca.pem"}}}


def test_a_credential_named_again_is_replaced_as_the_runs_merge_replaces_it() -> None:
    a = {"credentials": {"envVars": [{"name": "TOKEN", "mode": "mask"}, {"name": "KEY", "mode": "deny"}]}}
    b = {"credentials": {"envVars": [{"name": "TOKEN", "mode": "deny"}]}}
    assert merge_documents([a, b]) == {"credentials": {"envVars": [{"name": "KEY", "mode": "deny"},
                                                                   {"name": "TOKEN", "mode": "deny"}]}}


def test_trust_in_project_files_stays_on_once_a_layer_grants_it_as_the_run_reads_it() -> None:
    assert merge_documents([{"trustProjectFiles": True}, {"trustProjectFiles": False}]) == {"trustProjectFiles": True}


def test_a_later_layer_cannot_take_an_entry_of_an_earlier_one_out() -> None:
    """Documented (policy-reference.md, "Layers"): there is no removal
    syntax; a `!entry` is just a (refused) path or name, never a removal."""
    base = {"filesystem": {"denyRead": ["~/.secret"]}, "network": {"deniedDomains": ["evil.com"]}}
    merged = merge_documents([base, {"filesystem": {"denyRead": []}, "network": {"deniedDomains": []}}])
    assert merged == base
    with pytest.raises(Exception, match="deniedDomains"):
        validate_layer(Layer(name="p.json", data={"network": {"deniedDomains": ["!evil.com"]}}))


@pytest.mark.parametrize("second", [
    '{"network": {"allowedDomains": ["b.com"], "allowLocalDestinations": false}, "strict": false}',
    'strict = false\n[network]\nallowedDomains = ["b.com"]\nallowLocalDestinations = false\n',
])
def test_policy_files_given_twice_layer_in_order_json_or_toml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              second: str) -> None:
    ctx = _ctx(tmp_path, monkeypatch)
    first = tmp_path / "base.json"
    first.write_text('{"network": {"allowedDomains": ["a.com"], "allowLocalDestinations": true}, "strict": true,'
                     ' "filesystem": {"denyRead": ["~/secret"]}}')
    other = tmp_path / ("more.toml" if second.startswith("strict") else "more.json")
    other.write_text(second)
    eff = load(ctx, policy_files=(str(first), str(other)), flags=Flags())
    assert eff.allowed_domains == ("a.com", "b.com")
    assert (eff.allow_local_destinations, eff.strict) == (False, False)
    assert f"{ctx.home}/secret" in eff.deny_read
    # The other order: the base's values win.
    eff2 = load(ctx, policy_files=(str(other), str(first)), flags=Flags())
    assert (eff2.allow_local_destinations, eff2.strict) == (True, True)
    assert eff2.allowed_domains == ("b.com", "a.com")


def test_an_srt_settings_file_layers_like_any_other(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = _ctx(tmp_path, monkeypatch)
    srt = tmp_path / "srt-settings.json"  # sandbox-runtime's own keys, ripgrep and ignoreViolations included
    srt.write_text(json.dumps({"network": {"allowedDomains": ["github.com"], "deniedDomains": []},
                               "filesystem": {"denyRead": ["~/.ssh"], "allowWrite": ["."], "denyWrite": []},
                               "ignoreViolations": {"*": ["/usr/bin"]}, "ripgrep": {"command": "rg"}}))
    more = tmp_path / "more.json"
    more.write_text(json.dumps({"network": {"allowedDomains": ["pypi.org"]}, "ignoreViolations": {"*": ["/bin"]}}))
    eff, doc = load_with_document(ctx, policy_files=(str(srt), str(more)), flags=Flags(allow_write=("out",)))
    assert eff.allowed_domains == ("github.com", "pypi.org")
    assert doc["ignoreViolations"] == {"*": ["/usr/bin", "/bin"]}
    assert doc["filesystem"]["allowWrite"] == [".", "out"]
    assert doc["ripgrep"] == {"command": "rg"}


def test_the_document_a_run_ran_under_holds_every_layer_but_the_ones_each_run_adds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = _ctx(tmp_path, monkeypatch)
    user = tmp_path / "xdg" / "safebox"
    user.mkdir(parents=True)
    (user / "policy.toml").write_text("[network]\nallowLocalDestinations = true\n")
    (Path(ctx.cwd) / ".safebox.json").write_text('{"filesystem": {"denyWrite": ["Makefile"]}}')
    base = tmp_path / "base.json"
    base.write_text('{"filesystem": {"denyRead": ["~/x"]}, "limits": {"processes": 64}}')
    eff, doc = load_with_document(ctx, policy_files=(str(base),),
                                  flags=Flags(allow_domains=("a.com",), timeout="90s", presets=("pip",)))
    assert doc == {"network": {"allowLocalDestinations": True, "allowedDomains": ["a.com"]},
                   "filesystem": {"denyWrite": ["Makefile"], "denyRead": ["~/x"]},
                   "limits": {"processes": 64, "wallTime": "90s"}, "presets": ["pip"]}
    # Not the built-in defaults (this host's home, the credential list): every run adds them.
    assert f"{ctx.home}/.ssh" in eff.deny_read
    # Loaded again from the document alone, it is the same policy.
    again = tmp_path / "again.json"
    again.write_text(json.dumps(doc))
    (user / "policy.toml").unlink()
    (Path(ctx.cwd) / ".safebox.json").unlink()
    assert load(ctx, policy_files=(str(again),), flags=Flags()).replace(sources=None) == eff.replace(sources=None)


def test_the_learned_policy_is_the_one_the_run_ran_under_plus_what_it_learned() -> None:
    ran_under = {"network": {"allowLocalDestinations": True, "allowedDomains": ["a.com"]},
                 "filesystem": {"denyRead": ["secret"]}}
    learned = {"network": {"allowedDomains": ["a.com", "localhost"]}, "filesystem": {"allowWrite": ["~/.cache/x"]}}
    assert complete(ran_under, learned) == {
        "network": {"allowLocalDestinations": True, "allowedDomains": ["a.com", "localhost"]},
        "filesystem": {"denyRead": ["secret"], "allowWrite": ["~/.cache/x"]}}
    assert complete({}, {"network": {"allowedDomains": []}}) == {"network": {"allowedDomains": []}}


def test_policy_show_learns_which_value_a_later_layer_replaced() -> None:
    layers = [("defaults", {"mandatoryDenySearchDepth": 6}),
              ("base.json", {"strict": True, "network": {"allowLocalDestinations": False, "allowedDomains": ["a"]}}),
              ("more.json", {"strict": False, "network": {"allowLocalDestinations": False}}),
              ("command line", {"mandatoryDenySearchDepth": 6})]
    assert dict(replaced_values(layers)) == {"strict": (True, "base.json", "more.json")}


# ------------------------------------------------------------------ policy diff

def test_policy_diff_lists_added_and_removed_entries_and_changed_values_and_marks_what_widens() -> None:
    old = {"network": {"allowedDomains": ["a.com", "b.com"], "deniedDomains": ["evil.com"]}, "strict": True,
           "limits": {"memory": "2GiB"}}
    new = {"network": {"allowedDomains": ["b.com", "c.com"], "allowLocalDestinations": True},
           "limits": {"memory": "1GiB"}}
    changes = {c.key: c for c in diff(old, new)}
    assert set(changes) == {"network.allowedDomains", "network.deniedDomains", "network.allowLocalDestinations",
                            "strict", "limits.memory"}
    assert (changes["network.allowedDomains"].added, changes["network.allowedDomains"].removed) == (("c.com",),
                                                                                                   ("a.com",))
    assert changes["network.deniedDomains"].removed == ("evil.com",) and changes["network.deniedDomains"].widens
    assert (changes["strict"].old, changes["strict"].new, changes["strict"].widens) == (True, None, True)
    assert changes["limits.memory"].widens is False  # lowered: narrower
    text = render_text(diff(old, new), old_name="old.json", new_name="new.json")
    assert text.splitlines()[:2] == ["--- old.json", "+++ new.json"]
    assert "network.allowedDomains:  (widens)\n  + c.com\n  - a.com\n" in text
    assert "network.allowLocalDestinations: (not set) -> true  (widens)\n" in text
    assert "limits.memory: 2GiB -> 1GiB\n" in text
    assert text.endswith("5 keys changed, 4 of them widen the sandbox\n")


def test_policy_diff_of_the_same_policy_in_another_order_or_format_is_empty() -> None:
    assert diff({"network": {"allowedDomains": ["a", "b"]}}, {"network": {"allowedDomains": ["b", "a"]}}) == []
    assert render_text([], old_name="a.json", new_name="b.toml") == "a.json and b.toml: the same policy\n"


def test_policy_diff_never_prints_a_control_character_from_a_file() -> None:
    text = render_text(diff({}, {"ignoreViolations": {"x\nforged: line": ["/a\nb"]}}), old_name="a", new_name="b")
    assert "forged: line" in text and "\nforged" not in text and '"/a\\nb"' in text


@pytest.mark.parametrize("argv", [
    ["safebox", "exec", "-p", "L.json", "--", "sh", "-c", "echo 'a b' \"$HOME\"; cat x"],
    ["sh", "-c", "printf x\nsafebox: forged line", "tab\there", "bell\x07", "nel\x85", "quote'\\back"],
])
def test_the_enforce_line_is_one_line_that_a_shell_runs_as_the_same_argv(argv: list[str]) -> None:
    line = shell_line(argv)
    assert "\n" not in line and line.isprintable()
    # bash reads it back as the same arguments (printf %s\0 each one).
    r = subprocess.run(["bash", "-c", f"printf '%s\\0' {line}"], capture_output=True, check=True)
    assert r.stdout.decode().split("\0")[:-1] == argv


def test_the_enforce_line_repeats_what_shapes_the_run_but_no_policy_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    from safebox.run.main import ExecRequest, Without, enforce_argv
    from safebox.run.session import Options

    req = ExecRequest(command=("make", "-j2"), flags=Flags(allow_write=("out",)),
                      options=Options(policy_files=("base.json",), learn="L.json", without=Without("bwrap"),
                                      publish=("8080",), audit_log="a.jsonl"))
    monkeypatch.setattr("sys.argv", ["/opt/sb/bin/safebox"])
    monkeypatch.setenv("PATH", "/nonexistent")
    assert enforce_argv(req) == ("/opt/sb/bin/safebox", "exec", "-p", "L.json", "--without", "bwrap",
                                 "--publish", "8080", "--", "make", "-j2")

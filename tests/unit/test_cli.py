"""The command line: the fast exec parser agrees with click; errors and exit statuses."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from safebox.cli import EXEC_OPTIONS, UnknownOption, _click_app, fast_parse_exec


def click_parse(args: list[str]) -> dict | None:
    app = _click_app()
    captured: dict = {}
    cmd = app.commands["exec"]
    original = cmd.callback

    def spy(command, **kw):
        captured.update(kw, command=list(command[1:] if command and command[0] == "--" else command))

    cmd.callback = spy
    try:
        result = CliRunner().invoke(app, ["exec", *args])
    finally:
        cmd.callback = original
    return captured if result.exit_code == 0 else None


@pytest.mark.parametrize("args", [
    ["--", "ls", "-la"],
    ["ls", "-la"],
    ["-v", "--", "true"],
    ["--allow-write", "/a", "--allow-write=/b", "--deny-read", "~/.x", "--", "make", "-j2"],
    ["-p", "pol.toml", "--strict", "--without", "helper", "--dry-run", "--", "sh", "-c", "echo --"],
    ["--allow-domain", "*.x.com", "--deny-domain", "y.x.com", "--audit-log", "/tmp/a", "curl", "x"],
    ["--without=bwrap", "--verbose", "--", "--weird-command-name"],
])
def test_the_fast_parser_agrees_with_click(args: list[str]) -> None:
    fast = fast_parse_exec(args)
    assert fast is not None
    slow = click_parse(args)
    assert slow is not None
    for o in EXEC_OPTIONS:
        assert (list(fast[o.dest]) if o.multiple else fast[o.dest]) == (list(slow[o.dest]) if o.multiple else slow[o.dest])
    assert fast["command"] == slow["command"]


@pytest.mark.parametrize("args", [
    ["--help"], ["--without", "both", "--", "true"],
    ["--policy"], ["--"], [], ["--strict=1", "--", "true"], ["-p", "a", "-p", "b", "--", "true"],
])
def test_anything_unusual_goes_to_click(args: list[str]) -> None:
    assert fast_parse_exec(args) is None


def test_a_mistyped_option_is_an_error_not_the_command() -> None:
    with pytest.raises(UnknownOption):
        fast_parse_exec(["--allow-writ", "/x", "--", "true"])
    assert fast_parse_exec(["--", "--allow-writ"])["command"] == ["--allow-writ"]


@pytest.mark.parametrize("args, message", [
    (["exec", "--allow-writ", "/x", "--", "true"], "safebox: exec: no such option --allow-writ (did you mean --allow-write?)"),
    (["exec", "--without", "both", "--", "true"], "Invalid value for '--without'"),
    (["exec", "--policy"], "Option '--policy' requires an argument"),
])
def test_exec_usage_errors_exit_125_with_a_message(args: list[str], message: str) -> None:
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "safebox", *args], capture_output=True, text=True)
    assert r.returncode == 125
    assert message in r.stderr


def test_policy_check_names_the_key_and_exits_125(tmp_path) -> None:
    bad = tmp_path / "p.toml"
    bad.write_text('[filesystem]\nallowWrites = ["."]\n')
    r = CliRunner().invoke(_click_app(), ["policy", "check", str(bad)])
    assert r.exit_code == 125
    assert f"safebox: {bad}: filesystem.allowWrites: unknown key" in r.output


def test_policy_check_accepts_a_valid_file(tmp_path) -> None:
    good = tmp_path / "p.json"
    good.write_text('{"network": {"allowedDomains": ["pypi.org"]}}')
    r = CliRunner().invoke(_click_app(), ["policy", "check", str(good)])
    assert r.exit_code == 0 and r.output.strip() == f"{good}: ok"


@pytest.mark.parametrize("name", ["p.toml", "p.json"])
def test_policy_check_treats_an_empty_file_alike_in_json_and_toml(tmp_path, name: str) -> None:
    empty = tmp_path / name
    empty.write_text("")
    r = CliRunner().invoke(_click_app(), ["policy", "check", str(empty)])
    assert r.exit_code == 0 and r.output.strip() == f"{empty}: ok", r.output


@pytest.mark.parametrize("cmd", [["--help"], ["exec", "--help"], ["doctor", "--help"], ["policy", "--help"],
                                 ["policy", "check", "--help"], ["policy", "show", "--help"]])
def test_every_command_has_help(cmd: list[str]) -> None:
    r = CliRunner().invoke(_click_app(), cmd)
    assert r.exit_code == 0 and "Usage:" in r.output


def test_exec_help_describes_every_option() -> None:
    out = CliRunner().invoke(_click_app(), ["exec", "--help"]).output
    for o in EXEC_OPTIONS:
        assert o.long in out

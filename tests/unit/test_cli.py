"""The command line: the fast exec parser agrees with click; errors and exit statuses."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from safebox.cli import EXEC_OPTIONS, ExecUsageError, UnknownOption, _click_app, fast_parse_exec


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
    ["-p", "base.json", "--policy=learned.toml", "-p", "more.json", "--", "make"],
])
def test_the_fast_parser_agrees_with_click(args: list[str]) -> None:
    fast = fast_parse_exec(args)
    assert fast is not None
    slow = click_parse(args)
    assert slow is not None
    for o in EXEC_OPTIONS:
        assert (list(fast[o.dest]) if o.multiple else fast[o.dest]) == (list(slow[o.dest]) if o.multiple else slow[o.dest])
    assert fast["command"] == slow["command"]


@pytest.mark.parametrize("args", [["--help"], ["-h"], ["-v", "--help"]])
def test_only_help_goes_to_click(args: list[str]) -> None:
    assert fast_parse_exec(args) is None


@pytest.mark.parametrize("args", [
    ["--without", "both", "--", "true"], ["--policy"], ["--"], [], ["-v"], ["--strict=1", "--", "true"],
    ["--audit-log", "a", "--audit-log", "b", "--", "true"],
])
def test_the_fast_parser_refuses_a_malformed_exec_line(args: list[str]) -> None:
    with pytest.raises(ExecUsageError):
        fast_parse_exec(args)


def test_policy_files_layer_in_the_order_given() -> None:
    parsed = fast_parse_exec(["-p", "base.json", "--policy", "learned.toml", "--policy=x.json", "--", "true"])
    assert parsed is not None and parsed["policy_files"] == ["base.json", "learned.toml", "x.json"]


def test_a_mistyped_option_is_an_error_not_the_command() -> None:
    with pytest.raises(UnknownOption):
        fast_parse_exec(["--allow-writ", "/x", "--", "true"])
    assert fast_parse_exec(["--", "--allow-writ"])["command"] == ["--allow-writ"]


NO_COMMAND = "safebox: exec: no command given (usage: safebox exec [OPTIONS] -- COMMAND [ARGS]...)"


@pytest.mark.parametrize("args, message", [
    ([], NO_COMMAND),
    (["--"], NO_COMMAND),
    (["-v", "--allow-write", "/x"], NO_COMMAND),
    (["--allow-writ", "/x", "--", "true"], "safebox: exec: no such option --allow-writ (did you mean --allow-write?)"),
    (["--without", "both", "--", "true"], "safebox: exec: --without: 'both' is not one of bwrap, helper"),
    (["--policy"], "safebox: exec: --policy needs a value (FILE)"),
    (["--strict=1", "--", "true"], "safebox: exec: --strict takes no value"),
    (["--audit-log", "a", "--audit-log", "b", "--", "true"], "safebox: exec: --audit-log given twice (it takes one FILE)"),
])
def test_exec_usage_errors_are_one_safebox_line_and_exit_125(args: list[str], message: str) -> None:
    """Through the installed launcher (the fast path) and ``python -m
    safebox``: the message, at most one ``hint:``, nothing of click's
    ``Usage:``/``Error:`` block. On e6c8888 a missing command printed
    click's ``Error: Missing argument 'COMMAND...'``."""
    import subprocess
    import sys

    from sbx import SAFEBOX

    for argv in ([str(SAFEBOX), "exec", *args], [sys.executable, "-m", "safebox", "exec", *args]):
        r = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False)
        assert r.returncode == 125, (argv, r.stderr)
        lines = r.stderr.splitlines()
        assert lines[0] == message, (argv, r.stderr)
        assert len(lines) <= 2 and all(ln.startswith("hint: ") for ln in lines[1:]), (argv, r.stderr)
        assert r.stdout == ""


def test_a_well_formed_exec_line_is_not_a_usage_error() -> None:
    """Control for the test above: the same options with a command parse and run (dry run)."""
    import subprocess

    from sbx import SAFEBOX

    r = subprocess.run([str(SAFEBOX), "exec", "-v", "--without", "bwrap", "-p", "/dev/null", "--dry-run", "--",
                        "true"], capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False)
    assert "safebox: exec:" not in r.stderr
    assert r.returncode == 0 and "# helper argv (no bwrap)" in r.stdout, r.stderr


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

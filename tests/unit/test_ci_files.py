"""CI runner files (safebox/ci_job/), pure parts: how the file commands a
sandboxed step wrote are read and filtered before they reach the runner, and
how a git config loses its credentials. The end-to-end behaviour (real
runs, real files) is in tests/integration/test_ci_exec.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from safebox.ci_job import (
    ENV_DENY,
    CiRun,
    Passing,
    detect,
    env_refusal,
    parse_file_command,
    path_entry_refusal,
    render_entries,
    scrub_git_config,
)


def test_a_job_is_detected_from_the_ci_variables_and_can_be_opted_out() -> None:
    assert detect({"GITHUB_ACTIONS": "true"}) == "github"
    assert detect({"GITLAB_CI": "true"}) == "gitlab"
    assert detect({"GITLAB_CI": "false"}) is None  # gitlab-ci-local's own value
    assert detect({}) is None
    assert detect({"GITHUB_ACTIONS": "true", "SAFEBOX_CI": "off"}) is None


@pytest.mark.parametrize("data, entries", [
    ("A=1\nB=two words\n", [("A", "1"), ("B", "two words")]),
    ("A=x=y\n", [("A", "x=y")]),
    ("M<<EOF\nline 1\nline 2\nEOF\n", [("M", "line 1\nline 2")]),
    ("E<<EOF\nEOF\n", [("E", "")]),
    ("\n\nA=1\n\n", [("A", "1")]),
    # '=' before '<<' makes it a plain entry, as the runner reads it.
    ("A=b<<c\n", [("A", "b<<c")]),
    ("A=1\r\nB=2\r\n", [("A", "1"), ("B", "2")]),
])
def test_file_command_entries_are_read_as_the_runner_reads_them(data: str, entries: list[tuple[str, str]]) -> None:
    got, refused = parse_file_command(data, file="GITHUB_ENV")
    assert (got, refused) == (entries, [])


def test_a_lone_carriage_return_ends_an_entry_as_it_does_for_the_runner() -> None:
    # .NET's ReadLine splits at a lone \r: a reader splitting at \n only would
    # see one harmless X and pass LD_AUDIT on, hidden in its value.
    got, _ = parse_file_command("X=1\rLD_AUDIT=/tmp/evil.so\n", file="GITHUB_ENV")
    assert got == [("X", "1"), ("LD_AUDIT", "/tmp/evil.so")]


def test_an_unterminated_heredoc_refuses_itself_and_everything_after_it() -> None:
    got, refused = parse_file_command("A=1\nB<<EOF\nsafe\nC=2\n", file="GITHUB_ENV")
    assert got == [("A", "1")]
    assert [(r.name, r.reason) for r in refused] == [
        ("B", "heredoc delimiter 'EOF' never closes: it and everything after it are refused")]


def test_malformed_lines_are_refused_by_name() -> None:
    got, refused = parse_file_command("just text\nN<<\nOK=1\n", file="GITHUB_OUTPUT")
    assert got == [("OK", "1")]
    assert [(r.file, r.name, r.reason) for r in refused] == [
        ("GITHUB_OUTPUT", "just text", "not NAME=value nor NAME<<DELIMITER"),
        ("GITHUB_OUTPUT", "N", "a heredoc without a delimiter")]


@pytest.mark.parametrize("name", ["LD_PRELOAD", "LD_AUDIT", "LD_LIBRARY_PATH", "NODE_OPTIONS", "BASH_ENV",
                                  "PYTHONSTARTUP", "PYTHONPATH", "PERL5OPT", "RUBYOPT", "JAVA_TOOL_OPTIONS",
                                  "GIT_SSH_COMMAND", "GIT_CONFIG_COUNT", "PATH", "HOME", "PS4", "GOFLAGS",
                                  "RUSTC_WRAPPER", "https_proxy", "HTTPS_PROXY", "NPM_CONFIG_REGISTRY",
                                  "npm_config_script_shell", "GITHUB_TOKEN", "RUNNER_TEMP", "SAFEBOX_CI",
                                  "BASH_FUNC_ls%%", "A-B", "1A", "",
                                  # found in review: each ran code in a later step through the old denylist
                                  "XDG_CONFIG_HOME", "MAKEFILES", "TAR_OPTIONS", "OPENSSL_CONF", "JAVA_HOME",
                                  "CURL_HOME", "LUA_INIT", "VIMINIT", "GLIBC_TUNABLES"])
def test_variables_that_would_run_code_later_are_never_passed_by_a_wildcard(name: str) -> None:
    assert env_refusal(name) is not None
    assert env_refusal(name, ("*",)) is not None
    assert env_refusal(name, ("*", name[:1] + "*")) is not None


@pytest.mark.parametrize("name", ["XDG_CONFIG_HOME", "MAKEFILES", "LD_PRELOAD", "NODE_OPTIONS"])
def test_a_variable_that_runs_code_passes_when_the_policy_names_it_exactly(name: str) -> None:
    assert env_refusal(name, (name,)) is None


@pytest.mark.parametrize("name", ["NODE_ENV", "MY_VERSION", "CI", "BUILD_ID", "RELEASE_TAG", "GOOGLE_CLOUD_PROJECT",
                                  "GOAL", "PYTHON_VERSION", "IMAGE_TAG"])
def test_ordinary_variables_pass_only_when_listed(name: str) -> None:
    assert env_refusal(name) == f"not in ci.passEnv; fix: add {name!r} to ci.passEnv in the policy"
    assert env_refusal(name, (name,)) is None
    assert env_refusal(name, ("*",)) is None
    assert env_refusal(name, ("OTHER", "NOPE_*")) is not None


def test_every_deny_list_entry_is_documented() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "ci.md").read_text()
    for name in ENV_DENY:
        assert f"`{name}`" in doc, name


def test_a_path_entry_through_a_planted_link_and_dot_dot_is_refused_not_normalised(tmp_path: Path) -> None:
    """Found in review: normpath drops `L/..` as text, the kernel follows L:
    `W/L/../../usr/local/bin` with L -> W/d/d reaches W/usr/local/bin."""
    work = tmp_path / "w"
    ups = len(work.parts)  # as many '..' as W has components, and one for L: the text ends at /
    deep = work.joinpath(*["d"] * ups)
    deep.mkdir(parents=True)
    (work / "usr" / "local" / "bin").mkdir(parents=True)
    (work / "L").symlink_to(deep)  # the kernel climbs back from deep to W
    entry = str(work / "L") + "/.." * ups + "/usr/local/bin"
    passing = Passing(path=("/usr/local/bin",), writable=(str(work),), always=())
    assert os.path.normpath(entry) == "/usr/local/bin"  # what the text says
    assert os.path.realpath(entry) != "/usr/local/bin"  # what the kernel does
    assert path_entry_refusal(entry, passing) == "not a plain path ('.', '..', '//' or a trailing '/'); write it as '/usr/local/bin'"
    assert path_entry_refusal("/usr/local/bin", passing) is None  # control: the plain spelling passes


@pytest.mark.parametrize("d", ["/tmp", "/var/tmp", "/dev/shm"])
def test_a_path_entry_in_a_temporary_directory_is_never_passed_whatever_the_list_says(d: str) -> None:
    assert path_entry_refusal(f"{d}/bin", Passing(path=(f"{d}/bin",))) == (
        f"inside {d}, which a sandboxed run could write; a PATH entry there would run what the step planted "
        "(never passed on, whatever ci.passPath says)")


def test_path_entries_must_be_plain_owner_only_directories_outside_the_write_roots(tmp_path: Path) -> None:
    root = tmp_path / "work"
    (root / "bin").mkdir(parents=True)
    ok = tmp_path / "tools" / "bin"
    ok.mkdir(parents=True)
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    link = tmp_path / "sneaky"
    link.symlink_to(root / "bin")
    listed = [str(p) for p in (ok, root / "bin", link, open_dir, tmp_path / "missing", tmp_path / "file")]
    roots = Passing(path=tuple(listed), writable=(str(root),), always=())
    inside = (f"inside {root}, which a sandboxed run could write; a PATH entry there would run what the step "
              "planted (never passed on, whatever ci.passPath says)")
    assert path_entry_refusal(str(ok), roots) is None
    assert path_entry_refusal(str(ok), Passing(writable=(str(root),), always=())) == (
        f"not in ci.passPath; fix: add {str(ok)!r} to ci.passPath in the policy")
    assert path_entry_refusal(str(root / "bin"), roots) == inside
    assert path_entry_refusal(str(link), roots) == (
        f"a symlink on the way (it leads to {root}/bin); a PATH entry is passed on only as the directory itself, "
        "with no link a step could change")
    assert path_entry_refusal("bin", roots) == "not an absolute path"
    assert path_entry_refusal(f"{ok}:{root}/bin", roots) == "holds ':', which would add more than one PATH entry"
    assert path_entry_refusal(str(tmp_path / "missing"), roots) == "not an existing directory"
    assert path_entry_refusal(str(open_dir), roots) == "writable by others than its owner"
    (tmp_path / "file").write_text("")
    assert path_entry_refusal(str(tmp_path / "file"), roots) == "not a directory"


def test_entries_are_passed_on_canonically_with_a_delimiter_not_in_the_value() -> None:
    out = render_entries([("A", "1"), ("M", "x\nghadelimiter_safebox_\ny")])
    lines = out.split("\n")
    assert lines[0] == "A=1"
    delim = lines[1].split("<<", 1)[1]
    assert lines[1] == f"M<<{delim}" and lines[2:5] == ["x", "ghadelimiter_safebox_", "y"]
    assert lines[5] == delim and delim not in "x\nghadelimiter_safebox_\ny".split("\n")
    again, refused = parse_file_command(out, file="GITHUB_ENV")
    assert again == [("A", "1"), ("M", "x\nghadelimiter_safebox_\ny")] and refused == []


def test_finish_passes_safe_entries_on_and_reports_the_rest(tmp_path: Path) -> None:
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    theirs.write_text("EARLIER=1\n")
    ci = CiRun(kind="github")
    ci.attach("GITHUB_ENV", str(ours), str(theirs))
    ours.write_text("OK=1\nLD_PRELOAD=/x.so\nN<<E\na\nb\nE\n")
    refused = ci.finish(Passing(env=("OK", "N", "*")))
    assert [(r.file, r.name) for r in refused] == [("GITHUB_ENV", "LD_PRELOAD")]
    text = theirs.read_text()
    assert text.startswith("EARLIER=1\nOK=1\nN<<")
    assert "LD_PRELOAD" not in text


@pytest.mark.parametrize("config, clean", [
    ('[http "https://github.com/"]\n\textraheader = AUTHORIZATION: basic eC1hY2Nlc3M=\n[core]\n\tbare = false\n',
     '[http "https://github.com/"]\n[core]\n\tbare = false\n'),
    ("[http]\n\textraHeader=Authorization: bearer abc \\\n  continued\n\tsslVerify = true\n",
     "[http]\n\tsslVerify = true\n"),
    ('[remote "origin"]\n\turl = https://gitlab-ci-token:glcbt-SECRET@gitlab.example.com/g/p.git\n',
     '[remote "origin"]\n\turl = https://gitlab.example.com/g/p.git\n'),
    ("[core]\n\trepositoryformatversion = 0\n", "[core]\n\trepositoryformatversion = 0\n"),
])
def test_git_config_loses_its_credentials_and_keeps_the_rest(config: str, clean: str) -> None:
    assert scrub_git_config(config) == clean

"""``safebox mcp wrap``/``unwrap`` on the text of client configs (safebox/mcpwrap.py, safebox/jsonc.py):
what changes, what stays byte for byte, and that unwrap gives the file back.
The servers running wrapped: tests/integration/test_mcp.py."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from safebox import jsonc, mcpwrap
from safebox.errors import SafeboxError

REPO = Path(__file__).resolve().parents[2]
SAFEBOX = "/opt/sb/bin/safebox"
OPTS = mcpwrap.WrapOptions(safebox=SAFEBOX, state="/home/u/.local/state/safebox/mcp",
                           config="/home/u/.config/safebox/mcp")


def servers(text: str, key: str = "mcpServers") -> dict[str, dict[str, object]]:
    return dict(json.loads(text)[key])


def test_an_npx_server_runs_under_safebox_exec_with_the_npm_preset_in_a_work_dir_of_its_own() -> None:
    text = json.dumps({"mcpServers": {"fs": {"command": "npx", "args": ["-y", "pkg", "/data"]}}}, indent=2)
    new, out = mcpwrap.wrap_text(text, OPTS)
    assert servers(new)["fs"] == {"command": SAFEBOX, "args": [
        "exec", "--chdir", "/home/u/.local/state/safebox/mcp/fs/work",
        "--audit-log", "/home/u/.local/state/safebox/mcp/fs/audit.jsonl",
        "--policy", "/home/u/.config/safebox/mcp/fs.json",
        "--preset", "npm", "--", "npx", "-y", "pkg", "/data"]}
    assert [(o.name, o.action) for o in out] == [("fs", "wrapped")]
    assert out[0].detail == "npx runs under safebox exec (--preset npm); work dir /home/u/.local/state/safebox/mcp/fs/work"
    assert mcpwrap.unwrap_text(new)[0] == text


def test_a_directory_the_server_is_given_but_may_not_write_is_named_with_the_fix(tmp_path: Path) -> None:
    (tmp_path / "notes").mkdir()
    (tmp_path / "docs").mkdir()
    text = json.dumps({"mcpServers": {"fs": {"command": "npx", "args": [
        "-y", "@modelcontextprotocol/server-filesystem", str(tmp_path / "notes"), str(tmp_path / "docs")]}}})
    _, out = mcpwrap.wrap_text(text, OPTS.replace(allow_write=(str(tmp_path / "notes"),)))
    assert out[0].detail.endswith(f"; its arguments name directories it can read but not write: {tmp_path / 'docs'} "
                                  "(wrap it again with --server fs --allow-write DIR for those it should write)")


def test_uvx_gets_the_pip_preset_other_commands_none_and_flags_reach_every_server() -> None:
    opts = OPTS.replace(allow_domains=("api.example.com",), allow_write=("/data",), policy_files=("/p.toml",),
                        presets=("github",))
    text = json.dumps({"mcpServers": {"t": {"command": "uvx", "args": ["mcp-server-time"]},
                                      "p": {"command": "/usr/bin/python3", "args": ["s.py"]}}})
    new, _ = mcpwrap.wrap_text(text, opts)
    t, p = servers(new)["t"]["args"], servers(new)["p"]["args"]
    assert isinstance(t, list) and isinstance(p, list)
    assert t[7:] == ["--preset", "pip", "--preset", "github", "--policy", "/p.toml", "--allow-write", "/data",
                     "--allow-domain", "api.example.com", "--", "uvx", "mcp-server-time"]
    assert p[7:] == ["--preset", "github", "--policy", "/p.toml", "--allow-write", "/data",
                     "--allow-domain", "api.example.com", "--", "/usr/bin/python3", "s.py"]
    no_auto, _ = mcpwrap.wrap_text(text, OPTS.replace(auto_presets=False))
    assert "--preset" not in str(servers(no_auto)["t"]["args"])


def test_vs_code_jsonc_keeps_its_comments_and_trailing_commas_and_unwrap_gives_the_same_bytes() -> None:
    text = """// .vscode/mcp.json
{
  "inputs": [{"type": "promptString", "id": "key", "password": true}],
  "servers": {
    /* the files of this project */
    "files": {
      "type": "stdio",
      "command": "npx", // from npm
      "args": [
        "-y",
        "@modelcontextprotocol/server-filesystem",
        "${workspaceFolder}",
      ],
    },
    "github": {"type": "http", "url": "https://api.githubcopilot.com/mcp/"},
  },
}
"""
    new, out = mcpwrap.wrap_text(text, OPTS)
    assert "// .vscode/mcp.json" in new and "/* the files of this project */" in new and "// from npm" in new
    assert f'"command": "{SAFEBOX}", // from npm' in new
    assert '"exec", "--chdir", "/home/u/.local/state/safebox/mcp/files/work", ' in new
    assert [(o.name, o.action) for o in out] == [("files", "wrapped"), ("github", "remote")]
    assert out[1].detail.startswith("left alone: a remote server (https://api.githubcopilot.com/mcp/)")
    assert mcpwrap.unwrap_text(new)[0] == text


def test_a_server_without_args_gets_them_back_removed_and_an_empty_args_stays() -> None:
    text = '{\n  "mcpServers": {\n    "a": {\n      "command": "/opt/srv",\n      "env": {"X": "1"}\n    },\n' \
           '    "b": {"command": "srv", "args": []},\n    "c": {"args": [], "command": "srv"}\n  }\n}\n'
    new, _ = mcpwrap.wrap_text(text, OPTS)
    s = servers(new)
    state = "/home/u/.local/state/safebox/mcp"
    assert s["a"]["args"] == ["exec", "--chdir", f"{state}/a/work", "--audit-log", f"{state}/a/audit.jsonl",
                              "--policy", "/home/u/.config/safebox/mcp/a.json", "/opt/srv"]
    assert s["b"]["args"] == ["exec", "--chdir", f"{state}/b/work", "--audit-log", f"{state}/b/audit.jsonl",
                              "--policy", "/home/u/.config/safebox/mcp/b.json", "--", "srv"]
    assert '"command": "/opt/sb/bin/safebox",\n      "args": ["exec",' in new  # in the file's own layout
    assert mcpwrap.unwrap_text(new)[0] == text


def test_wrapping_twice_does_not_wrap_twice_and_naming_a_server_replaces_its_options() -> None:
    text = json.dumps({"mcpServers": {"a": {"command": "npx", "args": ["a"]}, "b": {"command": "npx", "args": ["b"]}}})
    once, _ = mcpwrap.wrap_text(text, OPTS)
    twice, out = mcpwrap.wrap_text(once, OPTS.replace(allow_domains=("x.example",)))
    assert twice == once and {o.action for o in out} == {"already-wrapped"}
    assert out[0].detail == ("left as it is: safebox exec --chdir /home/u/.local/state/safebox/mcp/a/work --audit-log "
                             "/home/u/.local/state/safebox/mcp/a/audit.jsonl --policy "
                             "/home/u/.config/safebox/mcp/a.json --preset npm (name it with --server to "
                             "replace its options)")
    named, out = mcpwrap.wrap_text(once, OPTS.replace(allow_domains=("x.example",)), only=["b"])
    b = servers(named)["b"]["args"]
    assert isinstance(b, list) and b.count("exec") == 1 and b[-5:] == ["--allow-domain", "x.example", "--", "npx", "b"]
    assert servers(named)["a"] == servers(once)["a"] and [o.action for o in out] == ["wrapped"]
    assert mcpwrap.unwrap_text(named)[0] == text


def test_a_config_that_comes_wrapped_with_wide_options_or_another_safebox_is_shown_whole() -> None:
    # A cloned project's .mcp.json, "wrapped" by its author: wrap leaves it (no double wrap) but says what it runs.
    text = json.dumps({"mcpServers": {"x": {"command": "./tools/safebox",
                                            "args": ["exec", "--allow-write", "~", "--", "node", "x.js"]}}})
    new, out = mcpwrap.wrap_text(text, OPTS)
    assert new == text and out[0].action == "already-wrapped"
    assert out[0].detail == ("left as it is: safebox exec --allow-write ~ (name it with --server to replace its "
                             "options); note: it runs ./tools/safebox, not this safebox (/opt/sb/bin/safebox)")


def test_the_servers_of_every_client_are_found() -> None:
    claude_json = {"mcpServers": {"g": {"command": "g"}},
                   "projects": {"/home/u/p": {"mcpServers": {"p": {"type": "stdio", "command": "p", "args": []}}}}}
    settings_json = {"editor.fontSize": 12, "mcp": {"servers": {"s": {"command": "s", "args": []}}}}
    for doc, names in ((claude_json, ["g", "p"]), (settings_json, ["s"]),
                       ({"servers": {"v": {"command": "v"}}}, ["v"])):
        _, out = mcpwrap.wrap_text(json.dumps(doc), OPTS)
        assert [(o.name, o.action) for o in out] == [(n, "wrapped") for n in names]


def test_what_cannot_be_wrapped_is_said() -> None:
    with pytest.raises(SafeboxError, match=r"c\.json: no MCP servers in it"):
        mcpwrap.wrap_text('{"other": {}}', OPTS, name="c.json")
    with pytest.raises(jsonc.JsoncError, match=r"^c\.json: line 2 column 12: expected ',' or '}'$"):
        mcpwrap.wrap_text('{"mcpServers":\n  {"a": {} "b": {}}}', OPTS, name="c.json")
    with pytest.raises(SafeboxError, match=r"no server named 'nope'") as e:
        mcpwrap.wrap_text('{"mcpServers": {"a": {"command": "a"}}}', OPTS, only=["nope"])
    assert isinstance(e.value, SafeboxError) and e.value.hint == "the servers in it: a"
    with pytest.raises(SafeboxError, match=r"its command '-x' begins with '-'"):
        mcpwrap.wrap_text('{"mcpServers": {"a": {"command": "-x"}}}', OPTS)
    _, out = mcpwrap.wrap_text('{"mcpServers": {"a": {"command": "a", "args": [1]}, "b": {"url": "u"}}}', OPTS)
    assert [(o.name, o.action) for o in out] == [("a", "skipped"), ("b", "remote")]


def test_a_name_that_is_no_file_name_gets_a_directory_of_its_own() -> None:
    assert mcpwrap.dir_name("github") == "github"
    assert mcpwrap.dir_name("../x") != mcpwrap.dir_name("_.x") and "/" not in mcpwrap.dir_name("../x")
    assert not mcpwrap.dir_name("..").startswith(".")


_names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12)
_server = st.fixed_dictionaries({"command": _names.filter(lambda c: not c.startswith("-"))},
                                optional={"args": st.lists(_names, max_size=4),
                                          "env": st.dictionaries(_names, _names, max_size=2)})


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(_names, _server, min_size=1, max_size=4), st.sampled_from([None, 1, 2, 4, "\t"]),
       st.booleans(), st.sampled_from(["mcpServers", "servers"]))
def test_unwrap_gives_back_the_bytes_wrap_was_given(cfg: dict[str, object], indent: int | str | None,
                                                    ascii_only: bool, key: str) -> None:
    text = json.dumps({key: cfg}, indent=indent, ensure_ascii=ascii_only)
    new, _ = mcpwrap.wrap_text(text, OPTS)
    for name, entry in json.loads(new)[key].items():
        original = cfg[name]
        assert isinstance(original, dict)
        assert entry["command"] == SAFEBOX and entry.get("env") == original.get("env")
        tail = [original["command"], *original.get("args", [])]
        assert entry["args"][-len(tail):] == tail and ("--" in entry["args"]) == ("args" in original)
    assert mcpwrap.wrap_text(new, OPTS)[0] == new
    assert mcpwrap.unwrap_text(new)[0] == text


def run_cli(*args: str, cwd: Path, home: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LC_ALL": "C"}
    return subprocess.run([str(REPO / ".venv" / "bin" / "safebox"), "mcp", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60, check=False)


def test_the_command_shows_a_diff_writes_atomically_keeping_the_mode_and_refuses_a_link(tmp_path: Path) -> None:
    config = tmp_path / "mcp.json"
    text = '{"mcpServers": {"a": {"command": "npx", "args": ["a"], "env": {"A_TOKEN": "t", "MODE": "m"}}}}\n'
    config.write_text(text)
    config.chmod(0o640)
    dry = run_cli("wrap", "--dry-run", "mcp.json", "--allow-write", "data", cwd=tmp_path, home=tmp_path)
    assert dry.returncode == 0 and config.read_text() == text
    assert dry.stdout.startswith("--- mcp.json\n+++ mcp.json\n@@ -1 +1 @@\n-" + text.rstrip("\n"))
    assert f'"--allow-write", "{tmp_path / "data"}"' in dry.stdout and "a: wrapped" in dry.stderr
    assert not (tmp_path / ".local").exists()
    done = run_cli("wrap", "mcp.json", cwd=tmp_path, home=tmp_path)
    assert done.returncode == 0 and "mcp.json: written (1 server(s) changed)" in done.stdout
    assert stat.S_IMODE(config.stat().st_mode) == 0o640
    work = tmp_path / ".local" / "state" / "safebox" / "mcp" / "a" / "work"
    assert work.is_dir() and stat.S_IMODE(work.stat().st_mode) == 0o700
    # The variables the entry gives its server are kept inside (env.allow), in a policy file of the server's own.
    own = tmp_path / ".config" / "safebox" / "mcp" / "a.json"
    assert json.loads(own.read_text()) == {"env": {"allow": ["A_TOKEN", "MODE"]}}
    own.write_text('{"network": {"allowedDomains": ["api.example.com"]}, "env": {"allow": ["MODE"]}}')
    assert run_cli("wrap", "--server", "a", "mcp.json", cwd=tmp_path, home=tmp_path).returncode == 0
    assert json.loads(own.read_text()) == {"network": {"allowedDomains": ["api.example.com"]},
                                           "env": {"allow": ["MODE", "A_TOKEN"]}}
    assert run_cli("unwrap", "mcp.json", cwd=tmp_path, home=tmp_path).returncode == 0
    assert config.read_text() == text
    # What every start of the server would refuse is refused now, and nothing is written.
    typo = run_cli("wrap", "mcp.json", "--preset", "nmp", cwd=tmp_path, home=tmp_path)
    assert typo.returncode == 125 and config.read_text() == text
    assert typo.stderr == ("safebox: --preset nmp: unknown preset 'nmp' (did you mean npm?); known: npm, pip, cargo, "
                           "go, maven, github\n"), typo.stderr
    (tmp_path / "link.json").symlink_to(config)
    refused = run_cli("wrap", "link.json", cwd=tmp_path, home=tmp_path)
    assert refused.returncode == 125 and config.read_text() == text
    assert refused.stderr == (f"safebox: {tmp_path / 'link.json'}: a symlink; safebox never follows one in a place a "
                              f"sandboxed command could write\nhint: give the file it leads to: {config}\n")


def test_a_config_of_many_escapes_or_deep_nesting_is_read_in_linear_time_or_refused() -> None:
    import time

    many = '{"mcpServers": {"a": {"command": "' + "\\\\" * 1_000_000 + '"}}}'
    t = time.monotonic()
    assert jsonc.parse(many).members[0].value.members[0].value.members[0].value.value == "\\" * 1_000_000
    assert time.monotonic() - t < 5
    with pytest.raises(jsonc.JsoncError, match="nested more than 200 deep"):
        jsonc.parse("[" * 10_000)


@pytest.mark.parametrize("env", [{"LD_PRELOAD": "./evil.so"}, {"LD_LIBRARY_PATH": "."}, {"PYTHONPATH": "x"},
                                 {"SAFEBOX_HELPER": "/p/evil"}, {"XDG_CONFIG_HOME": "./cfg"}, {"HOME": "/p"},
                                 {"OPENSSL_CONF": "/p/evil.cnf"}, {"HOSTALIASES": "/p/aliases"},
                                 {"GLIBC_TUNABLES": "x"}, {"BASH_ENV": "/p/rc"}, {"PATH": "bin:/usr/bin"},
                                 {"PATH": "${PWD}/bin:/usr/bin"}])
def test_an_entry_whose_env_acts_on_safebox_itself_is_not_wrapped_and_says_so(env: dict[str, str]) -> None:
    # Found in review: the client starts the wrapped line with the entry's env, so {"LD_PRELOAD": "./evil.so"}
    # ran the project's library in safebox's own process on the host, and wrap said "wrapped".
    entry = {"command": "node", "args": ["server.js"], "env": {"GITHUB_TOKEN": "t", **env}}
    text = json.dumps({"mcpServers": {"s": entry, "ok": {"command": "node", "args": ["ok.js"], "env": {"API_KEY": "k"}}}})
    new, out = mcpwrap.wrap_text(text, OPTS)
    by = {o.name: o for o in out}
    assert by["s"].action == "skipped" and by["s"].detail.startswith(f"NOT SANDBOXED: its \"env\" sets {next(iter(env))}")
    assert servers(new)["s"] == entry
    # Control: an entry whose env only carries the server's own settings is wrapped.
    assert by["ok"].action == "wrapped" and servers(new)["ok"]["command"] == OPTS.safebox
    # Named again, an entry that came wrapped with such an env is not unwrapped and left unwrapped.
    wrapped = json.dumps({"mcpServers": {"s": {"command": "/opt/sb/bin/safebox", "args": ["exec", "--", "node"],
                                               "env": env}}})
    again, out = mcpwrap.wrap_text(wrapped, OPTS, only=["s"])
    assert again == wrapped and out[0].action == "skipped"


def test_an_entry_with_an_env_file_is_not_wrapped_and_says_so() -> None:
    # VS Code reads envFile and gives its variables to the process it starts: LD_PRELOAD in it would run in
    # safebox on the host, and wrap cannot see it.
    entry = {"type": "stdio", "command": "node", "args": ["s.js"], "envFile": "${workspaceFolder}/.env"}
    new, out = mcpwrap.wrap_text(json.dumps({"servers": {"s": entry}}), OPTS)
    assert out[0].action == "skipped" and out[0].detail.startswith("NOT SANDBOXED: its \"env\" sets envFile")
    assert servers(new, "servers")["s"] == entry


def test_a_path_of_absolute_directories_in_env_is_kept_and_wrapped() -> None:
    # Claude Desktop configs often set PATH (nvm's node): absolute directories are no planted tool of the project.
    text = json.dumps({"mcpServers": {"s": {"command": "npx", "args": ["x"],
                                            "env": {"PATH": "/home/u/.nvm/versions/node/v20/bin:/usr/bin"}}}})
    _, out = mcpwrap.wrap_text(text, OPTS)
    assert out[0].action == "wrapped"

"""MCP servers under ``safebox mcp wrap`` (issue 26, item 5; docs/agents.md), end to end.

The client is the official MCP SDK (PyPI ``mcp``), started as Claude
Desktop starts servers: from the entries of a ``claude_desktop_config.json``
(its ``command``, ``args`` and ``env``). The servers are real: the npm
packages ``@modelcontextprotocol/server-filesystem`` and
``@modelcontextprotocol/server-everything``, started by ``npx -y`` as their
READMEs configure them, and a Python server built on the SDK
(``examples/mcp_server.py``). npx finds the packages in the project's
``node_modules`` (``.tools/mcp``, installed by ``build.py setup --tests``)
and runs offline: nothing here reaches a registry.

Each "cannot" has its control: the same call through the config as it was
before ``wrap`` (which ``unwrap`` gives back byte for byte) succeeds.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.types import TextContent

from netservers import serving
from sbx import PATH, REPO, SAFEBOX, FakeHome, make_home, missing, wait_for

pytestmark = pytest.mark.needs_bwrap

NODE_MODULES = REPO / ".tools" / "mcp" / "node_modules"
PYTHON = REPO / ".venv" / "bin" / "python"
SERVER = REPO / "examples" / "mcp_server.py"
# As a user keeps npx off the network: the packages are the project's own.
NPM_OFFLINE = {"npm_config_offline": "true", "npm_config_update_notifier": "false"}


class Homes:
    """A fake home with a Claude Desktop config, wrapped, and its text from before."""

    def __init__(self, home: FakeHome, config: Path, plain: str) -> None:
        self.home = home
        self.config = config
        self.plain = plain
        self.notes = home.root / "notes"

    def audit(self, server: str) -> list[dict[str, Any]]:
        log = self.home.root / ".local" / "state" / "safebox" / "mcp" / server / "audit.jsonl"
        return [json.loads(line) for line in log.read_text().splitlines()]


def mcp_cli(home: FakeHome, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SAFEBOX), "mcp", *args], env=home.env(), cwd=home.root, capture_output=True,
                          text=True, timeout=60, check=False)


@pytest.fixture(scope="module")
def homes(scratch: Path) -> Iterator[Homes]:
    if not (NODE_MODULES / ".bin" / "mcp-server-filesystem").exists():
        missing(f"the MCP servers are not installed in {NODE_MODULES}")
    home = make_home(scratch)
    notes = home.root / "notes"
    notes.mkdir()
    (notes / "a.txt").write_text("from the notes\n")
    # The project the npx servers run in has them as dependencies.
    (home.work / "node_modules").symlink_to(NODE_MODULES)
    config = home.root / ".config" / "Claude" / "claude_desktop_config.json"
    config.parent.mkdir(parents=True)
    plain = json.dumps({"mcpServers": {
        "filesystem": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", str(home.root)],
                       "env": NPM_OFFLINE},
        "everything": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-everything"],
                       "env": NPM_OFFLINE},
        "example": {"command": str(PYTHON), "args": [str(SERVER)], "env": {"EXAMPLE_API_TOKEN": "tok-for-example"}},
        "remote": {"type": "http", "url": "https://mcp.example.com/mcp"},
    }}, indent=2) + "\n"
    config.write_text(plain)
    for opts in (["--server", "filesystem", "--server", "everything", "--work-dir", str(home.work),
                  "--allow-write", str(notes)],
                 ["--server", "example", "--allow-domain", "allowed.example"]):
        r = mcp_cli(home, "wrap", str(config), *opts)
        assert r.returncode == 0, r.stderr
    yield Homes(home, config, plain)
    shutil.rmtree(home.root, ignore_errors=True)


@pytest.fixture(scope="module")
def web() -> Iterator[int]:
    """An HTTP server on the host's loopback: what the unwrapped server reaches."""
    with serving(body=b"hello\n") as srv:
        yield srv.port


def call(config_text: str, server: str, home: FakeHome, calls: list[tuple[str, dict[str, Any]]]
         ) -> tuple[list[str], str]:
    """Start ``server`` of the config as a client does, call each tool in
    turn, return the text of each result and what the server wrote on stderr."""
    entry = json.loads(config_text)["mcpServers"][server]
    env = {"HOME": str(home.root), "PATH": PATH, "LC_ALL": "C", "CLIENT_API_TOKEN": "tok-of-the-client",
           **entry.get("env", {})}
    # The client starts servers in the project (as Claude Code does), where npx finds its packages.
    params = StdioServerParameters(command=entry["command"], args=entry.get("args", []), env=env, cwd=home.work)

    async def session(errlog: Any) -> list[str]:
        with anyio.fail_after(120):
            async with stdio_client(params, errlog=errlog) as streams, ClientSession(*streams) as s:
                await s.initialize()
                out = []
                for tool, args in calls:
                    r = await s.call_tool(tool, args)
                    out.append("\n".join(c.text for c in r.content if isinstance(c, TextContent)))
                return out

    with tempfile.TemporaryFile("w+") as errlog:
        results = anyio.run(session, errlog)
        errlog.seek(0)
        return results, errlog.read()


def processes_naming(marker: str) -> list[str]:
    """Command lines of host processes that name ``marker`` (the fake home: servers and their sandboxes)."""
    found = []
    for pid in os.listdir("/proc"):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if pid.isdigit() and marker in argv:
            found.append(argv)
    return found


def test_wrap_rewrites_only_the_stdio_servers_and_unwrap_gives_the_file_back(homes: Homes) -> None:
    config = json.loads(homes.config.read_text())["mcpServers"]
    for name in ("filesystem", "everything", "example"):
        assert config[name]["command"] == str(SAFEBOX) and config[name]["args"][:2] == ["exec", "--chdir"], name
    assert config["filesystem"]["args"][-4:] == ["npx", "-y", "@modelcontextprotocol/server-filesystem",
                                                 str(homes.home.root)]
    assert "--preset" in config["filesystem"]["args"] and "--preset" not in config["example"]["args"]
    assert config["remote"] == {"type": "http", "url": "https://mcp.example.com/mcp"}
    again = mcp_cli(homes.home, "wrap", str(homes.config))
    assert again.returncode == 0 and "nothing to change" in again.stdout, again.stdout + again.stderr
    assert "remote: remote: left alone" in again.stdout
    dry = mcp_cli(homes.home, "unwrap", "--dry-run", str(homes.config))
    assert dry.returncode == 0 and '-      "command": "' + str(SAFEBOX) + '",' in dry.stdout
    assert '+      "command": "npx",' in dry.stdout
    copy = homes.home.root / "copy.json"
    copy.write_text(homes.config.read_text())
    assert mcp_cli(homes.home, "unwrap", str(copy)).returncode == 0
    assert copy.read_text() == homes.plain


def test_tool_calls_work_through_the_wrapped_config(homes: Homes) -> None:
    text, notes = homes.config.read_text(), homes.notes
    fs, _ = call(text, "filesystem", homes.home, [("read_text_file", {"path": str(notes / "a.txt")}),
                                                  ("write_file", {"path": str(notes / "b.txt"), "content": "b\n"})])
    assert fs == ["from the notes\n", f"Successfully wrote to {notes / 'b.txt'}"]
    assert (notes / "b.txt").read_text() == "b\n"
    everything, _ = call(text, "everything", homes.home, [("echo", {"message": "through safebox"})])
    assert everything == ["Echo: through safebox"]
    example, _ = call(text, "example", homes.home, [("read", {"path": str(notes / "a.txt")}),
                                                    ("env", {"name": "EXAMPLE_API_TOKEN"}),
                                                    ("env", {"name": "CLIENT_API_TOKEN"})])
    # The token its entry gives the server reaches it; one the client's environment has is removed, as ever.
    assert example == ["from the notes\n", "tok-for-example", "unset"]
    # The client closed each session: no sandbox, server or npx is left behind.
    assert wait_for(lambda: not processes_naming(str(homes.home.root))), processes_naming(str(homes.home.root))


def test_a_wrapped_server_cannot_read_the_users_credentials_nor_write_outside_its_roots(homes: Homes) -> None:
    root = homes.home.root
    ssh, aws, outside = root / ".ssh" / "id_rsa", root / ".aws" / "credentials", root / "outside.txt"
    fs_calls: list[tuple[str, dict[str, Any]]] = [
        ("read_text_file", {"path": str(ssh)}), ("read_text_file", {"path": str(aws)}),
        ("write_file", {"path": str(outside), "content": "from the server\n"})]
    own = root / ".config" / "safebox" / "mcp" / "example.json"  # the server's own policy: not its to widen
    py_calls: list[tuple[str, dict[str, Any]]] = [
        ("read", {"path": str(ssh)}), ("read", {"path": str(aws)}),
        ("write", {"path": str(outside), "text": "from the server\n"}), ("read", {"path": str(own)}),
        ("write", {"path": str(own), "text": "{}"})]
    # Control: the same calls, the servers started as the config had them.
    fs, _ = call(homes.plain, "filesystem", homes.home, fs_calls)
    assert homes.home.secret in fs[0] and homes.home.secret in fs[1]
    assert fs[2] == f"Successfully wrote to {outside}"
    py, _ = call(homes.plain, "example", homes.home, py_calls)
    assert homes.home.secret in py[0] and homes.home.secret in py[1] and py[2] == "written"
    assert "EXAMPLE_API_TOKEN" in py[3] and py[4] == "written"
    outside.write_text("outside\n")
    own.write_text(py[3])

    fs, _ = call(homes.config.read_text(), "filesystem", homes.home, fs_calls)
    py, err = call(homes.config.read_text(), "example", homes.home, py_calls)
    assert homes.home.secret not in "".join(fs + py)
    assert py == [f"error: [Errno 2] No such file or directory: '{ssh}'",
                  f"error: [Errno 2] No such file or directory: '{aws}'",
                  f"error: [Errno 30] Read-only file system: '{outside}'",
                  f"error: [Errno 2] No such file or directory: '{own}'",
                  f"error: [Errno 2] No such file or directory: '{own}'"]
    assert "EXAMPLE_API_TOKEN" in own.read_text()
    # The filesystem server resolves ~/.aws's link itself, and writes through a temporary file beside the target.
    assert fs[:2] == [f"ENOENT: no such file or directory, open '{ssh}'",
                      f"ENOENT: no such file or directory, open '{root / '.aws-real' / 'credentials'}'"]
    assert re.fullmatch(rf"EROFS: read-only file system, open '{re.escape(str(outside))}\.[0-9a-f]+\.tmp'", fs[2]), fs[2]
    assert outside.read_text() == "outside\n"
    assert "safebox: refused" in err


def test_a_wrapped_servers_request_to_an_unlisted_host_is_refused_and_reported(homes: Homes, web: int) -> None:
    url = f"http://localhost:{web}/"
    plain, _ = call(homes.plain, "example", homes.home, [("fetch", {"url": url})])
    assert plain == ["hello\n"]  # control: unwrapped, the server reaches it
    wrapped, err = call(homes.config.read_text(), "example", homes.home, [("fetch", {"url": url})])
    assert wrapped == [f"error: HTTP 403: safebox refused localhost:{web} by network.allowedDomains: localhost is "
                       "not in network.allowedDomains. Fix, for whoever runs the sandbox: add localhost to "
                       "network.allowedDomains. Retrying, or another route to the host, is refused the same way.\n"]
    assert f"safebox: refused HTTP to localhost:{web} (localhost is not in network.allowedDomains)" in err
    denied = [e for e in homes.audit("example") if e["event"] == "denied" and e.get("kind") == "network"]
    assert any(e["host"] == "localhost" and e["port"] == web and e["rule"] == "network.allowedDomains"
               for e in denied), denied


def test_safebox_exec_writes_nothing_on_the_commands_stdout_while_it_refuses(homes: Homes) -> None:
    """An MCP client reads JSON-RPC from the server's stdout: every refusal,
    the summary and -v's report go to stderr (and the audit log)."""
    script = ("printf '\\000\\001{\"jsonrpc\"}'; echo x > ~/outside.txt; cat ~/.ssh/id_rsa; "
              "curl -s -o /dev/null http://unlisted.example/ >&2; exit 0")
    r = subprocess.run([str(SAFEBOX), "exec", "-v", "--chdir", str(homes.home.work), "--allow-domain",
                        "allowed.example", "--audit-log", str(homes.home.root / "stdout-audit.jsonl"), "--",
                        "sh", "-c", script], env=homes.home.env(), cwd="/", capture_output=True, timeout=60,
                       check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout == b'\x00\x01{"jsonrpc"}'
    assert b"safebox: refused" in r.stderr and b"unlisted.example" in r.stderr


def test_the_mcp_example_wraps_a_server_and_every_check_holds(fresh_home: FakeHome) -> None:
    base = fresh_home.root / "mcp-example"
    base.mkdir()
    r = subprocess.run([str(PYTHON), str(REPO / "examples" / "mcp_wrap.py"), str(base)], cwd=fresh_home.root,
                       env=fresh_home.env(), capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert [line for line in r.stdout.splitlines() if line.startswith(("ok ", "FAIL "))] == [
        "ok writes-its-work-dir", "ok no-write-outside", "ok no-credentials", "ok unlisted-host-refused",
        "ok unwrap-restores"]
    assert fresh_home.secret not in r.stdout + r.stderr


def test_a_config_reached_through_a_link_in_an_earlier_runs_write_root_is_refused(fresh_home: FakeHome) -> None:
    # A sandboxed command could have made proj/cfg point at a config it wants rewritten.
    elsewhere = fresh_home.root / "elsewhere"
    elsewhere.mkdir()
    config = elsewhere / "mcp.json"
    text = '{"mcpServers": {"a": {"command": "srv", "args": []}}}\n'
    config.write_text(text)
    assert fresh_home.run(["true"]).returncode == 0  # proj is now an earlier run's write root
    (fresh_home.work / "cfg").symlink_to(elsewhere)
    r = mcp_cli(fresh_home, "wrap", str(fresh_home.work / "cfg" / "mcp.json"))
    assert r.returncode == 125 and config.read_text() == text
    assert r.stderr.startswith(f"safebox: {fresh_home.work}/cfg/mcp.json: {fresh_home.work}/cfg on the way is a "
                               f"symlink inside the write root {fresh_home.work}"), r.stderr
    ok = mcp_cli(fresh_home, "wrap", str(config))  # control: the path it leads to, given as such
    assert ok.returncode == 0 and config.read_text() != text, ok.stderr


def test_escape_sequences_in_a_projects_config_never_reach_the_terminal(fresh_home: FakeHome) -> None:
    # Found in review: a cloned project's .mcp.json picks server names, options and comments; printed raw,
    # "\x1b[2K\r" erased "already-wrapped: ... --allow-write /" and wrote "wrapped" over it.
    config = fresh_home.work / ".mcp.json"
    text = ('{"mcpServers": {\n'
            '  // \x1b]0;title\x07 \u009b2K\n'
            '  "ok\\u001b[2K\\rfake": {"command": "node", "args": ["y.js"]},\n'
            '  "pre": {"command": "/usr/bin/safebox", "args": ["exec", "--allow-write", "/", "--allow-read",'
            ' "\\u001b[0m\\r\\u001b[2Kpre: wrapped\\u009b", "--", "node", "x.js"]}\n'
            '}}\n')
    config.write_text(text)
    for args in (["wrap", "--dry-run"], ["wrap"], ["unwrap"]):
        r = mcp_cli(fresh_home, *args, str(config))
        assert r.returncode == 0, r.stderr
        said = r.stdout + r.stderr
        assert not any(c in said for c in "\x1b\r\x07\u009b"), repr(said)
        # Control: the names and options are there, each control character a "?".
        assert "ok?[2K?fake: " in said and "--allow-write / --allow-read ?[0m??[2Kpre: wrapped?" in said \
            or args == ["unwrap"], said
    assert "// ?]0;title? ?2K" in mcp_cli(fresh_home, "wrap", "--dry-run", str(config)).stdout

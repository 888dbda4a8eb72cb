"""An MCP server wrapped by ``safebox mcp wrap`` (docs/agents.md, "MCP servers").

It writes a Claude Desktop config that starts ``examples/mcp_server.py``
(a server that reads, writes and fetches whatever it is asked), wraps it
with ``safebox mcp wrap`` (the diff first, with ``--dry-run``), and then,
as a client would, starts the server from the wrapped config with the
official MCP SDK and calls its tools. It checks that the server

* works: it writes a file in its work dir,
* cannot write outside it (``EROFS``),
* cannot read ``~/.ssh/id_rsa`` (safebox's credential list),
* is refused an unlisted host, with the one line an agent can read,

and that ``safebox mcp unwrap`` gives the config back byte for byte.

Usage: python examples/mcp_wrap.py [BASE_DIR]   (exit 0: every check held)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.types import TextContent

HERE = os.path.dirname(os.path.abspath(__file__))


def safebox() -> str:
    """The safebox beside this Python (a venv's), else the one on PATH."""
    near = os.path.join(os.path.dirname(sys.executable), "safebox")
    return near if os.access(near, os.X_OK) else shutil.which("safebox") or "safebox"


async def call_tools(entry: dict[str, object], calls: list[tuple[str, dict[str, str]]]) -> list[str]:
    """Start the server of ``entry`` as a client does and call each tool; the text of each answer."""
    args = entry.get("args", [])
    assert isinstance(entry["command"], str) and isinstance(args, list)
    params = StdioServerParameters(command=entry["command"], args=args)
    async with stdio_client(params) as streams, ClientSession(*streams) as session:
        await session.initialize()
        out = []
        for tool, arguments in calls:
            result = await session.call_tool(tool, arguments)
            out.append("".join(c.text for c in result.content if isinstance(c, TextContent)))
        return out


def main(base: str) -> int:
    """Wrap, call, check, unwrap; print each check."""
    config = os.path.join(base, "claude_desktop_config.json")
    before = json.dumps({"mcpServers": {
        "example": {"command": sys.executable, "args": [os.path.join(HERE, "mcp_server.py")]},
    }}, indent=2) + "\n"
    with open(config, "w") as f:
        f.write(before)
    sb = safebox()
    diff = subprocess.run([sb, "mcp", "wrap", "--dry-run", config, "--allow-domain", "api.example.com"],
                          capture_output=True, text=True, check=True)
    print(diff.stdout, end="")
    subprocess.run([sb, "mcp", "wrap", config, "--allow-domain", "api.example.com"], check=True,
                   stdout=subprocess.DEVNULL)
    with open(config) as f:
        entry = json.load(f)["mcpServers"]["example"]
    work = entry["args"][entry["args"].index("--chdir") + 1]
    outside = os.path.join(base, "outside.txt")
    answers = anyio.run(call_tools, entry, [
        ("write", {"path": os.path.join(work, "notes.txt"), "text": "kept\n"}),
        ("write", {"path": outside, "text": "planted\n"}),
        ("read", {"path": os.path.expanduser("~/.ssh/id_rsa")}),
        ("fetch", {"url": "http://unlisted.example/"}),
    ])
    checks = {
        "writes-its-work-dir": answers[0] == "written",
        "no-write-outside": answers[1].startswith("error: [Errno 30] Read-only file system")
                            and not os.path.exists(outside),
        "no-credentials": answers[2].startswith("error: [Errno 2] No such file or directory"),
        "unlisted-host-refused": answers[3].startswith("error: HTTP 403: safebox refused unlisted.example:80 "
                                                       "by network.allowedDomains"),
    }
    subprocess.run([sb, "mcp", "unwrap", config], check=True, stdout=subprocess.DEVNULL)
    with open(config) as f:
        checks["unwrap-restores"] = f.read() == before
    for name, held in checks.items():
        print(f"{'ok' if held else 'FAIL'} {name}")
    for answer in answers:
        print(f"  server said: {answer.strip()}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="mcp-", dir="/var/tmp")))

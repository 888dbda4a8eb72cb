"""A small stdio MCP server, standing in for a third party's: it reads,
writes and fetches whatever its client asks (examples/mcp_wrap.py and
tests/integration/test_mcp.py run it wrapped and unwrapped).

Each tool answers ``error: ...`` with the exception's text instead of
raising, so the client sees the errno or the proxy's refusal (the SDK
would replace a raised exception with "Error executing tool").

Usage (by an MCP client): python examples/mcp_server.py
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request

from mcp.server.mcpserver import MCPServer

app = MCPServer("example")


@app.tool()
def read(path: str) -> str:
    """The text of the file at ``path``."""
    try:
        with open(path) as f:
            return f.read()
    except OSError as e:
        return f"error: {e}"


@app.tool()
def write(path: str, text: str) -> str:
    """Write ``text`` to the file at ``path``."""
    try:
        with open(path, "w") as f:
            f.write(text)
    except OSError as e:
        return f"error: {e}"
    return "written"


@app.tool()
def fetch(url: str) -> str:
    """The body of a GET of ``url`` (through the proxy the environment names, as urllib does)."""
    try:
        with urllib.request.urlopen(url, timeout=20) as r:
            return str(r.read().decode())
    except urllib.error.HTTPError as e:
        return f"error: HTTP {e.code}: {e.read().decode(errors='replace')}"
    except OSError as e:
        return f"error: {e}"


@app.tool()
def env(name: str) -> str:
    """The value of the environment variable ``name``, or ``unset``."""
    return os.environ.get(name, "unset")


if __name__ == "__main__":
    app.run()

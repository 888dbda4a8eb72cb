"""The proxy's import weight: every networked sandbox pays for it in memory
(docs/benchmarks.md), so what it must not load is pinned here."""

from __future__ import annotations

import os
import subprocess
import sys

_SCRIPT = r"""
import sys
import safebox.proxy
heavy = sorted(m for m in ("ssl", "_ssl", "pathlib", "json", "datetime", "pydantic", "click") if m in sys.modules)
import asyncio.sslproto
import ssl  # unhidden again: later code still gets the real module
print(",".join(heavy) or "-", asyncio.sslproto.ssl is None, ssl.OPENSSL_VERSION.split()[0])
"""


def _run(script: str) -> list[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_importing_the_proxy_loads_neither_openssl_nor_pathlib_json_or_pydantic() -> None:
    heavy, ssl_hidden_from_asyncio, openssl = _run(_SCRIPT)
    assert heavy == "-"
    assert ssl_hidden_from_asyncio == "True"
    assert openssl == "OpenSSL"


def test_asyncio_keeps_ssl_when_something_imported_it_before_the_proxy() -> None:
    # The guard must never take TLS away from a process that already had it.
    script = "import ssl, asyncio.sslproto, safebox.proxy; print(asyncio.sslproto.ssl is ssl)"
    assert _run(script) == ["True"]

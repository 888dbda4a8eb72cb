"""The proxy's import weight: every networked sandbox pays for it in memory
(docs/benchmarks.md), so what it must not load is pinned here."""

from __future__ import annotations

import os
import subprocess
import sys

_SCRIPT = r"""
import sys
import safebox.proxy.server
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
    script = "import ssl, asyncio.sslproto, safebox.proxy.server; print(asyncio.sslproto.ssl is ssl)"
    assert _run(script) == ["True"]


def test_any_proxy_module_imported_first_gets_asyncio_without_openssl() -> None:
    # Each module of the proxy that uses asyncio takes it from proxy/_asyncio.py.
    for module in ("http", "socks5", "upstream", "server"):
        script = f"import sys, safebox.proxy.{module}, asyncio.sslproto; print(asyncio.sslproto.ssl is None)"
        assert _run(script) == ["True"], module


def test_the_start_up_half_of_the_proxy_imports_no_asyncio() -> None:
    # safebox exec imports these on every networked start (proxy/deferred.py);
    # the server and asyncio wait for the first client.
    script = ("import sys, safebox.proxy, safebox.proxy.config, safebox.proxy.deferred\n"
              "print(sorted(m for m in ('asyncio', 'safebox.proxy.server', 'safebox.proxy.rules', 'socket',"
              " 'dataclasses', 'ipaddress', 're') if m in sys.modules) or '-')")
    assert _run(script) == ["-"]
    # Control: the package's names still load the server on use.
    assert _run("import sys, safebox.proxy; safebox.proxy.ProxyServer; print('asyncio' in sys.modules)") == ["True"]

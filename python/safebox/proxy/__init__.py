"""The filtering network proxy: HTTP CONNECT / plain HTTP and SOCKS5 on unix
sockets, checking every destination against the policy (see ``docs/network.md``).

Import-light: stdlib only (asyncio, ipaddress), no pydantic or click.
"""

import sys


def _import_asyncio_without_ssl() -> None:
    """Import asyncio with ``ssl`` hidden, when nothing has imported either yet.

    The proxy never speaks TLS (CONNECT tunnels carry the client's TLS
    untouched), but asyncio imports ``ssl`` eagerly, and initialising OpenSSL
    costs about 1.3 MiB of private memory in every networked sandbox
    (docs/benchmarks.md). asyncio accepts ``ssl`` being absent (it then
    refuses TLS transports). ``ssl`` is unhidden right after, so code that
    imports it later gets it as usual.
    """
    if "asyncio" in sys.modules or "ssl" in sys.modules:
        return
    sys.modules["ssl"] = None  # type: ignore[assignment]  # `import ssl` now raises ImportError
    try:
        import asyncio  # noqa: F401
    finally:
        del sys.modules["ssl"]


_import_asyncio_without_ssl()

# E402: these must come after asyncio was imported above.

from safebox.errors import ProxyError  # noqa: E402
from safebox.proxy.rules import Decision, NetworkRules  # noqa: E402
from safebox.proxy.server import ProxyConfig, ProxyServer  # noqa: E402

__all__ = ["Decision", "NetworkRules", "ProxyConfig", "ProxyError", "ProxyServer"]

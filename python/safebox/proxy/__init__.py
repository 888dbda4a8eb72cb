"""The filtering network proxy: HTTP CONNECT / plain HTTP and SOCKS5 on unix
sockets, checking every destination against the policy (see ``docs/network.md``).

Import-light: stdlib only (asyncio, ipaddress), no pydantic or click. Importing
the package itself loads nothing: ``safebox exec`` uses ``proxy.config`` and
``proxy.deferred``, which do not import asyncio; the server (``proxy.server``)
is loaded by the first client's connection. The names below are loaded on
first use (PEP 562).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from safebox.errors import ProxyError
    from safebox.proxy.config import ProxyConfig
    from safebox.proxy.rules import Decision, NetworkRules
    from safebox.proxy.server import ProxyServer

_LAZY = {
    "Decision": "safebox.proxy.rules",
    "NetworkRules": "safebox.proxy.rules",
    "ProxyConfig": "safebox.proxy.config",
    "ProxyError": "safebox.errors",
    "ProxyServer": "safebox.proxy.server",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'safebox.proxy' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = ["Decision", "NetworkRules", "ProxyConfig", "ProxyError", "ProxyServer"]

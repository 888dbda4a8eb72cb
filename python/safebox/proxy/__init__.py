"""The filtering network proxy: HTTP CONNECT / plain HTTP and SOCKS5 on unix
sockets, checking every destination against the policy (see ``docs/network.md``).

Import-light: stdlib only (asyncio, ipaddress, json), no pydantic or click.
"""

from safebox.errors import ProxyError
from safebox.proxy.rules import Decision, NetworkRules
from safebox.proxy.server import ProxyConfig, ProxyServer

__all__ = ["Decision", "NetworkRules", "ProxyConfig", "ProxyError", "ProxyServer"]

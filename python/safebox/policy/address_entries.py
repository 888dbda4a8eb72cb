"""The grammar of a ``network.allowedAddresses`` entry: a CIDR or an
address, with an optional port (``10.0.0.0/24``, ``10.0.0.5:5432``,
``[fd00::/64]:443``); docs/network.md, "TCP services by host:port and by
address".

Part of the policy language: ``safebox policy check`` (policy/model.py)
refuses an entry that does not parse, and the proxy (proxy/addresses.py)
parses the entries it matches with the same function.
"""

from __future__ import annotations

import ipaddress

__all__ = ["Network", "parse_address_entry"]

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_address_entry(entry: str) -> tuple[Network, int | None]:
    """``(network, port or None)``; raises ValueError saying what is wrong."""
    if not isinstance(entry, str) or not entry or entry != entry.strip():
        raise ValueError(f"{entry!r} is not an address or CIDR")
    text, port = entry, None
    if text.startswith("["):
        close = text.find("]")
        if close < 0:
            raise ValueError(f"{entry!r}: '[' without ']'")
        rest = text[close + 1:]
        text = text[1:close]
        if rest:
            if not rest.startswith(":"):
                raise ValueError(f"{entry!r}: expected ':PORT' after ']'")
            port = _port(entry, rest[1:])
    elif text.count(":") == 1:
        text, port_text = text.split(":")
        port = _port(entry, port_text)
    try:
        net = ipaddress.ip_network(text, strict=True)
    except ValueError as exc:
        raise ValueError(f"{entry!r} is not an address or CIDR ({exc})") from None
    return net, port


def _port(entry: str, text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise ValueError(f"{entry!r}: the port must be a number in 1-65535")
    return int(text)

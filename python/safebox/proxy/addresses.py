"""``network.allowedAddresses``: private services by address (docs/network.md,
"TCP services by host:port and by address").

An entry is a CIDR or an address, with an optional port: ``10.0.0.0/24``,
``10.0.0.5:5432``, ``10.1.0.0/16:22``, ``fd00::/8``, ``[fd00::5]:5432``,
``[fd00::/64]:443``. An address it covers (on its port) passes the address
check without ``network.allowLocalDestinations``, whether a name resolved to
it or the command dialled it (captured, or an IP literal through the proxy).
It never covers a cloud metadata address (those are reached only when listed
literally in ``network.allowedDomains``), and an IPv4 entry never covers an
IPv6 form of its addresses (``::ffff:10.0.0.5``).
"""

from __future__ import annotations

import ipaddress

__all__ = ["Grant", "parse_address_entry"]

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


class Grant:
    """The parsed entries of one policy."""

    def __init__(self, entries: tuple[str, ...]) -> None:
        self.entries = tuple((e, *parse_address_entry(e)) for e in entries)

    def match(self, ip: ipaddress.IPv4Address | ipaddress.IPv6Address, port: int | None) -> str | None:
        """The first entry covering ``ip`` on ``port`` (an entry without a port covers every port), or None."""
        for entry, net, entry_port in self.entries:
            if ip.version == net.version and ip in net and (entry_port is None or entry_port == port):
                return entry
        return None

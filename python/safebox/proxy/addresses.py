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

An entry's grammar is ``policy/address_entries.py`` (checked when the
policy is loaded); here the proxy matches addresses against the entries.
"""

from __future__ import annotations

import ipaddress

from safebox.policy.address_entries import parse_address_entry

__all__ = ["Grant"]

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

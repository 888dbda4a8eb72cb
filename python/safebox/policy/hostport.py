"""``host:port`` entries in ``allowedDomains``/``deniedDomains`` (srt's syntax).

sandbox-runtime accepts an optional ``:port`` suffix on a domain entry
(``api.example.com:443``, ``*.example.com:8443``, ``[2001:db8::1]:443``): the
entry then matches only that destination port; an entry without one matches
every port. This module only splits the suffix off; the host part is checked
by the same grammar as before (``policy/model.py`` for ``policy check``,
``proxy/rules.py`` for the proxy), so both accept the same entries.

A bare IPv6 address (``2001:db8::1``) never carries a port here: it has
several colons, and ``2001:db8::1:443`` is itself a valid address. srt
refuses such entries as ambiguous; safebox reads them as the address alone
(as it did before ports existed) and a port needs brackets.

Standard library only: the proxy imports this.
"""

from __future__ import annotations

__all__ = ["PortError", "join_port", "split_port"]


class PortError(ValueError):
    """The ``:port`` suffix of an entry is out of range; the message says so."""


def split_port(entry: str) -> tuple[str, int | None]:
    """``(host part, port)`` of one domain entry; port ``None`` when there is
    no ``:port`` suffix.

    Only a suffix of ASCII digits after a single colon (or after ``]``) is a
    port; anything else is left in the host part, whose own check then names
    what is wrong (``http://x.com`` is "not a domain name", not "bad port").
    Raises :class:`PortError` for a port of 0, above 65535, or with more
    than five digits.
    """
    if entry.startswith("["):
        end = entry.find("]")
        if end < 0 or end == len(entry) - 1:
            return entry, None
        host, rest = entry[: end + 1], entry[end + 1 :]
        if not rest.startswith(":"):
            return entry, None
        text = rest[1:]
    else:
        if entry.count(":") != 1:
            return entry, None
        host, _, text = entry.partition(":")
    if not (text.isascii() and text.isdigit()):
        return entry, None
    if len(text) > 5 or not 0 < int(text) < 65536:
        raise PortError(f"port {text} is out of range (1 to 65535)")
    return host, int(text)


def join_port(host: str, port: int | None) -> str:
    """Inverse of :func:`split_port` for a canonical host (an IPv6 address
    without brackets gets them back when a port follows)."""
    if port is None:
        return host
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{host}:{port}"

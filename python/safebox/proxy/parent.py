"""``network.parentProxy``: safebox's proxy forwards through an upstream HTTP
proxy (a corporate proxy, a CI runner's egress proxy) instead of connecting
directly. srt's key and semantics (``src/sandbox/parent-proxy.ts``):

* ``http`` / ``https`` are proxy URLs (``http://proxy:3128``, with
  ``user:password@`` for Basic authentication, or ``https://`` for a proxy
  spoken to over TLS). Each falls back to safebox's own environment when the
  key is absent: ``http`` to ``HTTP_PROXY`` then ``http_proxy``; ``https`` to
  ``HTTPS_PROXY``, ``https_proxy``, then whatever ``http`` resolved to.
* Tunnels (CONNECT and SOCKS5 requests) go through the ``https`` proxy (the
  ``http`` one when there is no ``https``), as ``CONNECT host:port``; plain
  ``http://`` requests go to the ``http`` proxy (else the ``https`` one) in
  absolute form.
* ``noProxy`` (else ``NO_PROXY``/``no_proxy``): comma-separated; ``*`` means
  every host; ``example.com`` and ``.example.com`` both match the name and its
  subdomains (Go's ``httpproxy`` rules); a leading ``*.`` is dropped, a
  ``:port`` suffix ignored; ``10.0.0.0/8`` matches IP literals in the range.
  Loopback (``localhost``, ``127/8``, ``::1``) always bypasses the parent.

The policy still decides first: a host the policy refuses never reaches the
parent. What the parent proxy then does is outside safebox (threat-model.md).

A proxy URL's grammar is ``policy/proxy_url.py`` (checked when the policy
is loaded; :class:`ProxyURL` and :func:`parse_proxy_url` are re-exported
here for the proxy's modules).

Standard library only; imported only when a parent proxy is configured.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from safebox.policy.proxy_url import ProxyURL, parse_proxy_url

__all__ = ["ParentProxy", "ProxyURL", "parse_proxy_url", "resolve_parent"]

_LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"),
             ipaddress.ip_network("::ffff:127.0.0.0/104"))


@dataclass(frozen=True)
class NoProxy:
    """Parsed ``noProxy`` rules."""

    everything: bool = False
    suffixes: tuple[str, ...] = ()
    networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()

    @classmethod
    def parse(cls, text: str) -> NoProxy:
        """srt's reading of a ``NO_PROXY`` value; malformed entries are ignored, as curl does."""
        everything = False
        suffixes: list[str] = []
        networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
        for raw in text.split(","):
            entry = raw.strip().lower()
            if not entry:
                continue
            if entry == "*":
                everything = True
                continue
            if "/" in entry:
                try:
                    networks.append(ipaddress.ip_network(entry, strict=False))
                except ValueError:
                    pass  # a malformed CIDR is not a name suffix either
                continue
            if entry.startswith("*."):
                entry = entry[1:]
            bare = entry.strip("[]")
            try:
                ipaddress.ip_address(bare)
                entry = bare
            except ValueError:
                head, sep, tail = entry.rpartition(":")
                if sep and tail.isdigit():
                    entry = head
            suffixes.append(entry.rstrip("."))
        return cls(everything, tuple(suffixes), tuple(networks))

    def matches(self, host: str) -> bool:
        """Whether the canonical ``host`` bypasses the parent proxy."""
        if self.everything:
            return True
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            ip = None
        if ip is not None and any(ip in n for n in self.networks if n.version == ip.version):
            return True
        for s in self.suffixes:
            if s.startswith("."):
                if host == s[1:] or host.endswith(s):
                    return True
            elif host == s or host.endswith("." + s):
                return True
        return False


@dataclass(frozen=True)
class ParentProxy:
    """The resolved parent proxy configuration of one run."""

    http: ProxyURL | None
    https: ProxyURL | None
    no_proxy: NoProxy
    #: Where each URL came from, for `-v` and the audit log ("network.parentProxy.https", "HTTPS_PROXY").
    origin: tuple[tuple[str, str], ...] = ()

    def select(self, host: str, *, tunnel: bool) -> ProxyURL | None:
        """The parent proxy for a connection to the canonical ``host``, or
        ``None`` to connect directly (loopback and ``noProxy``)."""
        if host == "localhost" or self.no_proxy.matches(host):
            return None
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            ip = None
        if ip is not None and any(ip in n for n in _LOOPBACK if n.version == ip.version):
            return None
        if tunnel:
            return self.https or self.http
        return self.http or self.https


def resolve_parent(*, http: str | None, https: str | None, no_proxy: str | None,
                   environ: dict[str, str] | None = None) -> tuple[ParentProxy | None, list[str]]:
    """The parent proxy from the policy keys, each falling back to the
    environment as srt does; ``(None, notes)`` when there is none.

    A bad URL in the policy raises ValueError naming the key; a bad one in
    the environment is skipped with a note (the environment is not policy,
    and curl ignores such values too).
    """
    env = environ or {}
    notes: list[str] = []
    origin: list[tuple[str, str]] = []

    def pick(key: str, value: str | None, env_names: tuple[str, ...]) -> ProxyURL | None:
        if value is not None:
            try:
                url = parse_proxy_url(value)
            except ValueError as exc:
                raise ValueError(f"network.parentProxy.{key}: {exc}") from None
            origin.append((key, f"network.parentProxy.{key}"))
            return url
        for name in env_names:
            text = env.get(name)
            if text:
                try:
                    url = parse_proxy_url(text)
                except ValueError as exc:
                    notes.append(f"ignoring {name} as the parent proxy: {exc}")
                    return None
                origin.append((key, name))
                return url
        return None

    http_url = pick("http", http, ("HTTP_PROXY", "http_proxy"))
    https_url = pick("https", https, ("HTTPS_PROXY", "https_proxy"))
    if https_url is None and https is None and http_url is not None:
        https_url = http_url  # curl's and srt's fallback: HTTPS_PROXY unset uses HTTP_PROXY
    if http_url is None and https_url is None:
        return None, notes
    text = no_proxy if no_proxy is not None else env.get("NO_PROXY", env.get("no_proxy", ""))
    return ParentProxy(http_url, https_url, NoProxy.parse(text), tuple(origin)), notes

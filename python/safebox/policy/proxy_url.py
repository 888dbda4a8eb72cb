"""The grammar of a proxy URL (``network.parentProxy``'s ``http`` and
``https``, and ``HTTP_PROXY``-style variables): ``http[s]://[user[:password]@]host[:port][/]``.

Part of the policy language: ``safebox policy check`` (policy/model.py)
refuses a URL that does not parse; the proxy (proxy/parent.py) forwards
through what :func:`parse_proxy_url` returns. Standard library only.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from safebox.policy.domains import HostError, normalize_host

__all__ = ["ProxyURL", "parse_proxy_url"]


@dataclass(frozen=True)
class ProxyURL:
    """One parent proxy: where it is and how to authenticate to it."""

    scheme: str  # "http" or "https" (TLS to the proxy itself)
    host: str  # canonical (normalize_host): a name, or an IP without brackets
    port: int
    auth: str | None  # the Proxy-Authorization value, or None
    shown: str  # the URL with any password replaced by "***", for messages

    @property
    def authority(self) -> str:
        """``host:port`` as it goes on the wire (IPv6 in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def parse_proxy_url(text: str) -> ProxyURL:
    """Parse ``http[s]://[user[:password]@]host[:port][/]``.

    Raises ValueError naming what is wrong (the message never repeats a
    password).
    """
    if not text or any(c.isspace() or ord(c) < 0x20 for c in text):
        raise ValueError("not a proxy URL: empty, or has spaces or control characters")
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"not a proxy URL ({exc})") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise ValueError(f"the proxy URL must start with http:// or https://, not {scheme or 'nothing'!r}")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError("the proxy URL must not have a path, query or fragment")
    if not parts.hostname:
        raise ValueError("the proxy URL has no host")
    try:
        host = normalize_host(parts.hostname)
    except HostError as exc:
        raise ValueError(f"the proxy URL's host is not valid: {exc}") from None
    auth = None
    shown_userinfo = ""
    if parts.username is not None:
        user, password = unquote(parts.username), unquote(parts.password or "")
        auth = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
        shown_userinfo = f"{parts.username}:***@" if parts.password is not None else f"{parts.username}@"
    port = port or (443 if scheme == "https" else 80)
    shown_host = f"[{host}]" if ":" in host else host
    return ProxyURL(scheme, host, port, auth, f"{scheme}://{shown_userinfo}{shown_host}:{port}")

"""HTTP/1.1 request heads as the proxy reads and writes them: limits, the
parser of a request head, header lines, and the 4xx answers. Below both
the plain proxy (http.py) and the TLS interceptor (forward.py), which each
use it: neither imports the other's parser."""

from __future__ import annotations

import re
from dataclasses import dataclass

from safebox.proxy.rules import HostError, normalize_host

TYPE_CHECKING = False
if TYPE_CHECKING:
    from safebox.proxy.parent import ProxyURL
    from safebox.proxy.rules import Decision

__all__ = ["HEAD_TIMEOUT", "MAX_HEAD", "BadRequest", "Request", "error_response", "header_lines", "parse_request_head",
           "refusal_response", "split_authority"]

#: The request line and headers together may not exceed this (431 otherwise).
MAX_HEAD = 64 * 1024
#: A client must send its whole request head within this many seconds (408 otherwise).
HEAD_TIMEOUT = 30.0
MAX_HEADERS = 200

_TOKEN_RE = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")
_BAD_VALUE_RE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
_TARGET_RE = re.compile(rb"[\x21-\x7e]+\Z")
# RFC 9110 7.6.1 plus the de-facto ones; Transfer-Encoding stays, because the
# body is relayed unchanged and the upstream needs its framing.
_HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-connection", "proxy-authorization",
     "proxy-authenticate", "te", "trailer", "upgrade"}
)
_REASONS = {
    400: "Bad Request", 403: "Forbidden", 421: "Misdirected Request", 405: "Method Not Allowed", 408: "Request Timeout",
    431: "Request Header Fields Too Large", 502: "Bad Gateway", 504: "Gateway Timeout",
    505: "HTTP Version Not Supported",
}


class BadRequest(Exception):
    """The request cannot be served; ``status`` is the HTTP status to answer."""

    def __init__(self, status: int, message: str, *, misdirected: tuple[str, int] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        #: The target (host, port) when the Host header names another: 421
        #: under network.requireHostMatch (proxy/netkeys.py).
        self.misdirected = misdirected


@dataclass(frozen=True)
class Request:
    """A parsed request head.  ``host`` is canonical (see ``normalize_host``)."""

    method: str
    host: str
    port: int
    path: str  # origin form for plain HTTP; "" for CONNECT
    version: str
    headers: tuple[tuple[str, str], ...]

    @property
    def is_connect(self) -> bool:
        """Whether this is a CONNECT tunnel request."""
        return self.method == "CONNECT"


def split_authority(authority: str, *, default_port: int | None) -> tuple[str, int]:
    """Split ``host[:port]`` / ``[v6][:port]`` into a canonical host and a port.

    Raises :class:`BadRequest` for userinfo, a missing or bad port, or a bad host.
    """
    if "@" in authority:
        raise BadRequest(400, f"userinfo ('@') is not allowed in {authority!r}")
    if authority.startswith("["):
        end = authority.find("]")
        if end < 0:
            raise BadRequest(400, f"unterminated IPv6 literal in {authority!r}")
        host, rest = authority[: end + 1], authority[end + 1 :]
        if rest and not rest.startswith(":"):
            raise BadRequest(400, f"junk after IPv6 literal in {authority!r}")
        port_text = rest[1:] if rest else None
    else:
        if authority.count(":") > 1:
            raise BadRequest(400, f"IPv6 literal must be bracketed in {authority!r}")
        host, sep, port_text_ = authority.partition(":")
        port_text = port_text_ if sep else None
    if port_text is None:
        if default_port is None:
            raise BadRequest(400, f"missing port in {authority!r}")
        port = default_port
    else:
        if not (port_text.isascii() and port_text.isdigit() and len(port_text) <= 5):
            raise BadRequest(400, f"bad port in {authority!r}")
        port = int(port_text)
        if not 0 < port < 65536:
            raise BadRequest(400, f"port out of range in {authority!r}")
    if not host:
        raise BadRequest(400, f"empty host in {authority!r}")
    try:
        return normalize_host(host), port
    except HostError as exc:
        raise BadRequest(400, str(exc)) from None


def parse_request_head(head: bytes) -> Request:
    """Parse a request head (everything before the blank line, CRLF-separated).

    Raises :class:`BadRequest` naming what is wrong.
    """
    lines = head.split(b"\r\n")
    method, target, version = _request_line(lines[0])
    headers = _header_fields(lines[1:])

    if method == "CONNECT":
        host, port = split_authority(target, default_port=None)
        return Request(method, host, port, "", version, tuple(headers))
    if "#" in target:
        raise BadRequest(400, "fragment ('#') in request target")
    if target.startswith("/"):
        raise BadRequest(400, "this is a proxy: the request target must be an absolute http:// URI")
    scheme, sep, rest = target.partition("://")
    if not sep or scheme.lower() != "http":
        raise BadRequest(400, "only http:// URIs are proxied (use CONNECT for https)")
    cut = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    authority, path = rest[:cut], rest[cut:]
    host, port = split_authority(authority, default_port=80)
    if not path.startswith("/"):
        path = "/" + path
    _check_host_header(headers, host, port, authority)
    return Request(method, host, port, path, version, tuple(headers))


def _request_line(line: bytes) -> tuple[str, str, str]:
    """(method, target, version) of a request line."""
    parts = line.split(b" ")
    if len(parts) != 3:
        raise BadRequest(400, "malformed request line (want: METHOD TARGET HTTP/1.1)")
    method_b, target_b, version_b = parts
    if not _TOKEN_RE.match(method_b):
        raise BadRequest(400, "malformed method")
    if version_b not in (b"HTTP/1.1", b"HTTP/1.0"):
        if version_b.startswith(b"HTTP/") and len(version_b) < 16:
            raise BadRequest(505, "only HTTP/1.0 and HTTP/1.1 are supported")
        raise BadRequest(400, "malformed HTTP version")
    if not _TARGET_RE.match(target_b):
        raise BadRequest(400, "malformed request target")
    return method_b.decode(), target_b.decode(), version_b.decode()


def header_lines(lines: list[bytes]) -> list[tuple[str, str]]:
    """Each header line as (name, value), refusing folding, a malformed name,
    control characters in a value, and more than MAX_HEADERS fields (the
    plain proxy's and the TLS interceptor's one parser of header lines)."""
    headers: list[tuple[str, str]] = []
    for line in lines:
        if line[:1] in (b" ", b"\t"):
            raise BadRequest(400, "obsolete header line folding is not supported")
        name, sep, value = line.partition(b":")
        if not sep or not _TOKEN_RE.match(name):
            raise BadRequest(400, "malformed header line")
        value = value.strip(b" \t")
        if _BAD_VALUE_RE.search(value):
            raise BadRequest(400, f"control character in header {name.decode()!r}")
        headers.append((name.decode(), value.decode("latin-1")))
        if len(headers) > MAX_HEADERS:
            raise BadRequest(431, f"more than {MAX_HEADERS} header fields")
    return headers


def _header_fields(lines: list[bytes]) -> list[tuple[str, str]]:
    """The header fields, refusing what could be read two ways."""
    headers = header_lines(lines)
    lower = [n.lower() for n, _ in headers]
    if lower.count("host") > 1:
        raise BadRequest(400, "more than one Host header")
    if "transfer-encoding" in lower and "content-length" in lower:
        raise BadRequest(400, "both Transfer-Encoding and Content-Length")
    if lower.count("content-length") > 1:
        raise BadRequest(400, "more than one Content-Length header")
    return headers


def _check_host_header(headers: list[tuple[str, str]], host: str, port: int, authority: str) -> None:
    """A Host header must name the request target's host and port."""
    for name, value in headers:
        if name.lower() == "host":
            try:
                h_host, h_port = split_authority(value, default_port=80)
            except BadRequest as exc:
                raise BadRequest(400, f"bad Host header: {exc.message}") from None
            if (h_host, h_port) != (host, port):
                raise BadRequest(
                    400, f"Host header {value!r} disagrees with the request target {authority!r}", misdirected=(host, port)
                )


def _origin_head(req: Request, authority: str, *, via: ProxyURL | None = None) -> bytes:
    """The head sent upstream: origin form, hop-by-hop headers dropped, ``Connection: close``.

    Through a parent proxy (``via``): absolute form, and the parent's
    ``Proxy-Authorization`` when its URL has credentials (the client's own
    ``Proxy-*`` headers were for safebox's proxy and are dropped as always).
    """
    named_by_connection: set[str] = set()
    for name, value in req.headers:
        if name.lower() in ("connection", "proxy-connection"):
            named_by_connection.update(t.strip().lower() for t in value.split(","))
    target = req.path if via is None else f"http://{authority}{req.path}"
    out = [f"{req.method} {target} HTTP/1.1"]
    if via is not None and via.auth:
        out.append(f"Proxy-Authorization: {via.auth}")
    has_host = False
    for name, value in req.headers:
        low = name.lower()
        if low in _HOP_BY_HOP or low in named_by_connection:
            continue
        has_host = has_host or low == "host"
        out.append(f"{name}: {value}")
    if not has_host:
        out.insert(1, f"Host: {authority}")
    out.append("Connection: close")
    return ("\r\n".join(out) + "\r\n\r\n").encode("latin-1")


def error_response(status: int, body: str, *, rule: str | None = None,
                   headers: tuple[tuple[str, str], ...] = (), phrase: str = "") -> bytes:
    """A complete ``Connection: close`` response with a text body; ``headers``
    and ``phrase`` (the status phrase, default the standard one) are written
    as given (the caller keeps them to printable ASCII)."""
    data = body.encode()
    extra = f"X-Safebox-Rule: {rule}\r\n" if rule else ""
    extra += "".join(f"{name}: {value}\r\n" for name, value in headers)
    return (
        f"HTTP/1.1 {status} {phrase or _REASONS.get(status, 'Error')}\r\n"
        f"Content-Type: text/plain; charset=utf-8\r\nContent-Length: {len(data)}\r\n"
        f"Connection: close\r\n{extra}\r\n"
    ).encode() + data


def refusal_response(host: str, port: int, decision: Decision) -> bytes:
    """The 403 for a refused destination: one line a model can read as the
    body, and ``X-Safebox-Refused: <host>; <rule>; <fix>`` (proxy/explain.py;
    imported here, on a refusal, not on the proxy's start)."""
    from safebox.proxy.explain import refusal_header, refusal_message

    phrase = ""
    if decision.told:  # network.deniedDomainReasons: what a client prints of a refused CONNECT
        from safebox.policy.srtnet import status_phrase

        phrase = status_phrase(decision.told)
    return error_response(403, refusal_message(host, port, decision) + "\n", rule=decision.rule,
                          headers=(("X-Safebox-Refused", refusal_header(host, port, decision)),), phrase=phrase)

"""The grammar of host names and of ``allowedDomains``/``deniedDomains``
entries, in one place.

``safebox policy check`` (the pydantic model, ``policy/model.py``) and the
proxy that ``safebox exec`` starts (``proxy/rules.py``) both call
:func:`check_pattern`, so an entry one accepts the other accepts, with the
same meaning (found in review: they had two validators, and
``deniedDomains: ["*"]`` passed the check and then failed the run).
``tests/unit/test_domain_grammar.py`` holds them to it.

Standard library only (``ipaddress``, ``re``): the proxy imports this, and it
must not load pydantic.
"""

from __future__ import annotations

import ipaddress
import re

from safebox.policy.hostport import PortError, join_port, split_port

__all__ = [
    "DENY_ALL",
    "MAX_LABEL_LENGTH",
    "MAX_NAME_LENGTH",
    "HostError",
    "check_pattern",
    "normalize_host",
    "parse_ip_literal",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

#: The ``deniedDomains`` entry that refuses every host and IP literal.
DENY_ALL = "*"

#: RFC 1035 limits, on the ASCII (IDNA) form.
MAX_NAME_LENGTH = 253
MAX_LABEL_LENGTH = 63

# Letters, digits, hyphen; underscore is tolerated because real names use it
# (``_dmarc``, some S3 buckets) and it cannot smuggle a delimiter.
_LABEL_RE = re.compile(r"[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?\Z")
# Anything getaddrinfo/inet_aton would read as a number: "127.1", "0x7f.1",
# "2130706433", "0177.0.0.1".  WHATWG URL treats a host whose last label is
# numeric as IPv4; so do we, and only the canonical dotted quad is accepted.
_NUMERIC_LABEL_RE = re.compile(r"(?:0x[0-9a-f]*|[0-9]+)\Z")
_CANONICAL_V4_RE = re.compile(r"(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}"
                              r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\Z")


class HostError(ValueError):
    """A host name or IP literal is malformed; the message says what is wrong."""


def _ip_literal(host: str) -> IPAddress | None:
    """:func:`parse_ip_literal`, its errors saying what is wrong without repeating ``host``."""
    text = host
    if text.startswith("[") or text.endswith("]"):
        if not (text.startswith("[") and text.endswith("]")):
            raise HostError("unbalanced brackets")
        text = text[1:-1]
        if ":" not in text:
            raise HostError("not an IPv6 address between the brackets")
    if ":" in text:
        if "%" in text:
            raise HostError("IPv6 zone ids are not allowed")
        try:
            return ipaddress.IPv6Address(text)
        except ValueError:
            raise HostError("not an IPv6 address" + (" between the brackets" if text != host else "")) from None
    lowered = text.lower().removesuffix(".")
    last = lowered.rsplit(".", 1)[-1]
    if _NUMERIC_LABEL_RE.match(last):
        if not _CANONICAL_V4_RE.match(lowered):
            raise HostError("an ambiguous number: write IPv4 addresses as a plain dotted quad")
        return ipaddress.IPv4Address(lowered)
    return None


def _normalize(host: str) -> str:
    """:func:`normalize_host`, its errors saying what is wrong without repeating ``host``."""
    if not host:
        raise HostError("empty")
    if len(host) > 1024:
        raise HostError("too long")
    ip = _ip_literal(host)
    if ip is not None:
        return ip.compressed
    for bad, what in (("@", "userinfo"), ("#", "a fragment"), ("/", "a path"),
                      ("?", "a query"), (":", "a port"), ("%", "percent-encoding")):
        if bad in host:
            raise HostError(f"contains {what} ({bad!r})")
    name = host.removesuffix(".")
    if not name.isascii():
        try:
            name = name.encode("idna").decode("ascii")
        except UnicodeError as exc:
            raise HostError(f"not a valid internationalised name ({exc})") from None
    name = name.lower()
    if _NUMERIC_LABEL_RE.match(name.rsplit(".", 1)[-1]):
        # Only reachable through IDNA mapping ("¹²⁷.0.0.1" -> "127.0.0.1"):
        # a number spelled in other characters is not a name either.
        raise HostError("maps to a numeric name")
    if len(name) > MAX_NAME_LENGTH:
        raise HostError(f"longer than {MAX_NAME_LENGTH} characters")
    _check_labels(name)
    return name


def _check_labels(name: str) -> None:
    """Raise HostError for the first label of ``name`` (lower-case ASCII) that DNS would refuse."""
    for label in name.split("."):
        if not label:
            raise HostError("an empty label")
        if len(label) > MAX_LABEL_LENGTH:
            raise HostError(f"a label longer than {MAX_LABEL_LENGTH} characters")
        if not _LABEL_RE.match(label):
            raise HostError("a character that is not a letter, digit, '-' or '_'")
        if label.startswith("xn--"):
            try:
                label.encode("ascii").decode("idna")
            except UnicodeError:
                raise HostError(f"an invalid IDNA label {label!r}") from None


def parse_ip_literal(host: str) -> IPAddress | None:
    """Return the address if ``host`` is an IP literal (``1.2.3.4``, ``::1``,
    ``[::1]``), ``None`` if it is a name.

    Raises :class:`HostError` for numeric forms other than the canonical dotted
    quad (``127.1``, ``0x7f.0.0.1``, ``2130706433``, ``0177.0.0.1``): resolvers
    read them as addresses, so they are never names, and refusing them keeps one
    spelling per address.  IPv6 zone ids (``fe80::1%eth0``) are refused too.
    """
    try:
        return _ip_literal(host)
    except HostError as exc:
        raise HostError(f"host {host!r}: {exc}") from None


def normalize_host(host: str) -> str:
    """Return the canonical form of a host: an IP literal in its compressed
    form (no brackets), or a lower-case ASCII (IDNA) name without trailing dot.

    Raises :class:`HostError` (naming the host) for userinfo (``a@b``),
    ports, fragments, empty labels, bad characters, over-long names and
    labels, and undecodable ``xn--`` labels.
    """
    try:
        return _normalize(host)
    except HostError as exc:
        raise HostError(f"host {host!r}: {exc}") from None


def check_pattern(pattern: str, *, denied: bool = False) -> str:
    """Return the canonical form of one ``allowedDomains`` entry (or, with
    ``denied``, ``deniedDomains`` entry): ``example.com``, ``*.example.com``,
    ``localhost``, an IP literal (``1.2.3.4``, ``::1``), or in ``deniedDomains``
    only, :data:`DENY_ALL`; each with an optional ``:port`` suffix (srt's
    ``host:port``, ``safebox/policy/hostport.py``: ``api.example.com:443``,
    ``[2001:db8::1]:443``, ``*:22``), kept in the canonical form.

    Raises :class:`HostError` as :func:`_check_host_pattern` does, and for a
    port out of range.
    """
    if not isinstance(pattern, str):
        raise HostError("not a string")
    try:
        host, port = split_port(pattern)
    except PortError as exc:
        raise HostError(str(exc)) from None
    return join_port(_check_host_pattern(host, denied=denied), port)


def _check_host_pattern(pattern: str, *, denied: bool = False) -> str:
    """The host part of an entry: ``example.com``, ``*.example.com``,
    ``localhost``, an IP literal (``1.2.3.4``, ``::1``), or in ``deniedDomains``
    only, :data:`DENY_ALL`.

    Raises :class:`HostError` saying what is wrong, without repeating the
    entry (the caller puts it in front, as the user spelled it): ``*`` in
    ``allowedDomains`` (it would let every host through, which is what the
    proxy exists to prevent; srt refuses it too), a wildcard anywhere but a
    leading ``*.``, a wildcard over a whole top-level domain (``*.com``) or
    an IP address (``*.1.2.3.4``), a single-label name other than
    ``localhost`` (as srt), schemes, ports, paths and userinfo, and whatever
    else a host name may not be (numeric IPv4 spellings, bad labels).
    """
    if not isinstance(pattern, str):
        raise HostError("not a string")
    if pattern == DENY_ALL:
        if denied:
            return DENY_ALL
        raise HostError("'*' alone would let every host through; list the domains instead "
                        "('*.example.com' covers the subdomains of example.com)")
    if not pattern or pattern.strip() != pattern:
        raise HostError("empty, or padded with spaces")
    if "/" in pattern or "@" in pattern or (pattern.count(":") == 1 and not pattern.startswith("[")):
        # Said plainly: a URL or host:port would otherwise read as a bad IPv6 literal.
        raise HostError("not a domain name: give the name alone (or name:port), without a scheme, path or user")
    if pattern.startswith("*."):
        rest = pattern[2:]
        if "*" in rest:
            raise HostError("a wildcard is only allowed as a leading '*.'")
        if _ip_literal(rest) is not None:
            raise HostError("wildcards do not apply to IP addresses")
        name = _normalize(rest)
        if "." not in name:
            raise HostError("too broad: it covers a whole top-level domain")
        return "*." + name
    if "*" in pattern:
        raise HostError("a wildcard is only allowed as a leading '*.'"
                        + (" (or '*' alone, which refuses everything)" if denied else ""))
    canonical = _normalize(pattern)
    if "." not in canonical and ":" not in canonical and canonical != "localhost":
        raise HostError("a domain needs at least two labels (or is 'localhost')")
    return canonical

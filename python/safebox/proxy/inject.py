"""Masked credentials in requests: sentinel → real value, per destination.

srt's semantics (``credential-sentinel.ts``, ``body-substitution.ts``): a
masked credential is a per-run sentinel ``fake_value_<uuid4>`` inside the
sandbox (padded with random ``[a-z0-9_-]`` to the real value's length when
that is longer, so a body keeps its length). The proxy swaps a sentinel for
its real value only in requests to that credential's own ``injectHosts``
(another credential's host gets the sentinel: no laundering one credential
through another's host), in every header value and in request bodies that
carry no ``Content-Encoding``; only on TLS-terminated connections, or on
plain ``http://`` with ``allowPlaintextInject``.

Safety properties (fuzzed in ``tests/unit/test_inject_fuzz.py``):

* Replacement is left to right, earliest match first, and resumes after the
  inserted value: an inserted real value is never scanned again, so it
  cannot complete another sentinel. No sentinel is a substring of another
  (refused at registration), so no two can overlap.
* A body is scanned in chunks with a hold-back of (longest sentinel - 1)
  bytes: the result never depends on where chunks are cut.
* Header splitting is impossible: a real value with a byte that may not
  appear in a header value (CR, LF, NUL, other controls but TAB) is never
  put into a header (the sentinel stays; body substitution still happens),
  and every substituted value is checked again before it is sent.

Standard library only; imported only when credentials are masked.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from safebox.proxy.rules import HostError, NetworkRules

__all__ = ["SENTINEL_PREFIX", "BodySubstituter", "Credential", "HeaderUnsafe", "Injector", "mint_sentinel",
           "substitute"]

SENTINEL_PREFIX = "fake_value_"
_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789_-"
#: Bytes a header value may hold (RFC 9110 field-vchar, obs-text, SP, HTAB).
_HEADER_UNSAFE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")


class HeaderUnsafe(Exception):
    """A substituted header value would hold a byte a header may not hold."""


def mint_sentinel(real: bytes) -> bytes:
    """``fake_value_<uuid4>``, padded with random alphabet characters to
    ``len(real)`` when the real value is longer (srt). The uuid4 carries the
    entropy (122 bits); the padding only keeps lengths equal."""
    b = bytearray(os.urandom(16))
    b[6] = (b[6] & 0x0F) | 0x40  # version 4
    b[8] = (b[8] & 0x3F) | 0x80  # RFC 4122 variant
    h = b.hex()
    base = f"{SENTINEL_PREFIX}{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
    pad = len(real) - len(base)
    if pad > 0:
        base += "".join(_ALPHABET[x % len(_ALPHABET)] for x in os.urandom(pad))
    return base.encode("ascii")


def header_safe(value: bytes) -> bool:
    """Whether ``value`` may appear inside a header value."""
    return _HEADER_UNSAFE.search(value) is None


@dataclass(frozen=True)
class Credential:
    """One masked credential: its sentinel, its real value, and where the
    real value may go (canonical ``allowedDomains``-style entries)."""

    name: str  # the variable, or "file:<path>": for messages, never the value
    sentinel: bytes
    real: bytes = field(repr=False)
    inject_hosts: tuple[str, ...]

    @property
    def in_headers(self) -> bool:
        """Whether the real value may be put into a header (no CR/LF/NUL/controls)."""
        return header_safe(self.real)


def substitute(data: bytes, pairs: list[tuple[bytes, bytes]]) -> bytes:
    """Every complete occurrence of a sentinel in ``data`` replaced by its
    real value, left to right, never rescanning an inserted value."""
    if not pairs:
        return data
    out, pos = _scan(data, pairs)
    return out + data[pos:]


def _scan(data: bytes, pairs: list[tuple[bytes, bytes]]) -> tuple[bytes, int]:
    """(output up to ``pos``, ``pos``): replacements done up to where no
    complete sentinel starts any more."""
    parts: list[bytes] = []
    pos = 0
    while True:
        best, hit = -1, None
        for sentinel, real in pairs:
            i = data.find(sentinel, pos)
            if i >= 0 and (best < 0 or i < best):
                best, hit = i, (sentinel, real)
        if hit is None:
            return b"".join(parts), pos
        parts += (data[pos:best], hit[1])
        pos = best + len(hit[0])


class BodySubstituter:
    """Streaming :func:`substitute` for a request body: feed chunks, then
    :meth:`flush`. Holds back at most (longest sentinel - 1) bytes."""

    def __init__(self, pairs: list[tuple[bytes, bytes]]) -> None:
        self.pairs = pairs
        self.keep = max((len(s) for s, _ in pairs), default=1) - 1
        self.carry = b""

    def feed(self, chunk: bytes) -> bytes:
        """Substituted bytes that can be sent now."""
        work = self.carry + chunk if self.carry else chunk
        done, pos = _scan(work, self.pairs)
        # A sentinel cut by the chunk boundary starts within the last keep
        # bytes: hold them back (never earlier than pos, already emitted).
        cut = max(pos, len(work) - self.keep)
        self.carry = work[cut:]
        return done + work[pos:cut]

    def flush(self) -> bytes:
        """The held-back tail (it cannot hold a complete sentinel)."""
        tail, self.carry = self.carry, b""
        return tail


class Injector:
    """The run's masked credentials, and which go where."""

    def __init__(self, credentials: list[Credential], *, allow_plaintext: bool) -> None:
        sentinels = [c.sentinel for c in credentials]
        for i, a in enumerate(sentinels):
            for b in sentinels[i + 1:]:
                if a in b or b in a:
                    raise ValueError("two sentinels nest; substitution would be ambiguous")
        self.credentials = credentials
        self.allow_plaintext = allow_plaintext
        self._rules: list[tuple[Credential, NetworkRules]] = []
        for c in credentials:
            try:
                self._rules.append((c, NetworkRules.from_policy(c.inject_hosts, allow_local_destinations=True)))
            except HostError as exc:
                raise ValueError(f"{c.name}: injectHosts: {exc}") from None
        self._cache: dict[tuple[str, int], list[Credential]] = {}

    def for_host(self, host: str, port: int) -> list[Credential]:
        """The credentials whose ``injectHosts`` cover ``host:port``."""
        key = (host, port)
        hit = self._cache.get(key)
        if hit is None:
            hit = [c for c, rules in self._rules if rules.check_host(host, port).allowed]
            if len(self._cache) < 4096:
                self._cache[key] = hit
        return hit

    @staticmethod
    def header_pairs(creds: list[Credential]) -> list[tuple[bytes, bytes]]:
        """(sentinel, real) for the credentials that may go into headers."""
        return [(c.sentinel, c.real) for c in creds if c.in_headers]

    @staticmethod
    def body_pairs(creds: list[Credential]) -> list[tuple[bytes, bytes]]:
        """(sentinel, real) for request bodies."""
        return [(c.sentinel, c.real) for c in creds]

    @staticmethod
    def header_value(value: str, pairs: list[tuple[bytes, bytes]]) -> str:
        """``value`` (latin-1, as parsed) with the sentinels replaced.

        Raises :class:`HeaderUnsafe` if the result could split the header
        (it cannot, with :meth:`header_pairs`; checked anyway)."""
        if not pairs or SENTINEL_PREFIX not in value:
            return value
        raw = value.encode("latin-1")
        out = substitute(raw, pairs)
        if out is raw or out == raw:
            return value
        if not header_safe(out):
            raise HeaderUnsafe("a substituted header value holds a control character")
        return out.decode("latin-1")

"""The network lists of a running sandbox, changed while its commands run:
``Sandbox.allow_domain()``/``deny_domain()``, an answer remembered for the
sandbox's lifetime (``on_request``, ``safebox exec --ask``), a line read from
``--control-fd`` (docs/api.md, "Runtime decisions").

The proxy's gate reads :attr:`LiveLists.rules` at every request: a change
takes effect at the next connection, never in the middle of one. Each change
builds a new :class:`NetworkRules` and swaps one reference, so a request sees
the lists before or after a change, never half of one. Imported only by a
sandbox that can change its lists; nothing here touches the network.
"""

from __future__ import annotations

import threading
from typing import Any

from safebox.proxy.rules import (
    RULE_DENIED,
    Decision,
    HostError,
    NetworkRules,
    _entry,
    _matches,
    _port_ok,
    normalize_host,
    validate_entry,
)

__all__ = ["MAX_REASON", "LiveLists", "clean_reason"]

#: A reason is cut to this many characters (srt's limit).
MAX_REASON = 500


def clean_reason(text: object, *, default: str) -> str:
    """A reason given by a harness, as one line of printable text (srt's
    rules): every run of control or invisible characters (and of spaces) becomes one space,
    ``<`` and ``>`` are dropped, the ends trimmed, at most :data:`MAX_REASON`
    characters; ``default`` when nothing is left. Non-ASCII letters stay here;
    the refusal line and the header keep printable ASCII only (explain.py)."""
    if not isinstance(text, str):
        return default
    out: list[str] = []
    space = False
    for c in text:
        if c in "<>":
            continue
        if not c.isprintable() or c in "\u200b\u200c\u200d\u2060\ufeff":
            if not space:
                out.append(" ")
            space = True
            continue
        out.append(c)
        space = False
    cleaned = " ".join("".join(out).split())[:MAX_REASON].strip()
    return cleaned or default


class LiveLists:
    """``allowedDomains`` and ``deniedDomains`` that can change; thread-safe."""

    def __init__(self, allowed: tuple[str, ...] = (), denied: tuple[str, ...] = (), *,
                 allow_local_destinations: bool = False, learn: bool = False) -> None:
        self._lock = threading.Lock()
        self._local = allow_local_destinations
        self._learn = learn
        #: Reasons given with a denied entry: canonical entry -> (reason, the
        #: rule its refusals name: deniedDomains, or "ask" for an answer remembered).
        self._reasons: dict[str, tuple[str, str]] = {}
        #: The policy's checks beyond the two lists (srt 0.0.83's keys, this
        #: host's addresses: proxy/netkeys.py), kept through every change.
        self._extra: dict[str, Any] = {}
        self.rules = NetworkRules.from_policy(allowed, denied, allow_local_destinations=allow_local_destinations,
                                              learn=learn)

    @staticmethod
    def canonical(entry: str, *, denied: bool = False) -> str:
        """The canonical form of one entry; ValueError naming it when it is not one."""
        if not isinstance(entry, str):
            raise TypeError(f"a domain entry is a str, not {type(entry).__name__}")
        try:
            return validate_entry(entry, denied=denied)
        except HostError as exc:
            raise ValueError(f"not a domain entry: {entry!r}: {exc}") from None

    def _swap(self, allowed: tuple[str, ...], denied: tuple[str, ...]) -> None:
        self.rules = NetworkRules.from_policy(allowed, denied, allow_local_destinations=self._local,
                                              learn=self._learn, **self._extra)

    def add_checks(self, **extra: Any) -> None:
        """Keep ``extra`` (``NetworkRules.from_policy`` keywords: reasons,
        denied_resolved, own, allowed_addresses) in the rules now and after every change."""
        with self._lock:
            self._extra = extra
            self._swap(self.rules.allowed, self.rules.denied)

    def allow(self, entry: str) -> str:
        """Add ``entry`` to the allowed list, and drop from the denied one the
        same entry and the answers remembered as "deny" it covers: the
        caller's latest word wins. Returns the canonical entry."""
        canon = self.canonical(entry)
        pattern, port = _entry(canon)
        with self._lock:
            r = self.rules
            # Answers remembered as "deny" that this entry covers go too: the
            # caller changed its mind (policy entries stay, as in a policy).
            asked = {d for d, (_, rule) in self._reasons.items() if rule != RULE_DENIED
                     and _matches(_entry(d)[0], pattern) and (port is None or _entry(d)[1] == port)}
            allowed = r.allowed if canon in r.allowed else (*r.allowed, canon)
            self._swap(allowed, tuple(d for d in r.denied if d != canon and d not in asked))
            for d in (canon, *asked):
                self._reasons.pop(d, None)
        return canon

    def deny(self, entry: str, reason: str | None = None, *, rule: str = RULE_DENIED) -> str:
        """Add ``entry`` to the denied list (and drop the same entry from the
        allowed one), with the reason its refusals give, by ``rule`` (an
        answer remembered says "ask"). Returns the canonical entry."""
        canon = self.canonical(entry, denied=True)
        with self._lock:
            r = self.rules
            denied = r.denied if canon in r.denied else (*r.denied, canon)
            self._swap(tuple(a for a in r.allowed if a != canon), denied)
            if reason or rule != RULE_DENIED:
                self._reasons[canon] = (clean_reason(reason, default="denied"), rule)
            else:
                self._reasons.pop(canon, None)
        return canon

    def replace(self, allowed: tuple[str, ...], denied: tuple[str, ...],
                reasons: dict[str, str] | None = None) -> None:
        """Both lists at once (a ``--control-fd`` line replaces the whole
        config, as in srt). Raises ValueError naming a bad entry; nothing
        changes then."""
        new_allowed = tuple(self.canonical(e) for e in allowed)
        new_denied = tuple(self.canonical(e, denied=True) for e in denied)
        new_reasons: dict[str, tuple[str, str]] = {}
        for host, why in (reasons or {}).items():
            new_reasons[self.canonical(host, denied=True)] = (clean_reason(why, default="denied"), RULE_DENIED)
        with self._lock:
            self._swap(new_allowed, new_denied)
            self._reasons = new_reasons

    def explained(self, host: str, port: int | None, decision: Decision) -> Decision:
        """``decision`` (a refusal by ``deniedDomains``) with the reason given
        for the entry that refused it, when one was."""
        if decision.rule != RULE_DENIED or not self._reasons:
            return decision
        try:
            name = normalize_host(host)
        except HostError:
            return decision
        with self._lock:
            reasons = list(self._reasons.items())
        for entry, (why, rule) in reasons:
            pattern, entry_port = _entry(entry)
            if _matches(name, pattern) and _port_ok(entry_port, port, deny=True):
                if rule != RULE_DENIED:
                    return Decision(False, rule, why)
                return Decision(False, RULE_DENIED, f"{name} is denied ({entry!r} in {RULE_DENIED}): {why}")
        return decision

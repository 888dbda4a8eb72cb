"""One ``safebox:`` line on stderr per refused destination: the host, the
rule that refused it and the fix, where the user looks (a client shows only
``403 Forbidden`` or ``CONNECT tunnel failed``; SOCKS5 has no room for a
reason at all).

Printed from the proxy's thread with one ``write(2)`` per line, so it appears
at once and never interleaves within a line. Once per host and port; after
:data:`MAX_LINES` distinct refusals one last line says the rest are in the
audit log (a command asking for a million names must not flood the
terminal). The host comes from the sandboxed command: everything outside
printable ASCII is replaced, so no escape sequence reaches the terminal.
"""

from __future__ import annotations

import os
import threading

from safebox.proxy.rules import (
    RULE_ADDRESSES,
    RULE_ALLOWED,
    RULE_ASK,
    RULE_DENIED,
    RULE_HOST_MATCH,
    RULE_LOCAL,
    RULE_OPAQUE,
    RULE_REQUEST,
    RULE_RESOLVED,
    Decision,
    parse_ip_literal,
)

__all__ = ["MAX_LINES", "Explainer", "policy_fix", "refusal_header", "refusal_line", "refusal_message"]

MAX_LINES = 50
_PROTOCOL = {"connect": "CONNECT", "http": "HTTP", "socks5": "SOCKS5", "capture": "TCP connect"}


def _printable(text: str) -> str:
    return "".join(c if " " <= c <= "~" else "?" for c in text)[:400]


def _presets(host: str) -> tuple[str, ...]:
    """The presets that list ``host``; none for an IP literal or a name the
    grammar refuses (HostError: the refusal must still be said)."""
    from safebox.policy.presets import presets_for_host

    try:
        return () if parse_ip_literal(host) is not None else tuple(presets_for_host(host))
    except ValueError:
        return ()


def address_entry(host: str, port: int | None) -> str:
    """The ``network.allowedAddresses`` entry for one address (and port)."""
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if ":" in bare:
        return f"[{bare}/128]:{port}" if port is not None else f"{bare}/128"
    return f"{bare}/32:{port}" if port is not None else f"{bare}/32"


def _key_fix(decision: Decision) -> str | None:
    """The fix of a refusal by one of srt's network keys (proxy/netkeys.py),
    in the policy's words; None for the other rules."""
    if decision.rule == RULE_RESOLVED:
        return f"none unless the matching {RULE_RESOLVED} range is removed (the address is refused on purpose)"
    if decision.rule == RULE_OPAQUE:
        return (f"none while {RULE_OPAQUE} is set, unless the traffic goes through HTTPS_PROXY as TLS that "
                "network.tlsTerminate covers")
    if decision.rule == RULE_HOST_MATCH:
        return f"none while {RULE_HOST_MATCH} is set, unless the requests go through HTTPS_PROXY naming their host"
    return None


def fix_for(host: str, decision: Decision, port: int | None = None) -> str:
    """What to change so that ``host`` is allowed (or why nothing will)."""
    keyed = _key_fix(decision)
    if keyed is not None:
        return keyed
    if decision.rule == RULE_ALLOWED and port is not None and "allows it only as" in decision.reason:
        # A host:port entry names another port (srt's syntax).
        shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
        return f"--allow-domain {shown}:{port} ({RULE_ALLOWED} in a policy file)"
    if decision.rule == RULE_REQUEST:
        return "the request is malformed; no policy change allows it"
    if decision.rule == RULE_DENIED:
        return f"{host} is denied on purpose: remove the matching --deny-domain or {RULE_DENIED} entry"
    if decision.rule == RULE_LOCAL:
        return f"set {RULE_LOCAL} = true in a policy file (the name resolves to a local address)"
    if decision.rule == RULE_ADDRESSES:
        return f"add {address_entry(host, port)} to {RULE_ADDRESSES} in a policy file"
    if "metadata" in decision.reason or "link-local" in decision.reason:
        return f"list the address literally in {RULE_ALLOWED} only if the command must reach it"
    fix = f"--allow-domain {host}"
    presets = _presets(host)
    if presets:
        fix += " or " + " or ".join(f"--preset {p}" for p in presets)
    fix = f"{fix} ({RULE_ALLOWED} in a policy file)"
    return f"{fix}, or allow it when asked" if decision.rule == RULE_ASK else fix


def policy_fix(host: str, decision: Decision, port: int | None = None) -> str:
    """:func:`fix_for` in the policy's words, for whoever runs the sandbox
    (a harness, the user of ``safebox exec``): no command-line flag, no ``;``
    (it is the last field of ``X-Safebox-Refused``)."""
    shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
    keyed = _key_fix(decision)
    if keyed is not None:
        return keyed
    if decision.rule == RULE_ALLOWED and port is not None and "allows it only as" in decision.reason:
        return f"add {shown}:{port} to {RULE_ALLOWED}"
    if decision.rule == RULE_REQUEST:
        return "none: the request is malformed"
    if decision.rule == RULE_ASK:
        return "none: whoever runs the sandbox refused it when asked"
    if decision.rule == RULE_DENIED:
        return f"none unless the matching {RULE_DENIED} entry is removed ({host} is denied on purpose)"
    if decision.rule == RULE_LOCAL:
        return f"set {RULE_LOCAL} to true (the name resolves to a local address)"
    if decision.rule == RULE_ADDRESSES:
        return f"add {address_entry(host, port)} to {RULE_ADDRESSES}"
    if "metadata" in decision.reason or "link-local" in decision.reason:
        return f"list the address literally in {RULE_ALLOWED} only if the command must reach it"
    fix = f"add {shown} to {RULE_ALLOWED}"
    presets = _presets(host)
    if presets:
            fix += " or use the preset " + " or ".join(presets)
    return fix


def _shown(host: str, decision: Decision) -> str:
    h = _printable(host.lower() if decision.rule != RULE_REQUEST else host)
    return h


def refusal_message(host: str, port: int, decision: Decision) -> str:
    """The refusal in one line a model can read (docs/network.md, "What a
    refused client sees"): the 403's body, and ``message`` in the API's
    ``network`` event. Printable ASCII only (the host comes from the
    sandboxed command)."""
    h = _shown(host, decision)
    shown = f"[{h}]" if ":" in h and not h.startswith("[") else h
    return _printable(f"safebox refused {shown}:{port} by {decision.rule}: {decision.reason}. "
                      f"Fix, for whoever runs the sandbox: {policy_fix(h, decision, port)}."
                      + ("" if decision.rule == RULE_ASK else
                         " Retrying, or another route to the host, is refused the same way."))


def refusal_header(host: str, port: int, decision: Decision) -> str:
    """``X-Safebox-Refused``'s value, ``<host>; <rule>; <fix>``: printable
    ASCII, so never a CR or LF that could split the response head."""
    h = _shown(host, decision)
    fix = policy_fix(h, decision, port).replace(";", ",")
    return _printable(f"{h.replace(';', '?')}; {decision.rule}; {fix}")


def refusal_line(host: str, port: int, protocol: str, decision: Decision) -> str:
    """``safebox: refused CONNECT to pypi.org:443 (pypi.org is not in ...); fix: --allow-domain pypi.org ...``."""
    h = _printable(host.lower() if decision.rule != RULE_REQUEST else host)
    shown = f"[{h}]" if ":" in h and not h.startswith("[") else h
    proto = _PROTOCOL.get(protocol, protocol.upper())
    by = "" if decision.rule in decision.reason or decision.rule == RULE_REQUEST else f" by {decision.rule}"
    what = f"the DNS lookup of {shown}" if protocol == "dns" else f"{proto} to {shown}:{port}"
    return _printable(f"safebox: refused {what}{by} ({decision.reason}); "
                      f"fix: {fix_for(h, decision, port)}") + "\n"


class Explainer:
    """The callable the proxy's gate calls on every refusal."""

    def __init__(self, fd: int = 2) -> None:
        self.fd = fd
        self.seen: set[tuple[str, int]] = set()
        self._lock = threading.Lock()  # one proxy thread today; cheap insurance

    def __call__(self, host: str, port: int, protocol: str, decision: Decision) -> None:
        key = (host.lower(), port)
        with self._lock:
            if key in self.seen or len(self.seen) > MAX_LINES:
                return
            self.seen.add(key)
            if len(self.seen) > MAX_LINES:
                line = (f"safebox: more than {MAX_LINES} destinations refused; the rest are not shown "
                        "(--audit-log FILE records every decision)\n")
            else:
                line = refusal_line(host, port, protocol, decision)
        try:
            os.write(self.fd, line.encode("ascii", "replace"))
        except OSError:
            pass  # stderr closed: nobody to tell

"""srt 0.0.83's newer network keys: their value grammar (used by
``policy/model.py``), their merge into the effective policy, and the policy
document they come back as (``policy/load.py`` calls in here; the logic
lives here so that the loader does not grow).

The keys (docs/policy-reference.md, "srt network keys"):

- ``deniedResolvedAddresses``: addresses/CIDR ranges an allowed host name
  may not resolve to (proxy/rules.py);
- ``deniedDomainReasons``: a model-facing reason per ``deniedDomains``
  entry, told in the refusal line, the 403's status phrase and, for port
  22 through SOCKS5, an SSH disconnect (proxy/netkeys.py);
- ``strictAllowlist``: a host no entry allows is refused without asking
  (``on_request``, ``--ask``); ``--learn`` and ``--ask`` are refused;
- ``requireHostMatch``: a request whose Host header or TLS server name
  names another host than it is sent to gets 421 (safebox refuses such a
  request anyway: 400 without the key);
- ``refuseOpaqueTunnels``: a tunnel the proxy cannot see into is refused;
- ``stripResponseHeaders``: response headers never passed to the client;
- ``allowPlaintextHeaderSet``: accepted; it governs header edits of srt's
  ``filterRequest`` callback, which safebox does not have.
"""

from __future__ import annotations

import ipaddress
import re

from safebox.errors import PolicyError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["MAX_REASON", "check_address_range", "check_header_name", "check_reason", "clean_reason", "document",
           "check_strict", "fold_header", "merge", "status_phrase"]

#: A reason is cut to this many characters (OpenSSH truncates a disconnect's text near it).
MAX_REASON = 400
_HEADER_RE = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")

#: key as a file spells it -> EffectivePolicy field, for the booleans.
BOOLEANS = {
    "strictAllowlist": "strict_allowlist",
    "requireHostMatch": "require_host_match",
    "refuseOpaqueTunnels": "refuse_opaque_tunnels",
    "allowPlaintextHeaderSet": "allow_plaintext_header_set",
}
#: The booleans whose ``true`` is the narrower setting: an untrusted project
#: file may turn them on, never off once a layer before it did.
_NARROWING = ("strictAllowlist", "requireHostMatch", "refuseOpaqueTunnels")


def check_address_range(value: str) -> str:
    """One ``deniedResolvedAddresses`` entry: an IPv4/IPv6 address or CIDR
    range, unbracketed (srt's ``addressRangeSchema``); returned canonical."""
    if not isinstance(value, str) or not value or value != value.strip():
        raise ValueError("must be an IP address or CIDR range such as 10.0.0.0/8 or fc00::/7")
    try:
        return ipaddress.ip_network(value, strict=False).compressed
    except ValueError:
        raise ValueError(f"{value!r} is not an IP address or CIDR range (write 10.0.0.0/8, 192.0.2.7 "
                         "or fc00::/7; IPv6 without brackets)") from None


def check_reason(value: str) -> str:
    """A ``deniedDomainReasons`` value: a non-empty line of text."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError("a reason must be a non-empty string")
    return value


def check_header_name(value: str) -> str:
    """A ``stripResponseHeaders`` entry: an HTTP header name."""
    if not isinstance(value, str) or not _HEADER_RE.match(value):
        raise ValueError(f"{value!r} is not an HTTP header name (letters, digits and -_.)")
    return value


def fold_header(name: str) -> str:
    """srt's matching of header names: case-insensitive, ``-``, ``_`` and ``.`` folded."""
    return re.sub(r"[-_.]", "-", name.lower())


def clean_reason(text: str) -> str:
    """A reason as a refusal line shows it: one line of printable text, cut."""
    one = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return one if len(one) <= MAX_REASON else one[: MAX_REASON - 3] + "..."


def status_phrase(reason: str) -> str:
    """``reason`` as a 403's status phrase: printable ASCII (srt: every
    non-ASCII character becomes ``?``, clients disagree on reading one), one
    line, cut."""
    return "".join(c if " " <= c <= "~" else "?" for c in clean_reason(reason))


def check_strict(*, learn: bool, ask: bool) -> None:
    """``safebox exec`` under ``strictAllowlist``: ``--learn`` lets through
    names no entry allows, which the key forbids (srt: nothing widens the
    allowlist), and ``--ask`` would never ask (the key says the list is the
    whole answer): both are refused rather than ignored. The API's
    ``on_request`` is not asked, silently, as srt's callback is not."""
    if learn:
        raise PolicyError("--learn lets the command reach hosts outside network.allowedDomains, which "
                          "network.strictAllowlist forbids",
                          hint="drop --learn, or run it with a policy without network.strictAllowlist")
    if ask:
        raise PolicyError("--ask would never ask: network.strictAllowlist refuses every host outside "
                          "network.allowedDomains without asking",
                          hint="drop --ask, or run it with a policy without network.strictAllowlist")


def _get(doc: dict[str, Any], *path: str) -> Any:
    cur: Any = doc
    for k in path:
        if not isinstance(cur, dict) or k not in cur:
            return None
        cur = cur[k]
    return cur


def merge(layers: list[tuple[Any, dict[str, Any]]], *, trust: bool, sources: list[tuple[str, Any, str]],
          denied_domains: tuple[str, ...]) -> dict[str, Any]:
    """The keys' EffectivePolicy fields, merged as the rest (lists
    concatenate, scalars and a reason for the same entry: later wins).
    ``layers`` are (Layer, validated document); ``denied_domains`` the merged
    ``deniedDomains``, canonical. Appends to ``sources``.

    An untrusted project file may turn the narrowing booleans on, never off,
    and may not set reasons (text a model reads as safebox's own) nor
    ``allowPlaintextHeaderSet``.
    """
    out: dict[str, Any] = {}
    ranges: list[str] = []
    strip: list[str] = []
    reasons: dict[str, tuple[str, str]] = {}  # canonical entry -> (reason, as the file spelled the key)
    hint = "set trustProjectFiles = true in your user policy or pass the file with --policy"

    def note(key: str, value: Any, layer: Any, *, scalar: bool = False) -> None:
        if scalar:
            sources[:] = [s for s in sources if s[0] != key]
        sources.append((key, value, layer.name))

    for layer, doc in layers:
        net = _get(doc, "network") or {}
        untrusted = layer.project and not trust
        for key, field in BOOLEANS.items():
            value = net.get(key)
            if value is None:
                continue
            if untrusted and ((key in _NARROWING and not value and out.get(field))
                              or (key == "allowPlaintextHeaderSet" and value)):
                raise PolicyError(f"{layer.name}: network.{key}: a project file may not widen the sandbox", hint=hint)
            out[field] = value
            note(f"network.{key}", value, layer, scalar=True)
        for r in net.get("deniedResolvedAddresses") or ():
            ranges.append(r)
            note("network.deniedResolvedAddresses", r, layer)
        for h in net.get("stripResponseHeaders") or ():
            strip.append(h)
            note("network.stripResponseHeaders", h, layer)
        given = net.get("deniedDomainReasons") or {}
        if given and untrusted:
            raise PolicyError(f"{layer.name}: network.deniedDomainReasons: a project file may not set the "
                              "reasons safebox tells the command", hint=hint)
        for entry, reason in given.items():
            reasons[_reason_key(layer.name, entry)] = (reason, entry)
            note("network.deniedDomainReasons", f"{entry}: {reason}", layer)
    _check_reasons(reasons, denied_domains)
    out["denied_resolved_addresses"] = tuple(dict.fromkeys(ranges))
    out["strip_response_headers"] = tuple(dict.fromkeys(strip))
    out["denied_domain_reasons"] = tuple((k, r) for k, (r, _) in reasons.items())
    return out


def _reason_key(where: str, entry: str) -> str:
    """A ``deniedDomainReasons`` key as the canonical ``deniedDomains`` entry it names."""
    from safebox.policy.domains import HostError, check_pattern

    try:
        return check_pattern(entry, denied=True)
    except HostError as exc:
        raise PolicyError(f"{where}: network.deniedDomainReasons: key {entry!r} is not a "
                          f"network.deniedDomains entry ({exc})") from None


def _check_reasons(reasons: dict[str, tuple[str, str]], denied_domains: tuple[str, ...]) -> None:
    """Every reason names an entry of the merged ``deniedDomains``. srt
    ignores one that does not; here it is almost surely a typo that would
    leave a refusal without the reason the user wrote."""
    from safebox.policy.domains import HostError, check_pattern

    listed = set()
    for d in denied_domains:
        try:
            listed.add(check_pattern(d, denied=True))
        except HostError:
            pass  # refused where the list is validated
    for canonical, (_, entry) in reasons.items():
        if canonical not in listed:
            raise PolicyError(f"network.deniedDomainReasons: {entry!r} is not a network.deniedDomains entry, "
                              "so its reason would never be told",
                              hint=f"add {entry!r} to network.deniedDomains, or remove the reason")


def document(eff: Any) -> dict[str, Any]:
    """The keys as a policy file spells them (``policy show --json``), only those set."""
    out: dict[str, Any] = {}
    for key, field in BOOLEANS.items():
        if getattr(eff, field):
            out[key] = True
    if eff.denied_resolved_addresses:
        out["deniedResolvedAddresses"] = list(eff.denied_resolved_addresses)
    if eff.strip_response_headers:
        out["stripResponseHeaders"] = list(eff.strip_response_headers)
    if eff.denied_domain_reasons:
        out["deniedDomainReasons"] = dict(eff.denied_domain_reasons)
    return out

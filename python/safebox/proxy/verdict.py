"""The proxy's verdict on a name before any lookup, for every path that
asks: a CONNECT, a plain request or a SOCKS5 tunnel (``Gate.check``,
proxy/upstream.py), and the capture front end and the sandbox's DNS
(proxy/capture.py), so that a captured connection meets the same lists,
as they are now, and is asked about when a CONNECT would be."""

from __future__ import annotations

from safebox.proxy.rules import RULE_ALLOWED, Decision, NetworkRules

TYPE_CHECKING = False
if TYPE_CHECKING:
    from safebox.proxy.upstream import Gate

__all__ = ["check_name", "may_ask", "rules_now"]


def rules_now(gate: Gate) -> NetworkRules:
    """The lists in force now: the live ones (proxy/live.py) when they can change."""
    return gate.live.rules if gate.live is not None else gate.rules


def check_name(gate: Gate, host: str, port: int | None) -> Decision:
    """The lists' verdict on ``host`` (not audited), with the reason given for
    a deny entry added while the sandbox runs."""
    decision = rules_now(gate).check_host(host, port)
    if not decision.allowed and gate.live is not None:
        decision = gate.live.explained(host, port, decision)
    return decision


def may_ask(gate: Gate, decision: Decision) -> bool:
    """Whether this refusal is put to whoever runs the sandbox (runtime/decisions.py): no
    entry allows it and none denies it, and network.strictAllowlist does not
    say the list is the whole answer (srt)."""
    return (not decision.allowed and decision.rule == RULE_ALLOWED and gate.ask is not None
            and not (gate.keys is not None and gate.keys.strict_allowlist))

"""``safebox policy diff OLD NEW``: what a policy change does, key by key.

Made for review in a pull request (a new learn run against the committed
policy): per list key, the entries added and removed; per other key, the
old and the new value; each change that widens the sandbox is marked.
Both files are validated first and compared as policy files spell them
(``~/x`` stays ``~/x``), so the diff is the same on every machine. Order
within a list does not matter to the sandbox and is not a change.
"""

from __future__ import annotations

import json

from safebox._record import Frozen

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["Change", "diff", "render_text"]

#: Lists whose added entries widen the sandbox, and lists whose removed
#: entries do (docs/policy-reference.md, "Keys").
_WIDEN_ADDED = frozenset({
    "network.allowedDomains", "network.allowedAddresses", "network.allowUnixSockets", "filesystem.allowWrite", "filesystem.allowRead",
    "env.allow", "presets", "network.tlsTerminate.excludeDomains", "credentials.envVars", "credentials.files",
})
_WIDEN_REMOVED = frozenset({"network.deniedDomains", "filesystem.denyRead", "filesystem.denyWrite", "env.deny",
                            "credentials.envVars", "credentials.files"})
#: Booleans that widen when they turn true; and the ones that widen when they turn false.
_WIDEN_TRUE = frozenset({
    "network.allowAllUnixSockets", "network.allowLocalBinding", "network.allowLocalDestinations",
    "filesystem.allowWritePathDirs", "filesystem.allowGitConfig", "trustProjectFiles",
    "credentials.allowPlaintextInject",
})
_WIDEN_FALSE = frozenset({"strict"})


class Change(Frozen):
    """One key's change: ``added``/``removed`` entries of a list, or
    ``old``/``new`` of any other value (None: not set)."""

    key: str
    added: tuple[Any, ...] = ()
    removed: tuple[Any, ...] = ()
    old: Any = None
    new: Any = None
    is_list: bool = False
    widens: bool = False

    def as_json(self) -> dict[str, Any]:
        """The change as ``--json`` prints it."""
        if self.is_list:
            return {"key": self.key, "added": list(self.added), "removed": list(self.removed), "widens": self.widens}
        return {"key": self.key, "old": self.old, "new": self.new, "widens": self.widens}


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _leaves(doc: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Every key of ``doc`` that is not a table, dotted (``network.allowedDomains``)."""
    out: dict[str, Any] = {}
    for key, value in doc.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_leaves(value, f"{dotted}."))
        else:
            out[dotted] = value
    return out


def _scalar_widens(key: str, old: Any, new: Any) -> bool:
    if key in _WIDEN_TRUE:
        return bool(new) and not old
    if key in _WIDEN_FALSE:
        return bool(old) and not new
    if key == "mandatoryDenySearchDepth":
        return old is not None and (new is None or new < old)
    if key.startswith("limits."):
        # Raised, or lifted: compared as the run reads them (a key not set
        # is the built-in default; 0 is unlimited).
        from safebox.policy import limit_values as limits

        name = key.split(".", 1)[1]
        if name not in limits.KEYS:
            return False
        before = limits.parse_value(name, old) if old is not None else limits.default(name)
        after = limits.parse_value(name, new) if new is not None else limits.default(name)
        return bool(before) and (not after or after > before)
    # A parent proxy (it sees every destination) or the TLS termination's
    # CA, set or changed: where the command's traffic goes changes.
    return key.startswith(("network.parentProxy.", "network.tlsTerminate.")) and new is not None


def diff(old: dict[str, Any], new: dict[str, Any]) -> list[Change]:
    """The changes from ``old`` to ``new`` (validated policy documents), by key."""
    a, b = _leaves(old), _leaves(new)
    out = []
    for key in sorted(set(a) | set(b)):
        va, vb = a.get(key), b.get(key)
        if isinstance(va, list) or isinstance(vb, list):
            la = va if isinstance(va, list) else []
            lb = vb if isinstance(vb, list) else []
            ka, kb = {_canonical(x) for x in la}, {_canonical(x) for x in lb}
            added = tuple(x for x in lb if _canonical(x) not in ka)
            removed = tuple(x for x in la if _canonical(x) not in kb)
            if added or removed:
                widens = bool(added and key in _WIDEN_ADDED) or bool(removed and key in _WIDEN_REMOVED)
                out.append(Change(key=key, added=added, removed=removed, is_list=True, widens=widens))
        elif _canonical(va) != _canonical(vb):
            out.append(Change(key=key, old=va, new=vb, widens=_scalar_widens(key, va, vb)))
    return out


def _word(value: Any) -> str:
    if value is None:
        return "(not set)"
    if isinstance(value, str) and value.isprintable() and value.strip() == value and value:
        return value
    return json.dumps(value)


def render_text(changes: list[Change], *, old_name: str, new_name: str) -> str:
    """The changes for people: a header, then per key its entries (``+``
    added, ``-`` removed) or ``old -> new``; ``(widens)`` where the new
    policy allows more."""
    if not changes:
        return f"{old_name} and {new_name}: the same policy\n"
    lines = [f"--- {old_name}", f"+++ {new_name}"]
    for c in changes:
        key = c.key if c.key.isprintable() else json.dumps(c.key)  # ignoreViolations' keys are the file's
        mark = "  (widens)" if c.widens else ""
        if c.is_list:
            lines.append(f"{key}:{mark}")
            lines += [f"  + {_word(x)}" for x in c.added]
            lines += [f"  - {_word(x)}" for x in c.removed]
        else:
            lines.append(f"{key}: {_word(c.old)} -> {_word(c.new)}{mark}")
    widening = sum(c.widens for c in changes)
    lines.append(f"{len(changes)} key{'s' if len(changes) != 1 else ''} changed"
                 + (f", {widening} of them widen{'s' if widening == 1 else ''} the sandbox" if widening else ""))
    return "\n".join(lines) + "\n"

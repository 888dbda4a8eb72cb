"""The effective policy as plain, frozen data (standard library only).

pydantic validates files on the slow path (``policy/load.py``); what it
produces is this dataclass, which is cached as JSON so that ``safebox exec``
never imports pydantic when the policy files have not changed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any


@dataclass(frozen=True)
class EffectivePolicy:
    """The merged policy. Paths are absolute (``~`` and relative ones expanded)."""

    allowed_domains: tuple[str, ...] = ()
    denied_domains: tuple[str, ...] = ()
    allow_unix_sockets: tuple[str, ...] = ()
    allow_all_unix_sockets: bool = False
    allow_local_binding: bool = False
    allow_local_destinations: bool = False
    deny_read: tuple[str, ...] = ()
    allow_write: tuple[str, ...] = ()
    deny_write: tuple[str, ...] = ()
    env_deny: tuple[str, ...] = ()
    env_allow: tuple[str, ...] = ()
    search_depth: int = 6
    strict: bool = False
    # Where each top-level key's value came from, for `safebox policy show`.
    sources: dict[str, list[str]] = field(default_factory=dict, compare=False)

    def to_json_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (tuples become lists)."""
        return asdict(self)

    @classmethod
    def from_json_dict(cls, data: dict[str, Any]) -> "EffectivePolicy":
        """Inverse of ``to_json_dict``; unknown keys are an error (a stale cache is rebuilt)."""
        names = {f.name for f in fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise ValueError(f"unknown keys {sorted(unknown)}")
        kw: dict[str, Any] = {}
        for f in fields(cls):
            if f.name not in data:
                continue
            v = data[f.name]
            kw[f.name] = tuple(v) if isinstance(v, list) and f.name != "sources" else v
        return cls(**kw)

"""The API's :class:`Policy`: a policy built in code (docs/api.md). Re-exported
by ``safebox.api``."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from safebox.errors import PolicyError

if TYPE_CHECKING:
    from safebox.policy.effective import EffectivePolicy
    from safebox.policy.load import Context, Layer


class Policy:
    """A policy built in code: layers in the policy file format
    (docs/policy-reference.md), validated when made. A :class:`Sandbox`
    merges the built-in defaults, then these layers in order, then its own
    arguments (presets, limits). The user's and the project's policy files
    are not read: a harness states its policy (add them with
    :meth:`from_file` if wanted)."""

    def __init__(self, layers: Sequence[Layer] = ()) -> None:
        self.layers: tuple[Layer, ...] = tuple(layers)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, name: str = "<dict>") -> Policy:
        """A policy from a dict shaped like a policy file. Raises
        :class:`PolicyError` naming the key (``key_path``), in the CLI's words."""
        from safebox.policy.load import Layer
        from safebox.policy.validate import validate_layer

        layer = Layer(name=name, data=dict(data))
        validate_layer(layer)
        return cls((layer,))

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Policy:
        """A policy from a JSON or TOML policy file."""
        from safebox.policy.load import Layer, _read_file, parse_document
        from safebox.policy.validate import validate_layer

        p = os.path.abspath(os.fspath(path))
        try:
            raw = _read_file(p)
        except FileNotFoundError:
            raise PolicyError(f"{p}: policy file not found") from None
        layer = Layer(name=p, data=parse_document(p, raw))
        validate_layer(layer)
        return cls((layer,))

    def __repr__(self) -> str:
        names = ", ".join(repr(layer.name) for layer in self.layers)
        return f"Policy(layers=[{names}])" if len(names) < 200 else f"Policy({len(self.layers)} layers)"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Policy) and self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]  # mutable contents

    def to_dict(self) -> dict[str, Any]:
        """The layers merged into one dict shaped like a policy file (lists
        add up, scalars are replaced, as :meth:`merge` and policy files
        layer): ``Policy.from_dict(p.to_dict())`` is the same policy. The
        built-in defaults and a :class:`Sandbox`'s own arguments are not in
        it (``Sandbox.policy`` is the merged policy in force)."""
        import copy

        out: dict[str, Any] = {}
        for layer in self.layers:
            _layer_onto(out, layer.data)
        return copy.deepcopy(out)

    def merge(self, *others: Policy) -> Policy:
        """This policy, then ``others`` on top (lists add up, scalars are
        replaced, as policy files layer)."""
        return Policy((*self.layers, *(layer for o in others for layer in o.layers)))

    def _effective(self, ctx: Context, *, presets: Sequence[str], limits: Mapping[str, str | None],
                   strict: bool) -> EffectivePolicy:
        from safebox.policy.load import Flags, credential_env_layers, default_layer, flags_layer
        from safebox.policy.merge import merge
        from safebox.policy.validate import validate_layer

        flags = Flags(presets=tuple(presets), strict=strict, limit_processes=limits.get("processes"),
                      limit_memory=limits.get("memory"), limit_tmp_size=limits.get("tmpSize"),
                      timeout=limits.get("wallTime"))
        first = default_layer()
        validated = [(first, validate_layer(first))]
        validated += [(layer, layer.data) for layer in credential_env_layers(ctx)]
        validated += [(layer, validate_layer(layer)) for layer in (*self.layers, flags_layer(flags))]
        return merge(validated, ctx)


def _layer_onto(out: dict[str, Any], data: Mapping[str, Any]) -> None:
    """One layer on top of ``out``: dicts merge, lists add up (without
    repeats), other values are replaced."""
    for key, value in data.items():
        have = out.get(key)
        if isinstance(value, Mapping) and isinstance(have, dict):
            _layer_onto(have, value)
        elif isinstance(value, Mapping):
            out[key] = {}
            _layer_onto(out[key], value)
        elif isinstance(value, list) and isinstance(have, list):
            have.extend(v for v in value if v not in have)
        else:
            out[key] = list(value) if isinstance(value, list) else value


PolicyLike = Policy | Mapping[str, Any] | str | os.PathLike[str]


def _as_policy(policy: PolicyLike) -> Policy:
    if isinstance(policy, Policy):
        return policy
    if isinstance(policy, Mapping):
        return Policy.from_dict(policy)
    return Policy.from_file(policy)



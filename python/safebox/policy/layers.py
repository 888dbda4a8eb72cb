"""Policy documents layered as files are: ``-p base.json -p learned.json``.

The run's merge (``policy/merge.py``) turns layers into an EffectivePolicy, with
paths expanded for this host. This module merges the *documents* by the
same rules, so that what it writes (``--learn OUT``: the policy a run ran
under plus what it learned) is a policy file that means, under ``safebox
exec -p OUT``, what the layers meant together:

* tables merge by key;
* lists add up: the earlier layer's entries first, then the later one's
  new entries (duplicates removed, first kept). A later layer never takes
  an entry out: layering cannot silently weaken a reviewed base policy
  (docs/policy-reference.md, "Layers");
* a credential entry named again (same ``name`` of ``credentials.envVars``,
  same ``path`` of ``credentials.files``) replaces the earlier one, as the
  run's merge does;
* any other value (true/false, a number, a string) takes the last layer's;
  ``trustProjectFiles`` is true when any layer sets it, as the run reads it.
"""

from __future__ import annotations

import json

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from typing import Any

__all__ = ["KEYED_LISTS", "merge_documents", "replaced_values"]

#: Lists whose entries are identified by one of their keys: a later entry
#: with the same identity replaces the earlier (it moves last).
KEYED_LISTS: dict[tuple[str, ...], str] = {
    ("credentials", "envVars"): "name",
    ("credentials", "files"): "path",
}
#: Scalars the run reads as "any layer set it" (policy/merge.py), not "the last".
_ANY_TRUE = frozenset({("trustProjectFiles",)})


def _canonical(value: Any) -> str:
    """A list entry's identity for de-duplication (entries may be tables)."""
    return json.dumps(value, sort_keys=True, default=str)


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _merge_list(path: tuple[str, ...], old: list[Any], new: list[Any]) -> list[Any]:
    ident = KEYED_LISTS.get(path)
    out: dict[str, Any] = {}
    for entry in (*old, *new):
        if ident is not None and isinstance(entry, dict) and ident in entry:
            key = f"{ident}\0{_canonical(entry[ident])}"
            out.pop(key, None)  # the later entry wins and moves last
        else:
            key = _canonical(entry)
            if key in out:
                continue
        out[key] = _copy(entry)
    return list(out.values())


def _merge_into(out: dict[str, Any], doc: Mapping[str, Any], path: tuple[str, ...]) -> None:
    for key, value in doc.items():
        here = (*path, key)
        old = out.get(key)
        if isinstance(value, dict):
            if not isinstance(old, dict):
                out[key] = old = {}
            _merge_into(old, value, here)
        elif isinstance(value, list):
            out[key] = _merge_list(here, old if isinstance(old, list) else [], value)
        elif here in _ANY_TRUE:
            out[key] = bool(old) or value
        else:
            out[key] = value


def merge_documents(docs: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """``docs`` (validated policy documents, earliest first) as one document."""
    out: dict[str, Any] = {}
    for doc in docs:
        _merge_into(out, doc, ())
    return out


def replaced_values(layers: Iterable[tuple[str, Mapping[str, Any]]]) -> list[tuple[str, tuple[Any, str, str]]]:
    """The values (not lists, not tables) a later layer replaced with a
    different one, for ``policy show``: per dotted key, (the value replaced,
    the layer that set it, the layer whose value won). A layer that repeats
    the value in force replaces nothing worth showing."""
    history: dict[str, list[tuple[Any, str]]] = {}

    def walk(doc: Mapping[str, Any], prefix: str, layer: str) -> None:
        for key, value in doc.items():
            if isinstance(value, dict):
                walk(value, f"{prefix}{key}.", layer)
            elif not isinstance(value, list):
                history.setdefault(f"{prefix}{key}", []).append((value, layer))

    for name, doc in layers:
        walk(doc, "", name)
    out = []
    for key, seen in history.items():
        value, winner = seen[-1]
        earlier = [(v, src) for v, src in seen[:-1] if _canonical(v) != _canonical(value)]
        if earlier:
            out.append((key, (earlier[-1][0], earlier[-1][1], winner)))
    return out

"""One layer validated (pydantic, policy/model.py), and its errors put in
safebox's words: one line naming the file (or the flag, as typed), the key
path, the value, what was expected, and a close known key for a typo."""

from __future__ import annotations

from safebox.errors import PolicyError
from safebox.policy.keys import POLICY_FLAGS
from safebox.policy.sources import FLAGS_LAYER, Layer

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def _key_part(part: object) -> str:
    """One step of a key path, printable: a key is whatever the file says, and
    a newline or escape sequence in it must not forge a second message line."""
    if isinstance(part, int):
        return f"[{part}]"
    text = str(part)
    return text if text.isprintable() and text else repr(text)


def _expected(loc: tuple[Any, ...]) -> str | None:
    """What the model expects at ``loc``, in words ("a list of domain
    names"), read from the model itself so that every key is covered."""
    from typing import get_args, get_origin

    from pydantic import BaseModel

    from safebox.policy.model import NOUNS, PolicyFile

    def bare(ann: Any) -> Any:
        args = get_args(ann)
        if type(None) in args:  # `X | None`: None means "not set"
            rest = [a for a in args if a is not type(None)]
            return rest[0] if len(rest) == 1 else ann
        return ann

    def noun(ann: Any, *, plural: bool) -> str | None:
        ann = bare(ann)
        if ann in NOUNS:
            return NOUNS[ann][plural]
        if get_origin(ann) is list:
            inner = noun(get_args(ann)[0], plural=True)
            return f"lists of {inner}" if plural else f"a list of {inner}"
        if get_origin(ann) is dict:
            inner = noun(get_args(ann)[1], plural=True)
            return f"tables of {inner}" if plural else f"a table/object whose values are {inner}"
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            return "tables/objects" if plural else "a table/object"
        return None

    ann: Any = PolicyFile
    for part in loc:
        ann = bare(ann)
        if isinstance(ann, type) and issubclass(ann, BaseModel) and isinstance(part, str):
            field = ann.model_fields.get(part)
            if field is None:
                return None
            ann = field.annotation
        elif get_origin(ann) is list and isinstance(part, int):
            ann = get_args(ann)[0]
        elif get_origin(ann) is dict and isinstance(part, str):
            ann = get_args(ann)[1]
        else:
            return None
    return noun(ann, plural=False)


def _known_keys() -> list[str]:
    """Every key a policy file may hold, dotted (``network``, ``filesystem.allowWrite``)."""
    from pydantic import BaseModel

    from safebox.policy.model import PolicyFile

    out = []
    for name, field in PolicyFile.model_fields.items():
        out.append(name)
        sub = next((a for a in getattr(field.annotation, "__args__", ()) if isinstance(a, type)
                    and issubclass(a, BaseModel)), None)
        if sub is not None:
            out += [f"{name}.{k}" for k in sub.model_fields]
    return out


def _unknown_key(loc: tuple[Any, ...]) -> str:
    """The message for a key the model does not have: srt's unsupported
    keys say why; otherwise the nearest known key, if one is near."""
    import difflib

    from safebox.policy.model import SRT_KEYS_NOT_SUPPORTED

    dotted = ".".join(str(p) for p in loc)
    # Keys inside list entries (credentials.envVars[0].decode) are listed
    # without the index.
    srt_key = ".".join(str(p) for p in loc if not isinstance(p, int))
    if srt_key in SRT_KEYS_NOT_SUPPORTED:
        return f"srt key not supported by safebox: {SRT_KEYS_NOT_SUPPORTED[srt_key]}"
    known = _known_keys()
    parent = ".".join(str(p) for p in loc[:-1])
    siblings = [k for k in known if k.rpartition(".")[0] == parent]
    near = difflib.get_close_matches(dotted, siblings, n=1, cutoff=0.75)
    if not near:
        # The right key in the wrong table (`allowWrite` at the top level,
        # `network.denyRead`): match the last part against every key's.
        by_last = {k.rpartition(".")[2]: k for k in known}
        last = difflib.get_close_matches(str(loc[-1]), list(by_last), n=1, cutoff=0.75)
        near = [by_last[last[0]]] if last else []
    if near:
        return f"unknown key (did you mean `{near[0]}`?)"
    return "unknown key (the keys are listed in docs/policy-reference.md)"


def _message(err: dict[str, Any]) -> str:
    """One pydantic error in safebox's words. pydantic's own wording
    ("Input should be a valid list", "Value error,") never reaches the user:
    every error is either ours (a validator's ValueError), an unknown key,
    or "must be <what the model expects>, not <what the file has>"."""
    kind = err["type"]
    loc = tuple(err["loc"])
    if kind == "extra_forbidden":
        return _unknown_key(loc)
    if kind in ("value_error", "assertion_error"):
        return str(err.get("ctx", {}).get("error", "")) or "invalid value"
    expected = _expected(loc)
    from safebox.policy.words import json_word

    given = json_word(err.get("input"))
    if expected is None:
        return f"{given} is not allowed here"
    return f"must be {expected}, not {given}"


# Command-line flags → the policy key each one feeds (flags_layer), so an
# error in a flag's value names the flag, as the user typed it.
FLAG_FOR_KEY: dict[tuple[str, ...], str] = {key: flag for flag, _, key in POLICY_FLAGS}


def _where(layer: Layer, err: dict[str, Any]) -> str:
    """Where an error is: the flag and its value as the user typed it
    (``--allow-domain http://x.com``) for the command line; otherwise
    ``FILE: key.path[0]``, with the value when the complaint is about it
    (``= "http://x.com"``)."""
    loc = tuple(err["loc"])
    value = err.get("input")
    if layer.name == FLAGS_LAYER:
        for key, flag in FLAG_FOR_KEY.items():
            n = len(key)
            if loc[:n] == key and len(loc) in (n, n + 1) and isinstance(value, str):
                import shlex

                return f"{flag} {shlex.quote(value) if value.isprintable() else repr(value)}"
    path = ".".join(_key_part(p) for p in loc).replace(".[", "[")
    where = f"{layer.name}: {path}" if path else layer.name
    if err["type"] in ("value_error", "assertion_error") and isinstance(value, str):
        import json

        where += f" = {json.dumps(value if len(value) <= 200 else value[:197] + '...')}"
    return where


def _format_validation_error(layer: Layer, exc: Any) -> PolicyError:
    """A pydantic ValidationError as one PolicyError line: the first error, in our words, and how many more."""
    errors = exc.errors()
    first = errors[0]
    msg = _message(first).replace("\n", " ")
    more = len(errors) - 1
    tail = f" (and {more} more error{'s' if more > 1 else ''})" if more else ""
    key_path = ".".join(_key_part(p) for p in first["loc"]).replace(".[", "[") or None
    return PolicyError(f"{_where(layer, first)}: {msg}{tail}", key_path=key_path)


def validate_layer(layer: Layer) -> dict[str, Any]:
    """Validate one layer with pydantic; return its document with defaults left out."""
    from pydantic import ValidationError

    from safebox.policy.model import validate

    try:
        model = validate(layer.data)
    except ValidationError as e:
        raise _format_validation_error(layer, e) from None
    doc = model.model_dump(exclude_none=True)
    if doc.get("enableWeakerNestedSandbox"):
        raise PolicyError(f"{layer.name}: enableWeakerNestedSandbox: safebox never weakens its sandbox; remove the key")
    net = doc.get("network", {})
    for k in ("httpProxyPort", "socksProxyPort"):
        if k in net:
            raise PolicyError(f"{layer.name}: network.{k}: an external proxy would bypass safebox's filtering proxy; remove the key")
    return doc

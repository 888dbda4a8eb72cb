"""Reading, validating and layering policy files.

Layers, later wins for scalars and lists concatenate:
built-in defaults < user file < project file < ``--policy`` < command-line flags.

The merged result is cached (keyed by the bytes of every input) so the hot
path imports neither pydantic nor tomllib when nothing changed; see
``load_cached``. The cache lives in safebox's state directory, which the
sandbox can never write (builder/resolve.py protects it).
"""

from __future__ import annotations

import marshal
import os

from safebox import __version__
from safebox._record import Frozen, sha256_hex
from safebox.errors import PolicyError
from safebox.policy import defaults
from safebox.policy.effective import EffectivePolicy

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

USER_FILES = ("policy.toml", "policy.json")
PROJECT_FILES = (".safebox.toml", ".safebox.json")
MAX_POLICY_BYTES = 1 << 20

# Keys of a project file that widen access. A repository you just cloned can
# ship a project file; it may narrow the sandbox freely, but widening needs
# `trustProjectFiles = true` in your user file or --policy (a cloned repo must
# not grant itself the network or your home directory).
_WIDENING: tuple[tuple[str, ...], ...] = (
    ("network", "allowedDomains"),
    ("network", "allowUnixSockets"),
    ("network", "allowAllUnixSockets"),
    ("network", "allowLocalBinding"),
    ("network", "allowLocalDestinations"),
    ("network", "allowedAddresses"),
    ("filesystem", "allowWrite"),
    ("filesystem", "allowRead"),
    ("filesystem", "allowWritePathDirs"),
    ("env", "allow"),
    ("ci", "passEnv"),  # what later, unsandboxed steps get
    ("ci", "passPath"),
    ("devices", "gpu"),  # a driver's whole ioctl surface
    ("trustProjectFiles",),
    ("presets",),  # a preset allows its registry's domains
    # A parent proxy sees every destination (and plain-HTTP contents); TLS
    # termination and plaintext injection change where credentials go.
    # Masked credential entries are checked apart (_srt_extras).
    ("network", "parentProxy"),
    ("network", "tlsTerminate"),
    ("credentials", "allowPlaintextInject"),
)


class Flags(Frozen):
    """Command-line additions (the last layer)."""

    allow_write: tuple[str, ...] = ()
    deny_read: tuple[str, ...] = ()
    allow_read: tuple[str, ...] = ()
    deny_write: tuple[str, ...] = ()
    allow_domains: tuple[str, ...] = ()
    deny_domains: tuple[str, ...] = ()
    strict: bool = False
    presets: tuple[str, ...] = ()
    # limits.*, as typed (validated with the policy files' rules).
    limit_processes: str | None = None
    limit_memory: str | None = None
    limit_tmp_size: str | None = None
    timeout: str | None = None
    # --allow-gpu: "all", or indices as typed ("0,2"); None: not given.
    allow_gpu: str | None = None


class Layer(Frozen):
    """One source of policy: its name (a path or 'defaults'/'flags') and raw document."""

    name: str
    data: dict[str, Any]
    project: bool = False


class Context(Frozen):
    """Where relative and ``~`` paths point, and the caller's variables that
    move credential stores (``defaults.credential_env``): their stores are
    read-denied like the default ones, and the policy cache is keyed on them."""

    cwd: str
    home: str
    credential_env: tuple[tuple[str, str], ...] = ()


def user_config_dir(home: str) -> str:
    """``$XDG_CONFIG_HOME/safebox`` or ``~/.config/safebox``."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    return os.path.join(base, "safebox")


def state_dir(home: str) -> str:
    """``$XDG_CACHE_HOME/safebox`` or ``~/.cache/safebox``: caches and run dirs."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")
    return os.path.join(base, "safebox")


def expand_path(p: str, ctx: Context) -> str:
    """``~``, ``~/x``, absolute, or relative to the working directory → normalised absolute."""
    if p == "~":
        p = ctx.home
    elif p.startswith("~/"):
        p = os.path.join(ctx.home, p[2:])
    elif not p.startswith("/"):
        p = os.path.join(ctx.cwd, p)
    # normpath, not realpath: symlinks are resolved deliberately in resolve.py.
    out = os.path.normpath(p)
    if out.startswith("//"):
        out = "/" + out.lstrip("/")
    return out


def _read_file(path: str) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise PolicyError(f"{path}: cannot read policy file: {e.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        data = f.read(MAX_POLICY_BYTES + 1)
    if len(data) > MAX_POLICY_BYTES:
        raise PolicyError(f"{path}: policy file larger than {MAX_POLICY_BYTES} bytes")
    return data


def parse_document(path: str, raw: bytes) -> dict[str, Any]:
    """JSON or TOML by extension (``.json``/``.toml``); anything else is tried as JSON then TOML.

    An empty file (or only whitespace) is an empty policy whatever its
    format, as an empty TOML document already is: ``touch policy.json``
    must not be an error where ``touch policy.toml`` is not
    (docs/policy-reference.md)."""
    suffix = os.path.splitext(path)[1].lower()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise PolicyError(f"{path}: not UTF-8 ({e.reason} at byte {e.start})") from None
    if not text.strip():
        return {}
    errors = []
    for kind in (("json",) if suffix == ".json" else ("toml",) if suffix == ".toml" else ("json", "toml")):
        try:
            if kind == "json":
                import json

                doc = json.loads(text)
            else:
                import tomllib

                doc = tomllib.loads(text)
        except ValueError as e:  # JSONDecodeError and TOMLDecodeError are ValueErrors
            errors.append(f"invalid {kind.upper()}: {e}")
            continue
        if not isinstance(doc, dict):
            raise PolicyError(f"{path}: the top level must be an object/table, not {type(doc).__name__}")
        return doc
    raise PolicyError(f"{path}: " + "; ".join(errors))


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
FLAG_FOR_KEY: dict[tuple[str, ...], str] = {
    ("filesystem", "allowWrite"): "--allow-write",
    ("filesystem", "denyRead"): "--deny-read",
    ("filesystem", "allowRead"): "--allow-read",
    ("filesystem", "denyWrite"): "--deny-write",
    ("network", "allowedDomains"): "--allow-domain",
    ("network", "deniedDomains"): "--deny-domain",
    ("strict",): "--strict",
    ("presets",): "--preset",
    ("limits", "processes"): "--limit-processes",
    ("limits", "memory"): "--limit-memory",
    ("limits", "tmpSize"): "--limit-tmp",
    ("limits", "wallTime"): "--timeout",
    ("devices", "gpu"): "--allow-gpu",
}
FLAGS_LAYER = "command line"


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


def _get(doc: dict[str, Any], path: tuple[str, ...]) -> Any:
    cur: Any = doc
    for k in path:
        if not isinstance(cur, dict) or k not in cur:
            return None
        cur = cur[k]
    return cur


def merge(layers: list[tuple[Layer, dict[str, Any]]], ctx: Context) -> EffectivePolicy:
    """Merge validated layers in order into an EffectivePolicy."""
    trust = any(_get(doc, ("trustProjectFiles",)) for layer, doc in layers if not layer.project)
    lists: dict[str, list[str]] = {k: [] for k in (
        "allowed_domains", "allowed_addresses", "denied_domains", "allow_unix_sockets", "deny_read", "allow_read",
        "allow_write", "deny_write", "env_deny", "env_allow", "ci_pass_env", "ci_pass_path", "presets",
        *_GLOB_FIELDS.values())}
    scalars: dict[str, Any] = {}
    sources: list[tuple[str, Any, str]] = []
    origin: dict[tuple[str, str], str] = {}  # (field, entry) -> the first layer that named it
    scalar_map = _SCALAR_KEYS
    for layer, doc in layers:
        if layer.project and not trust:
            _refuse_widening(layer, doc, scalars)
        _merge_lists(layer, doc, ctx, lists, origin, sources)
        for name in _get(doc, ("presets",)) or ():
            # A preset expands where it is named: its domains join the
            # allowed list, each saying which preset and layer it came from.
            from safebox.policy.presets import PRESETS

            for d in PRESETS[name].domains:
                lists["allowed_domains"].append(d)
                sources.append(("network.allowedDomains", d, f"preset {name} ({layer.name})"))
        for key, target in scalar_map.items():
            value = _get(doc, key)
            if value is not None:
                scalars[target] = tuple(value) if isinstance(value, list) else value  # devices.gpu's indices
                dotted = ".".join(key)
                # A later layer's scalar replaces the earlier one: only the winner is shown.
                sources = [s for s in sources if s[0] != dotted]
                sources.append((dotted, value, layer.name))
        for key, value in (_get(doc, ("limits",)) or {}).items():
            sources = _merge_limit(layer, key, value, scalars, sources, trusted=trust)

    def dedupe(xs: list[str]) -> tuple[str, ...]:
        return tuple(dict.fromkeys(xs))

    if lists["allow_read"] or lists["allow_read_globs"]:
        sources = _apply_allow_read(lists, origin, sources)
    # Keyed by EffectivePolicy's list fields (named at run time by _LIST_KEYS).
    merged: dict[str, Any] = {k: dedupe(v) for k, v in lists.items()}
    from safebox.policy.presets import active

    extras = _srt_extras(layers, ctx, trust=trust, sources=sources)
    return EffectivePolicy(**merged, **scalars, **extras, sources=tuple(sources),
                           cache_presets=active(merged["presets"], merged["allowed_domains"]))


def _refuse_widening(layer: Layer, doc: dict[str, Any], scalars: dict[str, Any]) -> None:
    """An untrusted project file may narrow the sandbox, never widen it."""
    # Scalars that weaken when lowered: a cloned repo must not turn
    # off strict mode or shrink the protected-file search (review).
    depth = _get(doc, ("mandatoryDenySearchDepth",))
    if depth is not None and depth < scalars.get("search_depth", 0):
        raise PolicyError(f"{layer.name}: mandatoryDenySearchDepth: a project file may not lower it",
                          hint="set trustProjectFiles = true in your user policy to allow it")
    if _get(doc, ("strict",)) is False and scalars.get("strict"):
        raise PolicyError(f"{layer.name}: strict: a project file may not turn strict mode off",
                          hint="set trustProjectFiles = true in your user policy to allow it")
    for key in _WIDENING:
        value = _get(doc, key)
        if value:
            raise PolicyError(
                f"{layer.name}: {'.'.join(key)}: a project file may not widen the sandbox",
                hint="set trustProjectFiles = true in your user policy or pass the file with --policy",
            )


def _merge_lists(layer: Layer, doc: dict[str, Any], ctx: Context, lists: dict[str, list[str]],
                 origin: dict[tuple[str, str], str], sources: list[tuple[str, Any, str]]) -> None:
    """Append the list keys of one layer (paths expanded; a path with a glob
    character to its glob field) to ``lists``, ``origin`` and ``sources``."""
    for key, (target, is_path) in _LIST_KEYS.items():
        values = _get(doc, key)
        if not values:
            continue
        dotted = ".".join(key)
        for v in values:
            field = target
            if isinstance(v, dict):  # {"path": ..., "literal": true}: glob characters are plain
                item = expand_path(v["path"], ctx)
            elif is_path:
                item = expand_path(v, ctx)
                if target in _GLOB_FIELDS and not _GLOB_CHARS.isdisjoint(v):
                    field = _GLOB_FIELDS[target]
            else:
                item = v
            lists[field].append(item)
            origin.setdefault((field, item), layer.name)
            sources.append((dotted, item, layer.name))


def _merge_limit(layer: Layer, key: str, value: Any, scalars: dict[str, Any],
                 sources: list[tuple[str, Any, str]], *, trusted: bool) -> list[tuple[str, Any, str]]:
    """``limits.KEY`` of one layer into ``scalars`` (normalised: bytes,
    seconds, a count; 0 unlimited). A project file may lower a limit, never
    raise it above what the layers before it (or the default) set: a cloned
    repository must not lift the fork-bomb guard of the host it lands on."""
    from safebox import limits

    field = limits.KEYS[key][1]
    parsed = limits.parse_value(key, value)
    if layer.project and not trusted:
        before = scalars.get(field, limits.default(key))
        if before and (not parsed or parsed > before):
            raise PolicyError(f"{layer.name}: limits.{key}: a project file may not raise a limit "
                              f"(to {limits.human(key, parsed)}, over {limits.human(key, before)})",
                              hint="set trustProjectFiles = true in your user policy, or pass the file with --policy")
    scalars[field] = parsed
    dotted = f"limits.{key}"
    return [s for s in sources if s[0] != dotted] + [(dotted, value, layer.name)]


def _apply_allow_read(lists: dict[str, list[str]], origin: dict[tuple[str, str], str],
                      sources: list[tuple[str, Any, str]]) -> list[tuple[str, Any, str]]:
    """Take off ``denyRead`` the entries ``allowRead`` names exactly (after
    ``~`` and relative expansion; a pattern only by the same pattern),
    whichever layer named them; ``policy show`` says so. Everything else
    (an entry inside a denied directory, a denyRead entry inside an
    allowRead one, patterns) is decided against the host when the sandbox
    is built (builder/regions.py): allowRead beats the denyRead region it
    lies in, and a more specific denyRead entry still wins."""
    gone: set[tuple[str, str]] = set()
    for deny, allow in (("deny_read", "allow_read"), ("deny_read_globs", "allow_read_globs")):
        again = set(lists[allow])
        gone.update((deny, d) for d in lists[deny] if d in again)
        lists[deny] = [d for d in lists[deny] if d not in again]
    keyed = {"deny_read": "filesystem.denyRead", "deny_read_globs": "filesystem.denyRead"}
    allow_of = {"deny_read": "allow_read", "deny_read_globs": "allow_read_globs"}
    shown = []
    for k, v, src in sources:
        hit = next((f for f in keyed if k == keyed[f] and (f, v) in gone), None)
        if hit is not None:
            src = f"{src} (re-allowed by filesystem.allowRead from {origin[(allow_of[hit], v)]})"
        shown.append((k, v, src))
    return shown


#: Path lists whose entries may be glob patterns (builder/globs.py): a
#: pattern goes to its own field, expanded against the host at every run.
_GLOB_FIELDS = {"deny_read": "deny_read_globs", "allow_read": "allow_read_globs", "deny_write": "deny_write_globs"}
_GLOB_CHARS = frozenset("*?[]")


def _srt_extras(layers: list[tuple[Layer, dict[str, Any]]], ctx: Context, *, trust: bool,
                sources: list[tuple[str, Any, str]]) -> dict[str, Any]:
    """The srt network and credential keys (``network.tlsTerminate``,
    ``network.parentProxy``, ``credentials``), merged as the rest: lists
    concatenate, scalars later wins; a credential entry named again (same
    variable or path) is replaced by the later one. Appends to ``sources``.
    Masked credential entries in an untrusted project file are refused: a
    cloned repository must not make the caller's secrets usable."""
    out: dict[str, Any] = {}
    exclude: list[str] = []
    extra_cas: list[str] = []
    env_entries: dict[str, tuple[str, str, tuple[str, ...] | None]] = {}
    file_entries: dict[str, tuple[str, str, tuple[str, ...] | None]] = {}

    def note(key: str, value: Any, layer: Layer, *, scalar: bool = False) -> None:
        _note(sources, key, value, layer, scalar=scalar)

    for layer, doc in layers:
        tls = _get(doc, ("network", "tlsTerminate"))
        if tls is not None:
            _merge_tls(layer, tls, ctx, out, exclude, extra_cas, sources)
        parent = _get(doc, ("network", "parentProxy")) or {}
        for key, field in (("http", "parent_proxy_http"), ("https", "parent_proxy_https"),
                           ("noProxy", "parent_proxy_no_proxy")):
            if parent.get(key) is not None:
                out[field] = parent[key]
                note(f"network.parentProxy.{key}", parent[key], layer, scalar=True)
        creds = _get(doc, ("credentials",)) or {}
        for kind, store, key in (("envVars", env_entries, "name"), ("files", file_entries, "path")):
            for entry in creds.get(kind) or ():
                if entry["mode"] == "mask" and layer.project and not trust:
                    raise PolicyError(
                        f"{layer.name}: credentials.{kind}: a project file may not mask a credential "
                        "(the proxy would put the real value into requests)",
                        hint="set trustProjectFiles = true in your user policy or pass the file with --policy")
                ident = expand_path(entry[key], ctx) if kind == "files" else entry[key]
                hosts = entry.get("injectHosts")
                store.pop(ident, None)  # a later entry for the same name wins, and moves last
                store[ident] = (ident, entry["mode"], tuple(hosts) if hosts is not None else None)
                note(f"credentials.{kind}", f"{ident} ({entry['mode']})", layer)
        if creds.get("allowPlaintextInject") is not None:
            out["allow_plaintext_inject"] = creds["allowPlaintextInject"]
            note("credentials.allowPlaintextInject", creds["allowPlaintextInject"], layer, scalar=True)
    out["tls_exclude_domains"] = tuple(dict.fromkeys(exclude))
    out["tls_extra_ca_cert_paths"] = tuple(dict.fromkeys(extra_cas))
    out["credential_env_vars"] = tuple(env_entries.values())
    out["credential_files"] = tuple(file_entries.values())
    return out


def _note(sources: list[tuple[str, Any, str]], key: str, value: Any, layer: Layer, *, scalar: bool = False) -> None:
    """Record where ``key``'s value came from; a scalar's later value replaces the earlier."""
    if scalar:
        sources[:] = [s for s in sources if s[0] != key]
    sources.append((key, value, layer.name))


def _merge_tls(layer: Layer, tls: dict[str, Any], ctx: Context, out: dict[str, Any], exclude: list[str],
               extra_cas: list[str], sources: list[tuple[str, Any, str]]) -> None:
    """One layer's ``network.tlsTerminate`` into ``out``, ``exclude`` and ``extra_cas``."""
    if not out.get("tls_terminate"):
        _note(sources, "network.tlsTerminate", True, layer, scalar=True)
    out["tls_terminate"] = True
    for key, field in (("caCertPath", "tls_ca_cert_path"), ("caKeyPath", "tls_ca_key_path")):
        if tls.get(key) is not None:
            out[field] = expand_path(tls[key], ctx)
            _note(sources, f"network.tlsTerminate.{key}", out[field], layer, scalar=True)
    for d in tls.get("excludeDomains") or ():
        exclude.append(d)
        _note(sources, "network.tlsTerminate.excludeDomains", d, layer)
    for pth in tls.get("extraCaCertPaths") or ():
        extra_cas.append(expand_path(pth, ctx))
        _note(sources, "network.tlsTerminate.extraCaCertPaths", extra_cas[-1], layer)


# Policy keys (as files spell them) → EffectivePolicy fields; lists also say
# whether their entries are paths (expanded against the working directory).
_LIST_KEYS: dict[tuple[str, ...], tuple[str, bool]] = {
    ("network", "allowedDomains"): ("allowed_domains", False),
    ("network", "allowedAddresses"): ("allowed_addresses", False),
    ("network", "deniedDomains"): ("denied_domains", False),
    ("network", "allowUnixSockets"): ("allow_unix_sockets", True),
    ("filesystem", "denyRead"): ("deny_read", True),
    ("filesystem", "allowRead"): ("allow_read", True),
    ("filesystem", "allowWrite"): ("allow_write", True),
    ("filesystem", "denyWrite"): ("deny_write", True),
    ("env", "deny"): ("env_deny", False),
    ("env", "allow"): ("env_allow", False),
    ("ci", "passEnv"): ("ci_pass_env", False),
    ("ci", "passPath"): ("ci_pass_path", True),
    ("presets",): ("presets", False),
}
_SCALAR_KEYS: dict[tuple[str, ...], str] = {
    ("network", "allowAllUnixSockets"): "allow_all_unix_sockets",
    ("network", "allowLocalBinding"): "allow_local_binding",
    ("network", "allowLocalDestinations"): "allow_local_destinations",
    ("filesystem", "allowWritePathDirs"): "allow_write_path_dirs",
    ("filesystem", "allowGitConfig"): "allow_git_config",
    ("devices", "gpu"): "devices_gpu",
    ("strict",): "strict",
    ("mandatoryDenySearchDepth",): "search_depth",
}


def policy_document(eff: EffectivePolicy) -> dict[str, Any]:
    """The effective policy as a policy file spells it
    (``{"network": {"allowedDomains": [...]}, ...}``, the ``policy`` member
    of ``safebox policy show --json``): saved to a file, ``safebox policy
    check`` accepts it."""
    out: dict[str, Any] = {}
    fields = {**{k: v[0] for k, v in _LIST_KEYS.items()}, **_SCALAR_KEYS}
    for key, field in fields.items():
        value = getattr(eff, field)
        node = out
        for part in key[:-1]:
            node = node.setdefault(part, {})
        if field in _GLOB_FIELDS:
            # A literal path that holds a glob character keeps srt's literal
            # form; the patterns follow the literal entries.
            value = [{"path": v, "literal": True} if not _GLOB_CHARS.isdisjoint(v) else v for v in value]
            value += list(getattr(eff, _GLOB_FIELDS[field]))
        node[key[-1]] = list(value) if isinstance(value, tuple) else value
    if eff.tls_terminate:
        tls: dict[str, Any] = {"excludeDomains": list(eff.tls_exclude_domains),
                               "extraCaCertPaths": list(eff.tls_extra_ca_cert_paths)}
        if eff.tls_ca_cert_path is not None:
            tls["caCertPath"] = eff.tls_ca_cert_path
        if eff.tls_ca_key_path is not None:
            tls["caKeyPath"] = eff.tls_ca_key_path
        out["network"]["tlsTerminate"] = tls
    parent = {k: v for k, v in (("http", eff.parent_proxy_http), ("https", eff.parent_proxy_https),
                                ("noProxy", eff.parent_proxy_no_proxy)) if v is not None}
    if parent:
        out["network"]["parentProxy"] = parent
    if eff.credential_env_vars or eff.credential_files or eff.allow_plaintext_inject:
        def entry(key: str, ident: str, mode: str, hosts: tuple[str, ...] | None) -> dict[str, Any]:
            e: dict[str, Any] = {key: ident, "mode": mode}
            if hosts is not None:
                e["injectHosts"] = list(hosts)
            return e

        out["credentials"] = {
            "envVars": [entry("name", *e) for e in eff.credential_env_vars],
            "files": [entry("path", *e) for e in eff.credential_files],
            "allowPlaintextInject": eff.allow_plaintext_inject,
        }
    from safebox.limits import KEYS, policy_value

    for limit_key, (_, field) in KEYS.items():
        value = getattr(eff, field)
        if value is not None:  # None: the built-in default, which a document leaves out
            out.setdefault("limits", {})[limit_key] = policy_value(limit_key, value)
    return out


def default_layer() -> Layer:
    """Built-in defaults: read everywhere but the credential list; write the working dir and /tmp."""
    return Layer(name="defaults", data={
        "filesystem": {"denyRead": list(defaults.CREDENTIAL_PATHS), "allowWrite": [".", "/tmp"]},
        "env": {"deny": list(defaults.ENV_DENY_PATTERNS)},
        "mandatoryDenySearchDepth": defaults.DEFAULT_SEARCH_DEPTH,
    })


def credential_env_layers(ctx: Context) -> list[Layer]:
    """The credential stores the caller's environment moves (``GNUPGHOME``,
    each file of ``KUBECONFIG``, ``$CARGO_HOME/credentials.toml``, ...), one
    layer per variable so that ``policy show`` names it. They follow the
    built-in defaults. These are literal paths from the environment, not
    policy text: they are not validated as policy entries (a ``[`` in a
    directory name is not a glob there)."""
    out = []
    for var, paths in defaults.credential_env_paths(ctx.credential_env):
        out.append(Layer(name=f"${var}", data={"filesystem": {"denyRead": [{"path": p, "literal": True}
                                                                            for p in paths]}}))
    return out


def flags_layer(flags: Flags) -> Layer:
    """Command-line flags as the last layer."""
    data: dict[str, Any] = {}
    fs = {k: list(v) for k, v in (("allowWrite", flags.allow_write), ("denyRead", flags.deny_read),
                                  ("allowRead", flags.allow_read), ("denyWrite", flags.deny_write)) if v}
    net = {k: list(v) for k, v in (("allowedDomains", flags.allow_domains),
                                   ("deniedDomains", flags.deny_domains)) if v}
    if fs:
        data["filesystem"] = fs
    if net:
        data["network"] = net
    if flags.strict:
        data["strict"] = True
    if flags.presets:
        data["presets"] = list(flags.presets)
    if flags.allow_gpu is not None:
        from safebox.builder.devices import parse_selection

        select = parse_selection(flags.allow_gpu)
        data["devices"] = {"gpu": True if select is None else list(select)}
    limits = {k: v for k, v in (("processes", flags.limit_processes), ("memory", flags.limit_memory),
                                ("tmpSize", flags.limit_tmp_size), ("wallTime", flags.timeout)) if v is not None}
    if limits:
        data["limits"] = limits
    return Layer(name=FLAGS_LAYER, data=data)


def discover_files(ctx: Context, *, policy_files: Sequence[str]) -> list[tuple[str, bool]]:
    """The policy files that apply, in layer order, as (path, is_project):
    the user file, the project file, then each ``--policy`` file in the
    order given (``-p base.json -p learned.json``: the later one layers on
    top, as ``docker compose -f a -f b`` does)."""
    out: list[tuple[str, bool]] = []
    udir = user_config_dir(ctx.home)
    for name in USER_FILES:
        p = os.path.join(udir, name)
        if os.path.exists(p):
            out.append((p, False))
            break
    for name in PROJECT_FILES:
        p = os.path.join(ctx.cwd, name)
        if os.path.exists(p):
            out.append((p, True))
            break
    out += [(expand_path(f, ctx), False) for f in policy_files]
    return out


def _read_inputs(files: list[tuple[str, bool]]) -> list[tuple[str, bool, bytes]]:
    out = []
    for path, project in files:
        try:
            raw = _read_file(path)
        except FileNotFoundError:
            raise PolicyError(f"{path}: policy file not found") from None
        out.append((path, project, raw))
    return out


def load(ctx: Context, *, policy_files: Sequence[str], flags: Flags) -> EffectivePolicy:
    """The slow path: read, validate (pydantic) and merge every layer."""
    inputs = _read_inputs(discover_files(ctx, policy_files=policy_files))
    return _load_from(inputs, ctx, flags)


def _load_from(inputs: list[tuple[str, bool, bytes]], ctx: Context, flags: Flags) -> EffectivePolicy:
    return merge(_validated(inputs, ctx, flags), ctx)


def _validated(inputs: list[tuple[str, bool, bytes]], ctx: Context, flags: Flags) -> list[tuple[Layer, dict[str, Any]]]:
    """Every layer, in order, with its validated document: the ones each run
    adds itself (:data:`RUN_ADDED`), then the files, then the flags."""
    first = default_layer()
    validated = [(first, validate_layer(first))]
    validated += [(layer, layer.data) for layer in credential_env_layers(ctx)]
    layers = [Layer(name=path, data=parse_document(path, raw), project=project) for path, project, raw in inputs]
    layers.append(flags_layer(flags))
    return [*validated, *((layer, validate_layer(layer)) for layer in layers)]


def read_layers(ctx: Context, *, policy_files: Sequence[str], flags: Flags) -> list[tuple[Layer, dict[str, Any]]]:
    """Every layer of a run, in order, each with its validated document
    (``merge`` of them is ``load``'s answer): for ``policy show``, which
    names the layer of each value."""
    return _validated(_read_inputs(discover_files(ctx, policy_files=policy_files)), ctx, flags)


def is_run_added(layer: Layer) -> bool:
    """Whether every run adds ``layer`` itself: the built-in defaults and the
    credential stores the environment moves (``$GNUPGHOME``). They are not
    written into a learned policy: they would bake this host's paths into a
    file meant for another run, and the next run adds them anyway."""
    return layer.name == "defaults" or layer.name.startswith("$")


def load_with_document(ctx: Context, *, policy_files: Sequence[str],
                       flags: Flags) -> tuple[EffectivePolicy, dict[str, Any]]:
    """``load``, and the policy the run runs under as one policy document:
    the user file, the project file, each ``--policy`` file and the flags,
    merged as files layer (policy/layers.py), for ``--learn`` to write with
    what it learned. Both come from the same bytes, read once."""
    from safebox.policy.layers import merge_documents

    layers = _validated(_read_inputs(discover_files(ctx, policy_files=policy_files)), ctx, flags)
    return merge(layers, ctx), merge_documents(doc for layer, doc in layers if not is_run_added(layer))


# The policy cache's bound (docs/index.md, "Where things live"): a harness
# that runs every task in a fresh worktree makes a new entry per task. Least
# recently used entries go first; a hit refreshes an entry's mtime at most
# once a minute (an inode write per run would be needless), so "recently"
# has a resolution of a minute. The bounds are checked only when an entry is
# written (a miss), never on a hit.
POLICY_CACHE_MAX_ENTRIES = 256
POLICY_CACHE_MAX_BYTES = 8 << 20
_TOUCH_AFTER = 60.0
_CACHE_FORMAT = 4  # 2: sources are (key, value, layer) records; 3: limits; 4: glob fields, allowGitConfig


def load_cached(ctx: Context, *, policy_files: Sequence[str], flags: Flags, cache_dir: str) -> EffectivePolicy:
    """``load``, memoised on disk by a digest of every input byte.

    A hit costs a few stats and reads and one ``marshal.loads``; a miss (or a
    cache file that is not ours and private) falls back to ``load``,
    rewrites it and evicts the least recently used entries beyond the bound
    (``evict_policy_cache``). marshal is not safe against hostile bytes,
    which is why the file must be ours, 0600, in a directory the sandbox can
    never write.
    """
    inputs = _read_inputs(discover_files(ctx, policy_files=policy_files))
    # The context includes the caller's credential-store variables: a run
    # with another GNUPGHOME must not be served the last run's deny list.
    # And the built-in layer's own bytes: a safebox upgraded in place (the
    # same __version__) with more ENV_DENY_PATTERNS or CREDENTIAL_PATHS must
    # not be served the old lists (issue 22 item 7; about 10 us).
    parts = [repr((_CACHE_FORMAT, __version__, ctx, flags, os.environ.get("XDG_CONFIG_HOME"),
                   default_layer().data)).encode()]
    for path, project, raw in inputs:
        parts.append(f"\0{path}\0{project}\0{len(raw)}\0".encode() + raw)
    key = sha256_hex(b"".join(parts))[:32]
    cache = os.path.join(cache_dir, f"{_CACHE_PREFIX}{key}{_CACHE_SUFFIX}")
    from safebox.hostio import HostFileError, open_read, replace

    try:
        fd = open_read(cache, max_size=1 << 22)  # no link followed; a regular file of ours, one link
        try:
            st = os.fstat(fd)
            if (st.st_mode & 0o077) == 0:
                policy = EffectivePolicy.from_json_dict(marshal.loads(os.read(fd, 1 << 22)))
                import time

                if time.time() - st.st_mtime > _TOUCH_AFTER:
                    try:
                        os.utime(fd)  # used: the eviction keeps recently used entries
                    except OSError:
                        pass
                return policy
        finally:
            os.close(fd)
    except (OSError, ValueError, TypeError, EOFError, HostFileError):
        pass
    policy = _load_from(inputs, ctx, flags)
    try:
        os.makedirs(cache_dir, mode=0o700, exist_ok=True)
        replace(cache, marshal.dumps(policy.to_json_dict()), mode=0o600)
        evict_policy_cache(cache_dir, keep=cache)
    except (OSError, HostFileError):
        pass  # an unwritable cache only costs speed
    return policy


_CACHE_PREFIX = "policy-"
_CACHE_SUFFIX = ".marshal"


def evict_policy_cache(cache_dir: str, *, keep: str | None = None,
                       max_entries: int | None = None, max_bytes: int | None = None) -> list[str]:
    """Remove the least recently used policy cache entries (oldest mtime
    first) until at most ``POLICY_CACHE_MAX_ENTRIES`` entries of at most
    ``POLICY_CACHE_MAX_BYTES`` together remain; ``keep`` (the entry just
    written) is never removed. Temporary files of writers that died (older
    than an hour) go too. Returns the removed names. Only policy cache files
    are looked at: the seccomp programs beside them are not ours to judge."""
    import time

    max_entries = POLICY_CACHE_MAX_ENTRIES if max_entries is None else max_entries
    max_bytes = POLICY_CACHE_MAX_BYTES if max_bytes is None else max_bytes
    now = time.time()
    entries: list[tuple[float, str, int]] = []
    removed: list[str] = []
    try:
        with os.scandir(cache_dir) as it:
            for e in it:
                if not e.name.startswith(_CACHE_PREFIX):
                    continue
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                if e.name.endswith(".tmp"):
                    if now - st.st_mtime > 3600:
                        try:
                            os.unlink(e.path)
                            removed.append(e.name)
                        except OSError:
                            pass
                elif e.name.endswith(_CACHE_SUFFIX):
                    entries.append((st.st_mtime, e.path, st.st_size))
    except OSError:
        return removed
    count = len(entries)
    total = sum(size for _, _, size in entries)
    if count <= max_entries and total <= max_bytes:
        return removed
    entries.sort()
    for _, path, size in entries:
        if count <= max_entries and total <= max_bytes:
            break
        if path == keep:
            continue
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass  # a concurrent safebox evicted it first
        except OSError:
            continue
        removed.append(os.path.basename(path))
        count -= 1
        total -= size
    return removed

"""Validated layers merged into one ``EffectivePolicy``: lists add up,
scalars later wins, a project file widens access only when trusted, paths
are expanded for this host, and srt's extras (TLS termination, parent
proxy, credentials) recorded with the layer that set each value."""

from __future__ import annotations

from safebox.errors import PolicyError
from safebox.policy.effective import EffectivePolicy
from safebox.policy.keys import GLOB_CHARS, GLOB_FIELDS, LIST_KEYS, SCALAR_KEYS
from safebox.policy.sources import Context, Layer, expand_path

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


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
        "allowed_domains", "allowed_addresses", "denied_domains", "allow_unix_sockets", "deny_read",
        "allow_read", "allow_write", "deny_write", "env_deny", "env_allow", "ci_pass_env", "ci_pass_path", "presets",
        *GLOB_FIELDS.values())}
    scalars: dict[str, Any] = {}
    sources: list[tuple[str, Any, str]] = []
    origin: dict[tuple[str, str], str] = {}  # (field, entry) -> the first layer that named it
    scalar_map = SCALAR_KEYS
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
    # Keyed by EffectivePolicy's list fields (named at run time by LIST_KEYS).
    merged: dict[str, Any] = {k: dedupe(v) for k, v in lists.items()}
    from safebox.policy.presets import active

    extras = _srt_extras(layers, ctx, trust=trust, sources=sources)
    from safebox.policy import srtnet

    extras.update(srtnet.merge(layers, trust=trust, sources=sources, denied_domains=merged["denied_domains"]))
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
    for key, (target, is_path) in LIST_KEYS.items():
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
                if target in GLOB_FIELDS and not GLOB_CHARS.isdisjoint(v):
                    field = GLOB_FIELDS[target]
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
    from safebox.policy import limit_values as limits

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

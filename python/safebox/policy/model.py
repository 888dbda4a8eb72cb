"""pydantic models of a policy file (JSON or TOML).

The keys are sandbox-runtime's settings keys, so an srt settings file works
unchanged; safebox's additions sit beside them. Every model forbids unknown
keys: a typo (``allowWrites``) is an error naming the key, never a silently
weaker sandbox.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PlainValidator

from safebox.policy import srtnet
from safebox.policy.domains import check_pattern


def _check_domain_pattern(value: str) -> str:
    """An ``allowedDomains`` entry, by the one grammar the proxy uses too
    (:func:`safebox.policy.domains.check_pattern`). The user's spelling is kept;
    the proxy canonicalises it the same way when it starts.

    Messages describe the value without repeating it: the caller puts it in
    front, as the user spelled it (``--allow-domain http://x.com: ...``)."""
    check_pattern(value)
    return value


def _check_denied_pattern(value: str) -> str:
    """A ``deniedDomains`` entry: the same grammar, plus ``*`` (refuse everything)."""
    check_pattern(value, denied=True)
    return value


#: Characters that make a path entry a glob in sandbox-runtime's syntax
#: (``*``, ``**``, ``?``, ``[...]``); builder/globs.py expands them. Braces
#: are literal in srt's glob syntax and expanded by shells: a pattern holding
#: one is refused (glob_syntax.check_pattern). Lists of paths that take no pattern
#: (``allowWrite``, ``allowUnixSockets``) refuse all of them.
GLOB_CHARS = frozenset("*?[]")
GLOB_REFUSAL = "glob patterns are not supported here"


def glob_refusal(value: str, *, key: str | None) -> str | None:
    """Why ``value`` cannot be an entry of ``key``, a list of literal paths, or None."""
    if GLOB_CHARS.isdisjoint(value):
        return None
    if key is None:  # a single path (a CA file, a credential file)
        return f"{GLOB_REFUSAL} (it has one of * ? [ ]): this key takes one path, not a pattern"
    why = {"allowWrite": "a write root is one directory bound into the sandbox when it starts",
           "allowUnixSockets": "a socket is bound in by its path"}.get(key, "")
    return (f"{GLOB_REFUSAL} (it has one of * ? [ ]): {key} takes paths; {why}. Name the path itself, or, "
            'for a name that holds such a character, write { "path": ..., "literal": true }')


def _check_plain_path(value: str) -> str:
    if not value or "\0" in value:
        raise ValueError("a path must be non-empty and contain no NUL byte")
    if value.startswith("~") and not (value == "~" or value.startswith("~/")):
        raise ValueError("only '~' and '~/...' are supported, not '~user'")
    return value


def _check_path(value: str) -> str:
    """A key that takes one path (``tlsTerminate.caCertPath``, a credential file)."""
    _check_plain_path(value)
    refusal = glob_refusal(value, key=None)
    if refusal:
        raise ValueError(refusal)
    return value


def _literal_entry(key: str) -> Any:
    """The validator of a list of literal paths, ``key``: a path holding no
    glob character, or srt's ``{"path": ..., "literal": true}``."""
    def check(value: Any) -> str | dict[str, Any]:
        if isinstance(value, str):
            _check_plain_path(value)
            refusal = glob_refusal(value, key=key)
            if refusal:
                raise ValueError(refusal)
            return value
        if isinstance(value, dict):
            entry = _check_fs_entry(value)
            if isinstance(entry, str):  # "literal": false, a pattern
                return check(entry)
            return entry
        raise ValueError(f'must be a path or {{ "path": ..., "literal": true }}, not {_describe(value)}')
    return check


def _describe(value: Any) -> str:
    from safebox.policy.words import json_word

    return json_word(value)


def _check_fs_entry(value: Any) -> str | dict[str, Any]:
    """A ``denyRead``/``allowRead``/``denyWrite`` entry: a path, a glob
    pattern (builder/globs.py), or srt's ``{"path": ..., "literal": true}``,
    whose path is taken as it is spelled, glob characters included."""
    if isinstance(value, str):
        _check_plain_path(value)
        if not GLOB_CHARS.isdisjoint(value):
            from safebox.policy.glob_syntax import check_pattern

            check_pattern(value)
        return value
    if isinstance(value, dict):
        extra = sorted(set(value) - {"path", "literal"})
        if extra:
            raise ValueError(f"unknown key `{extra[0]}` in a path entry (the keys are `path` and `literal`)")
        path, literal = value.get("path"), value.get("literal", False)
        if not isinstance(path, str):
            raise ValueError(f"`path` must be a path, not {_describe(path)}")
        if not isinstance(literal, bool):
            raise ValueError(f"`literal` must be true or false, not {_describe(literal)}")
        if not literal:
            return _check_fs_entry(path)
        _check_plain_path(path)
        return {"path": path, "literal": True}
    raise ValueError(f'must be a path or {{ "path": ..., "literal": true }}, not {_describe(value)}')


def _check_preset(value: str) -> str:
    from safebox.policy.presets import PRESETS, unknown_message

    if value not in PRESETS:
        raise ValueError(unknown_message(value))
    return value


def _check_env_pattern(value: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_*?]+", value):
        raise ValueError("an environment variable pattern uses only letters, digits, '_', '*' and '?'")
    return value


def _check_proxy_url(value: str) -> str:
    """A ``network.parentProxy`` URL: ``http[s]://[user[:password]@]host[:port]``."""
    from safebox.policy.proxy_url import parse_proxy_url

    parse_proxy_url(value)
    return value


def _check_env_name(value: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
        raise ValueError("an environment variable name uses only letters, digits and '_', not starting with a digit")
    return value


def _limit_check(key: str) -> Any:
    def check(value: Any) -> Any:
        from safebox.policy.limit_values import check_value

        if value is not None:
            check_value(key, value)
        return value
    return check


def _check_address_entry(value: str) -> str:
    from safebox.policy.address_entries import parse_address_entry

    parse_address_entry(value)  # ValueError: pydantic names the key and the entry
    return value


DomainPattern = Annotated[str, AfterValidator(_check_domain_pattern)]
AddressEntry = Annotated[str, AfterValidator(_check_address_entry)]
DeniedPattern = Annotated[str, AfterValidator(_check_denied_pattern)]
PolicyPath = Annotated[str, AfterValidator(_check_path)]
WriteRoot = Annotated[Any, PlainValidator(_literal_entry("allowWrite"))]
SocketPath = Annotated[Any, PlainValidator(_literal_entry("allowUnixSockets"))]
FsEntry = Annotated[Any, PlainValidator(_check_fs_entry)]
EnvPattern = Annotated[str, AfterValidator(_check_env_pattern)]


def _check_pass_env(value: str) -> str:
    _check_env_pattern(value)
    head = re.split(r"[*?]", value, maxsplit=1)[0]
    if head != value and len(head) < 2:
        raise ValueError("a pattern starts with at least two letters before its first '*' or '?' (IMAGE_*), so "
                         "that it names a family of variables, not all of them")
    return value


PassEnvPattern = Annotated[str, AfterValidator(_check_pass_env)]
PresetName = Annotated[str, AfterValidator(_check_preset)]
ProxyUrl = Annotated[str, AfterValidator(_check_proxy_url)]
EnvName = Annotated[str, AfterValidator(_check_env_name)]
AddressRange = Annotated[Any, PlainValidator(srtnet.check_address_range)]
DenialReason = Annotated[Any, PlainValidator(srtnet.check_reason)]
HeaderName = Annotated[Any, PlainValidator(srtnet.check_header_name)]
CredentialMode = Literal["deny", "mask"]
Port = Annotated[int, Field(ge=1, le=65535)]
SearchDepth = Annotated[int, Field(ge=1, le=20)]

# What each constrained type is, in the words an error message uses
# (singular, plural): "must be a list of domain names, not the string ...".
# Errors never show pydantic's own wording (policy/load.py).
NOUNS: dict[Any, tuple[str, str]] = {
    DomainPattern: ("a domain name", "domain names"),
    DeniedPattern: ("a domain name or '*'", "domain names (or '*')"),
    PolicyPath: ("a path", "paths"),
    WriteRoot: ("a path", "paths"),
    SocketPath: ("a path", "paths"),
    FsEntry: ("a path or glob pattern", "paths or glob patterns"),
    EnvPattern: ("an environment variable pattern", "environment variable patterns"),
    PassEnvPattern: ("an environment variable pattern", "environment variable patterns"),
    PresetName: ("a preset name", "preset names"),
    ProxyUrl: ("a proxy URL (http://host:port)", "proxy URLs"),
    EnvName: ("an environment variable name", "environment variable names"),
    CredentialMode: ('"deny" or "mask"', '"deny"/"mask" values'),
    AddressRange: ("an IP address or CIDR range", "IP addresses or CIDR ranges"),
    DenialReason: ("a reason (text)", "reasons (text)"),
    HeaderName: ("an HTTP header name", "HTTP header names"),
    Port: ("a port number from 1 to 65535", "port numbers"),
    SearchDepth: ("a whole number from 1 to 20", "whole numbers from 1 to 20"),
    str: ("a string", "strings"),
    int: ("a whole number", "whole numbers"),
    bool: ("true or false", "true/false values"),
}

# srt settings keys that safebox knows but does not support, as dotted key →
# why, and what to do instead. An unknown key found here is reported as
# "srt key not supported by safebox: <why>" instead of "unknown key"
# (policy/load.py). The keys are sandbox-runtime's settings schema
# (src/sandbox/sandbox-config.ts); docs/policy-reference.md lists them.
SRT_KEYS_NOT_SUPPORTED: dict[str, str] = {
    "filesystem.disabled": "safebox never switches its filesystem rules off; remove the key "
                           "(a command that must see and write everything is not one to sandbox)",
    "seccomp": "safebox compiles and installs its own seccomp filter (docs/layers.md); remove the key",
    "bwrapPath": "safebox runs bwrap from PATH, and never from a write root; remove the key and put bwrap on PATH",
    "socatPath": "safebox runs socat from PATH, and never from a write root; remove the key and put socat on PATH",
    "javaAgentJarPath": "safebox injects no JVM agent; remove the key (a JVM tool takes the proxy from "
                        "-Dhttps.proxyHost=127.0.0.1 -Dhttps.proxyPort=... in JAVA_TOOL_OPTIONS)",
    "windows": "settings of srt's Windows sandbox; safebox runs on Linux; remove the key",
    "git": "safebox runs the command under your own user id, so git sees the work tree as yours and needs "
           "no safe.directory; remove the key",
    # srt's structured and JWT masking, and its AWS re-signing: safebox masks
    # whole values only (docs/policy-reference.md, "Credentials").
    **{f"credentials.{kind}.{k}": "safebox masks the whole value only; remove the key, "
                                   "or use mode \"deny\""
       for kind in ("envVars", "files") for k in ("extract", "onExtractNoMatch", "decode", "maskClaims")},
    "credentials.files.maskDuplicates": "safebox masks the whole file only; remove the key",
    "credentials.awsPairs": "safebox does not re-sign AWS SigV4 requests; mask or deny the variables instead",
    "credentials.sigv4": "safebox does not re-sign AWS SigV4 requests; remove the key",
    # srt routes the matching domains through a MITM proxy on a unix socket.
    "network.mitmProxy": "safebox does not hand connections to another proxy by domain; to inspect "
                         "HTTPS use network.tlsTerminate, or run the MITM proxy on a TCP port and set "
                         "network.parentProxy (its noProxy lists the hosts it should not see)",
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, populate_by_name=False)


class TlsTerminateSettings(_Strict):
    """``network.tlsTerminate`` (srt): terminate HTTPS in the proxy with a
    per-run CA (or the one given), so that credential masking works over HTTPS."""

    caCertPath: PolicyPath | None = None
    caKeyPath: PolicyPath | None = None
    excludeDomains: list[DomainPattern] | None = None
    extraCaCertPaths: list[PolicyPath] | None = None


class ParentProxySettings(_Strict):
    """``network.parentProxy`` (srt): forward through an upstream HTTP proxy."""

    http: ProxyUrl | None = None
    https: ProxyUrl | None = None
    noProxy: str | None = None


class NetworkSettings(_Strict):
    """``network``: with no allowed domain the sandbox has no network at all."""

    allowedDomains: list[DomainPattern] | None = None
    deniedDomains: list[DeniedPattern] | None = None
    allowUnixSockets: list[SocketPath] | None = None
    allowAllUnixSockets: bool | None = None
    allowLocalBinding: bool | None = None
    # safebox addition: let allowed names resolve to loopback/private addresses.
    allowLocalDestinations: bool | None = None
    # safebox addition: private services by CIDR (and port), without allowLocalDestinations.
    allowedAddresses: list[AddressEntry] | None = None
    # srt: route through a proxy the caller runs. safebox always runs its own
    # filtering proxy; accepting these silently would bypass it, so they are refused.
    httpProxyPort: Port | None = None
    socksProxyPort: Port | None = None
    tlsTerminate: TlsTerminateSettings | None = None
    parentProxy: ParentProxySettings | None = None
    # srt 0.0.83's keys (policy/srtnet.py, docs/policy-reference.md "srt network keys").
    deniedResolvedAddresses: list[AddressRange] | None = None
    deniedDomainReasons: dict[str, DenialReason] | None = None
    strictAllowlist: bool | None = None
    requireHostMatch: bool | None = None
    refuseOpaqueTunnels: bool | None = None
    stripResponseHeaders: list[HeaderName] | None = None
    allowPlaintextHeaderSet: bool | None = None


class FilesystemSettings(_Strict):
    """``filesystem``: read everywhere except ``denyRead`` (``allowRead``
    re-allows within it); write only ``allowWrite`` (minus ``denyWrite``)."""

    denyRead: list[FsEntry] | None = None
    # srt's deny-then-allow: an entry beats a denyRead entry it lies in; a
    # denyRead entry more specific than it still wins (builder/regions.py).
    allowRead: list[FsEntry] | None = None
    allowWrite: list[WriteRoot] | None = None
    denyWrite: list[FsEntry] | None = None
    # srt's key: every repository's .git/config stays writable (hooks stay protected).
    allowGitConfig: bool | None = None
    # safebox addition: let the command write the directories of the
    # caller's PATH that lie in a write root (read-only by default).
    allowWritePathDirs: bool | None = None


class EnvSettings(_Strict):
    """``env`` (safebox addition): credential variable scrubbing."""

    deny: list[EnvPattern] | None = None
    allow: list[EnvPattern] | None = None


def _check_gpu(value: Any) -> Any:
    """``devices.gpu``: true, false, or a list of GPU indices (0-63)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, list) and value and all(type(v) is int and 0 <= v <= 63 for v in value):
        return value
    raise ValueError("must be true, false, or a non-empty list of GPU indices from 0 to 63 (the N of /dev/nvidiaN)")


GpuSetting = Annotated[Any, PlainValidator(_check_gpu)]


class DevicesSettings(_Strict):
    """``devices`` (safebox addition): device nodes bound into the sandbox (builder/devices.py)."""

    gpu: GpuSetting = None




class CiSettings(_Strict):
    """``ci`` (safebox addition): what a CI step may pass on to later,
    unsandboxed steps through the runner's file commands (python/safebox/ci_job/)."""

    # $GITHUB_ENV names or patterns ("VERSION", "IMAGE_*"); nothing else passes.
    passEnv: list[PassEnvPattern] | None = None
    # $GITHUB_PATH directories; never one a sandboxed run could write.
    passPath: list[PolicyPath] | None = None


class CredentialEnvVar(_Strict):
    """One ``credentials.envVars`` entry (srt): ``deny`` unsets the variable
    inside; ``mask`` shows a per-run sentinel that the proxy swaps for the
    real value in requests to ``injectHosts`` (default: ``allowedDomains``)."""

    name: EnvName
    mode: CredentialMode
    injectHosts: list[DomainPattern] | None = None


class CredentialFile(_Strict):
    """One ``credentials.files`` entry (srt): ``deny`` makes the path
    unreadable; ``mask`` shows a copy holding a per-run sentinel instead."""

    path: PolicyPath
    mode: CredentialMode
    injectHosts: list[DomainPattern] | None = None


class CredentialsSettings(_Strict):
    """``credentials`` (srt): secrets a command may use but never see."""

    envVars: list[CredentialEnvVar] | None = None
    files: list[CredentialFile] | None = None
    allowPlaintextInject: bool | None = None


class LimitsSettings(_Strict):
    """``limits`` (safebox addition): per-sandbox resource limits (safebox/policy/limit_values.py).

    Each takes ``"unlimited"`` too. The values are checked by the validators
    (any type reaches them, so that a wrong one gets the key's own words)."""

    processes: Annotated[Any, AfterValidator(_limit_check("processes"))] = None
    memory: Annotated[Any, AfterValidator(_limit_check("memory"))] = None
    tmpSize: Annotated[Any, AfterValidator(_limit_check("tmpSize"))] = None
    wallTime: Annotated[Any, AfterValidator(_limit_check("wallTime"))] = None


class RipgrepSettings(_Strict):
    """srt's ``ripgrep`` key: accepted for compatibility; safebox runs ``rg`` from PATH."""

    command: str | None = None
    args: list[str] | None = None
    argv0: str | None = None


class PolicyFile(_Strict):
    """One policy file. Every key is optional; layers merge (later wins for
    scalars, lists concatenate)."""

    network: NetworkSettings | None = None
    filesystem: FilesystemSettings | None = None
    env: EnvSettings | None = None
    credentials: CredentialsSettings | None = None
    ci: CiSettings | None = None
    devices: DevicesSettings | None = None
    strict: bool | None = None
    trustProjectFiles: bool | None = None
    mandatoryDenySearchDepth: SearchDepth | None = None
    # safebox addition: toolchain presets (policy/presets.py), e.g. ["npm"].
    presets: list[PresetName] | None = None
    # safebox addition: processes, memory, /tmp size, wall time (policy/limit_values.py).
    limits: LimitsSettings | None = None
    # srt keys that do not change enforcement in safebox; accepted so that an
    # srt settings file works unchanged (see policy-reference.md).
    ignoreViolations: dict[str, list[str]] | None = None
    allowPty: bool | None = None
    # srt: macOS only (Seatbelt's trustd and Apple Events); srt on Linux ignores them too.
    allowAppleEvents: bool | None = None
    enableWeakerNetworkIsolation: bool | None = None
    ripgrep: RipgrepSettings | None = None
    enableWeakerNestedSandbox: bool | None = None


def validate(data: Any) -> PolicyFile:
    """Validate a decoded document; raises pydantic.ValidationError."""
    return PolicyFile.model_validate(data)

"""pydantic models of a policy file (JSON or TOML).

The keys are sandbox-runtime's settings keys, so an srt settings file works
unchanged; safebox's additions sit beside them. Every model forbids unknown
keys: a typo (``allowWrites``) is an error naming the key, never a silently
weaker sandbox.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from safebox.domains import check_pattern


def _check_domain_pattern(value: str) -> str:
    """An ``allowedDomains`` entry, by the one grammar the proxy uses too
    (:func:`safebox.domains.check_pattern`). The user's spelling is kept;
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
#: (``*``, ``**``, ``?``, ``[...]``), plus braces, which shells and most glob
#: libraries expand (``*.{pem,key}``). safebox does not expand globs yet: taken
#: literally, ``**/.env`` names a path that never exists, and a deny entry for
#: it would be skipped as missing while every ``.env`` stays readable (found in
#: review, issue 11). Until globs are supported this is the one place that
#: refuses them; lifting it is the whole change on the validation side.
GLOB_CHARS = frozenset("*?[]{}")
GLOB_REFUSAL = "glob patterns are not supported yet"


def glob_refusal(value: str) -> str | None:
    """Why ``value`` cannot be a path entry yet, or None when it has no glob character."""
    if GLOB_CHARS.isdisjoint(value):
        return None
    return (f"{GLOB_REFUSAL} (it has one of * ? [ ] {{ }}): name the path itself, "
            "or its directory (a directory covers everything beneath it)")


def _check_path(value: str) -> str:
    if not value or "\0" in value:
        raise ValueError("a path must be non-empty and contain no NUL byte")
    if value.startswith("~") and not (value == "~" or value.startswith("~/")):
        raise ValueError("only '~' and '~/...' are supported, not '~user'")
    refusal = glob_refusal(value)
    if refusal:
        raise ValueError(refusal)
    return value


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
    from safebox.proxy.parent import parse_proxy_url

    parse_proxy_url(value)
    return value


def _check_env_name(value: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
        raise ValueError("an environment variable name uses only letters, digits and '_', not starting with a digit")
    return value


def _limit_check(key: str) -> Any:
    def check(value: Any) -> Any:
        from safebox.limits import check_value

        if value is not None:
            check_value(key, value)
        return value
    return check


DomainPattern = Annotated[str, AfterValidator(_check_domain_pattern)]
DeniedPattern = Annotated[str, AfterValidator(_check_denied_pattern)]
PolicyPath = Annotated[str, AfterValidator(_check_path)]
EnvPattern = Annotated[str, AfterValidator(_check_env_pattern)]
PresetName = Annotated[str, AfterValidator(_check_preset)]
ProxyUrl = Annotated[str, AfterValidator(_check_proxy_url)]
EnvName = Annotated[str, AfterValidator(_check_env_name)]
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
    EnvPattern: ("an environment variable pattern", "environment variable patterns"),
    PresetName: ("a preset name", "preset names"),
    ProxyUrl: ("a proxy URL (http://host:port)", "proxy URLs"),
    EnvName: ("an environment variable name", "environment variable names"),
    CredentialMode: ('"deny" or "mask"', '"deny"/"mask" values'),
    Port: ("a port number from 1 to 65535", "port numbers"),
    SearchDepth: ("a whole number from 1 to 20", "whole numbers from 1 to 20"),
    str: ("a string", "strings"),
    int: ("a whole number", "whole numbers"),
    bool: ("true or false", "true/false values"),
}

# srt settings keys that safebox knows but does not support, as dotted key →
# why, and what to do instead. An unknown key found here is reported with
# this reason instead of "unknown key" (policy/load.py). Empty today: every
# srt key is either supported or accepted (see PolicyFile).
SRT_KEYS_NOT_SUPPORTED: dict[str, str] = {
    # srt's structured and JWT masking, and its AWS re-signing: safebox masks
    # whole values only (docs/policy-reference.md, "Credentials").
    **{f"credentials.{kind}.{k}": "safebox masks the whole value only; remove the key, "
                                   "or use mode \"deny\""
       for kind in ("envVars", "files") for k in ("extract", "onExtractNoMatch", "decode", "maskClaims")},
    "credentials.files.maskDuplicates": "safebox masks the whole file only; remove the key",
    "credentials.awsPairs": "safebox does not re-sign AWS SigV4 requests; mask or deny the variables instead",
    "credentials.sigv4": "safebox does not re-sign AWS SigV4 requests; remove the key",
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
    allowUnixSockets: list[PolicyPath] | None = None
    allowAllUnixSockets: bool | None = None
    allowLocalBinding: bool | None = None
    # safebox addition: let allowed names resolve to loopback/private addresses.
    allowLocalDestinations: bool | None = None
    # srt: route through a proxy the caller runs. safebox always runs its own
    # filtering proxy; accepting these silently would bypass it, so they are refused.
    httpProxyPort: Port | None = None
    socksProxyPort: Port | None = None
    tlsTerminate: TlsTerminateSettings | None = None
    parentProxy: ParentProxySettings | None = None


class FilesystemSettings(_Strict):
    """``filesystem``: read everywhere except ``denyRead``; write only ``allowWrite``."""

    denyRead: list[PolicyPath] | None = None
    # srt's key. For now an entry may only re-allow a whole denyRead entry
    # (a default credential path a tool of yours needs); one beneath a
    # denied directory is refused (policy/load.py, merge).
    allowRead: list[PolicyPath] | None = None
    allowWrite: list[PolicyPath] | None = None
    denyWrite: list[PolicyPath] | None = None
    # safebox addition: let the command write the directories of the
    # caller's PATH that lie in a write root (read-only by default).
    allowWritePathDirs: bool | None = None


class EnvSettings(_Strict):
    """``env`` (safebox addition): credential variable scrubbing."""

    deny: list[EnvPattern] | None = None
    allow: list[EnvPattern] | None = None


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
    """``limits`` (safebox addition): per-sandbox resource limits (safebox/limits.py).

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


class PolicyFile(_Strict):
    """One policy file. Every key is optional; layers merge (later wins for
    scalars, lists concatenate)."""

    network: NetworkSettings | None = None
    filesystem: FilesystemSettings | None = None
    env: EnvSettings | None = None
    credentials: CredentialsSettings | None = None
    strict: bool | None = None
    trustProjectFiles: bool | None = None
    mandatoryDenySearchDepth: SearchDepth | None = None
    # safebox addition: toolchain presets (policy/presets.py), e.g. ["npm"].
    presets: list[PresetName] | None = None
    # safebox addition: processes, memory, /tmp size, wall time (limits.py).
    limits: LimitsSettings | None = None
    # srt keys that do not change enforcement in safebox; accepted so that an
    # srt settings file works unchanged (see policy-reference.md).
    ignoreViolations: dict[str, list[str]] | None = None
    allowPty: bool | None = None
    ripgrep: RipgrepSettings | None = None
    enableWeakerNestedSandbox: bool | None = None


def validate(data: Any) -> PolicyFile:
    """Validate a decoded document; raises pydantic.ValidationError."""
    return PolicyFile.model_validate(data)

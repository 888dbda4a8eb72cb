"""Pure: the command's environment: the caller's, minus credential variables,
plus the proxy variables when there is a proxy.
"""

from __future__ import annotations

from safebox._record import glob_match as fnmatchcase
from safebox.builder.resolved import Bridge

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

# Variables that steer safebox itself or the dynamic loader are not passed:
# LD_PRELOAD/LD_LIBRARY_PATH would be inherited by the helper's exec target
# anyway, but they must not reach socat or the helper before it restricts.
# The caller's proxy settings point at hosts the sandbox cannot reach (and
# NO_PROXY could send an allowed destination around our proxy). Whatever
# env.allow says.
_PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "FTP_PROXY", "GRPC_PROXY")
_ALWAYS_DROP = frozenset({"LD_PRELOAD", "LD_AUDIT", *_PROXY_VARS})
_ALWAYS_DROP_PREFIX = "SAFEBOX_"
#: Joins the names so that each ``*WORD*`` pattern is one C-level search of
#: all of them: never in a name (the kernel's environment is NAME=VALUE, and
#: a name is what comes before the first ``=``).
_SEP = "="


class _Globs:
    """Glob patterns sorted once by shape, so that a whole environment is
    tested with one C-level search per pattern instead of a Python loop over
    the patterns per name (:meth:`matching`): names are joined by ``_SEP``,
    and ``*MID*`` is a search for ``MID``, ``*SUFFIX`` for ``SUFFIX=``,
    ``PREFIX*`` for ``=PREFIX``; literals are a set intersection. Anything
    else (``?``, a ``*`` inside) is tried per name by ``glob_match``. (One
    name against 43 patterns one by one cost 0.5 ms of every start; ``re``
    is not imported on the start path.)"""

    def __init__(self, patterns: tuple[str, ...]) -> None:
        lits: set[str] = set()
        needles: list[tuple[str, int, int]] = []  # (text to find, separators before, after)
        other: list[str] = []
        for p in patterns:
            body = p.strip("*")
            if "?" in p or "*" in body or _SEP in p or not body:
                other.append(p)
            elif p == body:
                lits.add(p)
            elif p == "*" + body:
                needles.append((body + _SEP, 0, 1))
            elif p == body + "*":
                needles.append((_SEP + body, 1, 0))
            else:
                needles.append((body, 0, 0))
        self.lits, self.needles, self.other = frozenset(lits), tuple(needles), tuple(other)

    def matching(self, names: list[str]) -> set[str]:
        """The names of ``names`` that match a pattern. A name that holds
        ``_SEP`` is never one of a real environment's: then each name is
        tried alone."""
        hits = set(self.lits.intersection(names))
        text = _SEP + _SEP.join(names) + _SEP
        if text.count(_SEP) != len(names) + 1:
            return hits | {n for n in names if self.match(n)}
        for needle, lead, trail in self.needles:
            i = text.find(needle)
            while i != -1:
                start = text.rfind(_SEP, 0, i + lead) + 1
                end = text.find(_SEP, i + len(needle) - trail)
                hits.add(text[start:end])
                i = text.find(needle, end)
        if self.other:
            hits.update(n for n in names if any(fnmatchcase(n, p) for p in self.other))
        return hits

    def match(self, name: str) -> bool:
        """Whether one ``name`` matches a pattern."""
        if name in self.lits:
            return True
        for p in self.other:
            if fnmatchcase(name, p):
                return True
        padded = _SEP + name + _SEP if _SEP not in name else None
        for needle, lead, trail in self.needles:
            if padded is not None:
                if needle in padded:
                    return True
            elif fnmatchcase(name, ("" if lead else "*") + needle.strip(_SEP) + ("" if trail else "*")):
                return True
        return False


def url_with_userinfo(value: str) -> bool:
    """Whether ``value`` holds a URL whose authority carries userinfo:
    ``SCHEME://USERINFO@host`` anywhere in it (a list such as
    ``PIP_EXTRA_INDEX_URL="https://a https://u:tok@b"`` included), where a
    letter or digit precedes ``://`` and USERINFO is non-empty and holds no
    ``/``, ``?``, ``#`` or whitespace (the authority has not ended).

    Any userinfo, not only ``user:password``: in a Sentry DSN
    (``https://KEY@o0.ingest.sentry.io/1``) or ``https://TOKEN@github.com``
    the user part *is* the secret, and no shape tells a key from a user name
    (found in review, issue 11). On the start path, so linear: most values
    hold no ``@`` and cost one C-level ``in``; otherwise each authority is
    looked at once (they end at the next ``/``, so they do not overlap)."""
    if "@" not in value or "://" not in value:
        return False
    for tok in value.split():  # whitespace ends an authority
        i = tok.find("://")
        while i > 0:
            start = i + 3
            slash = tok.find("/", start)
            authority = tok[start:] if slash == -1 else tok[start:slash]
            at = authority.find("@")
            if at > 0 and tok[i - 1].isalnum() and "?" not in authority[:at] and "#" not in authority[:at]:
                return True
            if slash == -1:
                break
            i = tok.find("://", start)
    return False


def scrub(environ: Mapping[str, str], *, deny: tuple[str, ...], allow: tuple[str, ...]) -> tuple[dict[str, str], list[str]]:
    """(kept environment, names removed). A name is removed when it matches
    ``deny`` and is not a look-alike (``defaults.ENV_LOOKALIKES``, unless
    ``deny`` lists the name itself), or when its value holds a URL with
    userinfo (``url_with_userinfo``); ``allow`` exempts a name from both.
    The loader's, safebox's and the proxy variables are removed whatever
    ``allow`` says.

    On every start: each pattern costs one search of all the names joined,
    each name a few set lookups (``_Globs.matching``)."""
    from safebox.policy.defaults import ENV_LOOKALIKES

    kept: dict[str, str] = {}
    removed: list[str] = []
    # Names are matched upper-cased: `github_token` is as secret as
    # GITHUB_TOKEN (found in review).
    denied = _Globs(tuple(p.upper() for p in deny))
    keys = [k.upper() for k in environ]
    matched = denied.matching(keys)
    for (k, v), key in zip(environ.items(), keys, strict=True):
        if key in _ALWAYS_DROP or key.startswith(_ALWAYS_DROP_PREFIX):
            removed.append(k)
            continue
        if ((key in matched and (key not in ENV_LOOKALIKES or key in denied.lits))
                or ("@" in v and url_with_userinfo(v))):
            if not (allow and any(fnmatchcase(k, a) or fnmatchcase(key, a) for a in allow)):
                removed.append(k)
                continue
        kept[k] = v
    return kept, sorted(removed)


def proxy_env(bridges: tuple[Bridge, ...]) -> dict[str, str]:
    """HTTP_PROXY/HTTPS_PROXY/ALL_PROXY (and lower case) pointing at the bridges."""
    http = next((b for b in bridges if b.scheme == "http"), None)
    socks = next((b for b in bridges if b.scheme == "socks5h"), None)
    env: dict[str, str] = {}
    if http:
        url = f"http://127.0.0.1:{http.port}"
        for k in ("HTTP_PROXY", "HTTPS_PROXY"):
            env[k] = env[k.lower()] = url
    if socks:
        url = f"socks5h://127.0.0.1:{socks.port}"
        env["ALL_PROXY"] = env["all_proxy"] = url
        if http:
            # ControlMaster=no and ControlPath=none, as sandbox-runtime sets
            # them (command-line options beat ~/.ssh/config): a mux socket
            # from the user's ssh config that cannot be bound inside makes
            # ssh exit right after authenticating, and with ControlMaster=no
            # alone ssh still tries an existing master at the ControlPath,
            # a connection made outside the sandbox and its proxy.
            env["GIT_SSH_COMMAND"] = (
                "ssh -o ControlMaster=no -o ControlPath=none "
                f"-o ProxyCommand='socat - PROXY:127.0.0.1:%h:%p,proxyport={http.port}'"
            )
    if env:
        # Nothing may bypass the proxy: everything else is an empty namespace.
        env["NO_PROXY"] = env["no_proxy"] = ""
    return env


def build_env(environ: Mapping[str, str], *, deny: tuple[str, ...], allow: tuple[str, ...],
              bridges: tuple[Bridge, ...], private_tmp: bool, tmpdir: str | None = None) -> tuple[dict[str, str], list[str]]:
    """The command's environment and the names scrubbed from it."""
    env, removed = scrub(environ, deny=deny, allow=allow)
    env.update(proxy_env(bridges))
    if private_tmp:
        env["TMPDIR"] = "/tmp"
    elif tmpdir:
        env["TMPDIR"] = tmpdir
    env["SAFEBOX_SANDBOX"] = "1"
    return env, removed

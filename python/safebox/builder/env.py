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
_ALWAYS_DROP = ("LD_PRELOAD", "LD_AUDIT", "SAFEBOX_*")
_PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "FTP_PROXY", "GRPC_PROXY")


class _Globs:
    """Glob patterns sorted once by shape, so that a name is tested with a
    few C-level calls: literals in a set, ``*SUFFIX`` by ``str.endswith`` of a
    tuple, ``PREFIX*`` by ``startswith``, ``*MID*`` by ``in``; anything else
    by ``glob_match``. (One name against 43 patterns one by one cost 0.5 ms
    of every start.)"""

    def __init__(self, patterns: tuple[str, ...]) -> None:
        lits, suf, pre, mid, other = set(), [], [], [], []
        for p in patterns:
            body = p.strip("*")
            if "?" in p or "*" in body:
                other.append(p)
            elif p == body:
                lits.add(p)
            elif p == "*" + body:
                suf.append(body)
            elif p == body + "*":
                pre.append(body)
            else:
                mid.append(body)
        self.lits, self.suf, self.pre, self.mid, self.other = lits, tuple(suf), tuple(pre), tuple(mid), other

    def match(self, name: str) -> bool:
        if (name in self.lits or (bool(self.suf) and name.endswith(self.suf))
                or (bool(self.pre) and name.startswith(self.pre))):
            return True
        # Plain loops: a generator per name under any() cost a third of the scrub.
        for m in self.mid:
            if m in name:
                return True
        for p in self.other:
            if fnmatchcase(name, p):
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
    ``deny`` or its value holds a URL with userinfo (``url_with_userinfo``);
    ``allow`` exempts a name from both."""
    kept: dict[str, str] = {}
    removed: list[str] = []
    # Names are matched upper-cased: `github_token` is as secret as
    # GITHUB_TOKEN (found in review).
    denied = _Globs(tuple(p.upper() for p in deny))
    always = _Globs(_ALWAYS_DROP)
    for k, v in environ.items():
        key = k.upper()
        exempt = bool(allow) and any(fnmatchcase(k, a) or fnmatchcase(key, a) for a in allow)
        if always.match(key) or (not exempt and (denied.match(key) or ("@" in v and url_with_userinfo(v)))):
            removed.append(k)
            continue
        # The caller's proxy settings point at hosts the sandbox cannot reach
        # (and NO_PROXY could send an allowed destination around our proxy).
        if k.upper() in _PROXY_VARS:
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

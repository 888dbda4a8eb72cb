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
        return (name in self.lits or (bool(self.suf) and name.endswith(self.suf))
                or (bool(self.pre) and name.startswith(self.pre)) or any(m in name for m in self.mid)
                or any(fnmatchcase(name, p) for p in self.other))


def scrub(environ: Mapping[str, str], *, deny: tuple[str, ...], allow: tuple[str, ...]) -> tuple[dict[str, str], list[str]]:
    """(kept environment, names removed). ``allow`` exempts names from ``deny``."""
    kept: dict[str, str] = {}
    removed: list[str] = []
    # Names are matched upper-cased: `github_token` is as secret as
    # GITHUB_TOKEN (found in review).
    denied = _Globs(tuple(p.upper() for p in deny))
    always = _Globs(_ALWAYS_DROP)
    for k, v in environ.items():
        key = k.upper()
        exempt = bool(allow) and any(fnmatchcase(k, a) or fnmatchcase(key, a) for a in allow)
        if always.match(key) or (not exempt and denied.match(key)):
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
            env["GIT_SSH_COMMAND"] = (
            f"ssh -o ProxyCommand='socat - PROXY:127.0.0.1:%h:%p,proxyport={http.port}'"
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

"""Named toolchain presets, as data: a registry's domains and its tools' caches.

``--preset npm`` (or ``presets = ["npm"]`` in a policy file) adds the
preset's domains to ``network.allowedDomains`` and points each of its tools'
caches at a sandbox-private directory under safebox's state dir
(``sandbox-caches/PROJECT/PRESET/CACHE``, created on demand, 0700), through
the variable the tool reads. The host's own caches stay read-only inside: what
a sandboxed install writes never flows back into ``~/.npm`` or
``~/.cargo/registry``, where the host would run it later. ``PROJECT`` is the
work dir's identity (:func:`project_key`): one project's run never writes what
another project's run reads, configuration and executables included
(``CARGO_HOME/config.toml``, ``COREPACK_HOME``). docs/toolchains.md says why
it is done by variable rather than by mount, and why per project rather than
shared.

Standard library only (on the exec hot path); a test checks that
docs/toolchains.md names every preset, domain and variable here.
"""

from __future__ import annotations

from safebox._record import Frozen

#: Where the caches live, beneath safebox's state dir.
CACHE_SUBDIR = "sandbox-caches"

#: Characters of a work dir's name kept in its cache dir's name (for people
#: reading ``ls``; the digest alone decides).
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def project_key(work_dir: str) -> str:
    """The name of a project's cache dir: ``NAME-DIGEST``, with DIGEST the
    first 128 bits of the SHA-256 of the work dir's real path, and NAME its
    last component reduced to ``[A-Za-z0-9._-]`` (at most 32, for ``ls``).

    Two runs share their caches exactly when they run in the same work dir.
    A run in a subdirectory gets caches of its own: its write roots are
    narrower than the parent's, and what it wrote must not run in a run that
    can write more."""
    import os
    from hashlib import sha256

    real = os.path.realpath(work_dir)
    digest = sha256(real.encode("utf-8", "surrogateescape")).hexdigest()[:32]
    name = "".join(c if c in _NAME_CHARS else "_" for c in os.path.basename(real))[:32].lstrip(".")
    return f"{name or 'root'}-{digest}"


def project_cache_dir(state: str, work_dir: str) -> str:
    """``STATE/sandbox-caches/PROJECT``: every cache of one project's runs."""
    import os

    return os.path.join(state, CACHE_SUBDIR, project_key(work_dir))


class CacheVar(Frozen):
    """One environment variable a cache sets. ``value`` may hold ``{dir}``
    (the cache dir), ``{proxy_host}`` and ``{proxy_port}`` (the HTTP proxy as
    the command reaches it). ``append``: added after the caller's value (with
    a space) instead of replacing it."""

    name: str
    value: str
    append: bool = False


class Cache(Frozen):
    """A sandbox-private cache dir and the variables that point a tool at it."""

    name: str  # the leaf dir under sandbox-caches/PROJECT/PRESET/
    env: tuple[CacheVar, ...]
    #: Where the tool caches on the host (``~``-relative): kept read-only
    #: inside even beneath a write root, whenever this cache is in use.
    host_paths: tuple[str, ...] = ()


class Preset(Frozen):
    """A toolchain: what it must reach and where its caches go."""

    name: str
    summary: str
    domains: tuple[str, ...]
    caches: tuple[Cache, ...] = ()


def _set(name: str, value: str = "{dir}") -> CacheVar:
    return CacheVar(name=name, value=value)


PRESETS: dict[str, Preset] = {p.name: p for p in (
    Preset(
        name="npm",
        summary="npm, yarn, pnpm and corepack against the npm registry",
        domains=("registry.npmjs.org", "registry.yarnpkg.com", "repo.yarnpkg.com"),
        caches=(
            # npm reads npm_config_* before the project's and the user's .npmrc.
            Cache(name="npm", env=(_set("npm_config_cache"),), host_paths=("~/.npm",)),
            # yarn 1 and yarn 2+ both read YARN_CACHE_FOLDER.
            Cache(name="yarn", env=(_set("YARN_CACHE_FOLDER"),),
                  host_paths=("~/.cache/yarn", "~/.yarn/berry/cache")),
            # pnpm's store is $PNPM_HOME/store when PNPM_HOME is set (an
            # npm_config_store_dir would make npm warn on every run).
            Cache(name="pnpm", env=(_set("PNPM_HOME"),), host_paths=("~/.local/share/pnpm",)),
            Cache(name="corepack", env=(_set("COREPACK_HOME"),), host_paths=("~/.cache/node/corepack",)),
        ),
    ),
    Preset(
        name="pip",
        summary="pip and uv against PyPI",
        domains=("pypi.org", "files.pythonhosted.org"),
        caches=(
            Cache(name="pip", env=(_set("PIP_CACHE_DIR"),), host_paths=("~/.cache/pip",)),
            Cache(name="uv", env=(_set("UV_CACHE_DIR"),), host_paths=("~/.cache/uv",)),
        ),
    ),
    Preset(
        name="cargo",
        summary="cargo against crates.io",
        domains=("crates.io", "index.crates.io", "static.crates.io"),
        caches=(
            # CARGO_HOME holds the registry index, the downloaded crates and
            # their unpacked sources (build.rs runs from there).
            Cache(name="cargo-home", env=(_set("CARGO_HOME"),),
                  host_paths=("~/.cargo/registry", "~/.cargo/git")),
        ),
    ),
    Preset(
        name="go",
        summary="go modules through the Go module proxy and checksum database",
        domains=("proxy.golang.org", "sum.golang.org"),
        caches=(
            Cache(name="gomodcache", env=(_set("GOMODCACHE"),), host_paths=("~/go/pkg/mod",)),
            Cache(name="gocache", env=(_set("GOCACHE"),), host_paths=("~/.cache/go-build",)),
        ),
    ),
    Preset(
        name="maven",
        summary="Maven against Maven Central",
        domains=("repo.maven.apache.org", "repo1.maven.org"),
        caches=(
            # Maven reads neither a cache variable nor HTTP_PROXY: the local
            # repository and the proxy are Java system properties, which the
            # mvn script takes from MAVEN_OPTS. An empty nonProxyHosts: Java
            # would otherwise connect to localhost and 127.* directly.
            Cache(name="m2-repository", env=(CacheVar(
                name="MAVEN_OPTS", append=True,
                value="-Dmaven.repo.local={dir} -Dhttp.proxyHost={proxy_host} -Dhttp.proxyPort={proxy_port} "
                      "-Dhttps.proxyHost={proxy_host} -Dhttps.proxyPort={proxy_port} -Dhttp.nonProxyHosts="),),
                  host_paths=("~/.m2/repository",)),
        ),
    ),
    Preset(
        name="github",
        summary="git over HTTPS to github.com, its archives and its object hosts (no cache: git has none)",
        domains=("github.com", "codeload.github.com", "objects.githubusercontent.com",
                 "raw.githubusercontent.com", "media.githubusercontent.com", "github-cloud.githubusercontent.com"),
    ),
)}


def unknown(names: list[str] | tuple[str, ...]) -> str | None:
    """The first name that is not a preset, or None."""
    return next((n for n in names if n not in PRESETS), None)


def unknown_message(name: str) -> str:
    """``unknown preset 'nmp' (did you mean npm?); known: ...``."""
    import difflib

    near = difflib.get_close_matches(name, list(PRESETS), n=1)
    did = f" (did you mean {near[0]}?)" if near else ""
    return f"unknown preset {name!r}{did}; known: {', '.join(PRESETS)}"


def _covers(pattern: str, domain: str) -> bool:
    return pattern == domain or (pattern.startswith("*.") and domain.endswith(pattern[1:]))


def active(presets: tuple[str, ...], allowed_domains: tuple[str, ...]) -> tuple[str, ...]:
    """The presets whose caches a run uses: those named, and those whose
    registry (first domain) the policy allows anyway, so that the README's
    ``--allow-domain registry.npmjs.org -- npm install`` gets a writable
    cache that is not the host's. ``github`` has no cache."""
    out = [p for p in presets if p in PRESETS]
    for p in PRESETS.values():
        if p.caches and p.name not in out and any(_covers(a.lower(), p.domains[0]) for a in allowed_domains):
            out.append(p.name)
    return tuple(out)


def presets_for_host(host: str) -> tuple[str, ...]:
    """The presets that would allow ``host`` (for the refusal hint)."""
    return tuple(p.name for p in PRESETS.values() if any(_covers(d, host) for d in p.domains))


def describe(named: tuple[str, ...], used: tuple[str, ...], *, state: str, home: str,
             work_dir: str) -> dict[str, dict[str, object]]:
    """What each preset a run in ``work_dir`` would use expands to, for
    ``safebox policy show``: why it applies, its domains, and per cache the
    dir, the variables (proxy placeholders left as they are) and the host
    paths kept read-only."""
    import os

    out: dict[str, dict[str, object]] = {}
    project = project_cache_dir(state, work_dir)
    for name in dict.fromkeys((*named, *used)):
        p = PRESETS[name]
        caches = []
        for c in p.caches:
            d = os.path.join(project, name, c.name)
            caches.append({
                "dir": d,
                "env": {v.name: ("... " if v.append else "") + v.value.replace("{dir}", d) for v in c.env},
                "hostPaths": [os.path.join(home, h[2:]) if h.startswith("~/") else h for h in c.host_paths],
            })
        why = "named" if name in named else f"{p.domains[0]} is allowed"
        out[name] = {"why": why, "summary": p.summary, "domains": list(p.domains), "caches": caches}
    return out

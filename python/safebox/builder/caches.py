"""Sandbox-private tool caches for the presets a run uses (policy/presets.py).

Each cache is a leaf directory ``STATE/sandbox-caches/PRESET/CACHE``,
created on demand with mode 0700 and kept so across runs. The command gets
write access to the leaf only (a bind onto itself under bubblewrap, a
Landlock write rule), never to its parents: a command that could replace a
leaf with a symlink would have the next run bind the symlink's target
read-write (for example ``~/.ssh``). Before every run each leaf is checked to
be a real directory, ours, and not reached through a symlink; its mode is set
back to 0700 (the command, running as the same user, may have loosened it).

The tools are pointed at the leaves through their own variables, not by
mounting over their default paths: a mount point would have to exist in the
user's tree (``~/.npm`` is missing on a fresh CI runner, and safebox never
creates placeholders there), and the variables work the same without
bubblewrap. A tool that ignores its variable writes to its default path,
which is read-only inside: it fails, and nothing reaches the host's cache.
"""

from __future__ import annotations

import os
import stat

from safebox._record import Frozen
from safebox.errors import BuildError
from safebox.policy.presets import CACHE_SUBDIR, PRESETS


class CachePlan(Frozen):
    """The caches of one run: leaf dirs, the variables naming them, and the
    host's own cache paths to keep read-only."""

    presets: tuple[str, ...] = ()
    dirs: tuple[str, ...] = ()
    # (variable, value with {dir} filled in, append to the caller's value)
    env: tuple[tuple[str, str, bool], ...] = ()
    host_paths: tuple[str, ...] = ()


def _leaf(path: str, *, create: bool) -> None:
    """Make ``path`` a private directory of ours; refuse anything else."""
    if create:
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        except OSError as e:
            raise BuildError(f"cannot create the sandbox cache {path}: {e.strerror}") from None
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if not create:
            return  # --dry-run: it would be created
        raise
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise BuildError(f"sandbox cache {path} is not a directory owned by you; refusing to use it",
                         hint="remove it; safebox creates it again")
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(path, 0o700)


def prepare(presets: tuple[str, ...], *, state: str, home: str, create: bool = True) -> CachePlan:
    """Create (unless ``create`` is false: --dry-run) and check the cache
    leaves of ``presets``; the variables and host paths that go with them.
    Raises BuildError when a leaf is not a private directory of ours."""
    if not presets:
        return CachePlan()
    base = os.path.join(state, CACHE_SUBDIR)
    dirs: list[str] = []
    env: list[tuple[str, str, bool]] = []
    host: list[str] = []
    for name in presets:
        preset = PRESETS[name]
        if not preset.caches:
            continue
        parent = os.path.join(base, name)
        _leaf(base, create=create)
        _leaf(parent, create=create)
        for cache in preset.caches:
            d = os.path.join(parent, cache.name)
            _leaf(d, create=create)
            # The leaf and its two parents are no symlinks (checked above);
            # a symlinked ~/.cache above them is the user's own.
            d = os.path.realpath(d)
            dirs.append(d)
            env += [(v.name, v.value.replace("{dir}", d), v.append) for v in cache.env]
            host += [os.path.join(home, p[2:]) if p.startswith("~/") else p for p in cache.host_paths]
    return CachePlan(presets=presets, dirs=tuple(dirs), env=tuple(env), host_paths=tuple(host))


def cache_env(plan: CachePlan, environ: dict[str, str], *, proxy: tuple[str, int] | None) -> dict[str, str]:
    """The variables to set in the command's environment (``environ`` is the
    scrubbed caller's: appended variables keep its value first)."""
    out: dict[str, str] = {}
    for name, value, append in plan.env:
        if "{proxy_" in value:
            if proxy is None:
                continue  # no proxy (a --dry-run without network): nothing to point at
            value = value.replace("{proxy_host}", proxy[0]).replace("{proxy_port}", str(proxy[1]))
        if append:
            before = out.get(name, environ.get(name, ""))
            value = f"{before} {value}" if before else value
        out[name] = value
    return out

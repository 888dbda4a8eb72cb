"""Sandbox-private tool caches for the presets a run uses (policy/presets.py).

Each cache is a leaf directory ``STATE/sandbox-caches/PROJECT/PRESET/CACHE``,
created on demand with mode 0700 and kept so across runs. ``PROJECT`` names
the run's work dir (presets.project_key): a cache holds configuration and
executables the tool runs (``CARGO_HOME/config.toml`` and ``bin/``,
``COREPACK_HOME``'s package managers, pip's and go's build caches), so a
cache shared between projects would let one project's run decide what every
other project's runs execute, with their write roots and credentials. Nothing
is shared between work dirs (docs/toolchains.md says why not even the
content-addressed parts).

The command gets write access to the leaf only (a bind onto itself under
bubblewrap, a Landlock write rule), never to its parents: a command that
could replace a leaf with a symlink would have the next run bind the
symlink's target read-write (for example ``~/.ssh``). Before every run each
level is checked to be a real directory, ours, and not a symlink, opened one
component at a time beneath its parent without following links; its mode is
set back to 0700 (the command, running as the same user, may have loosened
it).

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
from safebox.policy.presets import CACHE_SUBDIR, PRESETS, project_cache_dir


class CachePlan(Frozen):
    """The caches of one run: leaf dirs, the variables naming them, and the
    host's own cache paths to keep read-only."""

    presets: tuple[str, ...] = ()
    dirs: tuple[str, ...] = ()
    # (variable, value with {dir} filled in, append to the caller's value)
    env: tuple[tuple[str, str, bool], ...] = ()
    host_paths: tuple[str, ...] = ()


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _refuse(path: str) -> BuildError:
    return BuildError(f"sandbox cache {path} is not a directory owned by you; refusing to use it",
                      hint="remove it; safebox creates it again")


def _level(parent: int | None, path: str, *, create: bool) -> int | None:
    """Open ``path`` (its last component beneath the ``parent`` fd, or the
    whole path when None) as a private directory of ours, creating it when
    ``create``; None when it is missing and not created (--dry-run). A
    symlink, a non-directory, another owner: BuildError. The mode goes back
    to 0700 through the fd, never through the path."""
    name = os.path.basename(path) if parent is not None else path
    if create:
        try:
            os.mkdir(name, 0o700, dir_fd=parent)
        except FileExistsError:
            pass
        except OSError as e:
            raise BuildError(f"cannot create the sandbox cache {path}: {e.strerror}") from None
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
    except FileNotFoundError:
        if not create:
            return None  # --dry-run: it would be created
        raise _refuse(path) from None  # removed between mkdir and open: someone else is at work here
    except OSError:  # ELOOP (a symlink), ENOTDIR, EACCES
        raise _refuse(path) from None
    st = os.fstat(fd)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        os.close(fd)
        raise _refuse(path)
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.fchmod(fd, 0o700)
    return fd


def _leaves(state: str, work_dir: str, preset: str, names: tuple[str, ...], *, create: bool) -> list[str]:
    """Check (and create) ``sandbox-caches``, the project's dir, the preset's
    and each leaf, every level opened beneath the one above; the leaves."""
    base = os.path.join(state, CACHE_SUBDIR)
    path = [base, project_cache_dir(state, work_dir)]
    path.append(os.path.join(path[-1], preset))
    fds: list[int] = []
    try:
        # safebox's state dir above is private_dir's (0700, ours); a
        # symlinked ~/.cache above it is the user's own.
        for p in path:
            fd = _level(fds[-1] if fds else None, p, create=create)
            if fd is None:
                return [os.path.join(path[-1], n) for n in names]
            fds.append(fd)
        out = []
        for n in names:
            leaf = os.path.join(path[-1], n)
            fd = _level(fds[-1], leaf, create=create)
            if fd is not None:
                os.close(fd)
            out.append(leaf)
        return out
    finally:
        for fd in fds:
            os.close(fd)


def prepare(presets: tuple[str, ...], *, state: str, home: str, work_dir: str, create: bool = True) -> CachePlan:
    """Create (unless ``create`` is false: --dry-run) and check the cache
    leaves of ``presets`` for a run in ``work_dir``; the variables and host
    paths that go with them. Raises BuildError when a level is not a
    private directory of ours."""
    if not presets:
        return CachePlan()
    dirs: list[str] = []
    env: list[tuple[str, str, bool]] = []
    host: list[str] = []
    for name in presets:
        preset = PRESETS[name]
        if not preset.caches:
            continue
        leaves = _leaves(state, work_dir, name, tuple(c.name for c in preset.caches), create=create)
        for cache, d in zip(preset.caches, leaves, strict=True):
            # Every level was checked above, no symlink among them; a
            # symlinked ~/.cache above the state dir is the user's own.
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

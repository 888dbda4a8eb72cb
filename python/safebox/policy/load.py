"""The policy of a run: every layer read, validated and merged (``load``,
the slow path: pydantic), or the same answer from the cache (``load_cached``,
the hot path), keyed by the bytes of every input so that a start imports
neither pydantic nor tomllib when nothing changed. The cache lives in
safebox's state directory, which the sandbox can never write
(builder/selfprotect.py keeps it so).

Layers, later wins for scalars and lists concatenate:
built-in defaults < user file < project file < ``--policy`` < command-line flags.

The steps, one module each: policy/sources.py (find and read the layers),
policy/validate.py (pydantic, and its errors in safebox's words),
policy/merge.py (layers into an EffectivePolicy), policy/document.py (an
EffectivePolicy as a policy file). Names other modules imported from here
are re-exported: the hot ones directly, the cold ones (pydantic's side) at
first use, so that importing this module stays cheap.
"""

from __future__ import annotations

import marshal
import os

from safebox import __version__
from safebox._record import sha256_hex
from safebox.policy.effective import EffectivePolicy
from safebox.policy.sources import (
    MAX_POLICY_BYTES,
    PROJECT_FILES,
    USER_FILES,
    Context,
    Flags,
    Layer,
    credential_env_layers,
    default_layer,
    discover_files,
    expand_path,
    flags_layer,
    is_run_added,
    parse_document,
    read_inputs,
    state_dir,
    user_config_dir,
)
from safebox.policy.sources import read_file as _read_file
from safebox.policy.sources import read_inputs as _read_inputs

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

__all__ = [
    "MAX_POLICY_BYTES", "POLICY_CACHE_MAX_BYTES", "POLICY_CACHE_MAX_ENTRIES", "PROJECT_FILES", "USER_FILES",
    "Context", "Flags", "Layer", "_read_file", "_read_inputs", "credential_env_layers",
    "default_layer", "discover_files", "evict_policy_cache", "expand_path", "flags_layer", "is_run_added", "load",
    "load_cached", "load_with_document", "parse_document", "read_inputs", "read_layers", "state_dir",
    "user_config_dir",
]

# Moved to the modules of pydantic's side; imported at first use (PEP 562).
_COLD = {"merge": "merge", "FLAG_FOR_KEY": "validate", "validate_layer": "validate", "_known_keys": "validate",
         "policy_document": "document"}


def __getattr__(name: str) -> object:
    module = _COLD.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f"safebox.policy.{module}"), name)


def load(ctx: Context, *, policy_files: Sequence[str], flags: Flags) -> EffectivePolicy:
    """The slow path: read, validate (pydantic) and merge every layer."""
    inputs = read_inputs(discover_files(ctx, policy_files=policy_files))
    return _load_from(inputs, ctx, flags)


def _load_from(inputs: list[tuple[str, bool, bytes]], ctx: Context, flags: Flags) -> EffectivePolicy:
    from safebox.policy.merge import merge

    return merge(_validated(inputs, ctx, flags), ctx)


def _validated(inputs: list[tuple[str, bool, bytes]], ctx: Context, flags: Flags) -> list[tuple[Layer, dict[str, Any]]]:
    """Every layer, in order, with its validated document: the ones each run
    adds itself (:data:`RUN_ADDED`), then the files, then the flags."""
    from safebox.policy.validate import validate_layer

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
    return _validated(read_inputs(discover_files(ctx, policy_files=policy_files)), ctx, flags)


def load_with_document(ctx: Context, *, policy_files: Sequence[str],
                       flags: Flags) -> tuple[EffectivePolicy, dict[str, Any]]:
    """``load``, and the policy the run runs under as one policy document:
    the user file, the project file, each ``--policy`` file and the flags,
    merged as files layer (policy/layers.py), for ``--learn`` to write with
    what it learned. Both come from the same bytes, read once."""
    from safebox.policy.layers import merge_documents
    from safebox.policy.merge import merge

    layers = _validated(read_inputs(discover_files(ctx, policy_files=policy_files)), ctx, flags)
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


_CACHE_FORMAT = 5  # 2: sources are (key, value, layer) records; 3: limits; 4: glob fields, allowGitConfig; 5: srt 0.0.83 network keys


def load_cached(ctx: Context, *, policy_files: Sequence[str], flags: Flags, cache_dir: str) -> EffectivePolicy:
    """``load``, memoised on disk by a digest of every input byte.

    A hit costs a few stats and reads and one ``marshal.loads``; a miss (or a
    cache file that is not ours and private) falls back to ``load``,
    rewrites it and evicts the least recently used entries beyond the bound
    (``evict_policy_cache``). marshal is not safe against hostile bytes,
    which is why the file must be ours, 0600, in a directory the sandbox can
    never write.
    """
    inputs = read_inputs(discover_files(ctx, policy_files=policy_files))
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

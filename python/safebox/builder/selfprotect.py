"""safebox's own files, kept out of the sandbox's reach: its installation,
the interpreter's import path, its state dir and caches. Code planted in
any of them would run at safebox's next start, outside any sandbox."""

from __future__ import annotations

import os

from safebox.builder.paths import at_or_beneath, is_under
from safebox.builder.regions import Regions
from safebox.builder.resolved import Layers
from safebox.errors import BuildError


def self_paths() -> tuple[str, ...]:
    """safebox's own installation: the package, the interpreter's prefix (venv)."""
    import sys

    import safebox

    pkg = os.path.dirname(os.path.realpath(safebox.__file__))
    out = {pkg, os.path.realpath(sys.prefix)}
    return tuple(sorted(out))


def python_prefixes() -> frozenset[str]:
    """The running interpreter's installation prefixes, resolved (a venv's
    and the base installation behind it)."""
    import sys

    return frozenset(os.path.realpath(p) for p in (sys.prefix, sys.exec_prefix, sys.base_prefix,
                                                    sys.base_exec_prefix))


def import_paths() -> tuple[str, ...]:
    """Where the running interpreter and its imports come from: the base
    installation behind a venv (pyenv under ``~``), every ``sys.path`` entry
    (a ``pip --user`` site in ``~/.local``, the entry script's directory)."""
    import sys

    out = {sys.base_prefix, sys.base_exec_prefix, sys.exec_prefix}
    # '' is the current directory (`python -c`, `python -m`).
    out.update(p if p else os.getcwd() for p in sys.path if not p or os.path.isabs(p))
    return tuple(sorted(out))


def import_dirs(import_paths: tuple[str, ...], write_roots: list[str], *, allow_roots: bool = False,
                 notes: list[str] | None = None) -> list[str]:
    """The directories of Python's import path, resolved; BuildError when one
    holds a write root (with ``allow_roots``, the API's harness started from
    its own repo: left writable, with a note; docs/api.md)."""
    imports: list[str] = []
    sorted_roots = sorted(write_roots)
    prefixes = python_prefixes()
    for p in import_paths:
        real = os.path.realpath(p)
        holds = at_or_beneath(sorted_roots, real)
        if holds and real in prefixes:
            # An installation prefix above the work dir (/usr above
            # /usr/src/app): outside its write roots it is read-only anyway.
            # What of it runs at safebox's next start (the interpreter,
            # libpython, the standard library) lives in bin/ and lib*/; the
            # sys.path entries are checked on their own.
            holds = [w for w in holds if w == real
                     or any(w == real + "/" + d or w.startswith(real + "/" + d + "/")
                            for d in ("bin", "lib", "lib64", "lib32", "libx32"))]
        if holds and allow_roots:
            if notes is not None:
                notes.append(f"Python's import path has {real}, which holds the write root {holds[0]}: "
                             "left writable (Sandbox(allow_import_roots=True), docs/api.md)")
            continue
        if holds:
            raise BuildError(f"Python's import path has {real}, which holds the write root {holds[0]}: "
                             "the command could plant code that safebox itself would run next time",
                             hint=_import_hint(real, holds[0], installation=real in prefixes))
        if os.path.isdir(real):
            imports.append(real)
    return imports


def _import_hint(entry: str, root: str, *, installation: bool) -> str:
    """What to change when Python's import path entry ``entry`` holds the
    write root ``root``, by where the entry comes from: PYTHONPATH, the
    directory ``python -m safebox`` was started in, or Python's own
    installation (a work dir such as /usr/lib, which PYTHONPATH has nothing
    to do with: issue 26)."""
    import sys

    named = [os.path.realpath(p) for p in os.environ.get("PYTHONPATH", "").split(":") if p]
    if entry in named:
        return f"unset PYTHONPATH (it names {entry}), or run from a directory outside it"
    if sys.path and sys.path[0] in ("", ".") or (sys.path and os.path.realpath(sys.path[0]) == entry
                                                 and entry == os.path.realpath(os.getcwd())):
        return "start safebox by its `safebox` script, not `python -m safebox` from the work tree"
    where = "Python's own installation" if installation else "a directory Python imports from"
    return (f"{entry} is {where}: run safebox from a directory outside it (the work dir is a write root), "
            f"or take {root} off filesystem.allowWrite")


def state_masks(state_dir: str, *, layers: Layers, write_roots: list[str]) -> tuple[str, ...]:
    """The masks that keep safebox's state out of the sandbox's reach, after
    refusing a write root at or inside the state dir (BuildError).

    The state dir (caches, run dirs, memories) decides the next run's
    sandbox. A write root above it keeps it read-only (self-protection in
    resolve.py, _kept); one at it or inside it could not be granted without handing
    the command that decision, so it is refused (issue 22: with a big
    policy a write root at the state dir made it writable, and a forged
    seccomp cache turned every later run's filter off).

    The caches (policies, limits, seccomp programs: STATE/cache) are the
    host's alone: under bubblewrap they are masked in every sandbox, an
    empty read-only tmpfs made after every write bind, so that no command
    can read or rewrite them whatever its write roots. The state dir's
    read-only bind is the first wall, this the second, and the reason
    bpf_cache may trust an entry's own digest. Without bubblewrap Landlock
    keeps the state dir out of every write grant (write_exclude)."""
    state = os.path.realpath(state_dir)
    for w in write_roots:
        if is_under(w, state):
            raise BuildError(f"filesystem.allowWrite {w} lies at or inside safebox's state dir {state}: its "
                             "caches and run dirs decide the next run's sandbox, so it is never writable "
                             "inside; remove the entry (or run from another directory if it is the work dir)",
                             hint="a write root above the state dir is fine: the state dir stays read-only "
                                  "inside it")
    cache = os.path.join(state, "cache")
    # Nothing cached yet: the state dir's read-only bind keeps it from being made.
    return (cache,) if layers is not Layers.HELPER_ONLY and os.path.isdir(cache) else ()


def refuse_unmasking(regions: Regions, masks: tuple[str, ...]) -> None:
    """BuildError when an ``allowRead`` entry re-allows one of safebox's own masks."""
    for m in masks:
        if regions.readable(m):
            raise BuildError(f"filesystem.allowRead re-allows safebox's cache dir {m}, which every sandbox "
                             "masks (its seccomp programs and policies decide the next run's sandbox)",
                             hint="remove the allowRead entry that holds it")

"""Where a run's policy comes from, in layer order: the built-in defaults,
the credential stores the environment moves, the user file, the project
file, each ``--policy`` file, the command-line flags. Finding and reading
the files (at most 1 MiB, JSON or TOML), and the types every later step
takes (``Context``, ``Layer``, ``Flags``). On the hot path of every start:
nothing here imports pydantic."""

from __future__ import annotations

import os

from safebox._record import Frozen
from safebox.errors import PolicyError
from safebox.policy import defaults

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any


USER_FILES = ("policy.toml", "policy.json")


PROJECT_FILES = (".safebox.toml", ".safebox.json")


MAX_POLICY_BYTES = 1 << 20


class Flags(Frozen):
    """Command-line additions (the last layer)."""

    allow_write: tuple[str, ...] = ()
    deny_read: tuple[str, ...] = ()
    allow_read: tuple[str, ...] = ()
    deny_write: tuple[str, ...] = ()
    allow_domains: tuple[str, ...] = ()
    deny_domains: tuple[str, ...] = ()
    strict: bool = False
    presets: tuple[str, ...] = ()
    # limits.*, as typed (validated with the policy files' rules).
    limit_processes: str | None = None
    limit_memory: str | None = None
    limit_tmp_size: str | None = None
    timeout: str | None = None
    # --allow-gpu: "all", or indices as typed ("0,2"); None: not given.
    allow_gpu: str | None = None


class Layer(Frozen):
    """One source of policy: its name (a path or 'defaults'/'flags') and raw document."""

    name: str
    data: dict[str, Any]
    project: bool = False


class Context(Frozen):
    """Where relative and ``~`` paths point, and the caller's variables that
    move credential stores (``defaults.credential_env``): their stores are
    read-denied like the default ones, and the policy cache is keyed on them."""

    cwd: str
    home: str
    credential_env: tuple[tuple[str, str], ...] = ()


def user_config_dir(home: str) -> str:
    """``$XDG_CONFIG_HOME/safebox`` or ``~/.config/safebox``."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    return os.path.join(base, "safebox")


def state_dir(home: str) -> str:
    """``$XDG_CACHE_HOME/safebox`` or ``~/.cache/safebox``: caches and run dirs."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")
    return os.path.join(base, "safebox")


def expand_path(p: str, ctx: Context) -> str:
    """``~``, ``~/x``, absolute, or relative to the working directory → normalised absolute."""
    if p == "~":
        p = ctx.home
    elif p.startswith("~/"):
        p = os.path.join(ctx.home, p[2:])
    elif not p.startswith("/"):
        p = os.path.join(ctx.cwd, p)
    # normpath, not realpath: symlinks are resolved deliberately in builder/realpaths.py.
    out = os.path.normpath(p)
    if out.startswith("//"):
        out = "/" + out.lstrip("/")
    return out


def read_file(path: str) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise PolicyError(f"{path}: cannot read policy file: {e.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        data = f.read(MAX_POLICY_BYTES + 1)
    if len(data) > MAX_POLICY_BYTES:
        raise PolicyError(f"{path}: policy file larger than {MAX_POLICY_BYTES} bytes")
    return data


def parse_document(path: str, raw: bytes) -> dict[str, Any]:
    """JSON or TOML by extension (``.json``/``.toml``); anything else is tried as JSON then TOML.

    An empty file (or only whitespace) is an empty policy whatever its
    format, as an empty TOML document already is: ``touch policy.json``
    must not be an error where ``touch policy.toml`` is not
    (docs/policy-reference.md)."""
    suffix = os.path.splitext(path)[1].lower()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise PolicyError(f"{path}: not UTF-8 ({e.reason} at byte {e.start})") from None
    if not text.strip():
        return {}
    errors = []
    for kind in (("json",) if suffix == ".json" else ("toml",) if suffix == ".toml" else ("json", "toml")):
        try:
            if kind == "json":
                import json

                doc = json.loads(text)
            else:
                import tomllib

                doc = tomllib.loads(text)
        except ValueError as e:  # JSONDecodeError and TOMLDecodeError are ValueErrors
            errors.append(f"invalid {kind.upper()}: {e}")
            continue
        if not isinstance(doc, dict):
            raise PolicyError(f"{path}: the top level must be an object/table, not {type(doc).__name__}")
        return doc
    raise PolicyError(f"{path}: " + "; ".join(errors))


FLAGS_LAYER = "command line"


def default_layer() -> Layer:
    """Built-in defaults: read everywhere but the credential list; write the working dir and /tmp."""
    return Layer(name="defaults", data={
        "filesystem": {"denyRead": list(defaults.CREDENTIAL_PATHS), "allowWrite": [".", "/tmp"]},
        "env": {"deny": list(defaults.ENV_DENY_PATTERNS)},
        "mandatoryDenySearchDepth": defaults.DEFAULT_SEARCH_DEPTH,
    })


def credential_env_layers(ctx: Context) -> list[Layer]:
    """The credential stores the caller's environment moves (``GNUPGHOME``,
    each file of ``KUBECONFIG``, ``$CARGO_HOME/credentials.toml``, ...), one
    layer per variable so that ``policy show`` names it. They follow the
    built-in defaults. These are literal paths from the environment, not
    policy text: they are not validated as policy entries (a ``[`` in a
    directory name is not a glob there)."""
    out = []
    for var, paths in defaults.credential_env_paths(ctx.credential_env):
        out.append(Layer(name=f"${var}", data={"filesystem": {"denyRead": [{"path": p, "literal": True}
                                                                            for p in paths]}}))
    return out


def flags_layer(flags: Flags) -> Layer:
    """Command-line flags as the last layer (keys.POLICY_FLAGS): a flag not
    given (an empty list, False, None) adds nothing."""
    from safebox.policy.keys import POLICY_FLAGS

    data: dict[str, Any] = {}
    for _, field, key in POLICY_FLAGS:
        value = getattr(flags, field)
        if value is None or value is False or value == ():
            continue
        if field == "allow_gpu":
            from safebox.policy.gpus import parse_selection

            select = parse_selection(value)
            value = True if select is None else list(select)
        elif isinstance(value, tuple):
            value = list(value)
        node = data
        for part in key[:-1]:
            node = node.setdefault(part, {})
        node[key[-1]] = value
    return Layer(name=FLAGS_LAYER, data=data)


def discover_files(ctx: Context, *, policy_files: Sequence[str]) -> list[tuple[str, bool]]:
    """The policy files that apply, in layer order, as (path, is_project):
    the user file, the project file, then each ``--policy`` file in the
    order given (``-p base.json -p learned.json``: the later one layers on
    top, as ``docker compose -f a -f b`` does)."""
    out: list[tuple[str, bool]] = []
    udir = user_config_dir(ctx.home)
    for name in USER_FILES:
        p = os.path.join(udir, name)
        if os.path.exists(p):
            out.append((p, False))
            break
    for name in PROJECT_FILES:
        p = os.path.join(ctx.cwd, name)
        if os.path.exists(p):
            out.append((p, True))
            break
    out += [(expand_path(f, ctx), False) for f in policy_files]
    return out


def read_inputs(files: list[tuple[str, bool]]) -> list[tuple[str, bool, bytes]]:
    out = []
    for path, project in files:
        try:
            raw = read_file(path)
        except FileNotFoundError:
            raise PolicyError(f"{path}: policy file not found") from None
        out.append((path, project, raw))
    return out


def is_run_added(layer: Layer) -> bool:
    """Whether every run adds ``layer`` itself: the built-in defaults and the
    credential stores the environment moves (``$GNUPGHOME``). They are not
    written into a learned policy: they would bake this host's paths into a
    file meant for another run, and the next run adds them anyway."""
    return layer.name == "defaults" or layer.name.startswith("$")

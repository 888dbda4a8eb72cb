#!/usr/bin/env python3
"""The environment scrub (builder/env.py ``scrub``), which runs on every start.

    PYTHONPATH=python .venv/bin/python benchmarks/bench_env_scrub.py [--against OLD_ENV_PY OLD_DEFAULTS_PY]

Times ``scrub`` with the built-in patterns on environments of 40, 140 and
1,040 variables (a desktop's, a CI runner's, and an outsized one), by CPU
time (``time.process_time``: the figure holds on a shared, loaded machine),
the minimum of 25 rounds of 50 calls. With ``--against``, the same for an
older ``builder/env.py`` and its ``policy/defaults.py`` (``git show
REV:python/safebox/builder/env.py > /tmp/old_env.py``), interleaved, for a
before/after figure. A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import time
import timeit
from types import ModuleType
from typing import Any


def _load(name: str, path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def environment(extra: int) -> dict[str, str]:
    """35 ordinary variables, ``extra`` CI-style ones, and a few secrets."""
    env = {f"ORDINARY_{i}": "/usr/local/bin:/usr/bin" for i in range(30)}
    env.update({f"CI_VAR_{i}": "value" for i in range(extra)})
    env.update({"GITHUB_TOKEN": "x", "TOKENIZERS_PARALLELISM": "false", "DB_PASS": "x",
                "XDG_RUNTIME_DIR": "/run/user/0", "PIP_INDEX_URL": "https://u:p@h/simple"})
    return env


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--against", nargs=2, metavar=("OLD_ENV_PY", "OLD_DEFAULTS_PY"))
    args = ap.parse_args()
    from safebox.builder import env as new_env
    from safebox.policy import defaults as new_defaults

    variants: list[tuple[str, Any, tuple[str, ...]]] = [("now", new_env, new_defaults.ENV_DENY_PATTERNS)]
    if args.against:
        old_env = _load("old_env", args.against[0])
        old_defaults = _load("old_defaults", args.against[1])
        variants.insert(0, ("before", old_env, old_defaults.ENV_DENY_PATTERNS))
    for extra in (5, 105, 1005):
        env = environment(extra)
        best = {name: float("inf") for name, _, _ in variants}
        for _ in range(25):
            for name, mod, pats in variants:
                t = timeit.Timer(lambda mod=mod, pats=pats, env=env: mod.scrub(env, deny=pats, allow=()),
                                 timer=time.process_time)
                best[name] = min(best[name], t.timeit(number=50) / 50)
        print(f"{len(env)} variables: " + "; ".join(
            f"{name} ({len(pats)} patterns) {best[name] * 1e6:.0f} us" for name, _, pats in variants))


if __name__ == "__main__":
    main()

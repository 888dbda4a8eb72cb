"""safebox: run an untrusted command inside bubblewrap + Landlock + seccomp.

Kept import-light on purpose: ``safebox exec`` starts on a hot path, and
``import safebox`` (which every ``safebox.x`` import runs) must stay cheap.
The public API (docs/api.md) is loaded on first use (PEP 562).
"""

from __future__ import annotations

__version__ = "0.1.0"

TYPE_CHECKING = False
if TYPE_CHECKING:
    from safebox.api import (
        DEVNULL,
        PIPE,
        STDOUT,
        AsyncPopen,
        CalledProcessError,
        CompletedRun,
        Event,
        HostCheck,
        Policy,
        Popen,
        Sandbox,
        TimeoutExpired,
        check_host,
    )
    from safebox.errors import PolicyError, SafeboxError
    from safebox.runtime.decisions import Decision, Request

#: name -> the module that defines it.
_API = {name: "safebox.api" for name in ("DEVNULL", "PIPE", "STDOUT", "AsyncPopen", "CalledProcessError",
                                         "CompletedRun", "Event",
                                         "HostCheck", "Policy", "Popen", "Sandbox", "TimeoutExpired", "check_host")}
_API.update({"PolicyError": "safebox.errors", "SafeboxError": "safebox.errors", "Decision": "safebox.runtime.decisions",
             "Request": "safebox.runtime.decisions"})


def __getattr__(name: str) -> object:
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'safebox' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once: later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_API])


__all__ = ["DEVNULL", "PIPE", "STDOUT", "AsyncPopen", "CalledProcessError", "CompletedRun", "Decision", "Event",
           "HostCheck", "Policy", "PolicyError", "Popen", "Request", "SafeboxError", "Sandbox", "TimeoutExpired", "__version__", "check_host"]

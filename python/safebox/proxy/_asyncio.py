"""asyncio, imported with ``ssl`` hidden when nothing has imported either yet.

The proxy's modules take asyncio from here (``from safebox.proxy._asyncio
import asyncio``), so whichever of them is imported first, asyncio comes
without OpenSSL.

The proxy never speaks TLS on its own (CONNECT tunnels carry the client's TLS
untouched; ``tlsTerminate`` imports ``ssl`` itself), but asyncio imports
``ssl`` eagerly, and initialising OpenSSL costs about 1.3 MiB of private
memory in every networked sandbox (docs/benchmarks.md). asyncio accepts
``ssl`` being absent (it then refuses TLS transports). ``ssl`` is unhidden
right after, so code that imports it later gets it as usual.
"""

import sys


def _import_asyncio_without_ssl() -> None:
    if "asyncio" in sys.modules or "ssl" in sys.modules:
        return
    sys.modules["ssl"] = None  # type: ignore[assignment]  # `import ssl` now raises ImportError
    try:
        import asyncio  # noqa: F401
    finally:
        del sys.modules["ssl"]


_import_asyncio_without_ssl()

import asyncio  # noqa: E402  (after the guard above, by design)

__all__ = ["asyncio"]

"""TLS for the proxy's own outbound connections (an ``https://`` parent
proxy, the upstream leg of ``network.tlsTerminate``), and giving asyncio its
``ssl`` module back.

The proxy package imports asyncio with ``ssl`` hidden (``proxy/__init__.py``:
OpenSSL costs every networked sandbox about 1.3 MiB); asyncio then keeps
``ssl = None`` in three of its modules and refuses TLS transports. A run that
needs TLS imports this module, which puts the real ``ssl`` back into them.
Nothing imports it otherwise (``tests/unit/test_tls_imports.py``).
"""

from __future__ import annotations

import re
import ssl
import sys

__all__ = ["CERT_BLOCK", "client_context", "ensure_asyncio_ssl", "pem_certificates"]

#: One PEM CERTIFICATE block: only these are taken from extraCaCertPaths files
#: (a combined cert+key PEM must not bring its key anywhere).
CERT_BLOCK = re.compile(rb"-----BEGIN CERTIFICATE-----\r?\n[A-Za-z0-9+/=\r\n]+?-----END CERTIFICATE-----")


def ensure_asyncio_ssl() -> None:
    """Give asyncio the ``ssl`` module if it was imported without it.

    ``asyncio.sslproto`` defines names from ``ssl`` at import time
    (``SSLAgainErrors``): it is executed again, in place, so that every
    module holding it sees the complete one.
    """
    import importlib

    for name in ("asyncio.base_events", "asyncio.selector_events"):
        mod = sys.modules.get(name)
        if mod is not None and getattr(mod, "ssl", ssl) is None:
            mod.ssl = ssl  # type: ignore[attr-defined]  # asyncio's module global, not in its stub
    sslproto = sys.modules.get("asyncio.sslproto")
    if sslproto is not None and getattr(sslproto, "ssl", ssl) is None:
        importlib.reload(sslproto)


ensure_asyncio_ssl()


def pem_certificates(data: bytes) -> list[bytes]:
    """The PEM ``CERTIFICATE`` blocks of ``data``, nothing else."""
    return CERT_BLOCK.findall(data)


def client_context(extra_pems: tuple[bytes, ...] | list[bytes]) -> ssl.SSLContext:
    """A verifying client context: the host's roots (OpenSSL's defaults, as
    curl and Python use them), plus ``extra_pems`` (certificates, PEM), TLS
    1.2 at least, HTTP/1.1 offered by ALPN."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if extra_pems:
        ctx.load_verify_locations(cadata=b"\n".join(extra_pems).decode("ascii"))
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx

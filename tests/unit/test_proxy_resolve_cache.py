"""The gate keeps a name's addresses for RESOLVE_TTL seconds (proxy/upstream.py):
fewer executor hops per connection, and every use still checked."""

from __future__ import annotations

import asyncio
import ipaddress
import socket

import pytest

from safebox.proxy import upstream
from safebox.proxy.rules import NetworkRules
from safebox.proxy.upstream import Gate, Refused, UpstreamError


def _gate(own: set[str]) -> tuple[Gate, list[str]]:
    rules = NetworkRules.from_policy(("a.test", "bad.test"),
                                     own=lambda: frozenset(ipaddress.ip_address(a) for a in own))
    return Gate(rules), []


def test_an_answer_is_reused_within_the_ttl_checked_at_each_use_and_failures_are_not_kept(
        monkeypatch: pytest.MonkeyPatch) -> None:
    own: set[str] = set()
    gate, asked = _gate(own)
    clock = [100.0]

    async def main() -> None:
        loop = asyncio.get_running_loop()

        async def getaddrinfo(name: str, port: int, **_kw: object) -> list[tuple[object, ...]]:
            asked.append(name)
            if name == "bad.test":
                raise socket.gaierror(-2, "Name or service not known")
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("11.22.33.44", port))]

        monkeypatch.setattr(loop, "getaddrinfo", getaddrinfo)
        monkeypatch.setattr(loop, "time", lambda: clock[0])
        assert (await gate.check("a.test", 80, "connect"))[1] == [ipaddress.ip_address("11.22.33.44")]
        await gate.check("a.test", 443, "connect")
        assert asked == ["a.test"]  # the second connection asked nobody
        # The cached answer is checked again: the address became this host's.
        own.add("11.22.33.44")
        with pytest.raises(Refused):
            await gate.check("a.test", 80, "connect")
        clock[0] += upstream.RESOLVE_TTL + 0.1
        own.clear()
        await gate.check("a.test", 80, "connect")
        assert asked == ["a.test", "a.test"]  # expired: asked again
        for _ in range(2):
            with pytest.raises(UpstreamError):
                await gate.check("bad.test", 80, "connect")
        assert asked.count("bad.test") == 2  # a failure is not kept

    asyncio.run(main())


def test_the_cache_holds_at_most_resolve_entries_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(upstream, "RESOLVE_ENTRIES", 3)
    gate, _ = _gate(set())

    async def main() -> None:
        loop = asyncio.get_running_loop()

        async def getaddrinfo(_name: str, port: int, **_kw: object) -> list[tuple[object, ...]]:
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("11.22.33.44", port))]

        monkeypatch.setattr(loop, "getaddrinfo", getaddrinfo)
        for i in range(10):
            await gate._resolve(f"n{i}.test", 80)
        assert list(gate._answers) == ["n7.test", "n8.test", "n9.test"]

    asyncio.run(main())

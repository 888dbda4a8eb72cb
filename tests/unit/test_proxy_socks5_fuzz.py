"""The SOCKS5 front end on arbitrary client bytes (hypothesis, bounded).

Whatever a client sends, ``socks5.handle`` either answers with a
well-formed SOCKS5 message or says nothing, and never raises: the proxy keeps
serving. The gate here refuses every name and every address, so nothing is
ever resolved or connected — no packet leaves the process.
"""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from safebox.proxy import socks5
from safebox.proxy.rules import NetworkRules
from safebox.proxy.upstream import Gate


class _Writer:
    """What ``handle`` uses of a StreamWriter, recording every write."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.chunks.append(bytes(data))

    async def drain(self) -> None:
        return None


def _serve(data: bytes) -> list[bytes]:
    async def run() -> list[bytes]:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        writer = _Writer()
        gate = Gate(NetworkRules.from_policy((), (), allow_local_destinations=False))
        await socks5.handle(reader, writer, gate)  # type: ignore[arg-type]
        return writer.chunks

    return asyncio.run(run())


def _well_formed(chunk: bytes) -> bool:
    if chunk in (b"\x05\x00", b"\x05\xff"):  # method selection
        return True
    # A reply: VER, REP, RSV, ATYP=1, 4 address bytes, 2 port bytes.
    return len(chunk) == 10 and chunk[0] == 5 and chunk[2] == 0 and chunk[3] == 1


@given(st.binary(max_size=300))
@settings(max_examples=400, deadline=None)
def test_any_bytes_get_a_well_formed_answer_or_none(data: bytes) -> None:
    assert all(_well_formed(c) for c in _serve(data))


_greeting = st.just(b"\x05\x01\x00")
_request = st.builds(
    lambda cmd, atyp, addr, port: bytes([5, cmd, 0, atyp]) + addr + port,
    st.integers(0, 4), st.sampled_from([1, 3, 4, 9]),
    st.one_of(st.binary(min_size=4, max_size=4), st.binary(min_size=16, max_size=16),
              st.binary(max_size=40).map(lambda b: bytes([len(b)]) + b)),
    st.binary(min_size=2, max_size=2))


@given(_greeting, _request)
@settings(max_examples=400, deadline=None)
def test_plausible_requests_are_refused_with_a_socks_reply_never_connected(greeting: bytes, request: bytes) -> None:
    chunks = _serve(greeting + request)
    assert chunks and chunks[0] == b"\x05\x00"
    assert all(_well_formed(c) for c in chunks)
    # Nothing is allowed: a complete CONNECT ends in 0x02 (not allowed), 0x07
    # (command) or 0x08 (address type); never 0x00 (succeeded).
    assert all(c[1] != 0 for c in chunks[1:])

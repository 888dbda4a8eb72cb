"""proxy/rawconn.py's RawConn keeps StreamReader's contract (the front ends
run on either): what is read past a request stays for the relay, a head
over the limit and a truncated one raise what StreamReader raises, and a
write the socket cannot take now is kept, never lost. On a real socketpair."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest

from safebox.proxy.rawconn import RawConn

T = TypeVar("T")


def _run(body: Callable[[RawConn, socket.socket], Awaitable[T]], limit: int = 64) -> T:
    async def main() -> T:
        a, b = socket.socketpair()
        a.setblocking(False)
        with a, b:
            return await body(RawConn(a, asyncio.get_running_loop(), limit), b)

    return asyncio.run(main())


def test_readuntil_returns_through_the_separator_and_keeps_the_rest_for_the_relay() -> None:
    async def body(conn: RawConn, peer: socket.socket) -> tuple[bytes, tuple[bytes, bool, bytes]]:
        peer.sendall(b"CONNECT a:1 HTTP/1.1\r\n")
        asyncio.get_running_loop().call_later(0.05, peer.sendall, b"\r\n\x16\x03\x01hello")  # arrives later
        head = await conn.readuntil(b"\r\n\r\n")
        return head, conn.take()

    head, (rest, eof, unsent) = _run(body)
    assert head == b"CONNECT a:1 HTTP/1.1\r\n\r\n"
    assert (rest, eof, unsent) == (b"\x16\x03\x01hello", False, b"")


def test_a_head_over_the_limit_raises_limit_overrun_and_a_truncated_one_incomplete_read() -> None:
    async def over(conn: RawConn, peer: socket.socket) -> None:
        peer.sendall(b"GET " + b"a" * 100)
        await conn.readuntil(b"\r\n\r\n")

    async def truncated(conn: RawConn, peer: socket.socket) -> bytes:
        peer.sendall(b"GET http://a/ HTTP/1.1\r\nX: 1")
        peer.shutdown(socket.SHUT_WR)
        try:
            await conn.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            return exc.partial
        raise AssertionError("no IncompleteReadError")

    with pytest.raises(asyncio.LimitOverrunError):
        _run(over)
    assert _run(truncated) == b"GET http://a/ HTTP/1.1\r\nX: 1"


def test_readexactly_waits_for_every_byte_and_raises_at_end_of_file() -> None:
    async def body(conn: RawConn, peer: socket.socket) -> bytes:
        loop = asyncio.get_running_loop()
        peer.sendall(b"\x05")
        loop.call_later(0.05, peer.sendall, b"\x01\x00")
        got = await conn.readexactly(3)
        peer.shutdown(socket.SHUT_WR)
        with pytest.raises(asyncio.IncompleteReadError):
            await conn.readexactly(1)
        return got

    assert _run(body) == b"\x05\x01\x00"


def test_a_write_the_socket_cannot_take_now_is_kept_and_sent_by_drain() -> None:
    async def body(conn: RawConn, peer: socket.socket) -> bool:
        big = b"x" * (8 << 20)  # more than a socketpair's buffers
        conn.write(big)
        kept = bool(conn.pending)
        received = bytearray()
        loop = asyncio.get_running_loop()
        peer.setblocking(False)

        async def reader() -> None:
            while len(received) < len(big):
                received.extend(await loop.sock_recv(peer, 1 << 20))

        await asyncio.gather(conn.drain(), reader())
        return kept and bytes(received) == big and not conn.pending

    assert _run(body)


def test_an_acceptor_out_of_descriptors_pauses_then_serves_the_waiting_client(monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    import safebox.proxy.rawconn as rawconn

    monkeypatch.setattr(rawconn, "ACCEPT_PAUSE", 0.1)

    class Flaky(socket.socket):
        failures = 1

        def accept(self) -> tuple[socket.socket, object]:
            if Flaky.failures:
                Flaky.failures -= 1
                raise OSError(errno.EMFILE, "Too many open files")
            return super().accept()

    async def main() -> tuple[bytes, float]:
        loop = asyncio.get_running_loop()
        listener = Flaky(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        served: asyncio.Future[tuple[bytes, float]] = loop.create_future()

        async def serve(sock: socket.socket) -> None:
            with sock:
                served.set_result((await loop.sock_recv(sock, 10), loop.time()))

        acceptor = rawconn.Acceptor(listener, serve)
        start = loop.time()
        client = socket.create_connection(listener.getsockname())
        client.sendall(b"hi")
        try:
            data, when = await asyncio.wait_for(served, 5)
        finally:
            client.close()
            acceptor.close()
        return data, when - start

    data, after = asyncio.run(main())
    assert data == b"hi"
    assert after >= 0.1  # not spinning on the readable listener meanwhile: it waited the pause


def test_a_relay_out_of_descriptors_when_it_turns_to_splicing_loses_no_byte() -> None:
    """A direction's first full read opens its pipe (relay.py, READ_FIRST).
    When the proxy is out of descriptors then (a sandboxed command can hold
    many proxy connections open), the bytes that read took still go on and
    the direction stays on plain reads: before, they were dropped, 64 KiB per
    read, and the upstream saw a clean end of file after nothing."""
    import os
    import resource

    from safebox.proxy.relay import Relay

    async def main() -> tuple[int, bool]:
        loop = asyncio.get_running_loop()
        client, client_peer = socket.socketpair()
        upstream, upstream_peer = socket.socketpair()
        for s in (client, upstream, client_peer, upstream_peer):
            s.setblocking(False)
        relay = Relay()
        relay.splice(client, upstream)
        data = os.urandom(1 << 20)
        received = bytearray()

        async def send() -> None:
            await loop.sock_sendall(client_peer, data)
            client_peer.shutdown(socket.SHUT_WR)

        async def receive() -> None:
            while chunk := await loop.sock_recv(upstream_peer, 1 << 20):
                received.extend(chunk)

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        lowest_free = os.dup(0)
        os.close(lowest_free)
        resource.setrlimit(resource.RLIMIT_NOFILE, (lowest_free, hard))  # no new descriptor from here on
        try:
            with pytest.raises(OSError) as no_fd:
                os.pipe2(os.O_CLOEXEC)
            await asyncio.wait_for(asyncio.gather(send(), receive()), 20)
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
            relay.abort()
            client_peer.close()
            upstream_peer.close()
        return no_fd.value.errno, bytes(received) == data

    import errno

    assert asyncio.run(main()) == (errno.EMFILE, True)


def test_a_connect_the_proxy_has_no_descriptor_for_is_answered_502_with_the_reason(tmp_path: Path) -> None:
    """The raw path's upstream socket is made per address inside the dial's
    error handling (as the stream path's create_connection is): out of
    descriptors, the client gets a 502 naming the error, not a closed
    connection with no word (and, with IPv6 off, an IPv4 address after an
    IPv6 one is still tried). On the real proxy, its process out of
    descriptors once the client is accepted."""
    import os
    import resource
    import time

    from safebox.proxy import ProxyConfig, ProxyServer

    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    with ProxyServer(ProxyConfig(("127.0.0.1",), allow_local_destinations=True), run_dir=run_dir, tcp=True) as proxy:
        client = socket.create_connection(("127.0.0.1", proxy.http_port), timeout=10)
        with client:
            deadline = time.monotonic() + 5
            while proxy.active_connections < 1 and time.monotonic() < deadline:
                time.sleep(0.01)  # accepted, waiting for the request
            soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            lowest_free = os.dup(0)
            os.close(lowest_free)
            resource.setrlimit(resource.RLIMIT_NOFILE, (lowest_free, hard))
            try:
                client.sendall(b"CONNECT 127.0.0.1:9 HTTP/1.1\r\n\r\n")
                answer = b""
                while chunk := client.recv(4096):
                    answer += chunk
            finally:
                resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert answer.startswith(b"HTTP/1.1 502 Bad Gateway\r\n"), answer
    assert answer.endswith(b"safebox: upstream 127.0.0.1 port 9: connecting to 127.0.0.1 port 9: "
                           b"Too many open files\n"), answer

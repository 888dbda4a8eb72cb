"""Loopback servers for the network tests: an origin that records what
reached it (HTTP, and HTTPS under a test CA of its own), and a parent proxy
that records what safebox's proxy sent it. Everything listens on loopback
(or on an address of a network namespace the test made) and connects only
to 127.0.0.1.

This module is the tests' one HTTP server: a test needing another answer
gives ``start_origin`` a ``reply``, it does not hand-roll a server. It is
importable without the test environment (only the standard library at the
top), so a script run in a network namespace of its own uses it too."""

from __future__ import annotations

import base64
import datetime
import http.server
import ipaddress
import os
import socket
import socketserver
import ssl
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Seen:
    """One request as the origin received it."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass(frozen=True)
class Reply:
    """What the origin answers one request with (``start_origin(reply=...)``).
    ``Content-Length`` is always sent; ``early``, when not empty, is the
    header of a 103 Early Hints head sent before the final one."""

    body: bytes
    status: int = 200
    headers: tuple[tuple[str, str], ...] = ()
    early: tuple[tuple[str, str], ...] = ()


class _Origin(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: OriginServer

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    break
                body += self.rfile.read(size)
                self.rfile.readline()
        else:
            body = self.rfile.read(length) if length else b""
        seen = Seen(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
        self.server.seen.append(seen)
        out = self.server.answer(seen)
        if out.early:
            self.send_response_only(103)
            for name, value in out.early:
                self.send_header(name, value)
            self.end_headers()
        self.send_response(out.status)
        self.send_header("Content-Type", "text/plain")
        for name, value in out.headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(out.body)))
        self.end_headers()
        self.wfile.write(out.body)

    do_GET = do_POST = do_PUT = _serve  # noqa: N815

    def log_message(self, *args: object) -> None:
        pass


class OriginServer(http.server.ThreadingHTTPServer):
    """A running origin (``start_origin``): ``.port``, and ``.seen``, every request it got, in order."""

    daemon_threads = True
    seen: list[Seen]
    body: bytes | None = None
    reply: Callable[[Seen], Reply] | None = None

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def answer(self, seen: Seen) -> Reply:
        if self.reply is not None:
            return self.reply(seen)
        if self.body is not None:
            return Reply(self.body)
        if seen.path.startswith("/bytes/"):
            return Reply(pattern(int(seen.path.split("/")[2])))
        return Reply(f"origin-{self.port} {seen.method} {seen.path}".encode())


class _OriginServer6(OriginServer):
    address_family = socket.AF_INET6


def files_below(root: Path) -> Callable[[Seen], Reply]:
    """A ``reply`` serving the files below ``root`` by their path (a static
    package index); anything else, a directory or a path leading out, is a 404."""
    top = root.resolve()

    def reply(seen: Seen) -> Reply:
        path = (top / seen.path.split("?", 1)[0].lstrip("/")).resolve()
        if path.is_relative_to(top) and path.is_file():
            return Reply(path.read_bytes())
        return Reply(b"not found\n", status=404)

    return reply


def pattern(n: int) -> bytes:
    """``n`` bytes of a fixed, non-repeating-looking pattern (for integrity checks)."""
    block = bytes((i * 131 + (i >> 8) * 7) & 0xFF for i in range(65536))
    return (block * (n // len(block) + 1))[:n]


def start_origin(*, tls: ssl.SSLContext | None = None, body: bytes | None = None,
                 reply: Callable[[Seen], Reply] | None = None, host: str = "127.0.0.1",
                 port: int = 0) -> OriginServer:
    """An HTTP/1.1 (or, with ``tls``, HTTPS) origin on ``host``:``port`` (an
    IPv6 address when ``host`` has a colon; a free port by default) that
    records every request in ``.seen``. Each request is answered by
    ``reply`` when given, else ``body`` (status 200), else a line naming the
    origin and the request (``/bytes/N``: N bytes of ``pattern``).
    The one test HTTP server: stop it with ``stop_origin``, or use ``serving``."""
    cls = _OriginServer6 if ":" in host else OriginServer
    srv = cls((host, port), _Origin)
    srv.seen = []
    srv.body = body
    srv.reply = reply
    if tls is not None:
        srv.socket = tls.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def stop_origin(srv: OriginServer) -> None:
    """Stop serving and close the listener."""
    srv.shutdown()
    srv.server_close()


@contextmanager
def serving(*, tls: ssl.SSLContext | None = None, body: bytes | None = None,
            reply: Callable[[Seen], Reply] | None = None, host: str = "127.0.0.1",
            port: int = 0) -> Iterator[OriginServer]:
    """``start_origin`` for a ``with`` block (or a fixture's ``yield``): the
    listener is closed when the block is left, however it is left."""
    srv = start_origin(tls=tls, body=body, reply=reply, host=host, port=port)
    try:
        yield srv
    finally:
        stop_origin(srv)


@contextmanager
def abstract_unix_listener() -> Iterator[str]:
    """A listening abstract unix socket (its name lives in this network
    namespace only), closed when the block is left; yields its name."""
    name = f"safebox-test-{os.getpid()}-{os.urandom(4).hex()}"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.bind("\0" + name)
        s.listen(64)
        yield name
    finally:
        s.close()


# --------------------------------------------------------------- a test CA


@dataclass
class LocalCA:
    """A CA of the tests' own (never the host's), and leaf files it signed."""

    dir: Path
    cert_pem: bytes
    key: object = field(repr=False)
    cert: object = field(repr=False)

    @property
    def cert_path(self) -> Path:
        return self.dir / "test-ca.pem"

    def server_context(self, names: list[str]) -> ssl.SSLContext:
        """A server context with a leaf for ``names`` (DNS names or IPs) signed by this CA."""
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec

        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        sans: list[x509.GeneralName] = []
        for n in names:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(n)))
            except ValueError:
                sans.append(x509.DNSName(n))
        cert = (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, names[0])]))
                .issuer_name(self.cert.subject)  # type: ignore[attr-defined]
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(hours=1))
                .not_valid_after(now + datetime.timedelta(days=2))
                .add_extension(x509.SubjectAlternativeName(sans), critical=False)
                .add_extension(x509.ExtendedKeyUsage([x509.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
                .sign(self.key, hashes.SHA256()))  # type: ignore[arg-type]
        leaf = self.dir / f"leaf-{names[0]}.pem"
        leaf.write_bytes(cert.public_bytes(serialization.Encoding.PEM) + key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(leaf)
        return ctx


def make_test_ca(directory: Path, *, name: str = "safebox test CA") -> LocalCA:
    """A fresh CA in ``directory`` (its certificate at ``test-ca.pem``)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                         crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    directory.mkdir(parents=True, exist_ok=True)
    pem = cert.public_bytes(serialization.Encoding.PEM)
    ca = LocalCA(directory, pem, key, cert)
    ca.cert_path.write_bytes(pem)
    return ca


def write_key(ca: LocalCA, path: Path) -> Path:
    """The CA's private key, PEM, at ``path`` (for caKeyPath tests)."""
    from cryptography.hazmat.primitives import serialization

    path.write_bytes(ca.key.private_bytes(serialization.Encoding.PEM,  # type: ignore[attr-defined]
                                          serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    path.chmod(0o600)
    return path


# --------------------------------------------------------------- a parent proxy


class _ParentHandler(socketserver.BaseRequestHandler):
    server: ParentProxy

    def handle(self) -> None:
        sock: socket.socket = self.request
        sock.settimeout(30)
        if self.server.tls is None:
            self._handle(sock)
            return
        try:
            tls = self.server.tls.wrap_socket(sock, server_side=True)
        except (ssl.SSLError, OSError):
            return  # the client refused our certificate
        with tls:
            self._handle(tls)

    def _handle(self, sock: socket.socket) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(4096)
            if not chunk:
                return
            head += chunk
        raw, _, rest = head.partition(b"\r\n\r\n")
        lines = raw.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
        self.server.requests.append((lines[0], headers))
        if self.server.auth and headers.get("proxy-authorization") != self.server.auth:
            sock.sendall(b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n")
            return
        up = socket.create_connection(("127.0.0.1", self.server.origin_port), timeout=30)
        with up:
            if lines[0].startswith("CONNECT "):
                sock.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                if rest:
                    up.sendall(rest)
            else:
                # Absolute form to origin form, as a real proxy forwards it.
                method, target, version = lines[0].split(" ", 2)
                path = "/" + target.split("://", 1)[1].split("/", 1)[1] if target.count("/") > 2 else "/"
                fwd = [f"{method} {path} {version}"] + [ln for ln in lines[1:]
                                                         if not ln.lower().startswith("proxy-")]
                up.sendall(("\r\n".join(fwd) + "\r\n\r\n").encode("latin-1") + rest)
            _pump(sock, up)


def _pump(a: socket.socket, b: socket.socket) -> None:
    def one(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    t = threading.Thread(target=one, args=(b, a), daemon=True)
    t.start()
    one(a, b)
    t.join(30)


class ParentProxy(socketserver.ThreadingTCPServer):
    """A forward proxy on 127.0.0.1 that sends every request, whatever its
    target, to 127.0.0.1:``origin_port``, and records the request lines and
    headers it got. With ``auth`` it answers 407 to any other
    ``Proxy-Authorization``."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, origin_port: int, *, user: str | None = None, password: str | None = None,
                 tls: ssl.SSLContext | None = None) -> None:
        super().__init__(("127.0.0.1", 0), _ParentHandler)
        self.origin_port = origin_port
        self.tls = tls
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.auth = ("Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()) if user else None
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def port(self) -> int:
        return int(self.server_address[1])

"""``network.tlsTerminate`` through the real ``safebox exec``: sandboxed curl
and Python against an HTTPS origin on 127.0.0.1 whose certificate comes from
a test CA of the tests' own, given to safebox as ``extraCaCertPaths`` (the
upstream trust). Every claim has its control: the same request without
termination sees the origin's own certificate; without the test CA the
upstream does not verify. Loopback only (192.0.2.10 only as a name the
parent proxy maps to loopback)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from netservers import LocalCA, OriginServer, ParentProxy, make_test_ca, pattern, serving, write_key
from sbx import BOTH, HELPER_ONLY, FakeHome, token

pytestmark = pytest.mark.needs_bwrap

TRUST_VARIABLES = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO", "PIP_CERT",
                   "CARGO_HTTP_CAINFO", "NODE_EXTRA_CA_CERTS", "AWS_CA_BUNDLE", "NIX_SSL_CERT_FILE",
                   "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH", "DENO_CERT")

# Python inside the sandbox: CONNECT through safebox's proxy, TLS with the
# default trust (SSL_CERT_FILE), print the issuer of the certificate seen.
ISSUER = r"""
import socket, ssl, sys
host, port, sni = sys.argv[1], int(sys.argv[2]), sys.argv[3]
s = socket.create_connection(("127.0.0.1", 3128))
s.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
head = b""
while b"\r\n\r\n" not in head:
    head += s.recv(1)
ctx = ssl.create_default_context()
if sys.argv[4:] == ["noverify"]:
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
try:
    t = ctx.wrap_socket(s, server_hostname=sni)
except ssl.SSLError as e:
    print("handshake failed:", e.reason)
    raise SystemExit(0)
cert = t.getpeercert()
print(dict(x[0] for x in cert["issuer"])["commonName"] if cert else "no verification")
"""


@pytest.fixture(scope="module")
def ca(scratch: Path) -> LocalCA:
    return make_test_ca(scratch / f"tls-{token()}")


@pytest.fixture(scope="module")
def origin(ca: LocalCA) -> Iterator[OriginServer]:
    with serving(tls=ca.server_context(["localhost", "127.0.0.1", "192.0.2.10"])) as srv:
        yield srv


@pytest.fixture(scope="module")
def plain_origin() -> Iterator[OriginServer]:
    with serving() as srv:
        yield srv


def _opts(home: FakeHome, network: dict[str, object], **top: object) -> list[str]:
    path = home.root / f"policy-{token()}.json"
    path.write_text(json.dumps({"network": {"allowedDomains": ["localhost"], "allowLocalDestinations": True,
                                            **network}, **top}))
    return ["-p", str(path)]


def _tls(ca: LocalCA, **kw: object) -> dict[str, object]:
    return {"tlsTerminate": {"extraCaCertPaths": [str(ca.cert_path)], **kw}}


def test_an_https_request_is_terminated_with_a_certificate_of_the_run_and_reaches_the_origin(
        shared_home: FakeHome, ca: LocalCA, origin: OriginServer) -> None:
    port = origin.port
    opts = _opts(shared_home, _tls(ca))
    r = shared_home.run(["curl", "-sS", "--max-time", "20", f"https://localhost:{port}/hello"], opts=opts)
    assert (r.returncode, r.stdout) == (0, f"origin-{port} GET /hello"), r.stderr
    seen = origin.seen[-1]
    assert seen.headers["host"] == f"localhost:{port}" and seen.headers["connection"] == "close"
    r = shared_home.run(["python3", "-c", ISSUER, "localhost", str(port), "localhost"], opts=opts)
    assert r.stdout.startswith("safebox per-run CA "), (r.stdout, r.stderr)


def test_control_without_termination_the_client_sees_the_origins_own_certificate(
        shared_home: FakeHome, ca: LocalCA, origin: OriginServer) -> None:
    port = origin.port
    r = shared_home.run(["python3", "-c", ISSUER, "localhost", str(port), "localhost"], opts=_opts(shared_home, {}),
                        env={"SSL_CERT_FILE": str(ca.cert_path)})
    assert r.stdout.strip() == "safebox test CA", (r.stdout, r.stderr)


def test_the_trust_variables_point_at_a_read_only_bundle_of_the_ca_the_host_roots_and_the_extra_cas(
        shared_home: FakeHome, ca: LocalCA) -> None:
    script = ("import os, ssl, sys\n"
              f"names = {TRUST_VARIABLES!r}\n"
              "paths = {os.environ[n] for n in names}\n"
              "print(len(paths))\n"
              "print(open(paths.pop()).read())\n")
    r = shared_home.run(["python3", "-c", script], opts=_opts(shared_home, _tls(ca)))
    count, text = r.stdout.split("\n", 1)
    assert count == "1", r.stderr
    assert ca.cert_pem.decode().strip() in text
    host_bundle = Path("/etc/ssl/certs/ca-certificates.crt")
    if host_bundle.exists():
        first_root = host_bundle.read_text().split("-----END CERTIFICATE-----")[0].split("-----BEGIN CERTIFICATE-----")[1]
        assert first_root in text
    assert "PRIVATE KEY" not in text
    assert text.count("BEGIN CERTIFICATE") >= 2
    r = shared_home.run(["sh", "-c", 'echo x >> "$SSL_CERT_FILE"'], opts=_opts(shared_home, _tls(ca)))
    assert r.returncode != 0 and ("Read-only file system" in r.stderr or "Permission denied" in r.stderr), r.stderr


def test_an_upstream_certificate_that_does_not_verify_gets_the_client_a_502_saying_why(
        shared_home: FakeHome, origin: OriginServer) -> None:
    """No extraCaCertPaths: the origin's test CA is not among the host's
    roots. Control: the first test, with it, gets 200."""
    port = origin.port
    before = len(origin.seen)
    r = shared_home.run(["curl", "-sS", "--max-time", "20", "-D", "/dev/stderr", f"https://localhost:{port}/x"],
                        opts=_opts(shared_home, {"tlsTerminate": {}}))
    assert r.returncode == 0 and "HTTP/1.1 502 Bad Gateway" in r.stderr, r.stderr
    assert "X-Safebox-Rule: network.tlsTerminate" in r.stderr
    assert r.stdout.startswith(f"safebox: the certificate of localhost port {port} did not verify: "
                               "unable to get local issuer certificate. safebox checks upstream certificates "
                               "against the host's roots and network.tlsTerminate.extraCaCertPaths"), r.stdout
    assert f"safebox: TLS: the certificate of localhost port {port} did not verify" in r.stderr
    assert len(origin.seen) == before  # no request was sent to it


def test_excluded_domains_are_tunnelled_untouched(shared_home: FakeHome, ca: LocalCA, origin: OriginServer) -> None:
    port = origin.port
    opts = _opts(shared_home, _tls(ca, excludeDomains=[f"localhost:{port}"]))
    # The client verifies the origin itself, with the bundle (which holds the extra CA).
    r = shared_home.run(["python3", "-c", ISSUER, "localhost", str(port), "localhost"], opts=opts)
    assert r.stdout.strip() == "safebox test CA", (r.stdout, r.stderr)
    r = shared_home.run(["curl", "-sS", "--max-time", "20", f"https://localhost:{port}/excluded"], opts=opts)
    assert (r.returncode, r.stdout) == (0, f"origin-{port} GET /excluded"), r.stderr


def test_a_clienthello_for_another_name_than_the_connect_target_is_refused(
        shared_home: FakeHome, ca: LocalCA, origin: OriginServer) -> None:
    port = origin.port
    opts = _opts(shared_home, _tls(ca))
    r = shared_home.run(["python3", "-c", ISSUER, "localhost", str(port), "evil.example", "noverify"], opts=opts)
    assert r.stdout.startswith("handshake failed"), (r.stdout, r.stderr)
    assert (f"safebox: TLS: refused a ClientHello for 'evil.example' inside a CONNECT to localhost port {port}"
            in r.stderr)
    # Control: the CONNECT target's own name is served.
    r = shared_home.run(["python3", "-c", ISSUER, "localhost", str(port), "localhost"], opts=opts)
    assert r.stdout.startswith("safebox per-run CA"), r.stdout


def test_a_client_that_does_not_trust_the_run_ca_is_told_why(shared_home: FakeHome, ca: LocalCA,
                                                            origin: OriginServer) -> None:
    port = origin.port
    r = shared_home.run(["curl", "-sS", "--max-time", "20", "--cacert", str(ca.cert_path),
                         f"https://localhost:{port}/"], opts=_opts(shared_home, _tls(ca)))
    assert r.returncode == 60, r.stderr  # curl: peer certificate cannot be authenticated
    assert "safebox: TLS: the command's client refused safebox's certificate for localhost" in r.stderr


def test_a_non_tls_stream_inside_connect_is_relayed_untouched(shared_home: FakeHome, ca: LocalCA,
                                                              plain_origin: OriginServer) -> None:
    port = plain_origin.port
    r = shared_home.run(["curl", "-sS", "--max-time", "20", "-p", f"http://localhost:{port}/tunnel"],
                        opts=_opts(shared_home, _tls(ca)))
    assert (r.returncode, r.stdout) == (0, f"origin-{port} GET /tunnel"), r.stderr


@pytest.mark.parametrize("mode", [BOTH, HELPER_ONLY])
def test_bodies_and_large_responses_cross_intact(fresh_home: FakeHome, ca: LocalCA, origin: OriginServer,
                                                 mode: str) -> None:
    port = origin.port
    body = fresh_home.work / "upload.bin"
    body.write_bytes(pattern(3 << 20))
    size = 24 << 20
    script = (f'curl -sS --max-time 60 https://localhost:{port}/bytes/{size} | sha256sum; '
              f'curl -sS --max-time 60 --data-binary @upload.bin https://localhost:{port}/up; echo; '
              f'curl -sS --max-time 60 -H "Transfer-Encoding: chunked" --data-binary @upload.bin '
              f'https://localhost:{port}/chunked')
    r = fresh_home.run(["sh", "-c", script], opts=_opts(fresh_home, _tls(ca)), mode=mode)
    lines = r.stdout.splitlines()
    assert lines[0].split()[0] == hashlib.sha256(pattern(size)).hexdigest(), r.stderr
    assert lines[1:] == [f"origin-{port} POST /up", f"origin-{port} POST /chunked"], r.stderr
    posted = [s for s in origin.seen if s.path in ("/up", "/chunked")][-2:]
    assert [s.body == pattern(3 << 20) for s in posted] == [True, True]


def test_the_upstream_leg_goes_through_the_parent_proxy(shared_home: FakeHome, ca: LocalCA, origin: OriginServer) -> None:
    parent = ParentProxy(origin.port)
    try:
        opts = _opts(shared_home, {**_tls(ca), "allowedDomains": ["192.0.2.10"],
                                   "parentProxy": {"https": f"http://127.0.0.1:{parent.port}"}})
        r = shared_home.run(["curl", "-sS", "--max-time", "20", "https://192.0.2.10/via-parent"], opts=opts)
        assert r.stdout == f"origin-{origin.port} GET /via-parent", r.stderr
        assert [line for line, _ in parent.requests] == ["CONNECT 192.0.2.10:443 HTTP/1.1"]
    finally:
        parent.shutdown()
        parent.server_close()


def test_an_https_parent_proxy_is_verified_against_the_host_roots(shared_home: FakeHome, ca: LocalCA,
                                                                   plain_origin: OriginServer) -> None:
    """The parent proxy speaks TLS with a certificate of the test CA; safebox
    trusts it only through the host's roots (here SSL_CERT_FILE names the
    test CA for safebox itself). Control: without that, the parent is refused."""
    parent = ParentProxy(plain_origin.port, tls=ca.server_context(["127.0.0.1"]))
    try:
        opts = _opts(shared_home, {"allowedDomains": ["192.0.2.10"],
                                   "parentProxy": {"https": f"https://127.0.0.1:{parent.port}"}})
        url = "http://192.0.2.10:8080/tls-parent"
        r = shared_home.run(["curl", "-sS", "-p", "--max-time", "20", url], opts=opts,
                            env={"SSL_CERT_FILE": str(ca.cert_path)})
        assert r.stdout.endswith("GET /tls-parent"), r.stderr
        r = shared_home.run(["curl", "-sS", "-p", "--max-time", "20", "-o", "/dev/null", "-w", "%{http_connect}",
                             url], opts=opts)
        assert r.stdout == "502", (r.stdout, r.stderr)
    finally:
        parent.shutdown()
        parent.server_close()


def test_a_given_ca_signs_the_leaves_and_its_key_never_enters_the_sandbox(fresh_home: FakeHome, ca: LocalCA,
                                                                        origin: OriginServer) -> None:
    own = make_test_ca(fresh_home.root / "myca", name="my own MITM CA")
    key = write_key(own, fresh_home.root / "myca" / "ca.key")
    port = origin.port
    opts = _opts(fresh_home, _tls(ca, caCertPath=str(own.cert_path), caKeyPath=str(key)))
    r = fresh_home.run(["python3", "-c", ISSUER, "localhost", str(port), "localhost"], opts=opts)
    assert r.stdout.strip() == "my own MITM CA", (r.stdout, r.stderr)
    r = fresh_home.run(["sh", "-c", f'cat {key}; grep -rl "PRIVATE KEY" "$(dirname "$SSL_CERT_FILE")"; true'],
                       opts=opts)
    assert "PRIVATE KEY" not in r.stdout and r.stdout.strip() == "", (r.stdout, r.stderr)
    # Control: without tlsTerminate the same file is readable inside.
    r = fresh_home.run(["cat", str(key)], opts=_opts(fresh_home, {}))
    assert "PRIVATE KEY" in r.stdout


def test_the_per_run_ca_key_is_nowhere_the_sandbox_can_read(fresh_home: FakeHome, ca: LocalCA) -> None:
    """The per-run CA exists only in safebox's memory: no file in the run
    dir, the state dir or /tmp holds a private key."""
    state = fresh_home.root / ".cache" / "safebox"
    script = f'grep -rl "PRIVATE KEY" {state} /tmp "$(dirname "$SSL_CERT_FILE")" 2>/dev/null; echo done'
    r = fresh_home.run(["sh", "-c", script], opts=_opts(fresh_home, _tls(ca)))
    assert r.stdout.strip() == "done", r.stdout


def test_bad_ca_settings_are_refused_naming_the_key(fresh_home: FakeHome, ca: LocalCA) -> None:
    r = fresh_home.run(["true"], opts=_opts(fresh_home, _tls(ca, caCertPath=str(ca.cert_path))))
    assert r.returncode == 125
    assert "network.tlsTerminate.caKeyPath: caCertPath and caKeyPath must be given together" in r.stderr
    other = make_test_ca(fresh_home.root / "other")
    key = write_key(other, fresh_home.root / "other" / "k.pem")
    r = fresh_home.run(["true"], opts=_opts(fresh_home, _tls(ca, caCertPath=str(ca.cert_path),
                                                             caKeyPath=str(key))))
    assert r.returncode == 125 and "is not the key of the certificate" in r.stderr, r.stderr

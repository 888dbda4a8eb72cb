"""``network.tlsTerminate``: the run's MITM CA, certificates minted per host
name, the trust bundle the sandbox gets, and the verifying upstream context.

srt's semantics (README, "TLS termination"): HTTPS CONNECTs are terminated
in the proxy so the decrypted requests can be seen (here: so masked
credentials can be substituted, ``proxy/inject.py``). The sandboxed process
trusts a bundle of the MITM CA, the host's roots and ``extraCaCertPaths``;
the proxy verifies each upstream against the host's roots and
``extraCaCertPaths`` (srt appends those to the sandbox's bundle; safebox also
trusts them upstream, since here the proxy is the client).
``excludeDomains`` are tunnelled untouched.

The CA's private key never leaves this process: a per-run CA is generated
in memory and never written anywhere; a given ``caKeyPath`` is read here
and made unreadable inside the sandbox (``run/netsetup.py``). Leaf certificates
share one per-run key; Python's ``ssl`` loads a certificate only from a
file, so each leaf goes through a memfd (``/proc/self/fd/N`` of this
process, which the sandbox cannot open: another pid namespace under
bubblewrap, Landlock's ptrace scoping without it) that is closed at once.

Imports ``cryptography`` (and ``ssl``): only a run with ``tlsTerminate``
imports this module (``tests/unit/test_tls_imports.py``).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
import threading
from collections import OrderedDict

from safebox.proxy.rules import HostError, NetworkRules, normalize_host
from safebox.proxy.tlsbase import client_context, pem_certificates

try:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
except ImportError:  # pragma: no cover - the message is tested through a fake absence
    x509 = None  # type: ignore[assignment]  # the marker Mitm checks to say how to install it

__all__ = ["TRUST_VARIABLES", "Mitm", "TlsSetupError", "host_roots"]

#: Variables that point tools at the trust bundle inside the sandbox (srt
#: sets these). Most REPLACE the tool's trust store, which is why the bundle
#: holds the host's roots too: excluded hosts are verified by the client.
TRUST_VARIABLES = (
    "SSL_CERT_FILE",  # OpenSSL: curl, Python's ssl, Ruby, git (OpenSSL builds)
    "REQUESTS_CA_BUNDLE",  # Python requests
    "CURL_CA_BUNDLE",  # curl
    "GIT_SSL_CAINFO",  # git
    "PIP_CERT",  # pip
    "CARGO_HTTP_CAINFO",  # cargo
    "NODE_EXTRA_CA_CERTS",  # Node.js (added to its built-in roots)
    "AWS_CA_BUNDLE",  # AWS CLI and SDKs
    "NIX_SSL_CERT_FILE",  # Nix
    "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH",  # gRPC
    "DENO_CERT",  # Deno
)

#: The host's CA bundle: the first of these that is a readable file (after
#: what OpenSSL itself reports, which honours SSL_CERT_FILE).
_SYSTEM_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt",
                   "/etc/ssl/ca-bundle.pem", "/etc/ssl/cert.pem", "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem")
#: Leaf certificates kept (one SSLContext each); the oldest goes first.
MAX_LEAVES = 1024
_LEAF_DAYS = 30
_CA_DAYS = 365


class TlsSetupError(Exception):
    """TLS termination cannot be set up; ``key`` names the policy key to fix."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


def host_roots() -> tuple[str | None, list[bytes]]:
    """(path, certificates) of the host's CA bundle, as OpenSSL finds it."""
    paths = ssl.get_default_verify_paths()
    for path in (paths.cafile, paths.openssl_cafile, *_SYSTEM_BUNDLES):
        if not path:
            continue
        try:
            with open(path, "rb") as f:
                certs = pem_certificates(f.read(64 << 20))
        except OSError:
            continue
        if certs:
            return path, certs
    return None, []


def _pem_file(path: str, key: str, *, limit: int = 1 << 20) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise TlsSetupError(key, f"cannot read {path}: {exc.strerror}") from None
    if len(data) > limit:
        raise TlsSetupError(key, f"{path} is larger than {limit} bytes")
    return data


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class Mitm:
    """The run's TLS termination: CA, leaves, contexts, bundle."""

    def __init__(self, *, ca_cert_path: str | None, ca_key_path: str | None,
                 extra_ca_cert_paths: tuple[str, ...], exclude_domains: tuple[str, ...]) -> None:
        if x509 is None:
            raise TlsSetupError("network.tlsTerminate",
                                "needs the cryptography package, which is not installed: "
                                "pip install 'safebox-sandbox[tls]' (or pip install cryptography)")
        if (ca_cert_path is None) != (ca_key_path is None):
            missing = "caKeyPath" if ca_key_path is None else "caCertPath"
            raise TlsSetupError(f"network.tlsTerminate.{missing}",
                                "caCertPath and caKeyPath must be given together (or neither, for a per-run CA)")
        try:
            self.exclude = NetworkRules.from_policy(exclude_domains)
        except HostError as exc:
            raise TlsSetupError("network.tlsTerminate.excludeDomains", str(exc)) from None
        self.notes: list[str] = []
        if ca_cert_path is not None and ca_key_path is not None:
            self._ca_cert, self._ca_key = self._load_ca(ca_cert_path, ca_key_path)
            self.generated = False
        else:
            self._ca_cert, self._ca_key = self._generate_ca()
            self.generated = True
        self.ca_pem = self._ca_cert.public_bytes(serialization.Encoding.PEM)
        self.extra_pems: list[bytes] = []
        for path in extra_ca_cert_paths:
            # srt: a missing file or one without a certificate is skipped
            # (a path may exist on some hosts only); only CERTIFICATE blocks
            # are taken (a combined cert+key PEM must not bring its key).
            try:
                with open(path, "rb") as f:
                    certs = pem_certificates(f.read(16 << 20))
            except OSError as exc:
                self.notes.append(f"network.tlsTerminate.extraCaCertPaths: {path}: skipped ({exc.strerror})")
                continue
            if not certs:
                self.notes.append(f"network.tlsTerminate.extraCaCertPaths: {path}: skipped (no PEM certificate)")
                continue
            self.extra_pems += certs
        for pem in self.extra_pems:
            try:
                x509.load_pem_x509_certificate(pem)
            except ValueError as exc:
                raise TlsSetupError("network.tlsTerminate.extraCaCertPaths",
                                    f"a certificate does not load: {exc}") from None
        # The verifying context loads the host's roots (about 20 ms): made at
        # the first terminated request, off the start-up path.
        self._upstream: ssl.SSLContext | None = None
        self.roots_path, roots = host_roots()
        if not roots:
            self.notes.append("network.tlsTerminate: no CA bundle found on the host; the sandbox trusts only "
                              "the run's CA and extraCaCertPaths (excluded hosts cannot be verified inside)")
        self.bundle_pem = b"\n".join([self.ca_pem.strip(), *roots, *self.extra_pems]) + b"\n"
        self._leaf_key = ec.generate_private_key(ec.SECP256R1())
        self._leaf_key_pem = self._leaf_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                          serialization.NoEncryption())
        self._contexts: OrderedDict[str, ssl.SSLContext] = OrderedDict()
        self._lock = threading.Lock()

    # -- the CA --------------------------------------------------------------

    @staticmethod
    def _generate_ca() -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "safebox"),
                          x509.NameAttribute(NameOID.COMMON_NAME, f"safebox per-run CA {os.urandom(4).hex()}")])
        now = _now()
        ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(hours=1))
                .not_valid_after(now + datetime.timedelta(days=_CA_DAYS))
                .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                             key_encipherment=False, data_encipherment=False, key_agreement=False,
                                             key_cert_sign=True, crl_sign=True, encipher_only=False,
                                             decipher_only=False), critical=True)
                .add_extension(ski, critical=False)
                .sign(key, hashes.SHA256()))
        return cert, key

    @staticmethod
    def _load_ca(cert_path: str, key_path: str
                 ) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey]:
        cert_key, key_key = "network.tlsTerminate.caCertPath", "network.tlsTerminate.caKeyPath"
        try:
            cert = x509.load_pem_x509_certificate(_pem_file(cert_path, cert_key))
        except ValueError as exc:
            raise TlsSetupError(cert_key, f"{cert_path} is not a PEM certificate ({exc})") from None
        try:
            key = serialization.load_pem_private_key(_pem_file(key_path, key_key), password=None)
        except (ValueError, TypeError) as exc:
            raise TlsSetupError(key_key, f"{key_path} is not an unencrypted PEM private key ({exc})") from None
        if not isinstance(key, (ec.EllipticCurvePrivateKey, rsa.RSAPrivateKey)):
            raise TlsSetupError(key_key, f"{key_path}: only RSA and EC keys are supported")
        # cert's key may be of any type cryptography knows; an unlike type compares unequal, as it should.
        if key.public_key().public_numbers() != cert.public_key().public_numbers():  # type: ignore[union-attr]
            raise TlsSetupError(key_key, f"{key_path} is not the key of the certificate {cert_path}")
        try:
            ca = cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        except x509.ExtensionNotFound:
            ca = False
        if not ca:
            raise TlsSetupError(cert_key, f"{cert_path} is not a CA certificate (basicConstraints CA:TRUE)")
        if cert.not_valid_after_utc <= _now():
            raise TlsSetupError(cert_key, f"{cert_path} expired on {cert.not_valid_after_utc:%Y-%m-%d}")
        return cert, key

    @property
    def upstream(self) -> ssl.SSLContext:
        """The client context for the upstream leg: the host's roots and ``extraCaCertPaths``."""
        with self._lock:
            if self._upstream is None:
                self._upstream = client_context(self.extra_pems)
            return self._upstream

    # -- decisions -----------------------------------------------------------

    def excluded(self, host: str, port: int) -> bool:
        """Whether ``host:port`` is in ``excludeDomains`` (tunnelled untouched)."""
        return bool(self.exclude.allowed) and self.exclude.check_host(host, port).allowed

    # -- leaves ----------------------------------------------------------------

    def _mint(self, name: str) -> bytes:
        """PEM of a leaf for ``name`` (a canonical host), its CA, and the leaf key."""
        try:
            san: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(name))
        except ValueError:
            san = x509.DNSName(name)
        now = _now()
        not_after = min(now + datetime.timedelta(days=_LEAF_DAYS), self._ca_cert.not_valid_after_utc)
        cert = (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name[:64])]))
                .issuer_name(self._ca_cert.subject).public_key(self._leaf_key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(not_after)
                .add_extension(x509.SubjectAlternativeName([san]), critical=False)
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
                .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                    self._ca_key.public_key()), critical=False)
                .sign(self._ca_key, hashes.SHA256()))
        return cert.public_bytes(serialization.Encoding.PEM) + self.ca_pem + self._leaf_key_pem

    def server_context(self, host: str) -> ssl.SSLContext:
        """The server context presenting a leaf for ``host`` (minted once, kept
        for :data:`MAX_LEAVES` hosts). Raises HostError for a bad name."""
        name = normalize_host(host)
        with self._lock:
            ctx = self._contexts.get(name)
            if ctx is not None:
                self._contexts.move_to_end(name)
                return ctx
        pem = self._mint(name)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.set_alpn_protocols(["http/1.1"])

        def sni(obj: ssl.SSLObject, server_name: str | None, _ctx: ssl.SSLContext) -> int | None:
            # A ClientHello for another name than the CONNECT target: the
            # certificate (and the substitution) would be for a host the
            # policy did not check. Refused; intercept.py says why.
            if server_name is None:
                return None
            try:
                asked = normalize_host(server_name)
            except HostError:
                asked = ""
            if asked != name:
                # A mark on the SSLObject for the handshake's error message (intercept reads it).
                obj.safebox_sni_refused = server_name  # type: ignore[attr-defined]
                return ssl.ALERT_DESCRIPTION_UNRECOGNIZED_NAME
            return None

        ctx.sni_callback = sni
        fd = os.memfd_create("safebox-leaf", os.MFD_CLOEXEC)
        try:
            os.write(fd, pem)
            ctx.load_cert_chain(f"/proc/self/fd/{fd}")
        finally:
            os.close(fd)
        with self._lock:
            self._contexts[name] = ctx
            while len(self._contexts) > MAX_LEAVES:
                self._contexts.popitem(last=False)
        return ctx

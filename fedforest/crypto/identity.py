"""Long-term identities of the participants of a network job.

Each participant (the master and every party) holds an ECDSA P-256 key pair
and a self-signed X.509 certificate naming it.  Nobody signs anybody else's
certificate: the participants exchange the certificates' SHA-256
fingerprints out of band and pin them in their configuration files, so a
connection is accepted only from (and to) exactly the pinned certificate.

The TLS contexts built here speak TLS 1.3 only.  The server (the master)
requires a client certificate and trusts exactly the certificates pinned in
its job file; the client (a party) checks the fingerprint of the master's
certificate after the handshake, before anything is sent.
"""
import datetime
import hashlib
import os
import re
import ssl

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from ..errors import InputError

VALID_DAYS = 3650
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def check_name(name, what="name"):
    """A participant name: letters, digits, '.', '_', '-' (at most 64), so it is safe in file names."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise InputError(what, f"must be 1-64 letters, digits, '.', '_' or '-' (starting with a letter "
                               f"or digit), got {name!r}")
    return name


def fingerprint(der):
    """SHA-256 fingerprint of a DER certificate, as ``openssl x509 -fingerprint -sha256`` prints it."""
    digest = hashlib.sha256(bytes(der)).hexdigest().upper()
    return ":".join(digest[i:i + 2] for i in range(0, len(digest), 2))


def normalize_fingerprint(text, what):
    """A pinned fingerprint in the canonical form (any case, with or without colons or spaces)."""
    # openssl prints "sha256 Fingerprint=AB:CD:..."; the part after "=" is the fingerprint
    hexdigits = re.sub(r"[:\s]", "", text.rpartition("=")[2]) if isinstance(text, str) else ""
    if not re.fullmatch(r"[0-9A-Fa-f]{64}", hexdigits):
        raise InputError(what, f"must be a SHA-256 fingerprint (64 hex digits, colons allowed), got {text!r}")
    hexdigits = hexdigits.upper()
    return ":".join(hexdigits[i:i + 2] for i in range(0, 64, 2))


def keygen(out, name):
    """Write ``<out>/<name>.key`` (private key, readable by the owner only) and
    ``<out>/<name>.crt`` (self-signed certificate); returns (key path, cert path, fingerprint).
    Refuses to replace an existing key."""
    check_name(name, "--name")
    os.makedirs(out, exist_ok=True)
    key_path = os.path.join(out, f"{name}.key")
    cert_path = os.path.join(out, f"{name}.crt")
    for p in (key_path, cert_path):
        if os.path.exists(p):
            raise InputError("--out", f"{p!r} already exists; a new key would change this participant's "
                                      "fingerprint (remove it first to replace the identity)")
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name),
                         x509.NameAttribute(NameOID.ORGANIZATION_NAME, "fedforest participant")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder()
            .subject_name(subject).issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, key_cert_sign=False, crl_sign=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([x509.ExtendedKeyUsageOID.SERVER_AUTH,
                                                  x509.ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
            .sign(key, hashes.SHA256()))
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                   serialization.NoEncryption()))
    der = cert.public_bytes(serialization.Encoding.DER)
    with open(cert_path, "wb") as fh:
        fh.write(cert.public_bytes(serialization.Encoding.PEM))
    return key_path, cert_path, fingerprint(der)


class Certificate:
    """A certificate file: its PEM text, DER bytes, fingerprint and the name it carries."""

    def __init__(self, path, what):
        try:
            with open(path, "rb") as fh:
                data = fh.read()
        except OSError as exc:
            raise InputError(what, f"cannot read certificate {path!r}: {exc.strerror}") from None
        try:
            cert = x509.load_pem_x509_certificate(data)
        except ValueError:
            raise InputError(what, f"{path!r} is not a PEM certificate (fedforest keygen writes "
                                   "one)") from None
        self.path = path
        self.der = cert.public_bytes(serialization.Encoding.DER)
        self.pem = cert.public_bytes(serialization.Encoding.PEM).decode("ascii")
        self.fingerprint = fingerprint(self.der)
        names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        self.name = str(names[0].value) if names else None

    def check_pin(self, pinned, what):
        """InputError unless this certificate has the pinned fingerprint."""
        if self.fingerprint != pinned:
            raise InputError(what, f"certificate {self.path!r} has fingerprint {self.fingerprint}, but "
                                   f"the configuration pins {pinned}; the file is not the one that was "
                                   "agreed on")


def _context(purpose, cert_path, key_path, what):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if purpose == "server" else ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    try:
        ctx.load_cert_chain(cert_path, key_path)
    except FileNotFoundError as exc:
        raise InputError(what, f"cannot read {exc.filename!r}: no such file") from None
    except (ssl.SSLError, OSError) as exc:
        raise InputError(what, f"cannot load the key pair {cert_path!r} / {key_path!r}: {exc}") from None
    return ctx


def server_context(cert_path, key_path, trusted, what="network"):
    """TLS 1.3 server context that requires a client certificate and accepts
    only the ``trusted`` certificates (a list of :class:`Certificate`)."""
    ctx = _context("server", cert_path, key_path, what)
    ctx.verify_mode = ssl.CERT_REQUIRED
    # each pinned self-signed certificate is its own trust anchor, and nothing else is
    ctx.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
    ctx.load_verify_locations(cadata="".join(c.pem for c in trusted))
    return ctx


def client_context(cert_path, key_path, what="network"):
    """TLS 1.3 client context presenting this participant's certificate.  The
    server's certificate is checked by its pinned fingerprint after the
    handshake (there is no certificate authority to verify it against)."""
    ctx = _context("client", cert_path, key_path, what)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx

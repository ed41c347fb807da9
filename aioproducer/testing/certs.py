"""Throw-away X.509 certificates for TLS tests, generated at test time.

::

    ca = CertificateAuthority()
    server = ca.issue("localhost", "127.0.0.1")          # DNS and IP subject alt names
    tls = BrokerTLS.from_certificate(server, client_ca=ca)   # for KafkaCluster(tls=...)
    context = ca.client_context()                         # verifies the broker and its name

Keys are ECDSA P-256 and written as unencrypted PKCS#8 PEM, the one private-key form a
Kafka ``PEM`` keystore accepts without a key password. Certificates are valid from one hour
ago for ``days`` days. Nothing is written to disk except, briefly, the files
:meth:`CertificateAuthority.client_context` hands to :mod:`ssl`.

Needs the ``cryptography`` package (part of the ``dev`` extra).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cryptography import x509

__all__ = ["CertificateAuthority", "IssuedCertificate", "load_certificate"]


@dataclass(frozen=True)
class IssuedCertificate:
    """A certificate and its private key, both PEM text."""

    #: The leaf certificate alone.
    certificate_pem: str
    #: Unencrypted PKCS#8; kept out of ``repr`` like every other secret.
    private_key_pem: str = field(repr=False)
    #: The leaf followed by the certificate of the authority that issued it.
    chain_pem: str = ""
    #: The names the certificate is valid for (empty for client certificates).
    names: tuple[str, ...] = ()


class CertificateAuthority:
    """A self-signed certificate authority that issues server and client certificates."""

    def __init__(self, common_name: str = "aioproducer test CA", *, days: int = 7) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        self._days = days
        self._key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        not_before, not_after = _validity(days)
        self._name = name
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(not_before)
            .not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()), critical=False
            )
            .sign(self._key, hashes.SHA256())
        )

    def __repr__(self) -> str:
        return f"<CertificateAuthority {self._cert.subject.rfc4514_string()}>"

    @property
    def certificate_pem(self) -> str:
        """The authority's own certificate: what clients (or brokers) must trust."""
        from cryptography.hazmat.primitives.serialization import Encoding

        return self._cert.public_bytes(Encoding.PEM).decode("ascii")

    def issue(self, *names: str) -> IssuedCertificate:
        """A server certificate valid for ``names`` (host names and IP addresses)."""
        if not names:
            raise ValueError("a server certificate needs at least one name")
        from cryptography import x509
        from cryptography.x509.oid import ExtendedKeyUsageOID

        alt_names: list[x509.GeneralName] = []
        for name in names:
            try:
                alt_names.append(x509.IPAddress(ipaddress.ip_address(name)))
            except ValueError:
                alt_names.append(x509.DNSName(name))
        return self._sign(
            names[0],
            names=tuple(names),
            extensions=[
                x509.SubjectAlternativeName(alt_names),
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
            ],
        )

    def issue_client(self, common_name: str) -> IssuedCertificate:
        """A client certificate for mutual TLS; the broker sees ``CN=<common_name>``."""
        from cryptography import x509
        from cryptography.x509.oid import ExtendedKeyUsageOID

        return self._sign(
            common_name,
            names=(),
            extensions=[x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH])],
        )

    def client_context(self, certificate: IssuedCertificate | None = None) -> ssl.SSLContext:
        """An :class:`ssl.SSLContext` that trusts this authority only and checks host names.

        With ``certificate`` the context also presents it (for brokers that require client
        certificates).
        """
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
        # Only this authority: a test must not pass because the system store trusts a peer.
        context.load_verify_locations(cadata=self.certificate_pem)
        if certificate is not None:
            load_certificate(context, certificate)
        return context

    def _sign(
        self,
        common_name: str,
        *,
        names: tuple[str, ...],
        extensions: Sequence[x509.ExtensionType],
    ) -> IssuedCertificate:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.hazmat.primitives.serialization import (
            Encoding,
            NoEncryption,
            PrivateFormat,
        )
        from cryptography.x509.oid import NameOID

        key = ec.generate_private_key(ec.SECP256R1())
        not_before, not_after = _validity(self._days)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(self._name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(not_before)
            .not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                critical=False,
            )
        )
        for extension in extensions:
            builder = builder.add_extension(extension, critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        leaf = cert.public_bytes(Encoding.PEM).decode("ascii")
        key_pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode(
            "ascii"
        )
        return IssuedCertificate(leaf, key_pem, leaf + self.certificate_pem, names)


def load_certificate(context: ssl.SSLContext, certificate: IssuedCertificate) -> None:
    """Make ``context`` present ``certificate`` (and its chain) to the peer."""
    # ssl only loads certificate chains from files; they live for the duration of the call.
    with tempfile.TemporaryDirectory(prefix="aioproducer-cert-") as directory:
        chain = os.path.join(directory, "chain.pem")
        key = os.path.join(directory, "key.pem")
        with open(chain, "w", encoding="ascii") as handle:
            handle.write(certificate.chain_pem or certificate.certificate_pem)
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as handle:
            handle.write(certificate.private_key_pem)
        context.load_cert_chain(chain, key)


def _validity(days: int) -> tuple[datetime.datetime, datetime.datetime]:
    # Backdated an hour so a clock a little behind on either side does not reject it.
    now = datetime.datetime.now(datetime.timezone.utc)
    return now - datetime.timedelta(hours=1), now + datetime.timedelta(days=days)

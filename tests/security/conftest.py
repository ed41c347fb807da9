"""One secured single-node Kafka for the whole session, with certificates made at test time.

The broker keeps its PLAINTEXT listener (used to create topics and read records back) and
gets these, each on its own port:

* ``SSL``: server-authenticated TLS, certificate for ``localhost`` and ``127.0.0.1``;
* ``MTLS``: the same, but the broker requires a client certificate from the test CA;
* ``WRONGNAME``: TLS with a certificate from the right CA that names another host only;
* ``SASL_PLAINTEXT`` and ``SASL_SSL``: PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512;
* ``OAUTH``: SASL_PLAINTEXT with OAUTHBEARER only (unsecured JWS tokens);
* ``REAUTH``: SASL_PLAINTEXT with PLAIN, SCRAM-SHA-256 and OAUTHBEARER, where a session
  lasts at most :data:`REAUTH_MS` before the client must re-authenticate (KIP-368).
"""

from __future__ import annotations

import dataclasses
import re
import ssl
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from aioproducer.testing import BrokerTLS, KafkaCluster, Listener
from aioproducer.testing.certs import CertificateAuthority, IssuedCertificate

#: Passwords are long random-looking strings so a leak check cannot match by accident.
USERS = {
    "alice": "alice-pw-" + uuid.uuid4().hex,
    "bob": "bob-pw-" + uuid.uuid4().hex,
}
WRONG_PASSWORD = "not-the-password-" + uuid.uuid4().hex
#: ``connections.max.reauth.ms`` of the REAUTH listener.
REAUTH_MS = 2500


@dataclasses.dataclass(frozen=True)
class SecureKafka:
    """The running cluster and the material clients need to reach it."""

    cluster: KafkaCluster
    ca: CertificateAuthority
    #: A second authority the broker knows nothing about.
    other_ca: CertificateAuthority
    client_cert: IssuedCertificate

    def servers(self, listener: str) -> str:
        """Bootstrap servers of ``listener``."""
        return self.cluster.bootstrap_servers_for(listener)

    def context(self, *, client_cert: bool = False) -> ssl.SSLContext:
        """A client context trusting the test CA only, checking host names."""
        return self.ca.client_context(self.client_cert if client_cert else None)

    def new_topic(self, name: str) -> str:
        """A fresh single-partition topic (created over the PLAINTEXT listener)."""
        base = re.sub(r"[^a-zA-Z0-9._-]+", "-", name).strip("-.")[:150] or "topic"
        topic = f"{base}-{uuid.uuid4().hex[:8]}"
        self.cluster.create_topic(topic, 1)
        return topic


@pytest.fixture(scope="session")
def secure_kafka() -> Iterator[SecureKafka]:
    """The secured single-node cluster, started once per session."""
    ca = CertificateAuthority("aioproducer security tests CA")
    server = ca.issue("localhost", "127.0.0.1")
    # Signed by the trusted CA, so only the name check can reject it.
    misnamed = ca.issue("kafka.invalid")
    listeners = [
        Listener("SSL"),
        Listener("MTLS", "SSL", client_auth="required"),
        Listener("WRONGNAME", "SSL", tls=BrokerTLS.from_certificate(misnamed)),
        Listener("SASL_PLAINTEXT"),
        Listener("SASL_SSL"),
        Listener("OAUTH", "SASL_PLAINTEXT", sasl_mechanisms=("OAUTHBEARER",)),
        Listener(
            "REAUTH",
            "SASL_PLAINTEXT",
            sasl_mechanisms=("PLAIN", "SCRAM-SHA-256", "OAUTHBEARER"),
            max_reauth_ms=REAUTH_MS,
        ),
    ]
    with KafkaCluster(
        nodes=1,
        listeners=listeners,
        tls=BrokerTLS.from_certificate(server, client_ca=ca),
        sasl_users=USERS,
    ) as cluster:
        yield SecureKafka(cluster, ca, CertificateAuthority("untrusted CA"), ca.issue_client("c1"))


@pytest.fixture(
    params=[pytest.param("asyncio", id="asyncio"), pytest.param("trio", id="trio")],
)
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    """The key security tests run on asyncio and on trio."""
    return request.param

"""KafkaCluster's listener, TLS and SASL options: validation and what they configure."""

from __future__ import annotations

from typing import Any

import pytest

from aioproducer.testing import BrokerTLS, KafkaCluster, Listener
from aioproducer.testing.certs import CertificateAuthority

from .conftest import USERS, SecureKafka

TLS = BrokerTLS("-----BEGIN CERTIFICATE-----\nx\n", "-----BEGIN PRIVATE KEY-----\ny\n", "ca")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"listeners": [Listener("SSL")]}, "uses TLS: pass tls="),
        ({"listeners": [Listener("SASL_PLAINTEXT")]}, "uses SASL: pass sasl_users="),
        ({"listeners": [Listener("PLAINTEXT")]}, "reserved"),
        ({"listeners": [Listener("controller", "SSL")], "tls": TLS}, "reserved"),
        ({"listeners": [Listener("SSL"), Listener("ssl", "SSL")], "tls": TLS}, "used twice"),
        ({"listeners": [Listener("BAD-NAME", "SSL")], "tls": TLS}, "letters, digits"),
        ({"listeners": [Listener("SECURE")], "tls": TLS}, "give protocol="),
        (
            {
                "listeners": [Listener("M", "SSL", client_auth="required")],
                "tls": BrokerTLS("c", "k"),
            },
            "needs a BrokerTLS with client_ca",
        ),
        (
            {"listeners": [Listener("SASL_PLAINTEXT", client_auth="required")]},
            "does not use TLS",
        ),
        (
            {"listeners": [Listener("SASL_PLAINTEXT")], "sasl_users": {"a": "x,y"}},
            "may not contain commas",
        ),
        (
            {"listeners": [Listener("SASL_PLAINTEXT")], "sasl_users": {"a b": "pw"}},
            "may not contain",
        ),
        (
            {
                "listeners": [Listener("SASL_PLAINTEXT", sasl_mechanisms=())],
                "sasl_users": {"a": "pw"},
            },
            "non-empty selection",
        ),
    ],
)
def test_invalid_security_options_are_rejected_up_front(kwargs: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        KafkaCluster(**kwargs)


def test_secret_material_stays_out_of_reprs() -> None:
    ca = CertificateAuthority()
    issued = ca.issue("localhost")
    tls = BrokerTLS.from_certificate(issued, client_ca=ca)
    assert "PRIVATE KEY" in tls.private_key and "PRIVATE KEY" not in repr(tls)
    assert "PRIVATE KEY" not in repr(issued)
    assert tls.client_ca == ca.certificate_pem
    assert tls.certificate_chain == issued.certificate_pem + ca.certificate_pem


@pytest.mark.broker
def test_listener_addresses(secure_kafka: SecureKafka) -> None:
    cluster = secure_kafka.cluster
    names = ["PLAINTEXT", *(item.name for item in cluster.listeners)]
    addresses = [cluster.bootstrap_servers_for(name) for name in names]
    assert addresses[0] == cluster.bootstrap_servers == cluster.broker_address(1)
    assert len(set(addresses)) == len(names)  # one port per listener
    assert all(a.startswith("127.0.0.1:") for a in addresses)
    with pytest.raises(KeyError, match="SASL_SSL"):
        cluster.bootstrap_servers_for("NOPE")


@pytest.mark.broker
def test_broker_configuration_read_back(secure_kafka: SecureKafka) -> None:
    """The broker's own properties file holds the per-listener settings asked for."""
    text = (secure_kafka.cluster.work_dir / "node-1" / "server.properties").read_text("ascii")
    props = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    assert props["inter.broker.listener.name"] == "PLAINTEXT"
    protocol_map = set(props["listener.security.protocol.map"].split(","))
    assert {"MTLS:SSL", "WRONGNAME:SSL", "SASL_SSL:SASL_SSL", "CONTROLLER:PLAINTEXT"} <= (
        protocol_map
    )
    assert props["listener.name.mtls.ssl.client.auth"] == "required"
    assert props["listener.name.ssl.ssl.client.auth"] == "none"
    assert props["listener.name.sasl_ssl.sasl.enabled.mechanisms"] == (
        "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
    )
    assert "ScramLoginModule" in props["listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config"]
    plain = props["listener.name.sasl_plaintext.plain.sasl.jaas.config"]
    assert all(f'user_{name}="{pw}"' in plain for name, pw in USERS.items())

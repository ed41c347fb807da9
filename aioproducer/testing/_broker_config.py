"""What each node's ``server.properties`` says besides the cluster's layout: test-friendly
broker defaults, the keys the layout owns, and the TLS and SASL settings of extra client
listeners, described by :class:`BrokerTLS` and :class:`Listener`.

Package-internal: :class:`BrokerTLS`, :class:`Listener` and the two type aliases are public
through :mod:`aioproducer.testing.kafka`; the functions and constants in ``__all__`` are for
the cluster.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "MANAGED_KEYS",
    "BrokerTLS",
    "Listener",
    "SaslMechanism",
    "SecurityProtocol",
    "check_security",
    "default_config",
    "scram_arguments",
    "security_config",
]


# Keys the cluster derives from its own layout; overriding them would break it.
MANAGED_KEYS = frozenset(
    {
        "process.roles",
        "node.id",
        "broker.id",
        "controller.quorum.voters",
        "controller.quorum.bootstrap.servers",
        "listeners",
        "advertised.listeners",
        "controller.listener.names",
        "inter.broker.listener.name",
        "listener.security.protocol.map",
        "log.dirs",
        "log.dir",
        "metadata.log.dir",
    }
)


#: Security protocols of the extra client listeners :class:`KafkaCluster` can add.
SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
#: SASL mechanisms a listener can enable (the ones the producer speaks).
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]

# What a SASL listener enables unless told otherwise. OAUTHBEARER is opt-in: the broker
# validates its tokens with Kafka's unsecured (signature-less) validator.
_SASL_MECHANISMS: tuple[SaslMechanism, ...] = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_ALL_SASL_MECHANISMS: tuple[SaslMechanism, ...] = (*_SASL_MECHANISMS, "OAUTHBEARER")
#: The JAAS options of the broker's own OAUTHBEARER login; ``sub`` is the principal of the
#: (unsecured) token a broker would present, which a client listener never asks for.
_OAUTHBEARER_JAAS = (
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
    'unsecuredLoginStringClaim_sub="admin";'
)
_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_RESERVED_LISTENERS = frozenset({"PLAINTEXT", "CONTROLLER"})


@dataclass(frozen=True)
class BrokerTLS:
    """The TLS identity of a broker listener, as PEM text.

    ``certificate_chain`` is the server certificate followed by its issuers,
    ``private_key`` its unencrypted PKCS#8 key (``-----BEGIN PRIVATE KEY-----``), the form a
    Kafka ``PEM`` keystore reads without a key password. ``client_ca`` holds the authorities
    trusted to sign client certificates; a listener needs it for ``client_auth``.
    :class:`aioproducer.testing.certs.CertificateAuthority` makes all three at test time.
    """

    certificate_chain: str
    private_key: str = field(repr=False)
    client_ca: str | None = None

    @classmethod
    def from_certificate(cls, certificate: object, client_ca: object = None) -> BrokerTLS:
        """Build it from an :class:`~aioproducer.testing.certs.IssuedCertificate` and,
        optionally, the :class:`~aioproducer.testing.certs.CertificateAuthority` (or PEM
        text) trusted for client certificates."""
        from .certs import CertificateAuthority, IssuedCertificate

        if not isinstance(certificate, IssuedCertificate):
            raise TypeError("certificate must be an IssuedCertificate")
        ca_pem: str | None
        if client_ca is None or isinstance(client_ca, str):
            ca_pem = client_ca
        elif isinstance(client_ca, CertificateAuthority):
            ca_pem = client_ca.certificate_pem
        else:
            raise TypeError("client_ca must be a CertificateAuthority, PEM text or None")
        return cls(
            certificate.chain_pem or certificate.certificate_pem,
            certificate.private_key_pem,
            ca_pem,
        )


@dataclass(frozen=True)
class Listener:
    """An extra client listener of every broker, on its own port.

    ``name`` is the Kafka listener name (letters, digits and ``_``; not ``PLAINTEXT`` or
    ``CONTROLLER``, which the cluster uses itself) and ``protocol`` its security protocol,
    by default the name itself (``Listener("SASL_SSL")``). SASL listeners enable
    ``sasl_mechanisms`` for the cluster's ``sasl_users``. TLS listeners present the
    cluster's ``tls`` identity unless ``tls`` is given here; ``client_auth`` is Kafka's
    ``ssl.client.auth`` (``"required"`` for mutual TLS).

    ``"OAUTHBEARER"`` (not enabled by default) accepts any *unsecured* JWS token (``alg``
    ``none``, no signature: Kafka's test validator) whose ``exp`` lies ahead; the token's
    ``sub`` claim is the principal. ``max_reauth_ms`` sets Kafka's
    ``connections.max.reauth.ms`` for each mechanism of the listener: clients must
    re-authenticate (KIP-368) within that many milliseconds or be disconnected.
    """

    name: str
    protocol: SecurityProtocol | None = None
    sasl_mechanisms: tuple[SaslMechanism, ...] = _SASL_MECHANISMS
    client_auth: Literal["none", "requested", "required"] = "none"
    tls: BrokerTLS | None = None
    max_reauth_ms: int | None = None

    @property
    def security_protocol(self) -> SecurityProtocol:
        """The listener's security protocol (``protocol``, or else its name)."""
        if self.protocol is not None:
            return self.protocol
        if self.name in _PROTOCOLS:
            protocol: SecurityProtocol = self.name  # type: ignore[assignment]
            return protocol
        raise ValueError(f"listener {self.name!r}: give protocol= (one of {', '.join(_PROTOCOLS)})")

    @property
    def uses_tls(self) -> bool:
        """Whether clients of this listener speak TLS."""
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        """Whether clients of this listener authenticate with SASL."""
        return self.security_protocol.startswith("SASL")


def default_config(nodes: int) -> dict[str, str]:
    """Broker settings for a quick, small test cluster of ``nodes`` nodes."""
    replication = min(nodes, 3)
    min_isr = 2 if replication >= 3 else 1
    coordinator_partitions = str(min(nodes, 3))
    return {
        "num.partitions": "1",
        "default.replication.factor": str(replication),
        "min.insync.replicas": str(min_isr),
        "offsets.topic.replication.factor": str(replication),
        "transaction.state.log.replication.factor": str(replication),
        "transaction.state.log.min.isr": str(min_isr),
        "share.coordinator.state.topic.replication.factor": str(replication),
        "share.coordinator.state.topic.min.isr": str(min_isr),
        # 50 partitions per internal topic is sized for production; creating them is the
        # slowest part of the first consumer-group or transaction in a test.
        "offsets.topic.num.partitions": coordinator_partitions,
        "transaction.state.log.num.partitions": coordinator_partitions,
        "share.coordinator.state.topic.num.partitions": coordinator_partitions,
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "true",
        # Fence a dead or paused broker after 3 s instead of 9 s, so failover tests are quick.
        "broker.heartbeat.interval.ms": "500",
        "broker.session.timeout.ms": "3000",
        # Leadership only moves when a test makes it move: the periodic preferred-leader
        # election would otherwise shift leaders under a running test after a restart.
        "auto.leader.rebalance.enable": "false",
        # Thread pools and buffers sized for a laptop or a 2-core CI runner.
        "num.network.threads": "2",
        "num.io.threads": "2",
        "background.threads": "2",
        "num.recovery.threads.per.data.dir": "1",
        "group.coordinator.threads": "1",
        "log.cleaner.dedupe.buffer.size": "8388608",
    }


def check_security(
    listeners: Sequence[Listener], tls: BrokerTLS | None, users: Mapping[str, str]
) -> None:
    """Reject listener and user settings that Kafka would refuse (or misread) at start-up."""
    seen: set[str] = set()
    for listener in listeners:
        name = listener.name
        if not name or not all(c.isascii() and (c.isalnum() or c == "_") for c in name):
            raise ValueError(f"listener name {name!r} may only use letters, digits and '_'")
        if name.upper() in _RESERVED_LISTENERS:
            raise ValueError(f"listener name {name!r} is reserved: KafkaCluster uses it itself")
        if name.upper() in seen:
            raise ValueError(f"listener name {name!r} is used twice")
        seen.add(name.upper())
        protocol = listener.security_protocol
        if protocol not in _PROTOCOLS:
            raise ValueError(f"listener {name!r}: unknown security protocol {protocol!r}")
        if listener.client_auth not in ("none", "requested", "required"):
            raise ValueError(f"listener {name!r}: unknown client_auth {listener.client_auth!r}")
        if listener.uses_tls:
            identity = listener.tls or tls
            if identity is None:
                raise ValueError(f"listener {name!r} uses TLS: pass tls= (or Listener(tls=...))")
            if listener.client_auth != "none" and identity.client_ca is None:
                raise ValueError(
                    f"listener {name!r}: client_auth={listener.client_auth!r} needs a "
                    "BrokerTLS with client_ca"
                )
        elif listener.client_auth != "none" or listener.tls is not None:
            raise ValueError(f"listener {name!r} ({protocol}) does not use TLS")
        if listener.uses_sasl:
            unknown = [m for m in listener.sasl_mechanisms if m not in _ALL_SASL_MECHANISMS]
            if unknown or not listener.sasl_mechanisms:
                raise ValueError(
                    f"listener {name!r}: sasl_mechanisms must be a non-empty selection of "
                    f"{', '.join(_ALL_SASL_MECHANISMS)}"
                )
            if not users and set(listener.sasl_mechanisms) != {"OAUTHBEARER"}:
                raise ValueError(f"listener {name!r} uses SASL: pass sasl_users=")
        if listener.max_reauth_ms is not None:
            if not listener.uses_sasl:
                raise ValueError(f"listener {name!r}: max_reauth_ms needs a SASL listener")
            if isinstance(listener.max_reauth_ms, bool) or not (
                isinstance(listener.max_reauth_ms, int) and listener.max_reauth_ms > 0
            ):
                raise ValueError(f"listener {name!r}: max_reauth_ms must be a positive int")
    for user, password in users.items():
        # The StorageTool splits --add-scram on ',' and the JAAS options are double-quoted,
        # so these characters cannot be passed through either.
        for what, text in (("name", user), ("password", password)):
            if not isinstance(text, str) or not text:
                raise ValueError(f"SASL user {what}s must be non-empty strings")
            if any(c in ',"\\]' or c.isspace() for c in text):
                raise ValueError(
                    f"SASL user {what}s may not contain commas, double quotes, backslashes, "
                    "']' or whitespace"
                    + (f" (user {user!r})" if what == "password" else f" ({text!r})")
                )
        # '$' for Azure Event Hubs' literal user name "$ConnectionString".
        if not all(c.isascii() and (c.isalnum() or c in "_-.@$") for c in user):
            raise ValueError(f"SASL user name {user!r} may only use letters, digits and _-.@$")


def security_config(
    listeners: Sequence[Listener], tls: BrokerTLS | None, users: Mapping[str, str]
) -> dict[str, str]:
    """Per-listener TLS and SASL settings (``listener.name.<name>.`` prefixed); ``tls`` is
    the identity of TLS listeners that bring none of their own."""
    config: dict[str, str] = {}
    for listener in listeners:
        prefix = f"listener.name.{listener.name.lower()}."
        if listener.uses_tls:
            identity = listener.tls or tls
            assert identity is not None  # see check_security
            # Inline PEM: no key store files or store passwords to manage.
            config[prefix + "ssl.keystore.type"] = "PEM"
            config[prefix + "ssl.keystore.certificate.chain"] = identity.certificate_chain
            config[prefix + "ssl.keystore.key"] = identity.private_key
            config[prefix + "ssl.client.auth"] = listener.client_auth
            if identity.client_ca is not None:
                config[prefix + "ssl.truststore.type"] = "PEM"
                config[prefix + "ssl.truststore.certificates"] = identity.client_ca
        if listener.uses_sasl:
            config[prefix + "sasl.enabled.mechanisms"] = ",".join(listener.sasl_mechanisms)
            for mechanism in listener.sasl_mechanisms:
                key = f"{prefix}{mechanism.lower()}.sasl.jaas.config"
                if listener.max_reauth_ms is not None:
                    reauth_key = f"{prefix}{mechanism.lower()}.connections.max.reauth.ms"
                    config[reauth_key] = str(listener.max_reauth_ms)
                if mechanism == "OAUTHBEARER":
                    # Without sasl.server.callback.handler.class the broker validates
                    # tokens with OAuthBearerUnsecuredValidatorCallbackHandler.
                    config[key] = _OAUTHBEARER_JAAS
                elif mechanism == "PLAIN":
                    # PLAIN checks passwords against the login module's user_<name> options.
                    options = " ".join(
                        f'user_{name}="{password}"' for name, password in users.items()
                    )
                    config[key] = (
                        f"org.apache.kafka.common.security.plain.PlainLoginModule "
                        f"required {options};"
                    )
                else:
                    # SCRAM checks against the credentials in the metadata log.
                    config[key] = (
                        "org.apache.kafka.common.security.scram.ScramLoginModule required;"
                    )
    return config


def scram_arguments(listeners: Sequence[Listener], users: Mapping[str, str]) -> list[str]:
    """``--add-scram`` arguments of ``StorageTool format`` for every SASL user."""
    mechanisms = sorted(
        {m for item in listeners if item.uses_sasl for m in item.sasl_mechanisms}
        - {"PLAIN", "OAUTHBEARER"}
    )
    args: list[str] = []
    for mechanism in mechanisms:
        for name, password in users.items():
            args += ["--add-scram", f"{mechanism}=[name={name},password={password}]"]
    return args

"""Package-internal: the ``aioproducer`` data source's options, read the way Spark's Kafka
sink reads them, into :class:`SinkOptions`.

Spark hands a data source its options lower-cased. The sink's own options are
``kafka.bootstrap.servers``, ``topic`` and ``includeHeaders``; every other ``kafka.<name>``
is a Java producer setting, mapped here onto the :class:`~aioproducer.ProducerConfig`
setting of the same meaning (:data:`KAFKA_SETTINGS`). A name we do not know, or one whose
Java meaning we cannot honour (serializers, interceptors, JKS key stores), is refused with
the closest valid name, before any task runs. Values arrive as strings and are converted
here, so a bad number fails on the driver too.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import re
import ssl
from collections.abc import Callable, Mapping
from typing import Any

from ..config import ProducerConfig
from ..errors import ConfigError

__all__ = ["KAFKA_SETTINGS", "SOURCE_OPTIONS", "SinkOptions", "parse_options"]


def _int(text: str) -> int:
    return int(text.strip())


def _float(text: str) -> float:
    return float(text.strip())


def _bool(text: str) -> bool:
    word = text.strip().lower()
    if word not in ("true", "false"):
        raise ValueError(f"expected true or false, got {text!r}")
    return word == "true"


def _acks(text: str) -> Any:
    word = text.strip().lower()
    if word == "all":
        return "all"
    value = int(word)
    if value not in (0, 1, -1):
        raise ValueError(f"expected all, -1, 0 or 1, got {text!r}")
    return value


def _upper(text: str) -> str:
    return text.strip().upper()


def _text(text: str) -> str:
    return text.strip()


#: ``kafka.<Java name>`` -> (our setting, how its string value converts).
KAFKA_SETTINGS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "bootstrap.servers": ("bootstrap_servers", _text),
    "client.id": ("client_id", _text),
    "acks": ("acks", _acks),
    "enable.idempotence": ("enable_idempotence", _bool),
    "linger.ms": ("linger_ms", _float),
    "batch.size": ("batch_size", _int),
    "buffer.memory": ("buffer_memory", _int),
    "max.block.ms": ("max_block_ms", _int),
    "delivery.timeout.ms": ("delivery_timeout_ms", _int),
    "request.timeout.ms": ("request_timeout_ms", _int),
    "retry.backoff.ms": ("retry_backoff_ms", _int),
    "retry.backoff.max.ms": ("retry_backoff_max_ms", _int),
    "reconnect.backoff.ms": ("reconnect_backoff_ms", _int),
    "reconnect.backoff.max.ms": ("reconnect_backoff_max_ms", _int),
    "max.in.flight.requests.per.connection": ("max_in_flight_requests_per_connection", _int),
    "max.request.size": ("max_request_size", _int),
    "compression.type": ("compression_type", _text),
    "compression.gzip.level": ("compression_level", _int),
    "compression.lz4.level": ("compression_level", _int),
    "compression.zstd.level": ("compression_level", _int),
    "metadata.max.age.ms": ("metadata_max_age_ms", _int),
    "metadata.max.idle.ms": ("metadata_max_idle_ms", _int),
    "allow.auto.create.topics": ("allow_auto_create_topics", _bool),
    "partitioner.ignore.keys": ("partitioner_ignore_keys", _bool),
    "partitioner.adaptive.partitioning.enable": (
        "partitioner_adaptive_partitioning_enable",
        _bool,
    ),
    "partitioner.availability.timeout.ms": ("partitioner_availability_timeout_ms", _int),
    "security.protocol": ("security_protocol", _upper),
    "sasl.mechanism": ("sasl_mechanism", _upper),
    "transaction.timeout.ms": ("transaction_timeout_ms", _int),
}

#: ``kafka.ssl.*`` settings read into one TLS context (PEM only: Python has no JKS reader).
SSL_SETTINGS = (
    "ssl.truststore.location",
    "ssl.truststore.type",
    "ssl.truststore.certificates",
    "ssl.keystore.location",
    "ssl.keystore.type",
    "ssl.keystore.certificate.chain",
    "ssl.keystore.key",
    "ssl.key.password",
    "ssl.endpoint.identification.algorithm",
)

#: Java settings with no counterpart here, and why (refused by name, not as unknown).
UNSUPPORTED = {
    "key.serializer": "Spark's Kafka sink refuses it too: keys are the key column's bytes",
    "value.serializer": "Spark's Kafka sink refuses it too: values are the value column's bytes",
    "transactional.id": (
        "one id would be shared by every task, each fencing the others; give the "
        "transactionalIdPrefix option (each task's id is '<prefix>-<partition index>')"
    ),
    "partitioner.class": "a Java class; rows choose a partition with the partition column",
    "interceptor.classes": "Java classes cannot run in a Python worker",
    "sasl.login.callback.handler.class": "a Java class; OAUTHBEARER is not available here",
    "sasl.client.callback.handler.class": "a Java class",
    "sasl.oauthbearer.token.endpoint.url": "OAUTHBEARER is not available through options",
}

#: The data source's own options: the name Spark users write -> what it sets.
SOURCE_OPTIONS = {
    "topic": "topic",
    "includeheaders": "includeHeaders",
    "transactionalidprefix": "transactionalIdPrefix",
    "exactlyonce": "exactlyOnce",
    "flushtimeout": "flushTimeout",
    # Set by Spark itself on streaming writes.
    "checkpointlocation": "checkpointLocation",
    "path": "path",
}


def _valid_names() -> list[str]:
    names = [f"kafka.{name}" for name in (*KAFKA_SETTINGS, *SSL_SETTINGS, "sasl.jaas.config")]
    return names + list(SOURCE_OPTIONS.values())


def _closest(name: str) -> str:
    shown = _valid_names()
    lowered = {n.lower(): n for n in shown}
    hint = difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=0.6)
    return f"; did you mean {lowered[hint[0]]!r}?" if hint else ""


@dataclasses.dataclass(frozen=True)
class SinkOptions:
    """The data source's options, checked and converted on the driver (plain picklable data).

    ``producer_config`` holds :class:`~aioproducer.ProducerConfig` settings under our names
    (``bootstrap_servers``, ``linger_ms``, ...), mapped from the ``kafka.*`` options.
    ``options`` keeps every option as Spark gave it (lower-cased names, string values).
    """

    bootstrap_servers: str
    topic: str | None
    include_headers: bool
    producer_config: dict[str, Any]
    transactional_id_prefix: str | None
    exactly_once: bool
    checkpoint_location: str | None
    flush_timeout: float | None
    options: dict[str, str]

    @property
    def derived_prefix(self) -> str | None:
        """``transactional_id_prefix`` if given, else one derived from the checkpoint
        location (stable across restarts of the same query), else ``None``."""
        if self.transactional_id_prefix is not None:
            return self.transactional_id_prefix
        if self.checkpoint_location is None:
            return None
        digest = hashlib.sha256(self.checkpoint_location.encode()).hexdigest()[:16]
        return f"aioproducer-{digest}"


def parse_options(options: Mapping[str, str]) -> SinkOptions:
    """Read Spark's (lower-cased) options into :class:`SinkOptions`; raise
    :class:`~aioproducer.errors.ConfigError` naming the first bad one."""
    opts = {str(k).lower(): str(v) for k, v in options.items()}
    config: dict[str, Any] = {}
    ssl_opts: dict[str, str] = {}
    jaas: str | None = None
    for name, raw in opts.items():
        if name.startswith("kafka."):
            java = name[len("kafka.") :]
            if java in KAFKA_SETTINGS:
                ours, convert = KAFKA_SETTINGS[java]
                try:
                    config[ours] = convert(raw)
                except ValueError as exc:
                    raise ConfigError(f"option {name!r}={raw!r} is invalid: {exc}") from None
            elif java in SSL_SETTINGS:
                ssl_opts[java] = raw
            elif java == "sasl.jaas.config":
                jaas = raw
            elif java in UNSUPPORTED:
                raise ConfigError(f"option {name!r} is not supported: {UNSUPPORTED[java]}")
            else:
                raise ConfigError(f"unknown option {name!r}{_closest(name)}")
        elif name not in SOURCE_OPTIONS:
            raise ConfigError(f"unknown option {name!r}{_closest(name)}")
    servers = config.get("bootstrap_servers")
    if not servers:
        raise ConfigError("option 'kafka.bootstrap.servers' is required (host:port[,host:port])")
    if jaas is not None:
        config.update(_jaas(jaas, config.get("sasl_mechanism")))
    if ssl_opts:
        config["ssl_context"] = ssl_context(tuple(sorted(ssl_opts.items())))
    topic = opts.get("topic")
    if topic is not None and not topic.strip():
        raise ConfigError("option 'topic' is empty")

    def flag(name: str, shown: str) -> bool:
        try:
            return _bool(opts.get(name, "false"))
        except ValueError as exc:
            raise ConfigError(f"option {shown!r} is invalid: {exc}") from None

    flush_timeout = None
    if "flushtimeout" in opts:
        try:
            flush_timeout = float(opts["flushtimeout"])
        except ValueError:
            raise ConfigError(
                f"option 'flushTimeout' must be seconds, got {opts['flushtimeout']!r}"
            ) from None
    prefix = opts.get("transactionalidprefix")
    if prefix is not None and not prefix.strip():
        raise ConfigError("option 'transactionalIdPrefix' is empty")
    # Every setting at once, as a producer would take them: a bad value fails here.
    ProducerConfig.from_kwargs(config)
    return SinkOptions(
        bootstrap_servers=servers,
        topic=topic,
        include_headers=flag("includeheaders", "includeHeaders"),
        producer_config=config,
        transactional_id_prefix=prefix,
        exactly_once=flag("exactlyonce", "exactlyOnce"),
        checkpoint_location=opts.get("checkpointlocation"),
        flush_timeout=flush_timeout,
        options=opts,
    )


_JAAS_MODULES = {
    "org.apache.kafka.common.security.plain.PlainLoginModule": ("PLAIN",),
    "org.apache.kafka.common.security.scram.ScramLoginModule": ("SCRAM-SHA-256", "SCRAM-SHA-512"),
}


def _jaas(text: str, mechanism: str | None) -> dict[str, str]:
    """``sasl.jaas.config`` for PLAIN and SCRAM: its login module, username and password."""
    match = re.match(
        r"\s*([\w.$]+)\s+(required|optional|requisite|sufficient)\b(.*?);?\s*$", text, re.S
    )
    if match is None:
        raise ConfigError(
            "option 'kafka.sasl.jaas.config' must read '<LoginModule> required "
            'username="..." password="...";\''
        )
    module, _flag, rest = match.groups()
    if module not in _JAAS_MODULES:
        raise ConfigError(
            f"option 'kafka.sasl.jaas.config' names {module!r}; only PlainLoginModule and "
            "ScramLoginModule are supported"
        )
    if mechanism is not None and mechanism not in _JAAS_MODULES[module]:
        raise ConfigError(
            f"option 'kafka.sasl.jaas.config' uses {module.rsplit('.', 1)[-1]}, which does "
            f"not serve kafka.sasl.mechanism={mechanism!r}"
        )
    pairs = dict(re.findall(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"', rest))
    if "username" not in pairs or "password" not in pairs:
        raise ConfigError(
            'option \'kafka.sasl.jaas.config\' needs username="..." and password="..."'
        )
    out = {"sasl_username": pairs["username"], "sasl_password": pairs["password"]}
    if mechanism is None:
        out["sasl_mechanism"] = _JAAS_MODULES[module][0]
    return out


class _KafkaSSLContext(ssl.SSLContext):
    """A TLS context that pickles as the settings it was made from (tasks rebuild it)."""

    settings: tuple[tuple[str, str], ...]

    def __reduce__(self) -> tuple[Any, ...]:
        return (ssl_context, (self.settings,))


def ssl_context(settings: tuple[tuple[str, str], ...]) -> ssl.SSLContext:
    """The TLS context of the ``kafka.ssl.*`` options (PEM files or PEM text)."""
    opts = dict(settings)
    for kind in ("truststore", "keystore"):
        store_type = opts.get(f"ssl.{kind}.type", "PEM").upper()
        if store_type != "PEM":
            raise ConfigError(
                f"option 'kafka.ssl.{kind}.type'={store_type!r} is not supported: give PEM "
                f"(convert with keytool/openssl)"
            )
    ctx = _KafkaSSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.settings = settings
    try:
        if "ssl.truststore.location" in opts:
            ctx.load_verify_locations(cafile=opts["ssl.truststore.location"])
        elif "ssl.truststore.certificates" in opts:
            ctx.load_verify_locations(cadata=opts["ssl.truststore.certificates"])
        else:
            ctx.load_default_certs()
        password = opts.get("ssl.key.password")
        if "ssl.keystore.location" in opts:
            ctx.load_cert_chain(opts["ssl.keystore.location"], password=password)
        elif "ssl.keystore.certificate.chain" in opts:
            raise ConfigError(
                "option 'kafka.ssl.keystore.certificate.chain' is not supported: give the "
                "certificate and key in one PEM file as 'kafka.ssl.keystore.location'"
            )
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"the kafka.ssl.* options do not make a TLS context: {exc}") from None
    if opts.get("ssl.endpoint.identification.algorithm", "https").strip() == "":
        ctx.check_hostname = False
    return ctx

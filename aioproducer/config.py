"""The producer's configuration: one frozen, validated object with Kafka 4.x defaults.

Every key is checked when the object is built, so a typo or a bad value fails at
construction with a :class:`~aioproducer.errors.ConfigError` naming the key and what is
allowed, never later inside a background task.
"""

from __future__ import annotations

import dataclasses
import difflib
import ssl
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from .errors import ConfigError
from .oauth import TokenProvider
from .protocol.compression import Codec, codec_from_name, validate_level

if TYPE_CHECKING:
    from .aws import AwsCredentialsProvider

__all__ = ["Acks", "Partitioner", "ProducerConfig", "Serializer"]

Acks = Literal[0, 1, -1, "all"]
#: ``serializer(topic, obj) -> bytes | None``.
Serializer = Callable[[str, Any], "bytes | bytearray | memoryview | str | None"]
#: ``partitioner(topic, key_bytes, all_partitions, available_partitions) -> partition``.
Partitioner = Callable[[str, "bytes | None", Sequence[int], Sequence[int]], int]

_INT32_MAX = 2**31 - 1
_DEFAULT_MAX_REQUEST_SIZE = 1024 * 1024


@dataclass(frozen=True)
class ProducerConfig:
    """Validated producer settings. Build it with ``ProducerConfig(**kwargs)``.

    Names follow the Java producer with dots replaced by underscores; defaults are the
    Kafka 4.x Java producer's.
    """

    bootstrap_servers: str | Sequence[str] = "127.0.0.1:9092"
    client_id: str = "aioproducer"
    acks: Acks = "all"
    enable_idempotence: bool = True
    #: How long a batch that is not full waits for more records, from its first record.
    #: It leaves once that time has passed, or up to 1 ms (the event loop's timer
    #: granularity; at most half of ``linger_ms``) before: loops wake timers on whole
    #: milliseconds, so waiting for the exact end would make it leave up to 1 ms late
    #: instead. A full batch, :meth:`~aioproducer.Producer.flush` and closing send at once.
    linger_ms: float = 5.0
    batch_size: int = 16384
    buffer_memory: int = 32 * 1024 * 1024
    max_block_ms: int = 60000
    delivery_timeout_ms: int = 120000
    request_timeout_ms: int = 30000
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1000
    reconnect_backoff_ms: int = 50
    reconnect_backoff_max_ms: int = 1000
    max_in_flight_requests_per_connection: int = 5
    max_request_size: int = _DEFAULT_MAX_REQUEST_SIZE
    compression_type: str = "none"
    compression_level: int | None = None
    #: Batches at least this large (uncompressed bytes) are compressed in a worker thread.
    compression_offload_bytes: int = 128 * 1024
    metadata_max_age_ms: int = 300000
    #: A topic no record was sent to for this long leaves the metadata (and the producer's
    #: per-topic state) at the next refresh; sending to it again fetches it anew.
    metadata_max_idle_ms: int = 300000
    #: The largest response accepted from a broker; a larger announced size closes the
    #: connection with ``ResponseTooLargeError`` before anything is buffered.
    receive_message_max_bytes: int = 64 * 1024 * 1024
    allow_auto_create_topics: bool = True
    key_serializer: Serializer | None = None
    value_serializer: Serializer | None = None
    partitioner: Partitioner | None = None
    partitioner_ignore_keys: bool = False
    #: KIP-794: keyless records lean towards partitions with fewer batches waiting, so a
    #: slow broker receives less (False: the next sticky partition is chosen uniformly).
    partitioner_adaptive_partitioning_enable: bool = True
    #: With adaptive partitioning, leave out the partitions of a broker that had batches
    #: waiting but took none for this long (0: never).
    partitioner_availability_timeout_ms: int = 0
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    sasl_mechanism: (
        Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "AWS_MSK_IAM"] | None
    ) = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    #: For ``sasl_mechanism="OAUTHBEARER"``: a callable (plain or async) returning an
    #: :class:`~aioproducer.oauth.OAuthToken` or a ``(token, expires_at)`` pair; see
    #: :mod:`aioproducer.oauth`.
    sasl_oauth_token_provider: TokenProvider | None = field(default=None, repr=False)
    #: For ``sasl_mechanism="AWS_MSK_IAM"``: the AWS region of the MSK cluster; by default
    #: the one the standard AWS configuration names (``AWS_REGION``, the profile).
    sasl_aws_region: str | None = None
    #: For ``sasl_mechanism="AWS_MSK_IAM"``: a callable (plain or async) returning
    #: ``aioproducer.aws.AwsCredentials``, called at every authentication; by
    #: default botocore's standard provider chain (see ``aioproducer.aws``).
    sasl_aws_credentials_provider: AwsCredentialsProvider | None = field(default=None, repr=False)
    #: Makes the producer transactional (see ``Producer.begin_transaction``); producers
    #: with the same id fence each other. Needs idempotence and ``acks="all"``.
    transactional_id: str | None = None
    #: How long the coordinator lets a transaction stay open before aborting it.
    transaction_timeout_ms: int = 60000

    # Derived, filled in __post_init__.
    codec: Codec = field(init=False, default=Codec.NONE)
    acks_value: int = field(init=False, default=-1)
    bootstrap_list: tuple[tuple[str, int], ...] = field(init=False, default=())

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "bootstrap_list", _parse_bootstrap(self.bootstrap_servers))
        if not isinstance(self.client_id, str):
            raise ConfigError(f"client_id must be a str, got {type(self.client_id).__name__}")

        if self.acks not in (0, 1, -1, "all") or isinstance(self.acks, bool):
            raise ConfigError(f"acks must be one of 0, 1, -1 or 'all', got {self.acks!r}")
        acks_value = -1 if self.acks == "all" else int(self.acks)
        set_(self, "acks_value", acks_value)

        _check_bool("enable_idempotence", self.enable_idempotence)
        _check_bool("allow_auto_create_topics", self.allow_auto_create_topics)
        _check_bool("partitioner_ignore_keys", self.partitioner_ignore_keys)
        _check_bool(
            "partitioner_adaptive_partitioning_enable",
            self.partitioner_adaptive_partitioning_enable,
        )
        if self.transactional_id is not None and acks_value != -1:
            raise ConfigError(
                f"acks must be 'all' for a transactional producer (got acks={self.acks!r})"
            )
        if self.enable_idempotence:
            if acks_value != -1:
                raise ConfigError(
                    f"acks must be 'all' when enable_idempotence=True (got acks={self.acks!r}); "
                    "set enable_idempotence=False to use acks=0 or 1"
                )
            if self.max_in_flight_requests_per_connection > 5:
                raise ConfigError(
                    "max_in_flight_requests_per_connection must be at most 5 when "
                    f"enable_idempotence=True (got {self.max_in_flight_requests_per_connection})"
                )

        if self.transactional_id is not None:
            if not isinstance(self.transactional_id, str) or not self.transactional_id:
                raise ConfigError(
                    f"transactional_id must be a non-empty str or None, got {self.transactional_id!r}"
                )
            if not self.enable_idempotence:
                raise ConfigError(
                    "a transactional producer needs enable_idempotence=True "
                    f"(transactional_id={self.transactional_id!r})"
                )
        _check_int("transaction_timeout_ms", self.transaction_timeout_ms, 1, _INT32_MAX)

        _check_number("linger_ms", self.linger_ms, 0, 24 * 3600 * 1000)
        _check_int("batch_size", self.batch_size, 0, _INT32_MAX)
        _check_int("buffer_memory", self.buffer_memory, 1024, 2**62)
        _check_int("max_block_ms", self.max_block_ms, 0, _INT32_MAX)
        _check_int("request_timeout_ms", self.request_timeout_ms, 1, _INT32_MAX)
        _check_int("delivery_timeout_ms", self.delivery_timeout_ms, 1, _INT32_MAX)
        _check_int("retry_backoff_ms", self.retry_backoff_ms, 0, _INT32_MAX)
        _check_int("retry_backoff_max_ms", self.retry_backoff_max_ms, 0, _INT32_MAX)
        _check_int("reconnect_backoff_ms", self.reconnect_backoff_ms, 0, _INT32_MAX)
        _check_int("reconnect_backoff_max_ms", self.reconnect_backoff_max_ms, 0, _INT32_MAX)
        _check_int(
            "max_in_flight_requests_per_connection",
            self.max_in_flight_requests_per_connection,
            1,
            1000,
        )
        _check_int("max_request_size", self.max_request_size, 1024, _INT32_MAX)
        self._check_event_hubs()
        _check_int("compression_offload_bytes", self.compression_offload_bytes, 0, 2**62)
        _check_int("metadata_max_age_ms", self.metadata_max_age_ms, 0, _INT32_MAX)
        _check_int("metadata_max_idle_ms", self.metadata_max_idle_ms, 1000, _INT32_MAX)
        _check_int(
            "receive_message_max_bytes", self.receive_message_max_bytes, 64 * 1024, _INT32_MAX
        )
        _check_int(
            "partitioner_availability_timeout_ms",
            self.partitioner_availability_timeout_ms,
            0,
            _INT32_MAX,
        )
        if self.partitioner_availability_timeout_ms:
            # Java accepts these combinations and ignores the timeout; saying so is kinder.
            if not self.partitioner_adaptive_partitioning_enable:
                raise ConfigError(
                    "partitioner_availability_timeout_ms has no effect with "
                    "partitioner_adaptive_partitioning_enable=False; set it to 0 or enable "
                    "adaptive partitioning"
                )
            if self.partitioner is not None:
                raise ConfigError(
                    "partitioner_availability_timeout_ms has no effect with a custom "
                    "partitioner; set it to 0"
                )
        if self.delivery_timeout_ms < self.linger_ms + self.request_timeout_ms:
            raise ConfigError(
                "delivery_timeout_ms must be at least linger_ms + request_timeout_ms "
                f"({self.linger_ms} + {self.request_timeout_ms}), got {self.delivery_timeout_ms}"
            )
        if self.retry_backoff_max_ms < self.retry_backoff_ms:
            raise ConfigError(
                f"retry_backoff_max_ms ({self.retry_backoff_max_ms}) must be at least "
                f"retry_backoff_ms ({self.retry_backoff_ms})"
            )

        if not isinstance(self.compression_type, str):
            raise ConfigError(
                f"compression_type must be a str, got {type(self.compression_type).__name__}"
            )
        try:
            codec = codec_from_name(self.compression_type)
        except ConfigError as exc:
            raise ConfigError(f"compression_type: {exc}") from None
        set_(self, "codec", codec)
        if self.compression_level is not None and (
            isinstance(self.compression_level, bool) or not isinstance(self.compression_level, int)
        ):
            raise ConfigError(
                f"compression_level must be an integer or None, got {self.compression_level!r}"
            )
        try:
            validate_level(codec, self.compression_level)
        except ConfigError as exc:
            raise ConfigError(f"compression_level: {exc}") from None

        for name in ("key_serializer", "value_serializer", "partitioner"):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise ConfigError(f"{name} must be callable or None, got {value!r}")

        protocols = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
        if self.security_protocol not in protocols:
            raise ConfigError(
                f"security_protocol must be one of {', '.join(protocols)}, "
                f"got {self.security_protocol!r}"
            )
        if self.ssl_context is not None and not isinstance(self.ssl_context, ssl.SSLContext):
            raise ConfigError("ssl_context must be an ssl.SSLContext or None")
        mechanisms = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "AWS_MSK_IAM")
        provider = self.sasl_oauth_token_provider
        if self.security_protocol.startswith("SASL"):
            if self.sasl_mechanism not in mechanisms:
                raise ConfigError(
                    f"sasl_mechanism must be one of {', '.join(mechanisms)} when "
                    f"security_protocol={self.security_protocol}, got {self.sasl_mechanism!r}"
                )
            if self.sasl_mechanism == "OAUTHBEARER":
                if provider is None:
                    raise ConfigError(
                        "sasl_oauth_token_provider is required for sasl_mechanism='OAUTHBEARER'"
                    )
                if not callable(provider):
                    raise ConfigError(
                        "sasl_oauth_token_provider must be callable (returning an OAuthToken "
                        f"or a (token, expires_at) pair), got {type(provider).__name__}"
                    )
                if self.sasl_username is not None or self.sasl_password is not None:
                    raise ConfigError(
                        "sasl_username and sasl_password are not used with OAUTHBEARER "
                        "(the token provider authenticates); leave them unset"
                    )
            elif self.sasl_mechanism == "AWS_MSK_IAM":
                if provider is not None:
                    raise ConfigError(
                        "sasl_oauth_token_provider is only used with "
                        "sasl_mechanism='OAUTHBEARER', not 'AWS_MSK_IAM'"
                    )
                if self.sasl_username is not None or self.sasl_password is not None:
                    raise ConfigError(
                        "sasl_username and sasl_password are not used with AWS_MSK_IAM "
                        "(AWS credentials sign each authentication); leave them unset"
                    )
            else:
                if provider is not None:
                    raise ConfigError(
                        "sasl_oauth_token_provider is only used with "
                        f"sasl_mechanism='OAUTHBEARER', not {self.sasl_mechanism!r}"
                    )
                if not self.sasl_username or self.sasl_password is None:
                    raise ConfigError("sasl_username and sasl_password are required for SASL")
        elif provider is not None:
            raise ConfigError(
                "sasl_oauth_token_provider is set but security_protocol is "
                f"{self.security_protocol}; use SASL_PLAINTEXT or SASL_SSL with OAUTHBEARER"
            )
        elif self.sasl_mechanism is not None:
            raise ConfigError(
                "sasl_mechanism is set but security_protocol is "
                f"{self.security_protocol}; use SASL_PLAINTEXT or SASL_SSL"
            )
        self._check_aws()

    def _check_event_hubs(self) -> None:
        """Azure Event Hubs refuses requests above 1,046,528 bytes: a producer of one of its
        namespaces gets that limit instead of the default, and may not set a higher one."""
        from .eventhubs import EVENT_HUBS_MAX_REQUEST_SIZE, is_event_hubs_host

        if not any(is_event_hubs_host(host) for host, _port in self.bootstrap_list):
            return
        if self.max_request_size == _DEFAULT_MAX_REQUEST_SIZE:
            object.__setattr__(self, "max_request_size", EVENT_HUBS_MAX_REQUEST_SIZE)
        elif self.max_request_size > EVENT_HUBS_MAX_REQUEST_SIZE:
            raise ConfigError(
                f"max_request_size={self.max_request_size} is above Azure Event Hubs' limit "
                f"of {EVENT_HUBS_MAX_REQUEST_SIZE} bytes per request; set at most that"
            )

    def _check_aws(self) -> None:
        """The AWS_MSK_IAM settings: set only with that mechanism; the region resolved now
        (from the AWS configuration if not given), so a missing one fails here."""
        aws_set = self.sasl_aws_region is not None or self.sasl_aws_credentials_provider is not None
        if self.sasl_mechanism != "AWS_MSK_IAM":
            if aws_set:
                raise ConfigError(
                    "sasl_aws_region and sasl_aws_credentials_provider are only used with "
                    f"sasl_mechanism='AWS_MSK_IAM', not {self.sasl_mechanism!r}"
                )
            return
        provider = self.sasl_aws_credentials_provider
        if provider is not None and not callable(provider):
            raise ConfigError(
                "sasl_aws_credentials_provider must be callable (returning AwsCredentials), "
                f"got {type(provider).__name__}"
            )
        region = self.sasl_aws_region
        if region is not None and (not isinstance(region, str) or not region):
            raise ConfigError(f"sasl_aws_region must be a non-empty string, got {region!r}")
        from .aws import default_region

        if region is None:
            region = default_region()
            if region is None:
                raise ConfigError(
                    "sasl_aws_region is required for AWS_MSK_IAM: set it, or AWS_REGION, "
                    "or the region of the AWS profile"
                )
            object.__setattr__(self, "sasl_aws_region", region)
        if provider is None:
            from .aws import botocore_credentials

            object.__setattr__(self, "sasl_aws_credentials_provider", botocore_credentials())

    @classmethod
    def from_kwargs(cls, kwargs: Mapping[str, Any]) -> ProducerConfig:
        """Build a config from keyword arguments, rejecting unknown keys with a suggestion."""
        known = {f.name for f in dataclasses.fields(cls) if f.init}
        for key in kwargs:
            if key not in known:
                hint = difflib.get_close_matches(key.replace(".", "_"), sorted(known), n=1)
                suggestion = f"; did you mean {hint[0]!r}?" if hint else ""
                raise ConfigError(f"unknown config key {key!r}{suggestion}")
        return cls(**kwargs)


def _parse_bootstrap(value: str | Sequence[str]) -> tuple[tuple[str, int], ...]:
    items = value.split(",") if isinstance(value, str) else list(value)
    out: list[tuple[str, int]] = []
    for raw in items:
        if not isinstance(raw, str):
            raise ConfigError(f"bootstrap_servers entries must be 'host:port' strings, got {raw!r}")
        item = raw.strip()
        if not item:
            continue
        host, sep, port_text = item.rpartition(":")
        if not sep or not host:
            raise ConfigError(f"bootstrap_servers entry {item!r} must be 'host:port'")
        host = host.strip("[]")
        try:
            port = int(port_text)
        except ValueError:
            raise ConfigError(f"bootstrap_servers entry {item!r} has a non-numeric port") from None
        if not 0 < port < 65536:
            raise ConfigError(f"bootstrap_servers entry {item!r} has an invalid port")
        out.append((host, port))
    if not out:
        raise ConfigError("bootstrap_servers must name at least one 'host:port'")
    return tuple(out)


def _check_bool(name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise ConfigError(f"{name} must be True or False, got {value!r}")


def _check_int(name: str, value: object, lo: int, hi: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be an integer, got {value!r}")
    if not lo <= value <= hi:
        raise ConfigError(f"{name} must be between {lo} and {hi}, got {value}")


def _check_number(name: str, value: object, lo: float, hi: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{name} must be a number, got {value!r}")
    if not lo <= value <= hi:
        raise ConfigError(f"{name} must be between {lo} and {hi}, got {value}")

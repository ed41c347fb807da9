"""Azure Event Hubs' Kafka endpoint: producer settings from a connection string.

Event Hubs speaks the Kafka protocol on port 9093 of ``<namespace>.servicebus.windows.net``
with SASL_SSL and PLAIN, the user name being the literal ``$ConnectionString`` and the
password the namespace's (or one event hub's) connection string. Its own rules:

* a request may be at most :data:`EVENT_HUBS_MAX_REQUEST_SIZE` bytes (1,046,528), below
  the producer's ``max_request_size`` default of 1,048,576; a producer whose bootstrap
  servers are an Event Hubs namespace uses the lower limit by default and refuses a
  higher one at construction;
* it closes connections idle for 240 s; the producer reconnects when it next sends, with
  nothing lost and nothing logged as an error.
"""

from __future__ import annotations

from typing import Any

from .errors import ConfigError

__all__ = [
    "EVENT_HUBS_DOMAIN",
    "EVENT_HUBS_MAX_REQUEST_SIZE",
    "event_hubs_config",
    "is_event_hubs_host",
]

#: The largest request Event Hubs accepts, in bytes.
EVENT_HUBS_MAX_REQUEST_SIZE = 1_046_528
#: The domain of Event Hubs namespaces (public Azure cloud).
EVENT_HUBS_DOMAIN = ".servicebus.windows.net"


def is_event_hubs_host(host: str) -> bool:
    """Whether ``host`` is an Event Hubs namespace's Kafka endpoint."""
    return host.lower().rstrip(".").endswith(EVENT_HUBS_DOMAIN)


def event_hubs_config(connection_string: str) -> dict[str, Any]:
    """The producer settings for the Event Hubs namespace a connection string names.

    ``connection_string`` is ``Endpoint=sb://<namespace>.servicebus.windows.net/;
    SharedAccessKeyName=...;SharedAccessKey=...`` (optionally with ``;EntityPath=...``), as
    the Azure portal shows it. Pass the result as keyword arguments, adding any others::

        Producer(**event_hubs_config(connection_string), linger_ms=20)

    Raises :class:`~aioproducer.errors.ConfigError` (without echoing the string, which
    holds a key) if it has no ``sb://`` endpoint or no shared access key.
    """
    if not isinstance(connection_string, str):
        raise ConfigError("an Event Hubs connection string must be a str")
    parts: dict[str, str] = {}
    for item in connection_string.strip().split(";"):
        name, sep, value = item.partition("=")
        if sep:
            parts[name.strip().lower()] = value.strip()
    endpoint = parts.get("endpoint", "")
    if not endpoint.startswith("sb://"):
        raise ConfigError(
            "the Event Hubs connection string has no Endpoint=sb://<namespace>"
            f"{EVENT_HUBS_DOMAIN}/ part"
        )
    # A port only in a local stand-in's string (the service itself listens on 9093).
    host, _, port = endpoint[len("sb://") :].split("/", 1)[0].partition(":")
    if port and not port.isdigit():
        raise ConfigError("the Event Hubs connection string's endpoint has a bad port")
    if not host or not (parts.get("sharedaccesskey") or parts.get("sharedaccesssignature")):
        raise ConfigError(
            "the Event Hubs connection string needs a namespace host and a SharedAccessKey"
        )
    return {
        "bootstrap_servers": f"{host}:{port or 9093}",
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "PLAIN",
        "sasl_username": "$ConnectionString",
        "sasl_password": connection_string.strip(),
        "max_request_size": EVENT_HUBS_MAX_REQUEST_SIZE,
    }

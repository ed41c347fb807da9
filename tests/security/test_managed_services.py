"""docs/managed-services.md runs as written, against local stand-ins for the services.

One Kafka with a SASL_SSL listener taking PLAIN, as Azure Event Hubs and Confluent Cloud
do: its users are ``$ConnectionString`` (the password a made-up Event Hubs connection
string naming this broker) and an API key. The snippets run in a subprocess with the
environment the page tells readers to set, the test CA trusted through ``SSL_CERT_FILE``
as a public CA would be; every record they report is read back. The broker closes
connections idle for :data:`IDLE_MS`, as Event Hubs does after 240 s, for the idle test.

MSK's snippet runs against the fake broker checking IAM signatures (no real Kafka can),
with SASL_SSL replaced by SASL_PLAINTEXT since the fake has no TLS.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from aioproducer import Producer
from aioproducer.connection import BrokerConnection
from aioproducer.errors import ConfigError
from aioproducer.eventhubs import EVENT_HUBS_MAX_REQUEST_SIZE, event_hubs_config
from aioproducer.testing import BrokerTLS, FakeCluster, KafkaCluster, Listener
from aioproducer.testing.certs import CertificateAuthority
from aioproducer.testing.verify import consume_all

from .test_msk_iam import KEYS, _check_msk_iam

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "managed-services.md"
_BLOCK = re.compile(r"<!-- tested: (\w+) -->\n```python\n(.*?)\n```", re.DOTALL)
_DELIVERED = re.compile(r"delivered to (\S+)\[(\d+)\] at offset (\d+)")
#: The broker's connections.max.idle.ms.
IDLE_MS = 1000
API_KEY = "ABCDEFGH12345678"
API_SECRET = "cflt-" + uuid.uuid4().hex


def _snippets() -> dict[str, str]:
    found = dict(_BLOCK.findall(PAGE.read_text(encoding="utf-8")))
    assert set(found) == {"msk", "eventhubs", "confluent"}, sorted(found)
    return found


def _free_port_run(count: int) -> int:
    """The first of ``count`` consecutive ports that are free right now."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = int(probe.getsockname()[1])
        if base + count > 65535:
            continue
        sockets = []
        try:
            for port in range(base, base + count):
                s = socket.socket()
                sockets.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()
    raise RuntimeError("no run of free ports")


class Services:
    """The running stand-in and what a reader of the page would have."""

    def __init__(self, cluster: KafkaCluster, ca_file: Path, connection_string: str) -> None:
        self.cluster = cluster
        self.ca_file = ca_file
        self.connection_string = connection_string

    @property
    def sasl_ssl(self) -> str:
        return self.cluster.bootstrap_servers_for("SASL_SSL")


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    ca = CertificateAuthority("managed services stand-in CA")
    ca_file = tmp_path_factory.mktemp("ca") / "ca.pem"
    ca_file.write_text(ca.certificate_pem, encoding="ascii")
    # The connection string names the broker's own SASL_SSL port (broker, controller and
    # then the listener: port_base + 2), so it must be known before the broker starts.
    base = _free_port_run(3)
    connection_string = (
        f"Endpoint=sb://localhost:{base + 2}/;SharedAccessKeyName=send;"
        f"SharedAccessKey={uuid.uuid4().hex}="
    )
    with KafkaCluster(
        nodes=1,
        port_base=base,
        listeners=[Listener("SASL_SSL", sasl_mechanisms=("PLAIN",))],
        tls=BrokerTLS.from_certificate(ca.issue("localhost", "127.0.0.1")),
        sasl_users={"$ConnectionString": connection_string, API_KEY: API_SECRET},
        broker_config={"connections.max.idle.ms": str(IDLE_MS)},
    ) as cluster:
        assert cluster.bootstrap_servers_for("SASL_SSL").endswith(f":{base + 2}")
        cluster.create_topic("orders", 1)
        yield Services(cluster, ca_file, connection_string)


def _run(code: str, env: dict[str, str], tmp_path: Path) -> list[tuple[str, int, int]]:
    program = tmp_path / "snippet.py"
    program.write_text(code + "\n", encoding="utf-8")
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, str(program)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env, "PYTHONPATH": path},
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    delivered = [(t, int(p), int(o)) for t, p, o in _DELIVERED.findall(result.stdout)]
    assert delivered, result.stdout
    return delivered


def _read_back(services: Services, delivered: list[tuple[str, int, int]], prefix: bytes) -> None:
    for topic, partition, offset in delivered:
        records = consume_all(services.cluster.bootstrap_servers, topic, partitions=[partition])
        [record] = [r for r in records if r.offset == offset]
        assert record.value is not None and record.value.startswith(prefix), record


def test_event_hubs_snippet(services: Services, tmp_path: Path) -> None:
    delivered = _run(
        _snippets()["eventhubs"],
        {
            "EVENTHUBS_CONNECTION_STRING": services.connection_string,
            "SSL_CERT_FILE": str(services.ca_file),
        },
        tmp_path,
    )
    _read_back(services, delivered, b"hello Event Hubs")


def test_confluent_cloud_snippet(services: Services, tmp_path: Path) -> None:
    delivered = _run(
        _snippets()["confluent"],
        {
            "CONFLUENT_BOOTSTRAP": services.sasl_ssl,
            "CONFLUENT_API_KEY": API_KEY,
            "CONFLUENT_API_SECRET": API_SECRET,
            "SSL_CERT_FILE": str(services.ca_file),
        },
        tmp_path,
    )
    _read_back(services, delivered, b"hello Confluent Cloud")


def test_msk_snippet_against_the_iam_checking_fake(tmp_path: Path) -> None:
    code = _snippets()["msk"]
    assert 'security_protocol="SASL_SSL"' in code
    code = code.replace('security_protocol="SASL_SSL"', 'security_protocol="SASL_PLAINTEXT"')
    key = "AKIAEXAMPLEONE000001"
    with FakeCluster(sasl={"AWS_MSK_IAM": _check_msk_iam("127.0.0.1")}) as fake:
        fake.create_topic("orders", 1)
        delivered = _run(
            code,
            {
                "MSK_BOOTSTRAP": fake.bootstrap_servers,
                "MSK_REGION": "us-east-1",
                "AWS_ACCESS_KEY_ID": key,
                "AWS_SECRET_ACCESS_KEY": KEYS[key],
                "AWS_CONFIG_FILE": "/nonexistent",
                "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
                "AWS_EC2_METADATA_DISABLED": "true",
            },
            tmp_path,
        )
        assert delivered == [("orders", 0, 0)]
        assert [r.value for r in fake.records("orders", 0)] == [b"hello MSK"]
        assert {a.principal for a in fake.authentications()} == {key}


def test_event_hubs_request_size_limit() -> None:
    settings = event_hubs_config(
        "Endpoint=sb://myns.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=s="
    )
    assert settings["bootstrap_servers"] == "myns.servicebus.windows.net:9093"
    assert settings["sasl_username"] == "$ConnectionString"
    # The namespace alone lowers the default, and a higher explicit value is refused.
    bootstrap = "myns.servicebus.windows.net:9093"
    assert Producer(bootstrap).config.max_request_size == EVENT_HUBS_MAX_REQUEST_SIZE
    assert Producer(bootstrap, max_request_size=500_000).config.max_request_size == 500_000
    with pytest.raises(ConfigError, match="1046528"):
        Producer(bootstrap, max_request_size=2_000_000)
    assert Producer("kafka.example:9092").config.max_request_size == 1024 * 1024
    with pytest.raises(ConfigError, match="no Endpoint=sb://") as excinfo:
        event_hubs_config("SharedAccessKeyName=k;SharedAccessKey=secret-value")
    assert "secret-value" not in str(excinfo.value)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_connections_the_broker_closes_when_idle_cost_nothing(
    services: Services, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Event Hubs closes connections idle for 240 s; here the broker closes them after
    1 s. Sends after each idle spell still deliver, in order, and nothing is logged at
    ERROR (or WARNING) level."""
    topic = f"idle-{uuid.uuid4().hex[:8]}"
    services.cluster.create_topic(topic, 1)
    caplog.set_level(logging.INFO, logger="aioproducer")
    opened: list[BrokerConnection] = []
    original = BrokerConnection.open

    async def recording_open(self: BrokerConnection, *args: Any, **kwargs: Any) -> None:
        await original(self, *args, **kwargs)
        opened.append(self)

    monkeypatch.setattr(BrokerConnection, "open", recording_open)
    sent = []
    async with Producer(
        **{
            **event_hubs_config(services.connection_string),
            "ssl_context": _ca_context(services.ca_file),
            "metadata_max_age_ms": 60_000,
        }
    ) as producer:
        for round_ in range(3):
            handles = []
            for i in range(20):
                value = f"round {round_} record {i}".encode()
                handles.append(await producer.send(topic, value))
                sent.append(value)
            for h in handles:
                await h
            if round_ < 2:
                # Longer than the broker's idle limit: it closes every connection.
                await anyio.sleep(IDLE_MS / 1000 * 2.2)
    records = consume_all(services.cluster.bootstrap_servers, topic, expected=len(sent))
    assert [r.value for r in records] == sent
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert loud == [], [r.getMessage() for r in loud]
    # The control: the broker did close idle connections, so the producer reconnected
    # (bootstrap plus leader once, then the leader again after each idle spell).
    leader = [c for c in opened if c.node_id >= 0]
    assert len(leader) >= 3, opened


def _ca_context(ca_file: Path) -> object:
    import ssl

    return ssl.create_default_context(cafile=str(ca_file))

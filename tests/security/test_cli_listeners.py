"""``python -m aioproducer.testing.kafka start`` with secured listeners: run it in a
subprocess, read the client settings it prints, and produce through what it advertises."""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from aioproducer import Producer
from aioproducer.testing.tokens import unsecured_token_provider
from aioproducer.testing.verify import consume_all

REPO_ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "cli-secret-pw"


def _read_settings(proc: subprocess.Popen[str]) -> dict[str, str]:
    """The ``key=value`` lines the CLI prints, up to the empty line that ends them."""
    assert proc.stdout is not None
    settings: dict[str, str] = {}
    while True:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"the CLI exited early with code {proc.wait()}")
        line = line.strip()
        if not line:
            return settings
        key, sep, value = line.partition("=")
        assert sep, line
        settings[key] = value


@pytest.mark.broker
def test_cli_secured_listeners(tmp_path: Path) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    stderr_path = tmp_path / "stderr.txt"
    command = [
        sys.executable,
        "-m",
        "aioproducer.testing.kafka",
        "start",
        "--tls",
        "--sasl-user",
        f"alice:{PASSWORD}",
        "--sasl-mechanism",
        "SCRAM",
        "--sasl-mechanism",
        "OAUTHBEARER",
    ]
    with open(stderr_path, "w") as stderr:
        proc = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env, cwd=tmp_path
        )
    try:
        settings = _read_settings(proc)
        for name, protocol in [
            ("SSL", "SSL"),
            ("SASL_PLAINTEXT", "SASL_PLAINTEXT"),
            ("SASL_SSL", "SASL_SSL"),
        ]:
            assert settings[f"{name}.security.protocol"] == protocol
            assert settings[f"{name}.bootstrap.servers"].startswith("127.0.0.1:")
        assert settings["SASL_SSL.sasl.mechanisms"] == "SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER"
        assert settings["SASL_SSL.sasl.users"] == "alice"
        ca_file = settings["SASL_SSL.ssl.ca.location"]
        assert ca_file == settings["SSL.ssl.ca.location"]
        assert PASSWORD not in stderr_path.read_text()
        context = ssl.create_default_context(cafile=ca_file)
        topic = "cli-secured"

        clients: list[tuple[str, dict[str, Any]]] = [
            ("SSL", {"security_protocol": "SSL", "ssl_context": context}),
            (
                "SASL_SSL",
                {
                    "security_protocol": "SASL_SSL",
                    "ssl_context": context,
                    "sasl_mechanism": "SCRAM-SHA-512",
                    "sasl_username": "alice",
                    "sasl_password": PASSWORD,
                },
            ),
            (
                "SASL_PLAINTEXT",
                {
                    "security_protocol": "SASL_PLAINTEXT",
                    "sasl_mechanism": "OAUTHBEARER",
                    "sasl_oauth_token_provider": unsecured_token_provider("alice"),
                },
            ),
        ]

        async def produce() -> None:
            for listener, config in clients:
                servers = settings[f"{listener}.bootstrap.servers"]
                async with Producer(servers, max_block_ms=30000, **config) as producer:
                    await producer.send_and_wait(topic, listener.encode())

        anyio.run(produce)
        records = consume_all(settings["bootstrap.servers"], topic, expected=3, timeout=30)
        assert [r.value for r in records] == [b"SSL", b"SASL_SSL", b"SASL_PLAINTEXT"]
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert code == 0, stderr_path.read_text()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--sasl-mechanism", "PLAIN"], "needs at least one --sasl-user"),
        (["--sasl-user", "alice"], "expected NAME:PASSWORD"),
        (["--max-reauth-ms", "1000"], "needs a SASL listener"),
    ],
)
def test_cli_rejects_incomplete_security_flags(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from aioproducer.testing.cli import main

    with pytest.raises(SystemExit) as excinfo:
        main(["start", *flags])
    assert excinfo.value.code == 2
    assert message in capsys.readouterr().err

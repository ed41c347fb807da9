"""A producer that is never closed says so, and how many records it may never deliver."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import TYPE_CHECKING

from support import closed_port

from aioproducer.testing import KafkaCluster

if TYPE_CHECKING:
    from conftest import NewTopic

# The application forgets close(): its records wait out a long linger, asyncio.run() ends
# and cancels the producer's tasks, and the producer is collected.
_SCRIPT = textwrap.dedent(
    """
    import asyncio, gc, sys
    from aioproducer import Producer

    async def main():
        p = Producer(sys.argv[1], max_block_ms=1500, linger_ms=60_000)
        await p.start()
        try:
            for value in (b"a", b"b", b"c"):
                await p.send(sys.argv[2], value)
        except Exception as exc:
            print("send failed:", type(exc).__name__)

    asyncio.run(main())
    gc.collect()
    print("finished")
    """
)


def _run(bootstrap: str, topic: str, *, warnings: bool = True) -> subprocess.CompletedProcess[str]:
    flags = ["-W", "always"] if warnings else []
    return subprocess.run(
        [sys.executable, *flags, "-c", _SCRIPT, bootstrap, topic],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_unclosed_producer_warns_with_the_records_it_drops(
    kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    done = _run(kafka.bootstrap_servers, new_topic())
    assert done.returncode == 0, done.stderr
    assert "finished" in done.stdout
    assert "ResourceWarning" in done.stderr
    assert "was never closed: 3 record(s) not delivered yet may never be" in done.stderr
    assert "never awaited" not in done.stderr


def test_unclosed_producer_is_logged_without_any_warnings_flag(
    kafka: KafkaCluster, new_topic: NewTopic
) -> None:
    # Python hides ResourceWarning by default: the aioproducer logger's WARNING is what a
    # program run plainly shows (logging's last-resort handler, no configuration needed).
    done = _run(kafka.bootstrap_servers, new_topic(), warnings=False)
    assert done.returncode == 0, done.stderr
    assert "ResourceWarning" not in done.stderr  # hidden, as Python does by default
    assert "was never closed: 3 record(s) not delivered yet may never be" in done.stderr
    assert "async with Producer(...)" in done.stderr


def test_unclosed_producer_of_an_unreachable_broker_leaves_no_stray_coroutines() -> None:
    done = _run(f"127.0.0.1:{closed_port()}", "t")
    assert done.returncode == 0, done.stderr
    assert "send failed: KafkaTimeoutError" in done.stdout
    assert "was never closed: 0 record(s)" in done.stderr
    assert "never awaited" not in done.stderr
    assert "Traceback" not in done.stderr

"""The smallest useful program: send a few records and print where they landed.

python examples/quickstart.py                          # starts a local broker for it
python examples/quickstart.py --bootstrap-servers host:9092 --topic events
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator

import anyio

from aioproducer import Producer


async def produce(bootstrap_servers: str, topic: str, count: int) -> None:
    """Send ``count`` keyed records with a header and print each one's metadata."""
    async with Producer(bootstrap_servers=bootstrap_servers) as producer:
        handles = [
            await producer.send(topic, f"hello {i}", key=f"user-{i % 3}", headers={"n": str(i)})
            for i in range(count)
        ]
        for handle in handles:
            meta = await handle
            print(f"{meta.topic}[{meta.partition}] @ {meta.offset}")


@contextlib.contextmanager
def broker(bootstrap_servers: str | None, topic: str) -> Iterator[str]:
    """Use the given cluster, or start a local one for the duration of the example."""
    if bootstrap_servers:
        yield bootstrap_servers
        return
    from aioproducer.testing import KafkaCluster

    with KafkaCluster() as cluster:
        cluster.create_topic(topic, partitions=3)
        yield cluster.bootstrap_servers


def main() -> None:
    """Parse arguments and run the example."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap-servers")
    parser.add_argument("--topic", default="quickstart")
    parser.add_argument("--count", type=int, default=10)
    args = parser.parse_args()
    with broker(args.bootstrap_servers, args.topic) as servers:
        anyio.run(produce, servers, args.topic, args.count)


if __name__ == "__main__":
    main()

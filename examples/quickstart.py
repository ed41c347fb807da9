"""The smallest useful program: send a few records and print where they landed.

python examples/quickstart.py --bootstrap-servers host:9092 --topic events
KAFKA_BOOTSTRAP=host:9092 python examples/quickstart.py   # the same, from the environment
python examples/quickstart.py          # neither: starts a throwaway local broker, says so
"""

from __future__ import annotations

import argparse

import anyio
from _local import add_broker_argument, kafka

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


def main() -> None:
    """Parse arguments and run the example."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_broker_argument(parser)
    parser.add_argument("--topic", default="quickstart")
    parser.add_argument("--count", type=int, default=10)
    args = parser.parse_args()
    with kafka(args.bootstrap_servers, args.topic) as servers:
        anyio.run(produce, servers, args.topic, args.count)


if __name__ == "__main__":
    main()

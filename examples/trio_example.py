"""The producer under trio: a nursery of simulated devices streaming keyed readings.

    python examples/trio_example.py                       # starts a local broker
    python examples/trio_example.py --devices 8 --seconds 5 --bootstrap-servers host:9092

Each device sends a JSON reading every ``--interval`` seconds, keyed by its name (so its
readings stay in order on one partition), until its time is up, then waits for the
acknowledgements and prints where its readings landed. Deadlines use trio's own cancel
scopes; the comments say why that is safe. Needs trio (``pip install trio``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import random

import trio
from _local import add_broker_argument, kafka

from aioproducer import DeliveryHandle, Producer


async def device(
    producer: Producer, topic: str, name: str, seconds: float, interval: float
) -> None:
    rng = random.Random(name)
    handles: list[DeliveryHandle] = []
    # Stream until the deadline. If it strikes inside send(), that record was not buffered
    # at all, so every handle we hold is a record that will be delivered.
    with trio.move_on_after(seconds):
        for seq in itertools.count():
            reading = {"device": name, "seq": seq, "celsius": round(rng.gauss(21, 2), 2)}
            handles.append(await producer.send(topic, json.dumps(reading), key=name))
            await trio.sleep(interval)
    # A separate deadline for the acknowledgements. Giving up on a wait does not cancel
    # the delivery: the producer keeps retrying, and close() waits for the record.
    # A failed record raises its KafkaError here, which ends the nursery and the program.
    with trio.move_on_after(10) as acks:
        offsets = [(await handle).offset for handle in handles]
    if acks.cancelled_caught:
        print(f"{name}: {len(handles)} readings, not all acknowledged within 10 s")
    elif handles:
        where = f"partition {handles[0].partition}, offsets {offsets[0]} to {offsets[-1]}"
        if offsets[-1] - offsets[0] + 1 > len(offsets):
            # Devices whose keys hash to the same partition take turns in its offsets.
            where += " (shared with other devices)"
        print(f"{name}: {len(handles)} readings -> {where}")


async def main_async(args: argparse.Namespace, bootstrap_servers: str) -> None:
    # The nursery is left first: every device has finished before the producer closes.
    async with (
        Producer(bootstrap_servers, client_id="trio-example") as producer,
        trio.open_nursery() as nursery,
    ):
        for number in range(args.devices):
            name = f"device-{number}"
            nursery.start_soon(device, producer, args.topic, name, args.seconds, args.interval)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--topic", default="readings")
    parser.add_argument("--devices", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=3, help="how long each device sends")
    parser.add_argument("--interval", type=float, default=0.01, help="seconds between readings")
    add_broker_argument(parser)
    args = parser.parse_args()
    with kafka(args.bootstrap_servers, args.topic) as bootstrap_servers:
        trio.run(main_async, args, bootstrap_servers)


if __name__ == "__main__":
    main()

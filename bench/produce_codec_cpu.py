"""``python -m bench.produce_codec_cpu``: CPU per produce request of the sender's own work.

What the producer's event loop spends per request outside record encoding, each part
timed alone on the same in-memory request (``--partitions`` batches of ``--records``
100-byte records, version ``--version``), so a change to one part is measured apart from
the others and from the network:

* ``encode``: building the request's batches and framing it (``ProduceCall.prepare`` and
  ``framing.encode_request``, as the connection's writer does);
* ``decode``: decoding the broker's answer (``framing.decode_response``, as the reader);
* ``settle``: the sender settling that answer (``Sender._process_inbox``: per-partition
  results matched to batches, sequences advanced, batches completed).

Times are the least of ``--rounds`` of thread CPU time, in microseconds per request. Run
it once per tree (``PYTHONPATH`` pointing at each) and compare; note the load.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

from aioproducer.accumulator import Accumulator, MemoryBudget, ProducerBatch
from aioproducer.config import ProducerConfig
from aioproducer.metrics import Metrics
from aioproducer.produce_call import ProduceCall
from aioproducer.protocol import framing
from aioproducer.protocol.compression import Codec
from aioproducer.protocol.messages import (
    ProducePartitionResponse,
    ProduceResponse,
    ProduceTopicResponse,
)
from aioproducer.protocol.records import RecordBatchBuilder
from aioproducer.sender import Sender

TOPIC = "codec-cpu"


def _batches(partitions: int, records: int) -> list[ProducerBatch]:
    out = []
    for p in range(partitions):
        builder = RecordBatchBuilder()
        builder.append_many(1_700_000_000_000, None, [b"v" * 100] * records)
        batch = ProducerBatch(TOPIC, p, builder, 0.0, 1e12)
        batch.producer_id, batch.producer_epoch, batch.sequence = 7, 0, p * records
        out.append(batch)
    return out


def _response_frame(partitions: int, version: int) -> bytes:
    answers = [ProducePartitionResponse(p, 0, 1000 * p) for p in range(partitions)]
    response = ProduceResponse([ProduceTopicResponse(TOPIC, answers)])
    # The frame payload as the reader hands it over: without the size prefix.
    return framing.encode_response(response, version, 1)[4:]


class _Cluster:
    """What the sender asks of its cluster while settling a successful answer."""

    on_update: Callable[[], None] | None = None


def _time(fn: Callable[[], object], repeat: int, rounds: int) -> float:
    samples = []
    for _ in range(rounds):
        start = time.thread_time()
        for _ in range(repeat):
            fn()
        samples.append((time.thread_time() - start) / repeat * 1e6)
    # The least of the rounds: on a shared machine, the round least disturbed by others.
    return min(samples)


def main() -> None:
    """Time each part and print microseconds per request."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--records", type=int, default=136)
    parser.add_argument("--version", type=int, default=11)
    parser.add_argument("--repeat", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", choices=("encode", "decode", "settle"), help="time one part")
    ns = parser.parse_args()
    config = ProducerConfig(bootstrap_servers="localhost:9092")
    metrics = Metrics()
    template = _batches(ns.partitions, ns.records)

    def encode() -> bytes:
        for batch in template:
            batch.built = None
        call = ProduceCall(1, -1, 30000, template, 1 << 30, metrics)
        _prepare_sync(call)
        return framing.encode_request(call, ns.version, 1, "bench")

    frame = _response_frame(ns.partitions, ns.version)

    def decode() -> object:
        return framing.decode_response(ProduceCall, ns.version, frame)

    response = decode()[1]
    acc = Accumulator(
        batch_size=16384,
        linger=0.005,
        delivery_timeout=120.0,
        codec=Codec.NONE,
        compression_level=None,
        budget=MemoryBudget(1 << 30),
    )
    sender = Sender(config, acc, _Cluster(), metrics)  # type: ignore[arg-type]
    # Settling completes its batches for good: fresh ones for every request, made ahead.
    pool = iter([_batches(ns.partitions, 1) for _ in range(ns.repeat * ns.rounds)])

    def settle() -> None:
        batches = next(pool)
        call = ProduceCall(1, -1, 30000, batches, 1 << 30, metrics)
        call.answered = True
        sender._in_flight_calls += 1
        sender._inbox.append((call, response, None))
        sender._process_inbox(0.0)

    parts = {"encode": encode, "decode": decode, "settle": settle}
    results = {
        name: _time(fn, ns.repeat, ns.rounds)
        for name, fn in parts.items()
        if ns.only in (None, name)
    }
    print(
        f"us per request ({ns.partitions} partitions x {ns.records} records, v{ns.version}): "
        + ", ".join(f"{k} {v:.2f}" for k, v in results.items())
        + f"; load {os.getloadavg()[0]:.2f}"
    )


def _prepare_sync(call: ProduceCall) -> None:
    # prepare() awaits only for compression offloaded to a thread, which uncompressed
    # batches never do: drive the coroutine by hand instead of starting an event loop.
    coro = call.prepare()
    try:
        coro.send(None)
    except StopIteration:
        return
    raise RuntimeError("prepare() suspended")


if __name__ == "__main__":
    main()

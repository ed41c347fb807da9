"""``python -m bench.otel_overhead``: CPU per record of ``send()`` with and without
OpenTelemetry instrumentation.

Starts a single-node Kafka (``aioproducer.testing.KafkaCluster``) and sends the same
records through a fresh producer in each mode, measuring the process CPU time (this
process only: the broker is another) from the first ``send()`` to the last
acknowledgement, divided by the record count. Modes:

* ``off``: no instrumentation (the producer's hook attribute is None);
* ``metrics``: an SDK ``MeterProvider`` and no SDK tracer provider: spans are still made,
  by the default no-op tracer (non-recording), and their context injected; metrics are
  per batch and per request;
* ``traces``: an SDK ``TracerProvider`` whose spans go to a ``BatchSpanProcessor`` with
  an exporter that drops them, plus the meter;

and, for scale, the cost of the one attribute check the uninstrumented path adds.
Needs ``opentelemetry-sdk``. Each mode runs ``--repeat`` times; the best run counts.
"""

from __future__ import annotations

import argparse
import time
import timeit
import uuid
from collections.abc import Sequence
from typing import Any

import anyio

from aioproducer import Producer
from aioproducer.otel import instrument_producer
from aioproducer.testing import KafkaCluster

MODES = ("off", "metrics", "traces")


def _providers(mode: str) -> tuple[Any, Any]:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Drop(SpanExporter):
        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    meter = MeterProvider(metric_readers=[InMemoryMetricReader()])
    tracer = None
    if mode == "traces":
        tracer = TracerProvider()
        tracer.add_span_processor(BatchSpanProcessor(Drop(), max_queue_size=1 << 20))
    return tracer, meter


async def _run(bootstrap: str, topic: str, mode: str, records: int) -> float:
    value = b"x" * 100
    async with Producer(bootstrap, linger_ms=5) as producer:
        if mode != "off":
            tracer, meter = _providers(mode)
            instrument_producer(producer, tracer_provider=tracer, meter_provider=meter)
        await producer.send_and_wait(topic, b"warm-up")
        started = time.process_time()
        for i in range(records):
            await producer.send(topic, value, key=b"%d" % (i % 64))
        await producer.flush()
        return (time.process_time() - started) / records


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--backend", default="asyncio", choices=("asyncio", "trio"))
    args = parser.parse_args(argv)

    probe = Producer()
    check = timeit.timeit("p.instrumentation is not None", globals={"p": probe}, number=10**6)
    print(f"one hook attribute check: {check * 1000:.1f} ns")

    with KafkaCluster(nodes=1) as cluster:
        results: dict[str, float] = {}
        for mode in MODES:
            best = float("inf")
            for _ in range(args.repeat):
                topic = f"otel-overhead-{uuid.uuid4().hex[:8]}"
                cluster.create_topic(topic, 3)
                per_record = anyio.run(
                    _run, cluster.bootstrap_servers, topic, mode, args.records, backend=args.backend
                )
                best = min(best, per_record)
            results[mode] = best
            extra = ""
            if mode != "off":
                extra = f"  (+{(best - results['off']) * 1e6:.2f} us vs off)"
            print(f"{mode:>8}: {best * 1e6:.2f} us CPU per record{extra}")


if __name__ == "__main__":
    main()

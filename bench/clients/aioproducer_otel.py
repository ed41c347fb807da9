"""aioproducer, ``await send()`` per record on asyncio, with OpenTelemetry on.

Every producer is instrumented (:class:`aioproducer.otel.AioproducerInstrumentor`) with the
OpenTelemetry SDK as a service would run it: a tracer provider whose batch span processor
hands the spans to an exporter (one that drops them, so the network is not measured), and
a meter provider with a reader. The difference to ``aioproducer`` is the instrumentation's
cost.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from aioproducer.otel import AioproducerInstrumentor

from ._common import ClientArgs, Meter, main_async
from .aioproducer_asyncio import produce as produce_plain


class _Discard(SpanExporter):
    """Takes every span and drops it."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


async def produce(args: ClientArgs, meter: Meter, **kwargs: Any) -> int:
    """:func:`.aioproducer_asyncio.produce` with every producer instrumented."""
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(_Discard()))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    instrumentor = AioproducerInstrumentor()
    instrumentor.instrument(tracer_provider=tracer_provider, meter_provider=meter_provider)
    try:
        return await produce_plain(args, meter, **kwargs)
    finally:
        instrumentor.uninstrument()
        tracer_provider.shutdown()


if __name__ == "__main__":
    raise SystemExit(main_async("aioproducer-otel", "aioproducer", produce))

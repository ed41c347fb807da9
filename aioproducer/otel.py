"""OpenTelemetry tracing and metrics for :class:`~aioproducer.Producer` (``pip install
aioproducer[otel]``).

Globally, in the OpenTelemetry instrumentor convention::

    from aioproducer.otel import AioproducerInstrumentor

    AioproducerInstrumentor().instrument(tracer_provider=..., meter_provider=...)

or for one producer only, with :func:`instrument_producer`. Either way:

* each record sent with ``send()``, ``try_send()`` or ``send_many()`` gets a ``PRODUCER``
  span named ``send <topic>`` that ends when the broker acknowledges the record (with its
  offset) or the record fails (with ``error.type``); ``send_bulk()`` gets one span for the
  whole call. Attributes follow the OpenTelemetry messaging semantic conventions as of
  version 1.28 (``messaging.operation.type`` is ``"send"``, it was ``"publish"`` before);
* the span's W3C trace context is written into the record's headers with the global
  propagator, so a consumer can continue the trace;
* counters, histograms and gauges are reported through the meter (see
  :class:`ProducerInstruments`), once per batch or request, never per record.

Spans end in one callback per batch, not one per record. Importing this module needs the
``otel`` extra; ``import aioproducer`` never imports it.
"""

from __future__ import annotations

import contextlib
import time
import weakref
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

from opentelemetry.instrumentation.instrumentor import (  # type: ignore[attr-defined,unused-ignore]
    BaseInstrumentor,
)

from . import sending
from .__about__ import __version__

if TYPE_CHECKING:
    from .accumulator import ProducerBatch
    from .producer import Producer
    from .results import BulkDelivery, DeliveryHandle
    from .sync import DeliveryFuture, SyncProducer

__all__ = [
    "AioproducerInstrumentor",
    "ProducerInstruments",
    "instrument_producer",
    "uninstrument_producer",
]

_SCHEMA_URL = "https://opentelemetry.io/schemas/1.28.0"
#: How many distinct topics get their own metric attribute value; the rest are "other".
TOPIC_CARDINALITY_LIMIT = 100


class _TopicCap:
    """Topic names as metric attribute values, at most ``limit`` distinct ones."""

    __slots__ = ("limit", "seen")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.seen: set[str] = set()

    def __call__(self, topic: str) -> str:
        if topic in self.seen:
            return topic
        if len(self.seen) < self.limit:
            self.seen.add(topic)
            return topic
        return "other"


def _error_type(exc: BaseException) -> str:
    cls = type(exc)
    return (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )


class ProducerInstruments:
    """The spans and instruments of one instrumentation (the global one, or one made by
    :func:`instrument_producer`); producers call into it through their hook.

    Metrics, all with ``messaging.system="kafka"`` and ``messaging.client.id``:

    * ``aioproducer.records.sent``, ``aioproducer.records.failed``,
      ``aioproducer.records.retried`` (counters, per ``messaging.destination.name``);
    * ``aioproducer.batch.records`` and ``aioproducer.batch.size`` (histograms, per
      acknowledged batch);
    * ``aioproducer.request.duration`` (histogram, per produce request and broker id);
    * ``aioproducer.batch.ack.duration`` (histogram: from a batch's first record to its
      acknowledgement, per batch);
    * ``aioproducer.buffer.bytes`` and ``aioproducer.requests.in_flight`` (gauges).

    Topics beyond the first ``TOPIC_CARDINALITY_LIMIT`` are reported as ``"other"``.
    """

    def __init__(self, tracer_provider: Any = None, meter_provider: Any = None) -> None:
        from opentelemetry import metrics, propagate, trace
        from opentelemetry.trace import SpanKind, Status, StatusCode, set_span_in_context

        self._inject = propagate.inject
        self._set_span_in_context = set_span_in_context
        self._kind = SpanKind.PRODUCER
        self._error_status = Status
        self._error_code = StatusCode.ERROR
        self.tracer = trace.get_tracer(
            "aioproducer", __version__, tracer_provider, schema_url=_SCHEMA_URL
        )
        meter = metrics.get_meter(
            "aioproducer", __version__, meter_provider, schema_url=_SCHEMA_URL
        )
        self.topic = _TopicCap(TOPIC_CARDINALITY_LIMIT)
        self.records_sent = meter.create_counter(
            "aioproducer.records.sent", "{record}", "Records acknowledged by the broker"
        )
        self.records_failed = meter.create_counter(
            "aioproducer.records.failed", "{record}", "Records that failed"
        )
        self.records_retried = meter.create_counter(
            "aioproducer.records.retried", "{record}", "Records sent again after an error"
        )
        self.batch_records = meter.create_histogram(
            "aioproducer.batch.records", "{record}", "Records per acknowledged batch"
        )
        self.batch_size = meter.create_histogram(
            "aioproducer.batch.size", "By", "Bytes per acknowledged batch, as sent"
        )
        self.request_duration = meter.create_histogram(
            "aioproducer.request.duration", "s", "Produce request latency"
        )
        self.ack_duration = meter.create_histogram(
            "aioproducer.batch.ack.duration",
            "s",
            "From a batch's first record being buffered to its acknowledgement",
        )
        # Observed producers: the gauges read each one's current state.
        self.producers: weakref.WeakSet[Producer] = weakref.WeakSet()
        meter.create_observable_gauge(
            "aioproducer.buffer.bytes",
            [self._observe_buffer],
            "By",
            "Bytes of buffer_memory in use",
        )
        meter.create_observable_gauge(
            "aioproducer.requests.in_flight",
            [self._observe_in_flight],
            "{request}",
            "Produce requests awaiting a response",
        )
        # Spans waiting for their batch: (span, index of the record in it).
        self._pending: dict[ProducerBatch, list[tuple[Any, int]]] = {}

    # -- metrics ---------------------------------------------------------------------------

    def attach(self, producer: Producer) -> None:
        """Report ``producer``'s metrics through this instrumentation (its loop calls it)."""
        if producer in self.producers:
            return
        self.producers.add(producer)
        producer.counters.listener = _Listener(self, producer.config.client_id)

    def detach(self, producer: Producer) -> None:
        """Stop reporting ``producer``'s metrics."""
        self.producers.discard(producer)
        if isinstance(producer.counters.listener, _Listener):
            producer.counters.listener = None

    def _observe_buffer(self, _options: Any) -> list[Any]:
        from opentelemetry.metrics import Observation

        return [
            # metrics() is the producer's public reading of these; gauges read it rarely.
            Observation(p.metrics()["buffer_bytes_in_use"], _base(p.config.client_id))
            for p in list(self.producers)
        ]

    def _observe_in_flight(self, _options: Any) -> list[Any]:
        from opentelemetry.metrics import Observation

        return [
            Observation(p.metrics()["requests_in_flight"], _base(p.config.client_id))
            for p in list(self.producers)
        ]

    # -- spans -----------------------------------------------------------------------------

    def start(
        self, producer: Producer | SyncProducer, topic: str, key: Any, headers: Any
    ) -> tuple[Any, list[tuple[str, Any]]]:
        """Start a record's span; returns it and the headers with its trace context."""
        attributes: dict[str, Any] = {
            "messaging.system": "kafka",
            "messaging.operation.type": "send",
            "messaging.operation.name": "send",
            "messaging.destination.name": topic,
            "messaging.client.id": producer.config.client_id,
        }
        if key is not None:
            if isinstance(key, str):
                attributes["messaging.kafka.message.key"] = key
            elif isinstance(key, (bytes, bytearray)):
                with contextlib.suppress(UnicodeDecodeError):
                    attributes["messaging.kafka.message.key"] = key.decode("utf-8")
        span = self.tracer.start_span(f"send {topic}", kind=self._kind, attributes=attributes)
        carrier: dict[str, str] = {}
        self._inject(carrier, context=self._set_span_in_context(span))
        if not carrier:
            return span, headers
        items: list[tuple[str, Any]] = []
        if headers:
            pairs = headers.items() if isinstance(headers, Mapping) else headers
            # A trace context the caller set is replaced, not repeated.
            items = [pair for pair in pairs if pair[0] not in carrier]
        items += [(name, value.encode()) for name, value in carrier.items()]
        return span, items

    def failed(self, span: Any, exc: BaseException) -> None:
        """End a span whose record (or bulk send) was never buffered, or failed."""
        span.set_attribute("error.type", _error_type(exc))
        span.record_exception(exc)
        span.set_status(self._error_status(self._error_code, str(exc)))
        span.end()

    def appended(self, span: Any, handle: DeliveryHandle) -> None:
        """A record is buffered: its span ends when its batch completes."""
        span.set_attribute("messaging.destination.partition.id", str(handle.partition))
        batch, index = handle.position()
        waiting = self._pending.get(batch)
        if waiting is None:
            if batch.done:
                self._end(span, batch, index)
                return
            self._pending[batch] = [(span, index)]
            batch.add_done_callback(self._batch_done)
        else:
            waiting.append((span, index))

    def _batch_done(self, batch: ProducerBatch) -> None:
        for span, index in self._pending.pop(batch, ()):
            self._end(span, batch, index)

    def _end(self, span: Any, batch: ProducerBatch, index: int) -> None:
        offset, _log_append_time, exc = batch.outcome(index)
        if exc is not None:
            self.failed(span, exc)
            return
        if offset >= 0:
            span.set_attribute("messaging.kafka.offset", offset)
        span.end()

    def settled(self, span: Any, future: DeliveryFuture) -> None:
        """End a :class:`~aioproducer.SyncProducer` record's span (its future is done)."""
        exc = future.exception()
        if exc is not None:
            self.failed(span, exc)
            return
        meta = future.result()
        span.set_attribute("messaging.destination.partition.id", str(meta.partition))
        if meta.offset >= 0:
            span.set_attribute("messaging.kafka.offset", meta.offset)
        span.end()

    def start_bulk(self, producer: Producer | SyncProducer, topic: str, count: int) -> Any:
        """Start the one span of a bulk send of ``count`` records."""
        return self.tracer.start_span(
            f"send {topic}",
            kind=self._kind,
            attributes={
                "messaging.system": "kafka",
                "messaging.operation.type": "send",
                "messaging.operation.name": "send",
                "messaging.destination.name": topic,
                "messaging.client.id": producer.config.client_id,
                "messaging.batch.message_count": count,
            },
        )

    def start_task(self, topic: str | None, client_id: str | None) -> Any:
        """Start the one span of a Spark task writing with :mod:`aioproducer.spark`."""
        attributes: dict[str, Any] = {
            "messaging.system": "kafka",
            "messaging.operation.type": "send",
            "messaging.operation.name": "send",
        }
        if topic is not None:
            attributes["messaging.destination.name"] = topic
        if client_id is not None:
            attributes["messaging.client.id"] = client_id
        name = f"send {topic}" if topic is not None else "send"
        return self.tracer.start_span(name, kind=self._kind, attributes=attributes)

    def task_done(self, span: Any, stats: Mapping[str, Any]) -> None:
        """End a Spark task's span with its figures (``aioproducer.spark._tasks`` stats row)."""
        span.set_attribute("messaging.batch.message_count", stats["records"])
        span.set_attribute("aioproducer.bulk.failed", stats["failed"])
        if stats["partition"] >= 0:
            span.set_attribute("aioproducer.spark.partition", stats["partition"])
        if stats["failed"]:
            # The row carries the first error as "TypeName: message".
            first = stats["first_error"] or "_OTHER"
            span.set_attribute("error.type", first.split(":", 1)[0])
            span.set_status(self._error_status(self._error_code, first))
        span.end()

    def bulk_tracked(self, span: Any, bulk: BulkDelivery, error: BaseException | None) -> None:
        """A bulk send buffered what it could (``error``: why it stopped early); its span
        ends when every buffered record has an outcome."""

        def done(bulk: BulkDelivery) -> None:
            # Counted here: a SyncProducer's bulk is tracked before the loop appends it.
            span.set_attribute("messaging.batch.message_count", bulk.records)
            first = bulk.first_error if bulk.records else None
            failure = first if first is not None else error
            if bulk.records:
                span.set_attribute("aioproducer.bulk.failed", bulk.failed)
            if failure is not None:
                self.failed(span, failure)
            else:
                span.end()

        bulk.add_done_callback(done)


def _base(client_id: str) -> dict[str, str]:
    return {"messaging.system": "kafka", "messaging.client.id": client_id}


class _Listener:
    """A producer's :class:`~aioproducer.metrics.Metrics` listener: per batch and request."""

    __slots__ = ("_attrs", "_by_topic", "_inst")

    def __init__(self, inst: ProducerInstruments, client_id: str) -> None:
        self._inst = inst
        self._attrs = _base(client_id)
        self._by_topic: dict[str, dict[str, str]] = {}

    def _topic(self, topic: str) -> dict[str, str]:
        attrs = self._by_topic.get(topic)
        if attrs is None:
            attrs = {**self._attrs, "messaging.destination.name": self._inst.topic(topic)}
            if len(self._by_topic) < TOPIC_CARDINALITY_LIMIT:
                self._by_topic[topic] = attrs
        return attrs

    def batch_sent(self, batch: ProducerBatch, nbytes: int) -> None:
        inst = self._inst
        attrs = self._topic(batch.topic)
        count = batch.record_count
        inst.records_sent.add(count, attrs)
        inst.batch_records.record(count, attrs)
        inst.batch_size.record(nbytes, attrs)
        inst.ack_duration.record(time.monotonic() - batch.created, attrs)

    def batch_failed(self, batch: ProducerBatch, exc: BaseException) -> None:
        attrs = {**self._topic(batch.topic), "error.type": _error_type(exc)}
        self._inst.records_failed.add(batch.record_count, attrs)

    def batch_retried(self, batch: ProducerBatch) -> None:
        self._inst.records_retried.add(batch.record_count, self._topic(batch.topic))

    def request(self, seconds: float, node_id: int) -> None:
        self._inst.request_duration.record(
            seconds, {**self._attrs, "messaging.kafka.broker.id": node_id}
        )


def instrument_producer(
    producer: Producer,
    *,
    tracer_provider: Any = None,
    meter_provider: Any = None,
    tracing: bool = True,
) -> ProducerInstruments:
    """Trace and measure this one producer (whatever the global instrumentation does).

    ``None`` providers mean the global ones. ``tracing=False`` reports metrics only: no
    span and no trace context per record, and no cost per record. Call it before or after
    ``start()``.
    """
    inst = ProducerInstruments(tracer_provider, meter_provider)
    if tracing:
        sending.TRACING[0] = True
        producer.instrumentation = inst
    else:
        producer.metrics_instrumentation = inst
    if producer.intake.accepting:  # running: start() would attach it otherwise
        inst.attach(producer)
    return inst


def uninstrument_producer(producer: Producer) -> None:
    """Undo :func:`instrument_producer`: the producer follows the global setting again."""
    for hook in ("instrumentation", "metrics_instrumentation"):
        inst = producer.__dict__.pop(hook, None)
        if inst is not None:
            inst.detach(producer)


class AioproducerInstrumentor(BaseInstrumentor):  # type: ignore[misc,unused-ignore]
    """Instruments every :class:`~aioproducer.Producer`, as an OpenTelemetry instrumentor:
    ``instrument(tracer_provider=..., meter_provider=...)``, ``uninstrument()``, and the
    ``opentelemetry_instrumentor`` entry point ``aioproducer``, so ``opentelemetry-instrument``
    picks it up.

    Spans start for every send from the call on; metrics are reported for producers
    started after it. ``uninstrument()`` stops both; producers instrumented one by one with
    :func:`instrument_producer` keep their own. ``instrument(tracing=False)`` reports
    metrics only, with no cost per record. One instance per process (the base class
    makes it a singleton); a second ``instrument()`` without ``uninstrument()`` does nothing.
    """

    _inst: ProducerInstruments | None = None

    def instrumentation_dependencies(self) -> Collection[str]:
        """The packages this instrumentation applies to."""
        return ("aioproducer",)

    def _instrument(self, **kwargs: Any) -> None:
        from .producer import Producer

        inst = ProducerInstruments(kwargs.get("tracer_provider"), kwargs.get("meter_provider"))
        type(self)._inst = inst
        if kwargs.get("tracing", True):
            sending.TRACING[0] = True
            Producer.instrumentation = inst
        else:
            Producer.metrics_instrumentation = inst

    def _uninstrument(self, **kwargs: Any) -> None:
        inst = self._inst
        if inst is None:
            return
        from .producer import Producer

        Producer.instrumentation = None
        Producer.metrics_instrumentation = None
        type(self)._inst = None
        for producer in list(inst.producers):
            inst.detach(producer)

"""Spans, trace context propagation and metrics of aioproducer.otel, against a real broker."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from aioproducer import Producer
from aioproducer.errors import (
    DeliveryTimeoutError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    RecordTooLargeError,
)
from aioproducer.otel import AioproducerInstrumentor, instrument_producer, uninstrument_producer
from aioproducer.testing import KafkaCluster
from aioproducer.testing.verify import consume_all

if TYPE_CHECKING:
    from conftest import NewTopic

pytestmark = pytest.mark.anyio


def _by_key(finished: tuple[ReadableSpan, ...]) -> dict[str, ReadableSpan]:
    return {
        str(span.attributes["messaging.kafka.message.key"]): span
        for span in finished
        if span.attributes and "messaging.kafka.message.key" in span.attributes
    }


def _points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    data = reader.get_metrics_data()
    out: dict[str, list[Any]] = {}
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                out.setdefault(metric.name, []).extend(metric.data.data_points)
    return out


async def test_spans_end_at_acknowledgement_with_offsets_and_context_reaches_consumer(
    kafka: KafkaCluster,
    new_topic: NewTopic,
    spans: InMemorySpanExporter,
    tracer_provider: TracerProvider,
) -> None:
    topic = new_topic(3)
    # Batches linger long enough that none can be acknowledged before the check below.
    async with Producer(kafka.bootstrap_servers, client_id="traced", linger_ms=500) as producer:
        instrument_producer(producer, tracer_provider=tracer_provider)
        h1 = await producer.send(topic, b"v1", key=b"k1", headers={"app": b"x"})
        h2 = producer.try_send(topic, b"v2", key="k2")
        many = await producer.send_many(topic, [b"v3", b"v4"], keys=[b"k3", b"k4"])
        h5 = await producer.send(topic, b"v5", key=b"\xff\xfe")  # not UTF-8: no key attribute
        assert spans.get_finished_spans() == ()  # nothing acknowledged yet
        handles = [h1, h2, *many, h5]
        metas = [await h for h in handles]
    finished = spans.get_finished_spans()
    assert len(finished) == 5
    keyed = _by_key(finished)
    assert sorted(keyed) == ["k1", "k2", "k3", "k4"]
    for key, meta in zip(["k1", "k2", "k3", "k4"], metas, strict=False):
        span = keyed[key]
        attrs = dict(span.attributes or {})
        assert span.name == f"send {topic}"
        assert span.kind is SpanKind.PRODUCER
        assert span.status.status_code is StatusCode.UNSET
        assert attrs["messaging.system"] == "kafka"
        assert attrs["messaging.operation.type"] == "send"
        assert attrs["messaging.destination.name"] == topic
        assert attrs["messaging.destination.partition.id"] == str(meta.partition)
        assert attrs["messaging.kafka.offset"] == meta.offset
        assert attrs["messaging.client.id"] == "traced"
        assert "error.type" not in attrs
    records = await anyio.to_thread.run_sync(
        lambda: consume_all(kafka.bootstrap_servers, topic, expected=5)
    )
    assert len(records) == 5
    by_value = {r.value: r for r in records}
    for value, key in [(b"v1", "k1"), (b"v2", "k2"), (b"v3", "k3"), (b"v4", "k4")]:
        headers = dict(by_value[value].headers)
        ctx = keyed[key].get_span_context()
        assert ctx is not None
        version, trace_id, span_id, _flags = (headers["traceparent"] or b"").decode().split("-")
        assert version == "00"
        assert int(trace_id, 16) == ctx.trace_id
        assert int(span_id, 16) == ctx.span_id
    assert dict(by_value[b"v1"].headers)["app"] == b"x"  # the caller's headers are kept


async def test_send_span_is_a_child_of_the_current_span(
    kafka: KafkaCluster,
    new_topic: NewTopic,
    spans: InMemorySpanExporter,
    tracer_provider: TracerProvider,
) -> None:
    topic = new_topic()
    tracer = tracer_provider.get_tracer("test")
    async with Producer(kafka.bootstrap_servers) as producer:
        instrument_producer(producer, tracer_provider=tracer_provider)
        with tracer.start_as_current_span("request") as parent:
            await (await producer.send(topic, b"v"))
    send_span = next(s for s in spans.get_finished_spans() if s.name.startswith("send"))
    assert send_span.parent is not None
    assert send_span.parent.span_id == parent.get_span_context().span_id
    assert send_span.context is not None
    assert send_span.context.trace_id == parent.get_span_context().trace_id


async def test_broker_error_ends_the_span_with_its_error_type(
    kafka: KafkaCluster,
    new_topic: NewTopic,
    spans: InMemorySpanExporter,
    tracer_provider: TracerProvider,
) -> None:
    topic = new_topic(config={"max.message.bytes": "2000"})
    async with Producer(kafka.bootstrap_servers) as producer:
        instrument_producer(producer, tracer_provider=tracer_provider)
        handle = await producer.send(topic, b"x" * 10_000, key=b"big")
        with pytest.raises(MessageSizeTooLargeError):
            await handle
    (span,) = spans.get_finished_spans()
    attrs = dict(span.attributes or {})
    assert attrs["error.type"] == "aioproducer.errors.MessageSizeTooLargeError"
    assert "messaging.kafka.offset" not in attrs
    assert span.status.status_code is StatusCode.ERROR


async def test_delivery_timeout_ends_the_span(
    kafka: KafkaCluster,
    new_topic: NewTopic,
    spans: InMemorySpanExporter,
    tracer_provider: TracerProvider,
) -> None:
    topic = new_topic()
    async with Producer(
        kafka.bootstrap_servers, request_timeout_ms=500, delivery_timeout_ms=1000, linger_ms=0
    ) as producer:
        instrument_producer(producer, tracer_provider=tracer_provider)
        await producer.partitions_for(topic)
        kafka.pause_broker(kafka.node_ids[0])
        try:
            handle = await producer.send(topic, b"late", key=b"late")
            with pytest.raises(DeliveryTimeoutError):
                await handle
        finally:
            kafka.resume_broker(kafka.node_ids[0])
    (span,) = spans.get_finished_spans()
    assert dict(span.attributes or {})["error.type"] == ("aioproducer.errors.DeliveryTimeoutError")


async def test_a_send_that_cannot_buffer_fails_its_span(
    spans: InMemorySpanExporter, tracer_provider: TracerProvider
) -> None:
    # A closed port: metadata never loads, so send() gives up after max_block_ms.
    async with Producer("127.0.0.1:1", max_block_ms=300) as producer:
        instrument_producer(producer, tracer_provider=tracer_provider)
        with pytest.raises(KafkaTimeoutError):
            await producer.send("nowhere", b"v")
        await producer.close(0)
    (span,) = spans.get_finished_spans()
    assert dict(span.attributes or {})["error.type"].endswith("KafkaTimeoutError")
    assert span.status.status_code is StatusCode.ERROR


async def test_send_bulk_has_one_span(
    kafka: KafkaCluster,
    new_topic: NewTopic,
    spans: InMemorySpanExporter,
    tracer_provider: TracerProvider,
) -> None:
    topic = new_topic(2)
    async with Producer(kafka.bootstrap_servers) as producer:
        instrument_producer(producer, tracer_provider=tracer_provider)
        bulk = await producer.send_bulk(topic, [b"%d" % i for i in range(1000)])
        await bulk
    (span,) = spans.get_finished_spans()
    attrs = dict(span.attributes or {})
    assert attrs["messaging.batch.message_count"] == 1000
    assert attrs["aioproducer.bulk.failed"] == 0
    assert span.kind is SpanKind.PRODUCER


async def test_metrics_count_what_was_sent(
    kafka: KafkaCluster,
    new_topic: NewTopic,
    meter_provider: MeterProvider,
    metric_reader: InMemoryMetricReader,
) -> None:
    topic = new_topic(3)
    async with Producer(kafka.bootstrap_servers, client_id="counted") as producer:
        instrument_producer(producer, meter_provider=meter_provider)
        handles = [await producer.send(topic, b"v%d" % i) for i in range(250)]
        bulk = await producer.send_bulk(topic, [b"b"] * 750)
        await bulk
        for h in handles:
            await h
        points = _points(metric_reader)
        snapshot = producer.metrics()
    sent = points["aioproducer.records.sent"]
    assert sum(p.value for p in sent) == 1000 == snapshot["records_sent"]
    assert {p.attributes["messaging.destination.name"] for p in sent} == {topic}
    assert all(p.attributes["messaging.client.id"] == "counted" for p in sent)
    batches = points["aioproducer.batch.records"]
    assert sum(p.sum for p in batches) == 1000
    assert sum(p.count for p in batches) == snapshot["batches_sent"]
    assert sum(p.sum for p in points["aioproducer.batch.size"]) == snapshot["bytes_sent"]
    requests = points["aioproducer.request.duration"]
    assert sum(p.count for p in requests) == snapshot["requests_sent"]
    assert (
        sum(p.count for p in points["aioproducer.batch.ack.duration"]) == snapshot["batches_sent"]
    )
    assert "aioproducer.buffer.bytes" in points
    assert "aioproducer.requests.in_flight" in points
    assert 0 < snapshot["request_latency_ms_p50"] <= snapshot["request_latency_ms_p99"]
    assert snapshot["request_latency_ms_p99"] <= snapshot["request_latency_ms_max"]


async def test_failed_records_are_counted(
    kafka: KafkaCluster,
    new_topic: NewTopic,
    meter_provider: MeterProvider,
    metric_reader: InMemoryMetricReader,
) -> None:
    topic = new_topic(config={"max.message.bytes": "2000"})
    async with Producer(kafka.bootstrap_servers) as producer:
        instrument_producer(producer, meter_provider=meter_provider)
        handle = await producer.send(topic, b"x" * 10_000)
        with pytest.raises(MessageSizeTooLargeError):
            await handle
        points = _points(metric_reader)
    (failed,) = points["aioproducer.records.failed"]
    assert failed.value == 1
    assert failed.attributes["error.type"].endswith("MessageSizeTooLargeError")


async def test_global_instrumentation_and_uninstrument(
    kafka: KafkaCluster,
    new_topic: NewTopic,
    spans: InMemorySpanExporter,
    tracer_provider: TracerProvider,
    meter_provider: MeterProvider,
    metric_reader: InMemoryMetricReader,
) -> None:
    topic = new_topic()
    instrumentor = AioproducerInstrumentor()
    instrumentor.instrument(tracer_provider=tracer_provider, meter_provider=meter_provider)
    try:
        assert instrumentor.is_instrumented_by_opentelemetry
        async with Producer(kafka.bootstrap_servers) as producer:
            await (await producer.send(topic, b"traced", key=b"a"))
            instrumentor.uninstrument()
            assert Producer.instrumentation is None
            assert producer.counters.listener is None
            await (await producer.send(topic, b"plain", key=b"b"))
            assert "instrumentation" not in vars(producer)
    finally:
        instrumentor.uninstrument()
    assert sorted(_by_key(spans.get_finished_spans())) == ["a"]
    sent = _points(metric_reader)["aioproducer.records.sent"]
    assert sum(p.value for p in sent) == 1
    records = await anyio.to_thread.run_sync(
        lambda: consume_all(kafka.bootstrap_servers, topic, expected=2)
    )
    assert [dict(r.headers).keys() >= {"traceparent"} for r in records] == [True, False]


async def test_uninstrument_producer_returns_to_the_plain_path(
    kafka: KafkaCluster,
    new_topic: NewTopic,
    spans: InMemorySpanExporter,
    tracer_provider: TracerProvider,
) -> None:
    topic = new_topic()
    async with Producer(kafka.bootstrap_servers) as producer:
        instrument_producer(producer, tracer_provider=tracer_provider)
        uninstrument_producer(producer)
        assert producer.instrumentation is None
        await (await producer.send(topic, b"v", key=b"k"))
    assert spans.get_finished_spans() == ()


def test_topic_attribute_cardinality_is_capped() -> None:
    from aioproducer.otel import TOPIC_CARDINALITY_LIMIT, _TopicCap

    cap = _TopicCap(TOPIC_CARDINALITY_LIMIT)
    names = [cap(f"t{i}") for i in range(TOPIC_CARDINALITY_LIMIT + 50)]
    assert names[:TOPIC_CARDINALITY_LIMIT] == [f"t{i}" for i in range(TOPIC_CARDINALITY_LIMIT)]
    assert set(names[TOPIC_CARDINALITY_LIMIT:]) == {"other"}
    assert cap("t0") == "t0"


def test_latency_percentiles() -> None:
    from aioproducer.metrics import Metrics

    metrics = Metrics()
    for ms in range(1, 101):
        metrics.observe_latency(ms / 1000)
    snap = metrics.snapshot(buffer_bytes=0, buffer_limit=1, requests_in_flight=0)
    assert 50 <= snap["request_latency_ms_p50"] <= 50 * 1.2
    assert 99 <= snap["request_latency_ms_p99"] <= 100
    empty = Metrics().snapshot(buffer_bytes=0, buffer_limit=1, requests_in_flight=0)
    assert empty["request_latency_ms_p50"] == empty["request_latency_ms_p99"] == 0.0


def test_sync_producer_sends_are_traced_and_measured(
    kafka: KafkaCluster,
    new_topic: NewTopic,
    spans: InMemorySpanExporter,
    tracer_provider: TracerProvider,
    meter_provider: MeterProvider,
    metric_reader: InMemoryMetricReader,
) -> None:
    from aioproducer import SyncProducer

    topic = new_topic(2)
    instrumentor = AioproducerInstrumentor()
    instrumentor.instrument(tracer_provider=tracer_provider, meter_provider=meter_provider)
    try:
        with SyncProducer(kafka.bootstrap_servers) as producer:
            futures = [producer.send(topic, b"v%d" % i, key=b"k%d" % i) for i in range(5)]
            metas = [f.result(30) for f in futures]
            producer.flush()
            sent = _points(metric_reader)["aioproducer.records.sent"]
    finally:
        instrumentor.uninstrument()
    assert sum(p.value for p in sent) == 5
    keyed = _by_key(spans.get_finished_spans())
    assert sorted(keyed) == [f"k{i}" for i in range(5)]
    for i, meta in enumerate(metas):
        attrs = dict(keyed[f"k{i}"].attributes or {})
        assert attrs["messaging.kafka.offset"] == meta.offset
        assert attrs["messaging.destination.partition.id"] == str(meta.partition)
    records = consume_all(kafka.bootstrap_servers, topic, expected=5)
    for record in records:
        ctx = keyed[(record.key or b"").decode()].get_span_context()
        assert ctx is not None
        traceparent = (dict(record.headers)["traceparent"] or b"").decode()
        assert traceparent.split("-")[1:3] == [f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"]


def test_a_spark_task_is_one_span(
    kafka: KafkaCluster,
    new_topic: NewTopic,
    spans: InMemorySpanExporter,
    tracer_provider: TracerProvider,
    meter_provider: MeterProvider,
    metric_reader: InMemoryMetricReader,
) -> None:
    pytest.importorskip("pyspark")
    from pyspark.sql import Row

    from aioproducer import spark as kafka_spark

    topic = new_topic(2)
    # The task runs in this process, as a Spark worker would run it.
    writer = kafka_spark.partition_writer(topic, bootstrap_servers=kafka.bootstrap_servers)
    instrumentor = AioproducerInstrumentor()
    instrumentor.instrument(tracer_provider=tracer_provider, meter_provider=meter_provider)
    try:
        writer([Row(key=f"k{i}", value=b"%d" % i) for i in range(300)])
    finally:
        instrumentor.uninstrument()
    (span,) = spans.get_finished_spans()
    attrs = dict(span.attributes or {})
    assert span.name == f"send {topic}"
    assert attrs["messaging.destination.name"] == topic
    assert attrs["messaging.batch.message_count"] == 300
    assert attrs["aioproducer.bulk.failed"] == 0
    assert len(consume_all(kafka.bootstrap_servers, topic, expected=300)) == 300


def test_sync_send_many_traces_each_record_and_send_bulk_the_call(
    kafka: KafkaCluster,
    new_topic: NewTopic,
    spans: InMemorySpanExporter,
    tracer_provider: TracerProvider,
    meter_provider: MeterProvider,
    metric_reader: InMemoryMetricReader,
) -> None:
    from aioproducer import SyncProducer

    many_topic, bulk_topic = new_topic(2), new_topic(2)
    instrumentor = AioproducerInstrumentor()
    instrumentor.instrument(tracer_provider=tracer_provider, meter_provider=meter_provider)
    try:
        with SyncProducer(kafka.bootstrap_servers) as producer:
            futures = producer.send_many(
                many_topic, [b"m%d" % i for i in range(20)], keys=[b"k%d" % i for i in range(20)]
            )
            metas = [f.result(30) for f in futures]
            bulk = producer.send_bulk(bulk_topic, [b"b%d" % i for i in range(500)]).result(30)
            assert bulk.delivered == 500
            # A bad record midway: the records before it go, the call raises, and its span
            # still ends once they are delivered, carrying the error.
            with pytest.raises(RecordTooLargeError):
                producer.send_bulk(bulk_topic, [b"ok", b"x" * 2_000_000, b"never"])
            producer.flush()
            sent = _points(metric_reader)["aioproducer.records.sent"]
    finally:
        instrumentor.uninstrument()
    assert sum(p.value for p in sent) == 20 + 500 + 1
    finished = spans.get_finished_spans()
    keyed = _by_key(finished)
    assert sorted(keyed) == sorted(f"k{i}" for i in range(20))
    for i, meta in enumerate(metas):
        attrs = dict(keyed[f"k{i}"].attributes or {})
        assert attrs["messaging.kafka.offset"] == meta.offset
    for record in consume_all(kafka.bootstrap_servers, many_topic, expected=20):
        ctx = keyed[(record.key or b"").decode()].get_span_context()
        traceparent = (dict(record.headers)["traceparent"] or b"").decode()
        assert traceparent.split("-")[1:3] == [f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"]
    calls = [
        s for s in finished if (s.attributes or {}).get("messaging.destination.name") == bulk_topic
    ]
    assert len(calls) == 2  # one per send_bulk call, not one per record
    whole, cut = sorted(calls, key=lambda s: s.start_time or 0)
    assert dict(whole.attributes or {})["messaging.batch.message_count"] == 500
    assert whole.status.status_code is not StatusCode.ERROR
    assert dict(cut.attributes or {})["messaging.batch.message_count"] == 1
    assert cut.status.status_code is StatusCode.ERROR
    assert dict(cut.attributes or {})["error.type"] == "aioproducer.errors.RecordTooLargeError"
    values = [r.value for r in consume_all(kafka.bootstrap_servers, bulk_topic, expected=501)]
    assert sorted(values) == sorted([b"b%d" % i for i in range(500)] + [b"ok"])


def test_the_instrumentor_is_an_opentelemetry_instrumentor_found_by_its_entry_point(
    tracer_provider: TracerProvider,
) -> None:
    from importlib.metadata import entry_points

    from opentelemetry.instrumentation.instrumentor import BaseInstrumentor

    from aioproducer import Producer

    (entry,) = [
        e for e in entry_points(group="opentelemetry_instrumentor") if e.name == "aioproducer"
    ]
    assert entry.load() is AioproducerInstrumentor
    instrumentor = AioproducerInstrumentor()
    assert isinstance(instrumentor, BaseInstrumentor)
    assert AioproducerInstrumentor() is instrumentor  # one per process
    try:
        instrumentor.instrument(tracer_provider=tracer_provider)
        hook = Producer.instrumentation
        assert hook is not None
        instrumentor.instrument(tracer_provider=tracer_provider)  # again: nothing changes
        assert Producer.instrumentation is hook
        assert instrumentor.is_instrumented_by_opentelemetry
    finally:
        instrumentor.uninstrument()
    assert Producer.instrumentation is None
    instrumentor.uninstrument()  # again: harmless
    assert not instrumentor.is_instrumented_by_opentelemetry


async def test_metrics_without_tracing(
    kafka: KafkaCluster,
    new_topic: NewTopic,
    spans: InMemorySpanExporter,
    tracer_provider: TracerProvider,
    meter_provider: MeterProvider,
    metric_reader: InMemoryMetricReader,
) -> None:
    topic = new_topic(2)
    instrumentor = AioproducerInstrumentor()
    instrumentor.instrument(
        tracer_provider=tracer_provider, meter_provider=meter_provider, tracing=False
    )
    try:
        # Nothing is called per record: the per-send hook stays unset.
        assert Producer.instrumentation is None
        async with Producer(kafka.bootstrap_servers) as producer:
            for i in range(100):
                await producer.send(topic, b"g%d" % i)
            await producer.flush()
            global_sent = sum(p.value for p in _points(metric_reader)["aioproducer.records.sent"])
    finally:
        instrumentor.uninstrument()
    async with Producer(kafka.bootstrap_servers) as producer:
        instrument_producer(producer, meter_provider=meter_provider, tracing=False)
        await producer.send_bulk(topic, [b"p%d" % i for i in range(50)])
        await producer.flush()
        total_sent = sum(p.value for p in _points(metric_reader)["aioproducer.records.sent"])
    assert global_sent == 100
    assert total_sent == 150
    assert spans.get_finished_spans() == ()
    records = consume_all(kafka.bootstrap_servers, topic, expected=150)
    assert all("traceparent" not in dict(r.headers or []) for r in records)
    assert sorted(r.value for r in records) == sorted(
        [b"g%d" % i for i in range(100)] + [b"p%d" % i for i in range(50)]
    )

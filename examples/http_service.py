"""An HTTP service that writes each request body to Kafka and answers with its offset.

    python examples/http_service.py      # port 8000; Kafka at $KAFKA_BOOTSTRAP, else a
                                         # throwaway local broker (it says so)
    curl -d 'hello' -H 'X-Key: user-1' localhost:8000/events/events
    {"topic":"events","partition":1,"offset":0,"timestamp_ms":1700000000000}

    python examples/http_service.py --bootstrap-servers host:9092 --port 8080
    KAFKA_BOOTSTRAP=host:9092 uvicorn --app-dir examples --factory http_service:create_app

``POST /events/{topic}`` sends the body as the record's value, keyed by the ``X-Key``
header or the ``key`` query parameter, and answers once the broker has acknowledged the
record. Errors map to HTTP statuses: 400 for a bad request, 404 for an unknown topic
(the service does not create topics), 413 for a record that is too large, 503 when Kafka
does not answer in time. Uses Starlette and uvicorn (``pip install starlette uvicorn``).

Tracing and metrics are on (``pip install '.[otel]' opentelemetry-sdk
opentelemetry-exporter-prometheus`` from the checkout): each request gets a server span, continuing a
``traceparent`` the client sent, and the record's send span is its child, its trace
context written into the record's headers for consumers. ``GET /metrics`` answers in the
Prometheus text format with the producer's counters (``aioproducer_records_sent_total``,
...). Spans go to the tracer provider passed to :func:`create_app`; by default they are
made (so trace context still reaches consumers) and dropped: configure an exporter there.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import uvicorn
from _local import add_broker_argument, configured_servers, kafka
from opentelemetry import propagate, trace
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from aioproducer import (
    KafkaError,
    KafkaTimeoutError,
    Producer,
    ProducerClosedError,
    RecordTooLargeError,
)
from aioproducer.errors import (
    InvalidArgumentError,
    SerializationError,
    UnknownTopicOrPartitionError,
)
from aioproducer.otel import instrument_producer

# A client waits for the answer, so fail within seconds rather than the library's minutes.
SERVICE_CONFIG: dict[str, Any] = {
    "max_block_ms": 5_000,  # metadata and buffer space
    "request_timeout_ms": 5_000,
    "delivery_timeout_ms": 10_000,
    "allow_auto_create_topics": False,  # clients must not create topics by typing a URL
}

ERROR_STATUS: list[tuple[type[KafkaError], int]] = [
    (RecordTooLargeError, 413),
    (InvalidArgumentError, 400),
    (SerializationError, 400),
    (UnknownTopicOrPartitionError, 404),
    (KafkaTimeoutError, 503),  # includes DeliveryTimeoutError: the write is not confirmed
    (ProducerClosedError, 503),  # the service is shutting down
]


async def post_event(request: Request) -> JSONResponse:
    tracer: trace.Tracer = request.app.state.tracer
    with tracer.start_as_current_span(
        "POST /events/{topic}",
        context=propagate.extract(request.headers),
        kind=trace.SpanKind.SERVER,
        attributes={"http.request.method": "POST", "http.route": "/events/{topic}"},
    ) as span:
        response = await _post_event(request)
        span.set_attribute("http.response.status_code", response.status_code)
        return response


async def _post_event(request: Request) -> JSONResponse:
    producer: Producer = request.app.state.producer
    topic = request.path_params["topic"]
    key = request.headers.get("x-key", request.query_params.get("key"))
    value = await request.body()
    if not value:
        return JSONResponse({"error": "the request body (the record's value) is empty"}, 400)
    content_type = request.headers.get("content-type")
    headers = {"content-type": content_type} if content_type else None
    try:
        # If the client disconnects while we wait, only the wait stops: the record is
        # still delivered.
        meta = await producer.send_and_wait(topic, value, key=key, headers=headers)
    except KafkaError as exc:
        status = next((s for cls, s in ERROR_STATUS if isinstance(exc, cls)), None)
        if status is None:
            status = 503 if exc.retriable else 502  # the broker refused or failed
        return JSONResponse({"error": f"{type(exc).__name__}: {exc}"}, status)
    return JSONResponse(
        {
            "topic": meta.topic,
            "partition": meta.partition,
            "offset": meta.offset,
            "timestamp_ms": meta.timestamp_ms,
        }
    )


async def metrics(request: Request) -> Response:
    registry: CollectorRegistry = request.app.state.registry
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


def create_app(
    bootstrap_servers: str | None = None,
    *,
    tracer_provider: trace.TracerProvider | None = None,
    **producer_config: Any,
) -> Starlette:
    """The ASGI app: one producer, started and closed with the application.

    ``bootstrap_servers`` defaults to ``$KAFKA_BOOTSTRAP`` (or 127.0.0.1:9092);
    ``producer_config`` overrides :data:`SERVICE_CONFIG`. Spans go to ``tracer_provider``
    (default: an SDK provider without exporter); metrics to the app's own Prometheus
    registry, served at ``/metrics``.
    """
    servers = configured_servers(bootstrap_servers) or "127.0.0.1:9092"
    config = {**SERVICE_CONFIG, **producer_config}
    tracing = tracer_provider if tracer_provider is not None else TracerProvider()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # One registry per app: several apps in a process do not report each other.
        registry = CollectorRegistry()
        reader = PrometheusMetricReader(registry=registry)
        meter_provider = MeterProvider(metric_readers=[reader])
        app.state.registry = registry
        app.state.tracer = tracing.get_tracer("http_service")
        try:
            # Closing delivers what is still buffered, after the server stopped taking
            # requests.
            async with Producer(servers, client_id="http-service", **config) as producer:
                instrument_producer(
                    producer, tracer_provider=tracing, meter_provider=meter_provider
                )
                app.state.producer = producer
                yield
        finally:
            meter_provider.shutdown()

    return Starlette(
        routes=[
            Route("/events/{topic}", post_event, methods=["POST"]),
            Route("/metrics", metrics, methods=["GET"]),
        ],
        lifespan=lifespan,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    add_broker_argument(parser)
    args = parser.parse_args()
    with kafka(args.bootstrap_servers, "events") as bootstrap_servers:
        uvicorn.run(create_app(bootstrap_servers), host=args.host, port=args.port)


if __name__ == "__main__":
    main()

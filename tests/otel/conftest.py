"""The OpenTelemetry tests run on asyncio and trio, with in-memory SDK exporters."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from typing import Any

import pytest

if importlib.util.find_spec("opentelemetry.sdk") is None:  # the otel extra is optional
    collect_ignore = ["test_otel.py"]
else:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


@pytest.fixture(
    params=[
        pytest.param(("asyncio", {}), id="asyncio"),
        pytest.param(("trio", {}), id="trio"),
    ]
)
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    return request.param


@pytest.fixture
def spans() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def tracer_provider(spans: InMemorySpanExporter) -> Iterator[TracerProvider]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    yield provider
    provider.shutdown()


@pytest.fixture
def metric_reader() -> InMemoryMetricReader:
    return InMemoryMetricReader()


@pytest.fixture
def meter_provider(metric_reader: InMemoryMetricReader) -> Iterator[MeterProvider]:
    provider = MeterProvider(metric_readers=[metric_reader])
    yield provider
    provider.shutdown()

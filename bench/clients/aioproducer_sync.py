"""aioproducer's blocking facade, ``aioproducer.SyncProducer``: ``send()`` per record.

``send()`` returns a ``concurrent.futures``-like ``DeliveryFuture``; ``flush()`` waits for
every record sent before it, after which each future is checked. The producer's event loop
runs on a background thread, whose CPU counts towards the process's CPU time. Several senders
are threads sharing the producer. If this aioproducer has no ``SyncProducer`` the client
reports itself unavailable (exit status 3) instead of failing.
"""

from __future__ import annotations

import inspect
from typing import Any

from ._common import (
    ClientArgs,
    Meter,
    SyncOps,
    main_sync,
    parse_args,
    run_sync,
    unavailable,
)
from .aioproducer_asyncio import config

CLIENT = "aioproducer-sync"


def _load() -> Any:
    try:
        from aioproducer import SyncProducer
    except ImportError:
        from aioproducer.sync import SyncProducer  # type: ignore[import-not-found,unused-ignore]
    return SyncProducer


def count_failed(futures: list[Any], meter: Meter) -> int:
    """How many futures failed; after ``flush()`` each is done, so ``result`` never waits."""
    failed = 0
    for future in futures:
        error = future.exception(timeout=120)
        if error is not None:
            failed += 1
            meter.note_failure(error)
    return failed


def _on_done(future: Any, callback: Any) -> None:
    future.add_done_callback(callback)


def produce(args: ClientArgs, meter: Meter) -> int:
    """Send every record, flush, then check every future."""
    producer = _load()(args.bootstrap_servers, **config(args))
    try:
        partitions_for = getattr(producer, "partitions_for", None)
        if partitions_for is not None:
            # Connect and load the topic's metadata before the clock starts.
            partitions_for(args.topic)
        send = producer.send
        params = list(inspect.signature(send).parameters.values())
        if len(params) < 3 or params[2].kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD:
            # key is keyword-only: one wrapper call per record (its cost is measured).
            plain_send = send

            def send(topic: str, value: bytes, key: bytes | None) -> Any:
                return plain_send(topic, value, key=key)

        ops = SyncOps(send=send, flush=producer.flush, count_failed=count_failed, on_done=_on_done)
        return run_sync(args, meter, ops)
    finally:
        producer.close()


def main(argv: list[str] | None = None) -> int:
    """Run the client, or report it unavailable if ``SyncProducer`` cannot be imported."""
    try:
        _load()
    except ImportError as exc:
        parse_args(CLIENT, argv)  # still validate the command line
        return unavailable(CLIENT, f"aioproducer.SyncProducer cannot be imported: {exc}")
    return main_sync(CLIENT, "aioproducer", produce, argv)


if __name__ == "__main__":
    raise SystemExit(main())

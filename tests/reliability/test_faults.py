"""Broker faults on a real 3-node Kafka 4.4.0 (replication 3, min.insync.replicas 2).

Each test reads every partition back with an independent client and checks the promise of
acks=all with idempotence: nothing acknowledged is lost, nothing is written twice, each
partition holds its records in send order, and nothing hangs. Every test brings all three
brokers back before it ends, whatever happens, because the cluster is shared.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
import pytest

from aioproducer import Producer
from aioproducer.errors import DeliveryTimeoutError, KafkaError, KafkaTimeoutError
from aioproducer.testing import KafkaCluster, KafkaSetupError
from aioproducer.testing.verify import consume_all

from ._ledger import Ledger

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

_TOPIC_CONFIG = {"min.insync.replicas": "2"}
# Records sent after the saboteur is armed and before it kills: enough that requests are in
# flight to the victim (a few tens of milliseconds of sending), few against the 90,000 between kills.
_KILL_LAG = 5_000


@pytest.fixture
def anyio_backend() -> Any:
    return "asyncio"


# The cheaper faults also run on uvloop and trio.
_ALL_BACKENDS = pytest.mark.parametrize(
    "anyio_backend",
    [
        pytest.param(("asyncio", {}), id="asyncio"),
        pytest.param(("asyncio", {"use_uvloop": True}), id="uvloop"),
        pytest.param(("trio", {}), id="trio"),
    ],
)


def _wait_fully_replicated(kafka: KafkaCluster, topic: str, timeout: float = 90.0) -> None:
    """Block until every partition has a leader and all three replicas in sync, so the next
    fault never takes the last in-sync copy."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            response = kafka.metadata([topic])
            entry = next(t for t in response.topics if t.name == topic)
            if entry.partitions and all(
                p.leader_id >= 0 and len(p.isr) == len(kafka.node_ids) for p in entry.partitions
            ):
                return
        except (KafkaSetupError, StopIteration):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{topic} not fully replicated within {timeout} s")
        time.sleep(0.25)


def _wait_new_leader(kafka: KafkaCluster, topic: str, partition: int, old: int) -> float:
    """Block until ``partition`` is led by another broker than ``old``; return when."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with contextlib.suppress(KafkaSetupError, KafkaError):
            if kafka.leader_for(topic, partition) not in (old, -1):
                return time.monotonic()
        time.sleep(0.1)
    raise TimeoutError(f"{topic}-{partition} still led by {old} after 60 s")


def _restore(kafka: KafkaCluster) -> None:
    """Bring every broker back (resume the paused, start the stopped) and wait for them."""
    for node in kafka.node_ids:
        if kafka.is_paused(node):
            kafka.resume_broker(node, wait=False)
    down = [n for n in kafka.node_ids if not kafka.is_running(n)]
    # A lone controller cannot form the quorum, so a broker started while the others are
    # down never becomes visible: launch all but the last without waiting for that.
    for node in down[:-1]:
        with contextlib.suppress(KafkaSetupError):
            kafka.start_broker(node, timeout=1.0)
    if down:
        kafka.start_broker(down[-1])
    deadline = time.monotonic() + 120
    while True:
        try:
            if len(kafka.metadata().brokers) == len(kafka.node_ids):
                return
        except KafkaSetupError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError("the cluster did not come back within 120 s")
        time.sleep(0.25)


@contextlib.contextmanager
def _restored_afterwards(kafka: KafkaCluster) -> Iterator[None]:
    try:
        yield
    finally:
        _restore(kafka)


async def _read_back(kafka: KafkaCluster, topic: str, expected: int) -> list[Any]:
    return await anyio.to_thread.run_sync(
        lambda: consume_all(kafka.bootstrap_servers, topic, expected=expected, timeout=180)
    )


async def test_sigkill_the_busiest_leader_five_times_loses_and_duplicates_nothing(
    kafka3: KafkaCluster,
) -> None:
    partitions, total, kills = 6, 500_000, 5
    topic = f"faults-kill-{time.monotonic_ns()}"
    kafka3.create_topic(topic, partitions, 3, _TOPIC_CONFIG)
    # Partition 0 gets 40% of the records, partition 1 20%, the rest 10% each.
    pattern = [0, 0, 0, 0, 1, 1, 2, 3, 4, 5]
    ledger = Ledger(partitions)
    # Kill k happens a little after `thresholds[k]` records were sent. The producer waits at
    # the threshold until the saboteur is armed (the cluster has healed from the last kill),
    # then keeps sending, and the kill comes `_KILL_LAG` records later: requests are then in
    # flight to the victim. Holding the producer until the kill itself would let every
    # request finish first, and the kill would hit an idle connection.
    thresholds = [40_000 + k * 90_000 for k in range(kills)]
    armed = [anyio.Event() for _ in range(kills)]
    kill_times: list[float] = []
    victims: list[tuple[int, list[int]]] = []
    failover: list[float] = []
    progress = [0]
    # An abandoned saboteur thread must not go on killing brokers after the test.
    stopping = threading.Event()

    def saboteur() -> None:
        for k in range(kills):
            _wait_fully_replicated(kafka3, topic)
            anyio.from_thread.run_sync(armed[k].set)
            while progress[0] < thresholds[k] + _KILL_LAG:
                if stopping.wait(0.001):
                    return
            leaders = kafka3.partition_leaders(topic)
            victim = leaders[0]
            led = [p for p, node in leaders.items() if node == victim]
            kill_times.append(time.monotonic())
            kafka3.kill_broker(victim)
            victims.append((victim, led))
            # How long the cluster itself takes to move leadership (session timeout 3 s),
            # to tell the brokers' share of the recovery time from the producer's.
            failover.append(_wait_new_leader(kafka3, topic, 0, victim) - kill_times[-1])
            kafka3.start_broker(victim)

    with _restored_afterwards(kafka3):
        async with Producer(kafka3.bootstrap_servers, linger_ms=5) as producer:
            try:
                async with anyio.create_task_group() as tg:

                    async def run_saboteur() -> None:
                        await anyio.to_thread.run_sync(saboteur, abandon_on_cancel=True)

                    tg.start_soon(run_saboteur)
                    for i in range(total):
                        if i in thresholds:
                            await armed[thresholds.index(i)].wait()
                        p = pattern[i % len(pattern)]
                        handle = await producer.send(topic, ledger.value(p), partition=p)
                        ledger.track(p, handle)
                        progress[0] = i + 1
            finally:
                stopping.set()
            with anyio.fail_after(150):
                await producer.flush()
            metrics = producer.metrics()

    records = await _read_back(kafka3, topic, total)
    outcome = ledger.check(records)
    recovery = [ledger.recovery(t, led) for t, (_v, led) in zip(kill_times, victims, strict=True)]
    print()
    print(outcome.line("sigkill x5", recovery))
    print(
        f"  victims={[v for v, _ in victims]} retried={metrics['records_retried']} "
        "cluster_failover_s=[" + ", ".join(f"{f:.2f}" for f in failover) + "]"
    )
    assert len(kill_times) == kills
    assert outcome.sent == total
    assert outcome.failed == 0, outcome.failures
    assert outcome.acked == total
    outcome.assert_exact()
    assert metrics["records_retried"] > 0, "no kill hit a request in flight"
    assert all(r < 60 for r in recovery), recovery


async def test_a_paused_broker_for_ten_seconds_loses_nothing(kafka3: KafkaCluster) -> None:
    partitions = 6
    topic = f"faults-pause-{time.monotonic_ns()}"
    kafka3.create_topic(topic, partitions, 3, _TOPIC_CONFIG)
    _wait_fully_replicated(kafka3, topic)
    ledger = Ledger(partitions)
    with _restored_afterwards(kafka3):
        # A request to a frozen broker never gets an answer: request_timeout_ms closes the
        # connection and the batch goes again, to whichever broker leads by then.
        async with Producer(
            kafka3.bootstrap_servers, linger_ms=5, request_timeout_ms=5000
        ) as producer:
            stop = anyio.Event()

            async def produce() -> None:
                i = 0
                while not stop.is_set():
                    p = i % partitions
                    ledger.track(p, await producer.send(topic, ledger.value(p), partition=p))
                    i += 1
                    if i % 200 == 0:
                        await anyio.sleep(0.01)  # about 20,000 records/s at most

            leaders = kafka3.partition_leaders(topic)
            victim = leaders[0]
            led = [p for p, n in leaders.items() if n == victim]
            elected: list[float] = []

            async def watch_election() -> None:
                # When the cluster itself moved the frozen broker's first partition.
                at = await anyio.to_thread.run_sync(_wait_new_leader, kafka3, topic, led[0], victim)
                elected.append(at)

            async with anyio.create_task_group() as tg:
                tg.start_soon(produce)
                await anyio.sleep(2)
                paused_at = time.monotonic()
                await anyio.to_thread.run_sync(kafka3.pause_broker, victim)
                tg.start_soon(watch_election)
                try:
                    await anyio.sleep(10)
                finally:
                    await anyio.to_thread.run_sync(kafka3.resume_broker, victim)
                await anyio.sleep(3)
                stop.set()
            with anyio.fail_after(90):
                await producer.flush()
    records = await _read_back(kafka3, topic, ledger.sent)
    outcome = ledger.check(records)
    recovery = ledger.recovery(paused_at, led)
    election = elected[0] - paused_at
    print()
    print(outcome.line("sigstop 10s", [election, recovery]))
    assert outcome.failed == 0, outcome.failures
    outcome.assert_exact()
    # Leadership moves after the 3 s session timeout; the requests already sent to the
    # frozen broker must time out (request_timeout_ms, 5 s) before their batches may go to
    # the new leader without reordering. The producer's own share is bounded by that, not
    # by the freeze: it goes around the frozen broker as soon as the cluster allows.
    assert recovery < max(election, 5.0) + 4.0, (
        f"partitions of the frozen broker recovered after {recovery:.2f} s; "
        f"the cluster elected a new leader after {election:.2f} s"
    )


async def test_all_brokers_down_fails_pending_records_in_time_then_recovers(
    kafka3: KafkaCluster,
) -> None:
    partitions, delivery_timeout = 3, 8.0
    topic = f"faults-outage-{time.monotonic_ns()}"
    kafka3.create_topic(topic, partitions, 3, _TOPIC_CONFIG)
    _wait_fully_replicated(kafka3, topic)
    ledger = Ledger(partitions)
    with _restored_afterwards(kafka3):
        async with Producer(
            kafka3.bootstrap_servers,
            linger_ms=5,
            delivery_timeout_ms=int(delivery_timeout * 1000),
            request_timeout_ms=3000,
        ) as producer:
            for i in range(3000):
                p = i % partitions
                ledger.track(p, await producer.send(topic, ledger.value(p), partition=p))
            await producer.flush()
            # Records in flight when the cluster dies, and records sent while it is dead.
            for i in range(20_000):
                p = i % partitions
                ledger.track(p, await producer.send(topic, ledger.value(p), partition=p))
            down_at = time.monotonic()
            for node in kafka3.node_ids:
                await anyio.to_thread.run_sync(kafka3.kill_broker, node)
            for i in range(2000):
                p = i % partitions
                ledger.track(p, await producer.send(topic, ledger.value(p), partition=p))
            with anyio.fail_after(delivery_timeout + 10):
                await producer.flush()
            settled = time.monotonic()
            late = []
            for p in range(partitions):
                for i, h in enumerate(ledger.handles[p]):
                    exc = h.exception()
                    if exc is None:
                        continue
                    assert isinstance(exc, DeliveryTimeoutError), repr(exc)
                    assert isinstance(exc, KafkaTimeoutError)
                    took = ledger.done_at[p][i] - ledger.sent_at[p][i]
                    if took > delivery_timeout + 5:
                        late.append(took)
            assert not late, f"{len(late)} records failed late (worst {max(late):.1f} s)"
            await anyio.to_thread.run_sync(_restore, kafka3)
            back_at = time.monotonic()
            # The same producer, untouched: the next record goes through.
            with anyio.fail_after(60):
                meta = await producer.send_and_wait(topic, b"after-outage", partition=0)
            first_after = time.monotonic() - back_at
    records = await _read_back(kafka3, topic, ledger.sent + 1)
    (after,) = [r for r in records if r.value == b"after-outage"]
    assert (after.partition, after.offset) == (0, meta.offset)
    outcome = ledger.check(r for r in records if r.value != b"after-outage")
    print()
    print(outcome.line("all down > delivery_timeout", [settled - down_at, first_after]))
    assert outcome.failed > 0, "the outage did not fail any record"
    assert outcome.failures.keys() == {"DeliveryTimeoutError"}
    assert outcome.lost == 0 and outcome.duplicated == 0 and outcome.out_of_order == 0
    assert outcome.wrong_offset == 0
    assert settled - down_at < delivery_timeout + 5


@_ALL_BACKENDS
async def test_a_dead_leader_that_stays_dead_is_routed_around(kafka3: KafkaCluster) -> None:
    # Regression: with nothing in flight to the dead leader, or when the first refresh
    # still named it (before the controller fenced it), nothing asked for metadata again
    # and its partitions waited for metadata_max_age_ms (5 min) or for it to come back.
    partitions = 3
    topic = f"faults-dead-{time.monotonic_ns()}"
    kafka3.create_topic(topic, partitions, 3, _TOPIC_CONFIG)
    _wait_fully_replicated(kafka3, topic)
    ledger = Ledger(partitions)
    with _restored_afterwards(kafka3):
        async with Producer(kafka3.bootstrap_servers, linger_ms=1) as producer:
            for p in range(partitions):
                ledger.track(p, await producer.send(topic, ledger.value(p), partition=p))
            await producer.flush()
            victim = kafka3.leader_for(topic, 0)
            led = [p for p, n in kafka3.partition_leaders(topic).items() if n == victim]
            killed_at = time.monotonic()
            await anyio.to_thread.run_sync(kafka3.kill_broker, victim)
            # One record every 20 ms: slow enough that requests are rarely in flight.
            with anyio.fail_after(45):
                i = 0
                while time.monotonic() - killed_at < 4 or ledger.pending():
                    p = i % partitions
                    i += 1
                    ledger.track(p, await producer.send(topic, ledger.value(p), partition=p))
                    await anyio.sleep(0.02)
            assert not kafka3.is_running(victim)
            failover = await anyio.to_thread.run_sync(_wait_new_leader, kafka3, topic, 0, victim)
            recovery = ledger.recovery(killed_at, led)
    records = await _read_back(kafka3, topic, ledger.sent)
    outcome = ledger.check(records)
    print()
    print(outcome.line("leader dead, not restarted", [failover - killed_at, recovery]))
    assert outcome.failed == 0, outcome.failures
    outcome.assert_exact()


_BACKENDS = {
    "asyncio": ("asyncio", {}),
    "uvloop": ("asyncio", {"use_uvloop": True}),
    "trio": ("trio", {}),
}


def test_broker_restart_while_idle_reconnects_transparently(kafka3: KafkaCluster) -> None:
    # One producer per event loop (asyncio, uvloop, trio), each on its own thread and topic,
    # all idle through the same round of restarts: one round instead of one per loop.
    partitions = 3
    idle = threading.Barrier(len(_BACKENDS) + 1)  # every producer has sent and flushed
    restarted = threading.Event()
    ledgers: dict[str, Ledger] = {}
    topics: dict[str, str] = {}
    recovered: dict[str, float] = {}
    errors: dict[str, BaseException] = {}

    def client(name: str) -> None:
        backend, options = _BACKENDS[name]
        ledger, topic = ledgers[name], topics[name]

        async def run() -> None:
            async with Producer(kafka3.bootstrap_servers, linger_ms=1) as producer:
                for i in range(300):
                    p = i % partitions
                    ledger.track(p, await producer.send(topic, ledger.value(p), partition=p))
                await producer.flush()
                await anyio.to_thread.run_sync(idle.wait)
                await anyio.to_thread.run_sync(restarted.wait)
                started = time.monotonic()
                with anyio.fail_after(60):
                    for i in range(300):
                        p = i % partitions
                        ledger.track(p, await producer.send(topic, ledger.value(p), partition=p))
                    await producer.flush()
                recovered[name] = time.monotonic() - started

        try:
            anyio.run(run, backend=backend, backend_options=options)
        except BaseException as exc:  # reported by the test's thread below
            errors[name] = exc
            idle.abort()

    for name in _BACKENDS:
        topics[name] = f"faults-idle-{name}-{time.monotonic_ns()}"
        ledgers[name] = Ledger(partitions)
        kafka3.create_topic(topics[name], partitions, 3, _TOPIC_CONFIG)
        _wait_fully_replicated(kafka3, topics[name])
    threads = [threading.Thread(target=client, args=(name,)) for name in _BACKENDS]
    with _restored_afterwards(kafka3):
        for t in threads:
            t.start()
        try:
            try:
                idle.wait(timeout=120)
            except threading.BrokenBarrierError:
                pass  # a client failed: its error is raised below
            else:
                # Every broker is restarted once (SIGKILL, so no goodbye on the sockets)
                # while the producers hold connections to all of them and send nothing.
                for node in kafka3.node_ids:
                    kafka3.restart_broker(node, kill=True)
                    for topic in topics.values():
                        _wait_fully_replicated(kafka3, topic)
        finally:
            restarted.set()
            for t in threads:
                t.join(timeout=180)
    assert not errors, errors
    assert set(recovered) == set(_BACKENDS), "a producer never got past the restarts"
    print()
    for name in _BACKENDS:
        records = consume_all(
            kafka3.bootstrap_servers, topics[name], expected=ledgers[name].sent, timeout=180
        )
        outcome = ledgers[name].check(records)
        print(outcome.line(f"idle restart, {name}", [recovered[name]]))
        assert outcome.failed == 0, outcome.failures
        assert outcome.acked == 600
        outcome.assert_exact()

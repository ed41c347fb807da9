"""Transactional settings are checked when the producer is built."""

from __future__ import annotations

import pytest

from aioproducer import Producer
from aioproducer.errors import ConfigError, TransactionStateError


def test_transactional_config_needs_idempotence_and_acks_all() -> None:
    with pytest.raises(ConfigError, match="enable_idempotence"):
        Producer(transactional_id="t", enable_idempotence=False)
    with pytest.raises(ConfigError, match="acks"):
        Producer(transactional_id="t", acks=1)
    with pytest.raises(ConfigError, match="transactional_id"):
        Producer(transactional_id="")
    with pytest.raises(ConfigError, match="transaction_timeout_ms"):
        Producer(transactional_id="t", transaction_timeout_ms=0)


@pytest.mark.anyio
async def test_transaction_calls_need_a_transactional_id() -> None:
    async with Producer("127.0.0.1:1", max_block_ms=100) as producer:
        with pytest.raises(TransactionStateError, match="transactional_id"):
            await producer.begin_transaction()
        with pytest.raises(TransactionStateError, match="transactional_id"):
            await producer.send_offsets_to_transaction({("t", 0): 1}, "g")

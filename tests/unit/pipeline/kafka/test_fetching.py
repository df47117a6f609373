"""Unit tests of :func:`pipeline.kafka.fetching.bounded_fetch`: a reader of a whole
topic asks for fetches that librdkafka can receive, whatever the topic's size."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import Consumer
from hypothesis import given
from hypothesis import strategies as st

from pipeline.kafka.fetching import (
    FETCH_MAX_BYTES,
    PARTITION_FETCH_MAX_BYTES,
    RECEIVE_MESSAGE_MAX_BYTES,
    bounded_fetch,
)


def test_a_reader_asks_8_mib_a_fetch_and_1_mib_a_partition_by_default() -> None:
    assert (
        bounded_fetch()
        == bounded_fetch({})
        == {
            "fetch.max.bytes": FETCH_MAX_BYTES,
            "max.partition.fetch.bytes": PARTITION_FETCH_MAX_BYTES,
            "receive.message.max.bytes": RECEIVE_MESSAGE_MAX_BYTES,
        }
    )
    # The embedded broker answered the 282 359-record dead-letter topic with 118 MB at
    # once, over librdkafka's default 100 MB: a reader of a whole topic takes it.
    assert FETCH_MAX_BYTES + 512 <= 118_450_986 <= RECEIVE_MESSAGE_MAX_BYTES


def test_a_users_smaller_receive_limit_bounds_the_fetch() -> None:
    bounded = bounded_fetch({"receive.message.max.bytes": 4_000_512, "fetch.max.bytes": 50_000_000})
    assert bounded["fetch.max.bytes"] == 4_000_000
    assert bounded["max.partition.fetch.bytes"] == PARTITION_FETCH_MAX_BYTES


@given(
    st.fixed_dictionaries(
        {},
        optional={
            "receive.message.max.bytes": st.integers(2_000_000, 2**31 - 1),
            "fetch.max.bytes": st.integers(1_000_000, 2**31 - 1),
            "max.partition.fetch.bytes": st.integers(1, 2**31 - 1),
        },
    )
)
def test_the_fetch_always_fits_the_receive_limit(client: dict[str, Any]) -> None:
    bounded = bounded_fetch(client)
    assert bounded["fetch.max.bytes"] + 512 <= bounded["receive.message.max.bytes"]
    assert bounded["max.partition.fetch.bytes"] <= bounded["fetch.max.bytes"]
    assert bounded["fetch.max.bytes"] <= client.get("fetch.max.bytes", FETCH_MAX_BYTES)


@pytest.mark.parametrize("client", [{}, {"receive.message.max.bytes": 4_000_512}])
def test_librdkafka_accepts_the_bounded_properties(client: dict[str, Any]) -> None:
    consumer = Consumer(
        {"bootstrap.servers": "127.0.0.1:1", "group.id": "g", **client, **bounded_fetch(client)}
    )
    consumer.close()

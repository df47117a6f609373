"""Kafka client properties are merged in one place (pipeline.kafka.clients): the user's
pass-through never sets what Floodgate's guarantees rest on, the role's own properties
win over it, and no client may create a topic."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer

from pipeline.config import parse_query_group
from pipeline.errors import ConfigError
from pipeline.kafka.clients import RESERVED_KAFKA_KEYS, kafka_settings
from tests.integration.helpers import flights_raw_config


def test_the_role_wins_over_the_pass_through_and_no_client_creates_topics() -> None:
    settings = kafka_settings(
        "b:9092",
        {"security.protocol": "SSL", "fetch.wait.max.ms": 500},
        {"group.id": "g", "fetch.wait.max.ms": 10},
    )
    assert settings == {
        "bootstrap.servers": "b:9092",
        "security.protocol": "SSL",
        "fetch.wait.max.ms": 10,
        "group.id": "g",
        "allow.auto.create.topics": False,
    }
    # librdkafka takes every merged property as it is (a typo would raise here).
    Consumer(kafka_settings("127.0.0.1:9", {"client.id": "x"}, {"group.id": "g"})).close()
    Producer(kafka_settings("127.0.0.1:9", {}, {"enable.idempotence": True, "acks": "all"}))


@pytest.mark.parametrize("key", sorted(RESERVED_KAFKA_KEYS))
def test_a_reserved_property_in_the_pass_through_is_refused_by_name(key: str) -> None:
    with pytest.raises(ConfigError, match=rf"may not set '{key}'") as info:
        kafka_settings("b:9092", {key: "x"}, {})
    assert info.value.key == f"kafka.client.{key}"
    raw = flights_raw_config("t", "/tmp/never-written")
    raw["kafka"] = {"client": {key: "x"}}
    with pytest.raises(ConfigError, match=rf"kafka\.client.*may not set '{key}'"):
        parse_query_group(raw, env={})

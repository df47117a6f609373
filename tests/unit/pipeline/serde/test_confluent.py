"""The Confluent wire format's codec, where no registry answers: framing it refuses
before asking one, and an outage that is no fault of the tuple. The round trip through
a real registry is tests/integration/registry."""

from __future__ import annotations

import pytest

from pipeline.errors import DeserializationError, SchemaError, SchemaRegistryError
from pipeline.serde.block import BlockEncoder
from pipeline.serde.confluent import ConfluentCodec, stream_codec
from pipeline.serde.schemas import MAGIC, SchemaRepository


@pytest.fixture(scope="module")
def repo() -> SchemaRepository:
    return SchemaRepository.load()


def closed_port() -> int:
    from pipeline.brokers.engines import free_port

    return free_port()  # nobody listens there once the probe socket is closed


def codec(repo: SchemaRepository, url: str = "http://127.0.0.1:9") -> ConfluentCodec:
    made = stream_codec(
        "flights",
        repo.get("flight"),
        repo,
        encoding="confluent",
        topic="flights",
        registry={"url": url},
    )
    assert isinstance(made, ConfluentCodec)
    return made


@pytest.mark.parametrize("value", [b"", b"\x00\x00\x00\x01", MAGIC + bytes(8) + b"\x02"])
def test_values_without_confluent_framing_are_bad_magic_byte(
    repo: SchemaRepository, value: bytes
) -> None:
    with pytest.raises(DeserializationError) as info:
        codec(repo).decode(value)
    assert info.value.reason == "bad-magic-byte"


def test_a_registry_that_does_not_answer_is_an_outage_not_a_bad_tuple(
    repo: SchemaRepository,
) -> None:
    quiet = codec(repo, f"http://127.0.0.1:{closed_port()}")
    with pytest.raises(SchemaRegistryError) as info:
        quiet.decode(b"\x00\x00\x00\x00\x01\x02")
    assert not isinstance(info.value, DeserializationError)
    with pytest.raises(SchemaRegistryError):
        quiet.encode(
            {
                "year": 2013,
                "month": 1,
                "day": 1,
                "sched_dep_time": 515,
                "sched_arr_time": 819,
                "carrier": "UA",
                "flight": 1545,
                "origin": "EWR",
                "dest": "IAH",
                "distance": 1400,
                "hour": 5,
                "minute": 15,
                "time_hour": 1357034400000,
            }
        )


def test_confluent_streams_are_encoded_tuple_by_tuple(repo: SchemaRepository) -> None:
    assert not BlockEncoder(codec(repo)).enabled
    assert BlockEncoder(stream_codec("flights", repo.get("flight"), repo)).enabled


def test_an_unknown_encoding_or_a_missing_registry_is_refused(repo: SchemaRepository) -> None:
    with pytest.raises(SchemaError, match="allowed: single-object, confluent"):
        stream_codec("flights", repo.get("flight"), repo, encoding="avro")
    with pytest.raises(SchemaError, match="schema_registry"):
        stream_codec("flights", repo.get("flight"), repo, encoding="confluent", topic="t")

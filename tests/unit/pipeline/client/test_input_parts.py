"""The parts of a stream input, no broker: the tuples' encoding (one record per tuple
whatever form a put is given, a bad batch refused whole), the queue's back-pressure
(sends counted between readings, one warning per threshold crossing and per broker
outage, the resume check), and the producer's local size limit."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from prometheus_client import CollectorRegistry

from pipeline.client.backpressure import THRESHOLD_MESSAGE_CODE, BackPressure
from pipeline.client.encoding import TupleEncoder
from pipeline.client.producer import StreamProducer
from pipeline.config import QueryGroupConfig, load_query_group
from pipeline.demo.flights import flight_table, flight_tuples, load_flights
from pipeline.errors import (
    BrokerError,
    EventTimeError,
    NullKeyError,
    SchemaError,
    TupleTooLargeError,
)
from pipeline.metrics import ClientMetrics
from pipeline.queues.snapshot import PartitionQueue, QueueSnapshot
from pipeline.resources import shipped_configs
from pipeline.serde.schemas import SchemaRepository

LABELS = {"query_group": "flights", "stream": "flights"}


@pytest.fixture(scope="module")
def config() -> QueryGroupConfig:
    return load_query_group(shipped_configs()["flights"], env={})


@pytest.fixture(scope="module")
def encoder(config: QueryGroupConfig) -> TupleEncoder:
    return TupleEncoder(config, "flights", SchemaRepository.load())


@pytest.fixture(scope="module")
def flights() -> list[dict[str, Any]]:
    return list(flight_tuples(load_flights(limit=50)))


# -- the encoding ----------------------------------------------------------------


def test_a_dict_a_list_and_a_table_give_the_same_records(
    encoder: TupleEncoder, flights: list[dict[str, Any]]
) -> None:
    records = encoder.encode(flights)
    assert len(records) == len(flights)
    assert records == [encoder.encode(t)[0] for t in flights]
    assert encoder.encode(flight_table(load_flights(limit=50))) == records
    assert all(key for key, _ in records)  # the flights stream is keyed
    assert encoder.encode([]) == []


def test_a_bad_batch_is_refused_whole_naming_the_tuple(
    encoder: TupleEncoder, flights: list[dict[str, Any]]
) -> None:
    with pytest.raises(SchemaError, match="not str"):
        encoder.encode("a flight")
    with pytest.raises(NullKeyError) as null:
        encoder.encode([flights[0], dict(flights[1], carrier=None)])
    assert (null.value.index, null.value.field) == (1, "carrier")
    ahead = datetime.now(UTC) + timedelta(days=365)
    with pytest.raises(EventTimeError) as late:
        encoder.encode([flights[0], flights[1], dict(flights[2], time_hour=ahead)])
    assert (late.value.index, late.value.field) == (2, "time_hour")


# -- the back-pressure -----------------------------------------------------------


class FakeProbe:
    """Answers each ``snapshot()`` with the next queue length, or raises it."""

    def __init__(self, answers: list[int | BaseException]) -> None:
        self.answers: Iterator[int | BaseException] = iter(answers)

    def snapshot(self) -> QueueSnapshot:
        answer = next(self.answers)
        if isinstance(answer, BaseException):
            raise answer
        return QueueSnapshot("flights", 1_000, {0: PartitionQueue(high=answer)})


@pytest.fixture
def space(config: QueryGroupConfig) -> Callable[..., tuple[BackPressure, CollectorRegistry]]:
    settings = config.input_settings("flights").model_copy(
        update={
            "max_queue_size": 1_000,
            "free_input_queue_size_threshold": 20,
            "resume_free_queue_size_threshold": 50,
        }
    )

    def make(*answers: int | BaseException) -> tuple[BackPressure, CollectorRegistry]:
        registry = CollectorRegistry()
        made = BackPressure(
            query_group="flights",
            stream="flights",
            settings=settings,
            probe=FakeProbe(list(answers)),  # type: ignore[arg-type]
            metrics=ClientMetrics(registry),
        )
        return made, registry

    return make


def test_sends_count_against_the_reading_and_a_crossing_warns_once(
    space: Callable[..., tuple[BackPressure, CollectorRegistry]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="pipeline.client")
    pressure, registry = space(300, 300)
    assert pressure.stale() and pressure.length is None
    pressure.refresh(in_flight=100)
    assert (pressure.length, pressure.available) == (300, 600)
    assert not pressure.stale() or pressure.settings.queue_refresh_interval_ms == 0
    assert not pressure.try_reserve(601)  # all or nothing
    assert pressure.try_reserve(400) and pressure.available == 200
    assert pressure.update_threshold_state()  # 20% free: at the threshold, crossed now
    assert pressure.threshold_exceeded
    assert pressure.try_reserve(100) and not pressure.update_threshold_state()
    error = pressure.full_error(500, waited_s=1.5)
    assert (error.requested, error.free, error.max_queue_size) == (500, 100, 1_000)
    crossings = [r for r in caplog.records if r.getMessage().startswith(THRESHOLD_MESSAGE_CODE)]
    assert len(crossings) == 1
    total = "floodgate_input_stream_queue_threshold_crossings_total"
    assert registry.get_sample_value(total, LABELS) == 1
    pressure.refresh(in_flight=0)  # the queue drained to 300: 700 free again
    assert pressure.available == 700 and not pressure.threshold_exceeded


def test_a_broker_outage_keeps_counting_against_the_last_reading(
    space: Callable[..., tuple[BackPressure, CollectorRegistry]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="pipeline.client")
    lost = BrokerError("no answer")
    pressure, _ = space(200, lost, lost, 100)
    pressure.refresh(in_flight=0)
    assert pressure.try_reserve(300)
    pressure.refresh(in_flight=300)
    pressure.refresh(in_flight=300)
    assert (pressure.length, pressure.available) == (200, 500)  # the sends still count
    outage = [r.getMessage() for r in caplog.records if r.getMessage().startswith("FG-CLIENT-002")]
    assert len(outage) == 1 and "no answer" in outage[0]
    pressure.refresh(in_flight=0)
    assert (pressure.length, pressure.available) == (100, 900)
    assert "queue state read again" in caplog.records[-1].getMessage()


def test_the_first_reading_is_asked_again_only_through_a_transient_error(
    space: Callable[..., tuple[BackPressure, CollectorRegistry]],
) -> None:
    transient = BrokerError("coordinator moving")
    transient.__cause__ = KafkaException(KafkaError(KafkaError.NOT_COORDINATOR))
    pressure, _ = space(transient, 400)
    pressure.refresh(in_flight=0)
    assert pressure.length == 400
    pressure, _ = space(BrokerError("refused"), 400)
    with pytest.raises(BrokerError, match="refused"):
        pressure.refresh(in_flight=0)
    assert pressure.length is None


def test_a_blocked_put_resumes_only_above_the_resume_threshold(
    space: Callable[..., tuple[BackPressure, CollectorRegistry]],
) -> None:
    pressure, _ = space(500, 400)
    pressure.refresh(in_flight=0)  # 50% free: not above it
    assert not pressure.may_resume(1)
    pressure.refresh(in_flight=0)  # 60% free
    assert pressure.may_resume(600)
    assert not pressure.may_resume(601)


# -- the producer ----------------------------------------------------------------


def test_a_record_over_message_max_bytes_is_refused_naming_its_index() -> None:
    producer = StreamProducer(
        stream="flights",
        topic="flights",
        bootstrap_servers="127.0.0.1:9",
        client={"message.max.bytes": 1_000},
    )
    try:
        assert producer.max_message_bytes == 1_000
        producer.refuse_oversized([(b"k", b"v" * 999), (None, b"v" * 1_000)])
        with pytest.raises(TupleTooLargeError) as info:
            producer.refuse_oversized([(None, b"v"), (b"kk", b"v" * 999)])
        assert (info.value.index, info.value.size, info.value.limit) == (1, 1_001, 1_000)
        assert producer.take_failed() == [] and producer.replacements == 0
    finally:
        producer.close(0)

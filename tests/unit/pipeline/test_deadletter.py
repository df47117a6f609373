"""Unit tests of :mod:`pipeline.deadletter`: a task's dead letters are sent one record
each and logged as one ``FG-SOURCE-001`` line per reason, not one per tuple."""

from __future__ import annotations

import logging
from typing import Any, ClassVar

import pytest

import pipeline.deadletter as deadletter
from pipeline.deadletter import DLQ_REASON, DeadLetterWriter
from pipeline.errors import DeserializationError, RefusedTupleError


class _Message:
    """The parts of a confluent-kafka ``Message`` the writer reads."""

    def __init__(self, partition: int, offset: int) -> None:
        self._partition, self._offset = partition, offset

    def topic(self) -> str:
        return "flights"

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes:
        return f"AA|{self._offset}|1357034400000".encode()

    def value(self) -> bytes:
        return b"v"

    def headers(self) -> list[tuple[str, bytes]]:
        return []


class _Producer:
    """A producer that acknowledges every record at once."""

    sent: ClassVar[list[dict[str, Any]]] = []

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config

    def produce(self, topic: str, **record: Any) -> None:
        _Producer.sent.append({"topic": topic, **record})
        record["on_delivery"](None, None)

    def flush(self, timeout: float) -> int:
        return 0


@pytest.fixture
def producer(monkeypatch: pytest.MonkeyPatch) -> type[_Producer]:
    _Producer.sent = []
    monkeypatch.setattr(deadletter, "Producer", _Producer)
    return _Producer


def _refused(message: _Message, reason: str) -> RefusedTupleError:
    return RefusedTupleError(
        f"event time before the watermark ({reason})",
        reason=reason,
        stream="flights",
        topic=message.topic(),
        partition=message.partition(),
        offset=message.offset(),
    )


def test_the_late_tuples_of_a_task_are_logged_as_one_line_with_a_count_and_a_sample(
    producer: type[_Producer], caplog: pytest.LogCaptureFixture
) -> None:
    writer = DeadLetterWriter(
        "group.dead-letter", bootstrap_servers="b:9092", stream="flights", query="q"
    )
    messages = [_Message(p, o) for p in (0, 3) for o in range(100, 1_100)]
    for m in messages:
        writer.add(m, _refused(m, "late"))

    with caplog.at_level(logging.WARNING, logger="pipeline.deadletter"):
        writer.send(batch_id=17)

    assert len(producer.sent) == 2_000  # every tuple still has its dead-letter record
    assert {dict(r["headers"])[DLQ_REASON] for r in producer.sent} == {b"late"}
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1
    (line,) = lines
    assert line.startswith("FG-SOURCE-001 dead-lettered 2000 tuples of stream 'flights' as 'late'")
    assert "query 'q', micro-batch 17, partitions 0, 3" in line
    # The sample is the first tuple: its error names where it was, and its key.
    assert "partition 0, offset 100" in line and "b'AA|100|1357034400000'" in line
    assert writer.pending == []


def test_each_reason_gets_its_own_line(
    producer: type[_Producer], caplog: pytest.LogCaptureFixture
) -> None:
    writer = DeadLetterWriter("dlq", bootstrap_servers="b:9092", stream="flights", query=None)
    for offset in range(5):
        writer.add(_Message(1, offset), _refused(_Message(1, offset), "late"))
    bad = DeserializationError("not Avro", reason="bad-marker", stream="flights").at(
        topic="flights", partition=2, offset=9
    )
    writer.add(_Message(2, 9), bad)

    with caplog.at_level(logging.WARNING, logger="pipeline.deadletter"):
        writer.send()

    lines = sorted(r.getMessage() for r in caplog.records)
    assert len(lines) == 2
    assert "1 tuple of stream 'flights' as 'bad-marker'" in lines[0]
    assert "micro-batch ?, partition 2)" in lines[0]
    assert "5 tuples of stream 'flights' as 'late'" in lines[1]


def test_nothing_pending_sends_and_logs_nothing(
    producer: type[_Producer], caplog: pytest.LogCaptureFixture
) -> None:
    writer = DeadLetterWriter("dlq", bootstrap_servers="b:9092", stream="flights", query="q")
    with caplog.at_level(logging.WARNING, logger="pipeline.deadletter"):
        writer.send(batch_id=3)
    assert producer.sent == [] and caplog.records == []

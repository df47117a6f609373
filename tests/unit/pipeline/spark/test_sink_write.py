"""KafkaTransactionalSink.write's tuples, and its former keyword ``rows``.

No broker: ``write`` runs on a stand-in sink whose transaction only keeps what it
was given, so what is checked is how the tuples are taken and encoded.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from pipeline.spark.sink import KafkaTransactionalSink


class _Codec:
    schema = SimpleNamespace(field_names=("a", "b"))

    @staticmethod
    def normalise(values: dict[str, Any]) -> dict[str, Any]:
        return values

    @staticmethod
    def encode_normalised(values: dict[str, Any]) -> bytes:
        return repr(sorted(values.items())).encode()


class _Guard:
    def __init__(self) -> None:
        self.reserved: list[int] = []

    @contextlib.contextmanager
    def reserve(self, n: int, **_: Any) -> Iterator[None]:
        self.reserved.append(n)
        yield


class _StandIn:
    """The attributes of a sink that :meth:`KafkaTransactionalSink.write` reads."""

    def __init__(self) -> None:
        self.codec = _Codec()
        self.guard = _Guard()
        self.query = "q"
        self._keys_in_schema = True
        self.batches_written = 0
        self.tuples_written = 0
        self.sent: list[tuple[list[Any], int]] = []

    def key(self, values: dict[str, Any]) -> bytes:
        return str(values["a"]).encode()

    def _transaction(self, encoded: list[Any], batch_id: int, offsets: Any) -> None:
        self.sent.append((encoded, batch_id))


TUPLES = [{"a": 1, "b": "x", "extra": 0}, {"a": 2, "b": None}]


def test_write_takes_tuples_and_leaves_out_other_columns() -> None:
    sink = _StandIn()
    KafkaTransactionalSink.write(sink, tuples=TUPLES, batch_id=3, offsets=[])  # type: ignore[arg-type]
    ((encoded, batch_id),) = sink.sent
    assert batch_id == 3
    assert [key for key, _ in encoded] == [b"1", b"2"]
    assert b"extra" not in encoded[0][1]
    assert sink.guard.reserved == [2]
    assert sink.tuples_written == 2


def test_write_rows_is_deprecated() -> None:
    sink = _StandIn()
    with pytest.warns(DeprecationWarning, match=r"write\(rows=\.\.\.\).*pass tuples"):
        KafkaTransactionalSink.write(sink, rows=TUPLES, batch_id=0, offsets=[])  # type: ignore[arg-type]
    assert sink.tuples_written == 2


def test_write_refuses_rows_and_tuples_together() -> None:
    with pytest.raises(TypeError, match="'rows' and 'tuples'"):
        KafkaTransactionalSink.write(_StandIn(), rows=TUPLES, tuples=TUPLES, batch_id=0, offsets=[])  # type: ignore[arg-type]

"""What the full-disk tests share: the query group, its output counted per tuple, and
waits with deadlines."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from pipeline.client import connect
from pipeline.config import QueryGroupConfig, parse_query_group
from pipeline.deadletter import DLQ_REASON
from pipeline.demo.reception import read_all
from pipeline.errors import BrokerError, DeliveryError
from pipeline.serde.codec import StreamCodec
from pipeline.serde.schemas import SchemaRepository
from pipeline.services.ledger import reconcile
from tests.integration.helpers import flights_raw_config


def group_config(
    run_id: str, checkpoint_dir: Path, *, max_rows_per_trigger: int = 400
) -> QueryGroupConfig:
    """The flights group's per-origin-hour aggregation (a query with state stores in
    its checkpoint) and the pass-through copy to count each tuple by, in micro-batches
    of ``max_rows_per_trigger`` so that a fault lands mid-stream. (The per-carrier-day
    aggregation is left out: a third query costs Spark time and writes the same kind
    of files.)"""
    raw = flights_raw_config(
        run_id, checkpoint_dir, passthrough=True, max_rows_per_trigger=max_rows_per_trigger
    )
    del raw["queries"]["delays_by_carrier_day"]
    del raw["output_streams"]["delays_by_carrier_day"]
    return parse_query_group(raw, env={})


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def key_of(record: dict[str, Any]) -> tuple[Any, ...]:
    """A tuple by all its fields (the flights have no unique key field), a timestamp as
    its epoch milliseconds: a tuple decoded without logical types and the same tuple
    as the client reports it back (normalised, ``time_hour`` a ``datetime``) are one
    key."""
    return tuple(
        sorted(
            (name, (value - _EPOCH) // timedelta(milliseconds=1))
            if isinstance(value, datetime)
            else (name, value)
            for name, value in record.items()
        )
    )


def copies(bootstrap: str, config: QueryGroupConfig, schemas: SchemaRepository) -> Counter[Any]:
    """The copy query's output tuples by key (``read_committed``): a tuple written twice
    counts twice."""
    codec = StreamCodec("flights", schemas.get("flight"), schemas)
    return Counter(
        key_of(codec.decode(m.value(), logical=False))
        for m in read_all(bootstrap, config.output_streams["flights_copy"].topic)
    )


def input_copies(
    bootstrap: str, config: QueryGroupConfig, schemas: SchemaRepository
) -> Counter[Any]:
    """The input stream's tuples by key, as :func:`copies` counts the output's."""
    codec = StreamCodec("flights", schemas.get("flight"), schemas)
    return Counter(
        key_of(codec.decode(m.value(), logical=False))
        for m in read_all(bootstrap, config.input_streams["flights"].topic)
    )


def output_tuples(bootstrap: str, config: QueryGroupConfig) -> int:
    return len(read_all(bootstrap, config.output_streams["flights_copy"].topic))


def committed_all(bootstrap: str, config: QueryGroupConfig) -> bool:
    """Whether every query's consumer group has committed the input's high watermarks."""
    topic = config.input_streams["flights"].topic
    partitions = config.input_settings("flights").partitions
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "disk-faults-check"})
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        ends = [consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in tps]
        for query in config.queries:
            probe = Consumer(
                {"bootstrap.servers": bootstrap, "group.id": config.consumer_group(query)}
            )
            try:
                committed = [tp.offset for tp in probe.committed(tps, timeout=10)]
            finally:
                probe.close()
            if committed != ends:
                return False
        return True
    finally:
        consumer.close()


def wait_until(
    predicate: Callable[[], bool], timeout_s: float, what: str, *, tolerate: bool = False
) -> None:
    """Poll ``predicate`` every 0.25 s until it holds.

    Args:
        tolerate: an exception of ``predicate`` counts as "not yet" (a broker coming
            back); else it is raised.

    Raises:
        AssertionError: ``timeout_s`` passed, naming ``what``.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except Exception:
            if not tolerate:
                raise
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def check_exactly_once(
    bootstrap: str,
    config: QueryGroupConfig,
    schemas: SchemaRepository,
    records: list[dict[str, Any]],
    reput: Sequence[dict[str, Any]] = (),
) -> None:
    """Every tuple put is in the copy's output once, and the tuple ledger balances with
    every tuple written and processed.

    ``reput``: tuples reported back to their producer (``DeliveryError``) and put
    again. Each may be in the output once more, and no other tuple: a broker whose
    disk fills mid-append can write a batch and still answer with an error (seen:
    ``UNKNOWN_SERVER_ERROR`` after a fault in its memory-mapped index, the segment
    already written), so the producer's second put is a second copy. No client can
    tell; docs/runbook.md ("Full disks") says so. Nothing may be lost either way.
    """
    wait_until(
        lambda: committed_all(bootstrap, config), 300, "every query to commit its input",
        tolerate=True,
    )  # fmt: skip
    got = copies(bootstrap, config, schemas)
    want = Counter(key_of(r) for r in records)
    lost = want - got
    assert not lost, f"{sum(lost.values())} tuple(s) lost, e.g. {next(iter(lost))}"
    extra = got - want
    unexplained = extra - Counter(key_of(r) for r in reput)
    if unexplained:
        inputs = input_copies(bootstrap, config, schemas)
        twice_in = sum(1 for key in unexplained if inputs[key] > 1)
        raise AssertionError(
            f"{sum(unexplained.values())} tuple(s) written twice that no put reported "
            f"back; {twice_in} of them are in the input twice too (the producer wrote "
            f"them twice), the others only in the output (the sink did)"
        )
    rows = reconcile(config, bootstrap_servers=bootstrap)
    assert all(row.balanced for row in rows), rows
    assert sum(row.written for row in rows) == len(records) + sum(extra.values()), rows
    # A second copy comes after the stream's watermark passed its event time: the
    # aggregation dead-letters it as late (seen: 52 of 52); nothing else may be.
    dead = sum(row.dead_lettered for row in rows)
    assert dead <= sum(extra.values()), f"{dead} dead-lettered, {sum(extra.values())} put again"
    reasons = Counter(
        dict(m.headers() or ())[DLQ_REASON].decode()
        for m in read_all(bootstrap, config.dead_letter_topic)
    )
    assert set(reasons) <= {"late"}, reasons
    assert sum(row.processed for row in rows) + dead == len(records) + sum(extra.values()), rows


class Producing:
    """A data transmission application on its own thread: puts ``records`` in puts of
    ``put_size`` with ``block=True``, the first ``first`` at once and the rest one put
    every ``pace_s`` after :meth:`go` (so a fault lands while it writes). A put refused
    on a :class:`~pipeline.errors.BrokerError` (the queue could not be read) is put
    again, and tuples ``put_end`` reports unacknowledged are put again: both are what
    the client's errors are for, and each is recorded in :attr:`retries`."""

    def __init__(
        self,
        bootstrap: str,
        config: QueryGroupConfig,
        schemas: SchemaRepository,
        records: list[dict[str, Any]],
        *,
        first: int,
        put_size: int = 100,
        pace_s: float = 0.3,
    ) -> None:
        self.bootstrap, self.config, self.schemas = bootstrap, config, schemas
        self.records, self.first, self.put_size, self.pace_s = records, first, put_size, pace_s
        self._go = threading.Event()
        self.put_count = 0
        self.retries: list[str] = []
        #: Tuples ``put_end`` reported unacknowledged, put again.
        self.reput: list[dict[str, Any]] = []
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="producing", daemon=True)

    def start(self) -> Producing:
        self.thread.start()
        return self

    def go(self) -> None:
        self._go.set()

    def _run(self) -> None:
        try:
            with connect(
                bootstrap_servers=self.bootstrap, config=self.config, schemas=self.schemas
            ) as connector:
                stream_input = connector.open_stream_input(self.config.name, "flights")
                pending = list(self.records)
                while pending:
                    for i in range(0, len(pending), self.put_size):
                        chunk = pending[i : i + self.put_size]
                        while True:
                            try:
                                stream_input.put(chunk, block=True, timeout_s=300)
                                break
                            except BrokerError as exc:
                                self.retries.append(f"put: {exc}")
                                time.sleep(0.5)
                        self.put_count += len(chunk)
                        if self.put_count >= self.first:
                            self._go.wait()
                            time.sleep(self.pace_s)
                    try:
                        stream_input.put_end(timeout_s=300)
                        pending = []
                    except DeliveryError as exc:
                        self.retries.append(f"put_end: {exc}")
                        pending = [dict(t) for t, _ in exc.failed]
                        self.reput.extend(pending)
        except BaseException as exc:
            self.error = exc

    def join(self, timeout_s: float) -> None:
        self.thread.join(timeout_s)
        assert not self.thread.is_alive(), "the producer did not finish"
        assert self.error is None, repr(self.error)

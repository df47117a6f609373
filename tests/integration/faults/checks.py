"""What every fault test shares: a producer that writes through the fault, and the
checks every fault must pass once it healed.

The fault tests (``disk/``, ``kafka/``, ``network/``) run the flights query group with
a pass-through copy query, put the first flights through the back-pressure client
while they inject a fault, and then check (:func:`check_exactly_once`):

* every tuple put is in the copy's output (``read_committed``), counted by all its
  fields: none lost, and none there twice unless its put was reported back to the
  producer and put again (a broker that fails mid-append can answer with an error for
  a batch it wrote; no producer can tell);
* the tuple ledger balances (:func:`pipeline.queues.ledger.reconcile`), and only
  such second copies are dead-lettered, as late;
* no transaction is left open on an output or dead-letter partition: each last stable
  offset reaches its high watermark (:func:`check_no_open_transaction`).

Plain helpers; each fault's fixtures are in the ``conftest.py`` of its folder.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer, IsolationLevel, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from pipeline.client import connect
from pipeline.client.input import StreamInput
from pipeline.config import QueryGroupConfig
from pipeline.deadletter import DLQ_REASON
from pipeline.demo.reception import read_all
from pipeline.errors import BrokerError, DeliveryError
from pipeline.queues.ledger import reconcile
from pipeline.queues.replays import replays as replays_of
from pipeline.serde.codec import StreamCodec
from pipeline.serde.schemas import SchemaRepository
from pipeline.spark.states import QueryGroupState
from tests.integration.helpers import wait_until

if TYPE_CHECKING:
    from pipeline.spark.query_group import QueryGroup

#: Tuples a put carries.
PUT_SIZE = 100

#: How long a committed transaction's markers may take to reach every output partition
#: (the last stable offset catching up with the high watermark), seconds: generous, and
#: above the sink's transaction timeout (60 s), after which the coordinator aborts
#: whatever it still has open.
LSO_WAIT_S = 150.0

#: How long every query may take to commit the input's ends once a fault healed, seconds.
SETTLE_S = 300.0

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def key_of(record: dict[str, Any]) -> tuple[Any, ...]:
    """A flight by all its fields (the flights have no unique key field), a timestamp as
    its epoch milliseconds: a tuple decoded without logical types and the same tuple as
    the client reports it back (normalised, ``time_hour`` a ``datetime``) are one key."""
    return tuple(
        sorted(
            (name, (value - _EPOCH) // timedelta(milliseconds=1))
            if isinstance(value, datetime)
            else (name, value)
            for name, value in record.items()
        )
    )


def flights_in(bootstrap: str, topic: str, schemas: SchemaRepository) -> Counter[Any]:
    """The flights of ``topic`` by :func:`key_of` (``read_committed``): a tuple written
    twice counts twice."""
    codec = StreamCodec("flights", schemas.get("flight"), schemas)
    return Counter(
        key_of(codec.decode(m.value(), logical=False)) for m in read_all(bootstrap, topic)
    )


def copy_topic(config: QueryGroupConfig) -> str:
    """The pass-through copy's output topic."""
    return config.output_streams["flights_copy"].topic


def output_tuples(bootstrap: str, config: QueryGroupConfig) -> int:
    """Records in the copy's output so far (``read_committed``)."""
    return len(read_all(bootstrap, copy_topic(config)))


def committed_all(bootstrap: str, config: QueryGroupConfig) -> bool:
    """Whether every query's consumer group has committed the input's high watermarks."""
    topic = config.input_streams["flights"].topic
    partitions = config.input_settings("flights").partitions
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": "faults-check"})
    try:
        ends = [reader.get_watermark_offsets(tp, timeout=10)[1] for tp in tps]
        for query in config.queries:
            probe = Consumer(
                {"bootstrap.servers": bootstrap, "group.id": config.consumer_group(query)}
            )
            try:
                if [tp.offset for tp in probe.committed(tps, timeout=10)] != ends:
                    return False
            finally:
                probe.close()
        return True
    finally:
        reader.close()


def open_transactions(bootstrap: str, topics: Sequence[str]) -> dict[str, tuple[int, int]]:
    """The partitions of ``topics`` whose last stable offset (LSO, ListOffsets with
    ``read_committed``) is below the high watermark (``read_uncommitted``): those with a
    transaction still open, as ``{"topic/partition": (LSO, high watermark)}``. Empty:
    every transaction that wrote to them is committed or aborted (Kafka's KIP-98: the
    LSO is the first offset of the earliest open transaction, else the high watermark).

    Raises:
        KafkaException: the request failed.
    """
    admin = AdminClient({"bootstrap.servers": bootstrap})
    metadata = admin.list_topics(timeout=10)
    tps = [TopicPartition(t, p) for t in topics for p in metadata.topics[t].partitions]

    def offsets(level: IsolationLevel) -> dict[str, int]:
        futures = admin.list_offsets(
            {tp: OffsetSpec.latest() for tp in tps}, isolation_level=level, request_timeout=30
        )
        return {f"{tp.topic}/{tp.partition}": f.result().offset for tp, f in futures.items()}

    stable = offsets(IsolationLevel.READ_COMMITTED)
    high = offsets(IsolationLevel.READ_UNCOMMITTED)
    return {tp: (stable[tp], high[tp]) for tp in high if stable[tp] != high[tp]}


def check_no_open_transaction(
    bootstrap: str, topics: Sequence[str], wait_s: float = LSO_WAIT_S
) -> None:
    """Wait until no transaction is open on ``topics`` (:func:`open_transactions`
    empty), for up to ``wait_s``.

    Raises:
        AssertionError: one was still open then (names the partitions, their LSO and
            high watermark).
    """
    last: dict[str, tuple[int, int]] | str = "no answer"

    def none_open() -> bool:
        nonlocal last
        try:
            last = open_transactions(bootstrap, topics)
        except Exception as exc:  # the broker is coming back
            last = repr(exc)
        return last == {}

    try:
        wait_until(none_open, wait_s, "every output partition's LSO to reach its HW")
    except AssertionError:
        raise AssertionError(
            f"a transaction is left open after {wait_s:.0f} s "
            f"({{partition: (last stable offset, high watermark)}}): {last}"
        ) from None


def check_exactly_once(
    bootstrap: str,
    config: QueryGroupConfig,
    schemas: SchemaRepository,
    records: Sequence[dict[str, Any]],
    *,
    reput: Sequence[dict[str, Any]] = (),
    group: QueryGroup | None = None,
) -> None:
    """The checks of every fault, once it healed (see the module docstring).

    Args:
        records: every tuple put, once each.
        reput: tuples reported back to their producer (``DeliveryError``) and put
            again: each may be in the output once more, and its second copy
            dead-lettered as late (it comes after the watermark passed it).
        group: the running query group, if the test has one: it must neither have
            failed nor stopped (its copy query's last error is shown if it did).

    Raises:
        AssertionError: a check does not hold; for a tuple there twice, whether the
            input holds it twice too (the producer wrote it twice) or only the output
            (the sink did).
    """
    check_delivery(bootstrap, config, schemas, records, reput=reput, group=group)


def check_replays_counted(bootstrap: str, config: QueryGroupConfig, duplicates: int) -> int:
    """The audit's replays of the pass-through query (``pipeline.queues.replays``) against
    the ``duplicates`` read in its output: every replayed tuple is one of them, and the
    rest are in batches not committed yet (a batch cut short whose first copies are
    there). Returns the replayed count."""
    (row,) = [r for r in replays_of(config, bootstrap_servers=bootstrap) if r.query == "copy"]
    assert row.replayed is not None and row.uncommitted is not None, row
    assert row.replayed <= duplicates <= row.replayed + row.uncommitted, (duplicates, row)
    assert row.written == row.committed + row.replayed + row.uncommitted, row
    return row.replayed


def check_delivery(
    bootstrap: str,
    config: QueryGroupConfig,
    schemas: SchemaRepository,
    records: Sequence[dict[str, Any]],
    *,
    reput: Sequence[dict[str, Any]] = (),
    group: QueryGroup | None = None,
    at_least_once: bool = False,
) -> Counter[tuple[Any, ...]]:
    """:func:`check_exactly_once`, or with ``at_least_once`` (a group of ``delivery =
    "at-least-once"``) the same checks with the output's second copies of tuples put
    once allowed: nothing lost, the ledger balanced, no tuple out that was not put.

    Returns:
        The tuples in the output more often than put, and how many times more (the
        replays of an at-least-once sink after a fault).
    """
    wait_until(
        lambda: (
            committed_all(bootstrap, config)
            or (group is not None and group.state == QueryGroupState.FAILED)
        ),
        SETTLE_S,
        "every query to commit its input",
    )
    if group is not None:
        assert group.state not in (QueryGroupState.FAILED, QueryGroupState.STOPPED), (
            f"{group.state}: {group.sinks()['copy'].last_error!r}"
        )
    got = flights_in(bootstrap, copy_topic(config), schemas)
    want = Counter(key_of(r) for r in records)
    lost = want - got
    assert not lost, f"{sum(lost.values())} tuple(s) lost, e.g. {next(iter(lost))}"
    extra = got - want
    unexplained = extra - Counter(key_of(r) for r in reput)
    replays: Counter[tuple[Any, ...]] = Counter()
    if at_least_once:
        assert set(unexplained) <= set(want), "a tuple out that was never put"
        replays, unexplained = unexplained, Counter()
        check_replays_counted(bootstrap, config, sum(replays.values()))
    if unexplained:
        inputs = flights_in(bootstrap, config.input_streams["flights"].topic, schemas)
        twice_in = sum(1 for key in unexplained if inputs[key] > 1)
        raise AssertionError(
            f"{sum(unexplained.values())} tuple(s) written twice that no put reported "
            f"back; {twice_in} of them are in the input twice too (the producer wrote "
            f"them twice), the others only in the output (the sink did)"
        )
    topics = [s.topic for s in config.output_streams.values()] + [config.dead_letter_topic]
    check_no_open_transaction(bootstrap, topics)
    rows = reconcile(config, bootstrap_servers=bootstrap)
    assert all(row.balanced for row in rows), rows
    put_again = sum((extra - replays).values())
    assert sum(row.written for row in rows) == len(records) + put_again, rows
    dead = sum(row.dead_lettered for row in rows)
    assert dead <= put_again, f"{dead} tuple(s) dead-lettered, {put_again} put again: {rows}"
    reasons = Counter(
        dict(m.headers() or ())[DLQ_REASON].decode()
        for m in read_all(bootstrap, config.dead_letter_topic)
    )
    assert set(reasons) <= {"late"}, reasons
    assert sum(row.processed for row in rows) + dead == len(records) + put_again, rows
    return replays


def put_all(
    stream_input: StreamInput,
    records: Sequence[dict[str, Any]],
    *,
    after_put: Callable[[int], None],
    retries: list[str],
    reput: list[dict[str, Any]],
    put_size: int = PUT_SIZE,
) -> None:
    """Put ``records`` with ``put(block=True)`` in puts of ``put_size``, then
    ``put_end``, doing what the client's errors ask: a put refused on a
    :class:`~pipeline.errors.BrokerError` (the queue could not be read) is put again,
    and so are the tuples ``put_end`` reports unacknowledged
    (:class:`~pipeline.errors.DeliveryError`).

    Args:
        after_put: called with the tuples put so far after each put (to pace, or to
            publish progress).
        retries: every refusal and report is appended here, as text.
        reput: every tuple reported back is appended here.
    """
    pending = list(records)
    put = 0
    while pending:
        for i in range(0, len(pending), put_size):
            chunk = pending[i : i + put_size]
            while True:
                try:
                    stream_input.put(chunk, block=True, timeout_s=300)
                    break
                except BrokerError:
                    retries.append(f"put: {traceback.format_exc()}")
                    time.sleep(0.5)
            put += len(chunk)
            after_put(put)
        try:
            stream_input.put_end(timeout_s=300)
            pending = []
        except DeliveryError as exc:
            retries.append(f"put_end: {exc}")
            pending = [dict(t) for t, _ in exc.failed]
            reput.extend(pending)


class Producing:
    """A data transmission application on its own thread (:func:`put_all`): the first
    ``first`` tuples at once, the rest one put every ``pace_s`` once :meth:`go` is
    called, so that a fault lands while it writes.

    Attributes:
        put_count: tuples put so far.
        retries: the refusals and reports it acted on (:func:`put_all`).
        reput: the tuples reported back and put again.
        error: what ended its thread, if not success.
    """

    def __init__(
        self,
        bootstrap: str,
        config: QueryGroupConfig,
        schemas: SchemaRepository,
        records: Sequence[dict[str, Any]],
        *,
        first: int,
        pace_s: float,
    ) -> None:
        self.bootstrap, self.config, self.schemas = bootstrap, config, schemas
        self.records, self.first, self.pace_s = records, first, pace_s
        self._go = threading.Event()
        self.put_count = 0
        self.retries: list[str] = []
        self.reput: list[dict[str, Any]] = []
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="producing", daemon=True)

    def start(self) -> Producing:
        self.thread.start()
        return self

    def go(self) -> None:
        """Put the rest, paced."""
        self._go.set()

    def _after_put(self, put: int) -> None:
        self.put_count = put
        if put >= self.first:
            self._go.wait()
            time.sleep(self.pace_s)

    def _run(self) -> None:
        try:
            with connect(
                bootstrap_servers=self.bootstrap, config=self.config, schemas=self.schemas
            ) as connector:
                put_all(
                    connector.open_stream_input(self.config.name, "flights"),
                    self.records,
                    after_put=self._after_put,
                    retries=self.retries,
                    reput=self.reput,
                )
        except BaseException as exc:
            self.error = exc

    def join(self, timeout_s: float) -> None:
        """Wait for the producer to finish.

        Raises:
            AssertionError: it did not within ``timeout_s``, or it failed.
        """
        self.thread.join(timeout_s)
        assert not self.thread.is_alive(), "the producer did not finish"
        assert self.error is None, repr(self.error)

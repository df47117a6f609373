"""The demo's reception: the output stream queues read into tables, latest tuple per key."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

from pipeline.client import StreamOutput
from pipeline.errors import FloodgateError
from pipeline.kafka.clients import reader_settings
from pipeline.kafka.fetching import bounded_fetch
from pipeline.names import ad_hoc_group_id
from pipeline.serde.codec import StreamCodec

log = logging.getLogger(__name__)


#: Most tuples one ``StreamOutput.get`` of the reception returns.
RECEPTION_BATCH = 5_000


@dataclass
class OutputTable:
    """The latest tuple per key of one output stream, as a reception application sees it.

    Output streams written in ``update`` mode re-emit a group's row whenever it
    changes; like a compacted topic, the latest tuple per key is the current value.

    Attributes:
        stream: the output stream's name.
        key: the stream's key columns (empty: every tuple is kept).
        rows: ``{key values: latest tuple}``.
        received: tuples read, all of them (re-emits included).
    """

    stream: str
    key: tuple[str, ...]
    rows: dict[Any, dict[str, Any]] = field(default_factory=dict)
    received: int = 0

    def add(self, tuples: list[dict[str, Any]]) -> None:
        """Take tuples in the order read: a later tuple of a key replaces the earlier."""
        for t in tuples:
            self.rows[tuple(t[k] for k in self.key) if self.key else self.received] = t
            self.received += 1


class Reception:
    """The demo's data reception application: reads output streams as they are written.

    A thread loops over the streams, :meth:`StreamOutput.get` on each (which commits
    what it returned, freeing output stream queue space), and keeps an
    :class:`OutputTable` per stream. Read the tables through :meth:`tables` (a copy,
    taken under the lock) from any thread.

    Args:
        outputs: ``{stream: StreamOutput}`` opened by the demo's connector.
        keys: ``{stream: key columns}``.
        wait_s: how long one ``get`` waits for tuples.
        idle_s: when a round read nothing, how often the paused reader asks the broker
            whether its streams have new tuples (:meth:`StreamOutput.rest`).
        on_received: called from the reading thread with ``(stream, tuples)`` as soon
            as a ``get`` returned them (the latency benchmark times them).
    """

    def __init__(
        self,
        outputs: Mapping[str, StreamOutput],
        keys: Mapping[str, Iterable[str]],
        *,
        wait_s: float = 0.1,
        idle_s: float = 0.25,
        on_received: Callable[[str, list[dict[str, Any]]], None] | None = None,
    ) -> None:
        self.outputs = dict(outputs)
        self.on_received = on_received
        self.idle_s = idle_s
        self._tables = {s: OutputTable(s, tuple(keys[s])) for s in self.outputs}
        self.wait_s = wait_s
        self.error: BaseException | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="demo-reception", daemon=True)

    def start(self) -> Reception:
        """Start reading in a thread of its own."""
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                read = 0
                for stream, output in self.outputs.items():
                    tuples = output.get(max_tuples=RECEPTION_BATCH, timeout_s=self.wait_s)
                    if tuples:
                        read += len(tuples)
                        if self.on_received is not None:
                            self.on_received(stream, tuples)
                        with self._lock:
                            self._tables[stream].add(tuples)
                if not read:
                    # Nothing new: rest until there is, rather than have librdkafka
                    # poll the log end all along.
                    StreamOutput.rest(self.outputs.values(), stop=self._stop, poll_s=self.idle_s)
        except BaseException as exc:
            self.error = exc
            log.exception("demo reception failed")

    def tables(self) -> dict[str, OutputTable]:
        """A copy of every stream's table now."""
        with self._lock:
            return {
                s: OutputTable(t.stream, t.key, dict(t.rows), t.received)
                for s, t in self._tables.items()
            }

    def queue_lengths(self) -> dict[str, int]:
        """Each output stream queue's length, read from the broker now (tuples)."""
        return {s: o.queue_length() for s, o in self.outputs.items()}

    def wait_until_read(self, timeout_s: float) -> None:
        """Block until every output stream queue is empty (everything written was read).

        Raises:
            FloodgateError: the reception failed, or did not catch up within ``timeout_s``
                (the message gives each queue's length).
        """
        deadline = time.monotonic() + timeout_s
        while True:
            if self.error is not None:
                raise FloodgateError(f"the demo's reception failed: {self.error}") from self.error
            lengths = self.queue_lengths()
            if not any(lengths.values()):
                return
            if time.monotonic() > deadline:
                raise FloodgateError(
                    f"the reception did not read every output tuple in {timeout_s:.0f} s; "
                    f"output stream queue lengths: {lengths}"
                )
            time.sleep(0.1)

    def stop(self) -> None:
        """Stop reading (the streams stay open; their connector closes them)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)


def latest_hour(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The origin-hour tuples of the latest ``hour_start`` among ``rows``, by origin."""
    rows = list(rows)
    if not rows:
        return []
    last = max(r["hour_start"] for r in rows)
    return sorted((r for r in rows if r["hour_start"] == last), key=lambda r: r["origin"])


def read_table(
    bootstrap_servers: str,
    topic: str,
    codec: StreamCodec,
    *,
    key_columns: Iterable[str] = (),
    timeout_s: float = 60.0,
    client: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Read a whole output topic (``read_committed``) and keep the latest tuple per key.

    Output streams written in ``update`` mode re-emit a group's row when it changes;
    like a compacted topic, the latest record per key is the current value.

    Returns:
        The decoded tuples, one per key (every tuple when ``key_columns`` is empty).
    """
    records = read_all(bootstrap_servers, topic, timeout_s=timeout_s, client=client)
    latest: dict[Any, dict[str, Any]] = {}
    keyed = bool(list(key_columns))
    for i, message in enumerate(records):
        latest[message.key() if keyed else i] = codec.decode(message.value())
    return list(latest.values())


def read_all(
    bootstrap_servers: str,
    topic: str,
    *,
    timeout_s: float = 60.0,
    client: Mapping[str, Any] | None = None,
    committed_only: bool = True,
) -> list[Any]:
    """Every committed record of a topic, partition by partition, up to its end now
    (:func:`each_record`, in a list)."""
    return list(
        each_record(
            bootstrap_servers,
            topic,
            timeout_s=timeout_s,
            client=client,
            committed_only=committed_only,
        )
    )


def each_record(
    bootstrap_servers: str,
    topic: str,
    *,
    timeout_s: float = 60.0,
    client: Mapping[str, Any] | None = None,
    committed_only: bool = True,
) -> Iterator[Any]:
    """Every committed record of a topic (``read_committed``), up to each partition's
    high watermark when the read starts, one at a time: a topic of millions of records
    is never held whole. With ``committed_only = False``, every record in the log
    (``read_uncommitted``: aborted ones and an open transaction's too).

    Raises:
        TimeoutError: a partition was not read to its end within ``timeout_s``.
    """
    consumer = Consumer(
        reader_settings(
            bootstrap_servers,
            client,
            group_id=ad_hoc_group_id(),
            committed_only=committed_only,
            # A whole topic: more than one fetch answer may hold.
            own={"enable.partition.eof": True, **bounded_fetch(client)},
        )
    )
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            for p in partitions
        }
        pending = {p for p, (low, high) in ends.items() if high > low}
        consumer.assign([TopicPartition(topic, p, ends[p][0]) for p in partitions])
        deadline = time.monotonic() + timeout_s
        while pending and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=10_000, timeout=0.5):
                error = message.error()
                if error is not None:
                    if (
                        error.code() == KafkaError._PARTITION_EOF
                        and (message.offset() or 0) >= ends[message.partition()][1]
                    ):
                        pending.discard(message.partition())
                    continue
                yield message
                if (message.offset() or 0) + 1 >= ends[message.partition()][1]:
                    pending.discard(message.partition())
        if pending:
            raise TimeoutError(
                f"reading {topic!r}: partitions {sorted(pending)} "
                f"not read to the end in {timeout_s} s"
            )
    finally:
        consumer.close()

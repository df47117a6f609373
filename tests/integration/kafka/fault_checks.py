"""What the broker fault tests share: the query group they run, a producer that writes
through the fault, and the checks each fault must pass (nothing lost or duplicated by
key, the ledger balanced, no transaction left open).

Plain helpers; the fixtures are in ``conftest.py`` beside this module.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, IsolationLevel, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from pipeline.client import connect
from pipeline.config import QueryGroupConfig, parse_query_group
from pipeline.demo.reception import read_all
from pipeline.errors import BrokerError, DeliveryError
from pipeline.serde.codec import StreamCodec
from pipeline.serde.schemas import SchemaRepository
from pipeline.services.ledger import reconcile
from pipeline.spark.query_group import QueryGroup
from pipeline.spark.states import QueryGroupState
from tests.integration.helpers import flights_raw_config

#: Tuples each test produces, in puts of PUT_SIZE; the first FIRST of them at once,
#: the rest (once the test calls :meth:`Producing.go`) one put every ``pace_s``.
TUPLES = 3_000
PUT_SIZE = 100
FIRST = 600

#: How long a committed transaction's markers may take to reach every output partition
#: (the last stable offset catching up with the high watermark), seconds: generous, and
#: above the sink's transaction timeout (60 s), after which the coordinator aborts
#: whatever it still has open.
LSO_WAIT_S = 150.0


def group_config(
    run_id: str, tmp_path: Path, *, only_passthrough: bool = False
) -> QueryGroupConfig:
    """The flights group (both aggregations, unless ``only_passthrough``) plus a
    pass-through copy to count by key, small micro-batches so that faults land
    mid-stream. Micro-batches aligned in event time, as the demo's: a fault that
    stalls one input partition while the others go on would otherwise move the
    watermark past its flights, and the aggregations would dead-letter them as late
    (found by the 3-node test: the ledger balanced, with fewer tuples processed)."""
    raw = flights_raw_config(
        run_id,
        tmp_path / "checkpoints",
        passthrough=True,
        only_passthrough=only_passthrough,
        max_rows_per_trigger=200,
        aligned=True,
    )
    return parse_query_group(raw, env={})


def key_of(record: dict[str, Any]) -> tuple[Any, ...]:
    """A tuple by all its fields (the flights have no unique key field)."""
    return tuple(sorted(record.items()))


def copies(bootstrap: str, config: QueryGroupConfig, schemas: SchemaRepository) -> Counter[Any]:
    """The copy query's output tuples by key (``read_committed``): a duplicate counts
    twice."""
    codec = StreamCodec("flights", schemas.get("flight"), schemas)
    return Counter(
        key_of(codec.decode(m.value(), logical=False))
        for m in read_all(bootstrap, config.output_streams["flights_copy"].topic)
    )


class Producing:
    """A data transmission application on its own thread: puts ``records`` with
    ``block=True``, the first ``first`` at once, the rest one put every ``pace_s``
    once :meth:`go` is called (so that faults land while it writes). A put refused
    because the broker was unreachable, or tuples the broker did not acknowledge, are
    put again (what the client's errors are for); every such retry is recorded in
    :attr:`retries`."""

    def __init__(
        self,
        bootstrap: str,
        config: QueryGroupConfig,
        schemas: SchemaRepository,
        records: list[dict[str, Any]],
        *,
        pace_s: float,
        first: int = FIRST,
    ) -> None:
        self.bootstrap, self.config, self.schemas, self.records = (
            bootstrap,
            config,
            schemas,
            records,
        )
        self.pace_s = pace_s
        self.first = first
        self._go = threading.Event()
        self.put_count = 0
        self.retries: list[str] = []
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="producing", daemon=True)

    def start(self) -> Producing:
        self.thread.start()
        return self

    def go(self) -> None:
        """Put the rest, paced."""
        self._go.set()

    def _run(self) -> None:
        try:
            with connect(
                bootstrap_servers=self.bootstrap, config=self.config, schemas=self.schemas
            ) as connector:
                stream_input = connector.open_stream_input(self.config.name, "flights")
                pending = list(self.records)
                while pending:
                    for i in range(0, len(pending), PUT_SIZE):
                        chunk = pending[i : i + PUT_SIZE]
                        while True:
                            try:
                                stream_input.put(chunk, block=True, timeout_s=300)
                                break
                            except BrokerError:
                                self.retries.append(f"put: {traceback.format_exc()}")
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
        except BaseException as exc:
            self.error = exc

    def join(self, timeout_s: float) -> None:
        self.thread.join(timeout_s)
        assert not self.thread.is_alive(), "the producer did not finish"
        assert self.error is None, repr(self.error)


def committed_all(bootstrap: str, config: QueryGroupConfig) -> bool:
    """Whether every query's consumer group has committed the input's high watermarks."""
    topic = config.input_streams["flights"].topic
    partitions = config.input_settings("flights").partitions
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "faults-check"})
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


def wait_until(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll ``predicate`` every 0.5 s (an exception counts as not yet: the broker is
    coming back) until it holds.

    Raises:
        AssertionError: it did not hold within ``timeout_s`` (names ``what``).
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except Exception:
            pass  # the broker is coming back
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def output_tuples(bootstrap: str, config: QueryGroupConfig) -> int:
    return len(read_all(bootstrap, config.output_streams["flights_copy"].topic))


def open_transactions(bootstrap: str, topic: str) -> dict[int, tuple[int, int]]:
    """The partitions of ``topic`` whose last stable offset (LSO, ListOffsets with
    ``read_committed``) is below the high watermark (``read_uncommitted``): those with a
    transaction still open, as ``{partition: (lso, high watermark)}``. Empty: every
    transaction that wrote to the topic is committed or aborted (Kafka's KIP-98:
    the LSO is the first offset of the earliest open transaction, else the high
    watermark).

    Raises:
        KafkaException: the request failed.
    """
    admin = AdminClient({"bootstrap.servers": bootstrap})
    partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions
    latest = {TopicPartition(topic, p): OffsetSpec.latest() for p in partitions}

    def offsets(level: IsolationLevel) -> dict[int, int]:
        futures = admin.list_offsets(latest, isolation_level=level, request_timeout=10)
        return {tp.partition: future.result().offset for tp, future in futures.items()}

    stable = offsets(IsolationLevel.READ_COMMITTED)
    high = offsets(IsolationLevel.READ_UNCOMMITTED)
    return {p: (stable[p], high[p]) for p in partitions if stable[p] != high[p]}


def check_no_open_transaction(bootstrap: str, topic: str) -> None:
    """Wait until no transaction is open on ``topic`` (:func:`open_transactions` empty),
    for up to :data:`LSO_WAIT_S`.

    Raises:
        AssertionError: a transaction was still open then (names the partitions, their
            LSO and high watermark).
    """
    deadline = time.monotonic() + LSO_WAIT_S
    last: dict[int, tuple[int, int]] | str = "no answer"
    while time.monotonic() < deadline:
        try:
            last = open_transactions(bootstrap, topic)
        except Exception as exc:  # the broker is coming back
            last = repr(exc)
        if last == {}:
            return
        time.sleep(0.5)
    raise AssertionError(
        f"a transaction is left open on {topic} after {LSO_WAIT_S:.0f} s "
        f"({{partition: (last stable offset, high watermark)}}): {last}"
    )


def check_exactly_once(
    bootstrap: str,
    config: QueryGroupConfig,
    schemas: SchemaRepository,
    group: QueryGroup,
    records: list[dict[str, Any]],
) -> None:
    """Every query has committed all its input, the group still runs, each of
    ``records`` is in the copy's output exactly once (``read_committed``), no
    transaction is left open on any output topic, and the ledger balances.

    Raises:
        AssertionError: any of these does not hold (the group's own error first, when
            it failed).
    """
    wait_until(
        lambda: committed_all(bootstrap, config) or group.state == QueryGroupState.FAILED,
        300,
        "every query to commit its input",
    )
    assert group.state not in (QueryGroupState.FAILED, QueryGroupState.STOPPED), (
        f"{group.state}: {group.sinks()['copy'].last_error!r}"
    )
    assert copies(bootstrap, config, schemas) == Counter(key_of(r) for r in records)
    for stream in config.output_streams.values():
        check_no_open_transaction(bootstrap, stream.topic)
    rows = reconcile(config, bootstrap_servers=bootstrap)
    assert all(row.balanced for row in rows), rows
    assert sum(row.written for row in rows) == len(records), rows
    assert sum(row.processed for row in rows) == len(records), rows


@dataclass
class PausedCommit:
    """The sink's ``before-commit:<batch>:wait=<release>`` failpoint
    (:data:`pipeline.spark.sink.FAILPOINT_ENV`): the batch stands right before its
    ``commit_transaction``, its records delivered and its offsets sent, until
    :meth:`release`."""

    batch_id: int
    release_path: Path

    def wait_reached(self, timeout_s: float) -> None:
        """Block until a sink has reached the failpoint.

        Raises:
            AssertionError: none did within ``timeout_s``.
        """
        reached = Path(f"{self.release_path}.reached")
        deadline = time.monotonic() + timeout_s
        while not reached.exists():
            assert time.monotonic() < deadline, (
                f"no sink reached before-commit of batch {self.batch_id} in {timeout_s:.0f} s"
            )
            time.sleep(0.1)

    def release(self) -> None:
        """Let the paused batch commit (and any later one pass the failpoint)."""
        self.release_path.touch()


#: FindCoordinator's ``key_type``: a consumer group's, a transactional id's.
GROUP, TRANSACTION = 0, 1


def find_coordinator(address: str, key: str, key_type: int) -> int:
    """The ``node.id`` of the coordinator of ``key`` as the broker at ``address``
    (``host:port``, PLAINTEXT) names it: a FindCoordinator request, version 1 (Kafka's
    protocol guide; confluent-kafka has no call that returns a transaction's
    coordinator). What tells that a test kills the coordinator it means to.

    Raises:
        AssertionError: the broker answered an error (e.g. 15, COORDINATOR_NOT_AVAILABLE).
        OSError: the broker did not answer.
    """

    def text(value: str) -> bytes:
        raw = value.encode()
        return struct.pack(">h", len(raw)) + raw

    body = struct.pack(">hhi", 10, 1, 1) + text("floodgate-test") + text(key)
    body += struct.pack(">b", key_type)
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(struct.pack(">i", len(body)) + body)
        reply = b""
        while len(reply) < 4 or len(reply) < 4 + struct.unpack(">i", reply[:4])[0]:
            chunk = sock.recv(65536)
            if not chunk:
                raise OSError(f"{address} closed the connection")
            reply += chunk
    # size, correlation id, throttle_time_ms, error_code, error_message, node_id, ...
    error = struct.unpack(">h", reply[12:14])[0]
    message_length = struct.unpack(">h", reply[14:16])[0]
    at = 16 + max(message_length, 0)
    assert error == 0, f"FindCoordinator({key!r}) answered error {error}"
    return int(struct.unpack(">i", reply[at : at + 4])[0])

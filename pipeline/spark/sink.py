"""Writing a query's micro-batches to its output stream, effectively once.

:class:`KafkaTransactionalSink` is the ``foreachBatch`` function of every query
of a query group. For micro-batch ``N`` it:

1. reads the batch's end offsets of the query's input streams from Spark's
   offset log (``<checkpoint>/offsets/N``, written before the batch runs);
2. looks at the query's consumer group: if its committed offsets carry the
   metadata ``{"checkpoint": <this checkpoint>, "batch": M}`` with ``M >= N``,
   batch ``N`` was already written before a crash, and its output is skipped
   (the batch still runs, into Spark's ``noop`` sink, so a stateful query's
   state stores commit it);
3. otherwise collects the batch's rows on the driver, encodes them as Avro tuples,
   and in **one Kafka transaction** produces them to the output topic and
   commits the input end offsets (with that metadata) to the consumer group
   (``send_offsets_to_transaction``: Kafka's read-process-write pattern).

So a batch replayed after a crash, at any point, neither loses nor duplicates
output for ``read_committed`` readers; and the consumer group's committed
offsets are exactly what has been durably processed, which is what input queue
lengths and lag tools read. A restarted driver fences the old one's producer
through the stable ``transactional.id``.

Before step 3 writes anything, the batch's output is checked against the
output stream queue (:class:`OutputQueueGuard`; the stream data platform's "preventing the output
stream queue from overflowing"): when it does not fit in the free space, the query sleeps
``sleep_on_over_store_ms`` and re-checks, up to ``sleep_on_over_store_retry_count``
times, then raises :class:`~pipeline.errors.QueryGroupHeld`. Spark then
terminates the query *without* committing the batch, and the query group holds
its other queries; on release the batch is replayed from the offset log.

Rows are collected on the driver: output of a batch is bounded by the output
stream queue's max (a larger batch is :class:`~pipeline.errors.OversizedBatchError`),
and aggregations make it small; a query that passes large volumes through should
lower ``max_tuples_per_trigger``.

Stable message codes of the log (and of the errors): ``FG-QG-001`` (warning) a
query sleeps on a full output stream queue; ``FG-QG-002`` (error) the query group
is held; ``FG-QG-003`` (info) it is released; ``FG-QG-004`` (warning) input was
discarded on release; ``FG-QG-005`` (error) a batch larger than its output queue;
``FG-QG-008`` (warning) the broker went away during a batch's transaction, which is
written again by a new producer; ``FG-QG-009`` (warning) a batch's committed offsets
are read again through a transient broker error.

*The stream data platform* cited below is the stream data processing product whose
queue rules Floodgate follows, and whose parameter names it keeps (docs/glossary.md).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from pipeline.errors import (
    PY4J_ERROR_PREFIX,
    BatchInterrupted,
    MicroBatchError,
    QueryGroupError,
    renamed_argument,
)
from pipeline.failpoints import armed
from pipeline.kafka.clients import kafka_settings
from pipeline.kafka.retries import BROKER_WAIT_S, broker_retrying, transient_kafka_error
from pipeline.names import sink_transactional_id, verify_group_id
from pipeline.offsets import read_offset_log
from pipeline.serde.codec import StreamCodec, TupleKey
from pipeline.spark.guard import OutputQueueGuard

log = logging.getLogger(__name__)


#: Seconds a transaction step may take before it is abandoned and the batch fails.
TRANSACTION_TIMEOUT_S = 60.0

#: Seconds :meth:`KafkaTransactionalSink.prepare` gives ``init_transactions`` (a broker
#: that does not answer then delays the first micro-batch, which tries again, by as much).
PREPARE_TIMEOUT_S = 10.0


#: How many times a micro-batch's transaction is written when the broker goes away
#: during it (:meth:`KafkaTransactionalSink._transaction`).
TRANSACTION_ATTEMPTS = 5


#: librdkafka errors (``error_cb``) that mean the broker went away: a transaction
#: open across them is written again.
BROKER_GONE = frozenset({KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT})


#: Delivery errors of a record that a new producer may write again: the record timed
#: out in librdkafka (``message.timeout.ms``, bounded by the transaction timeout) or
#: the broker answered with a retriable error (``KafkaError.retriable()``, e.g.
#: NOT_ENOUGH_REPLICAS while the ISR is below ``min.insync.replicas``). Found by a
#: network partition that cut the output partition's leader from the other brokers:
#: its records timed out, ``flush()`` does not count such records, and the
#: transaction's ``send_offsets_to_transaction`` then failed with an abortable
#: ``_TIMED_OUT``. Any other delivery error (too large, not authorized) fails the batch.
TRANSIENT_DELIVERY = frozenset(
    {
        KafkaError._MSG_TIMED_OUT,
        KafkaError._TIMED_OUT,
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        # Purged by the sink itself when the broker went away (_on_error): the batch
        # is written again, never refused (a kill -9 of one node of three failed the
        # group with "refused ... Purged in queue",
        # tests/integration/faults/kafka/test_cluster.py).
        KafkaError._PURGE_QUEUE,
        KafkaError._PURGE_INFLIGHT,
    }
)


#: Broker errors that fence a transactional producer. After a broker loss they do not
#: mean a second producer with the same ``transactional.id``: Apache Kafka answered
#: ``send_offsets_to_transaction`` with "Producer attempted an operation with an old
#: epoch" after a SIGKILL and restart of a single broker
#: (``tests/integration/faults/kafka/test_single_broker.py``), its transaction coordinator having
#: aborted the open transaction with a bumped epoch.
FENCED = frozenset(
    {
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
    }
)


#: How long a committed transaction's records are read back for when the broker went
#: away during its commit, seconds.
VISIBLE_WAIT_S = 30.0


#: The sink's failpoints (:mod:`pipeline.failpoints`), for crash tests:
#: ``FLOODGATE_FAILPOINT=after-commit:<batch>`` kills the
#: driver's whole process group with SIGKILL right after the output transaction of that
#: micro-batch commits and before Spark records the batch as done -- the window in which
#: a replay must be recognised and skipped. ``records-sent:<batch>`` kills it once the
#: batch's records are delivered (acknowledged) in its open transaction, before its input
#: offsets are sent and it commits: a kill -9 mid-transaction. A spec ending in ``:stop``
#: (``records-sent:<batch>:stop``) stops the process group with SIGSTOP there instead,
#: once per process, for a test to start a second driver and resume this one, a zombie,
#: with SIGCONT. A spec ending in ``:wait=<path>`` (``before-commit:<batch>:wait=<path>``)
#: pauses the batch there instead: the sink creates ``<path>.reached`` and waits until
#: ``<path>`` exists (at most :data:`FAILPOINT_WAIT_S`) before it goes on, so that a test
#: does its fault (kills a broker, stops one) while the batch stands still, then creates
#: ``<path>``. ``before-commit:<batch>`` is right before ``commit_transaction``: the
#: batch's records delivered and its input offsets sent to the consumer group in the open
#: transaction. Unset in production.
FAILPOINTS = ("mid-transaction", "records-sent", "before-commit", "after-commit")

#: How long a ``:wait=`` failpoint waits for its release file, seconds; then the batch
#: goes on (a test that died meanwhile does not hold the driver for ever).
FAILPOINT_WAIT_S = 600.0


def _transient_delivery(error: KafkaError) -> bool:
    """Whether a record's delivery ``error`` lets a new producer write the batch again
    (:data:`TRANSIENT_DELIVERY`, or a retriable broker error)."""
    return error.code() in TRANSIENT_DELIVERY or bool(error.retriable())


def _failpoint(name: str, batch_id: int) -> None:
    action = armed(name, batch_id)
    if action == "":
        log.error("failpoint %s reached at batch %d: killing the driver", name, batch_id)
        os.killpg(os.getpgid(0), signal.SIGKILL)
    elif action == "stop":
        _stop_once(f"{name}:{batch_id}:stop")
    elif action is not None and action.startswith("wait="):
        _wait_for_release(f"{name}:{batch_id}:{action}", action.removeprefix("wait="))


def _wait_for_release(spec: str, release: str) -> None:
    """Create ``<release>.reached``, then block until the file ``release`` exists, for up
    to :data:`FAILPOINT_WAIT_S`."""
    log.error("failpoint %s reached: waiting for %s", spec, release)
    with open(f"{release}.reached", "a"):
        pass
    deadline = time.monotonic() + FAILPOINT_WAIT_S
    while not os.path.exists(release) and time.monotonic() < deadline:
        time.sleep(0.1)


_stopped_at: set[str] = set()


def _stop_once(spec: str) -> None:
    """Stop the driver's process group with SIGSTOP at failpoint ``spec``, the first time
    this process reaches it; it goes on where it stopped once sent SIGCONT."""
    if spec in _stopped_at:
        return
    _stopped_at.add(spec)
    log.error("failpoint %s reached: stopping the driver (SIGSTOP)", spec)
    os.killpg(os.getpgid(0), signal.SIGSTOP)


def for_spark(exc: BaseException, *, query_group: str, query: str, batch_id: int) -> BaseException:
    """What a ``foreachBatch`` function should raise to Spark for ``exc``.

    py4j hands Spark a Python error as the text of its whole traceback, and Spark's
    stream thread cannot read one that holds a JVM error's Java stack when the query
    is being stopped (:data:`~pipeline.errors.PY4J_ERROR_PREFIX`): the thread dies of
    a ``StackOverflowError`` and the stop becomes a failure. So an error whose
    traceback holds a JVM error becomes a :class:`~pipeline.errors.MicroBatchError`
    (a few lines, Spark's form of an interruption when it was one), to be raised
    ``from None`` (a cause would print the Java stack again); any other error is
    returned as it is.

    Args:
        exc: the error raised under the batch.
        query_group, query: where (for the message).
        batch_id: the micro-batch.
    """
    if PY4J_ERROR_PREFIX not in "".join(traceback.format_exception(exc)):
        return exc
    return MicroBatchError(query_group=query_group, query=query, batch_id=batch_id, cause=exc)


class _StuckCall(Exception):
    """A librdkafka transaction call that did not return within its bound."""


#: How much longer than its own timeout a transaction call may take before it is
#: abandoned, seconds (:func:`_bounded`).
STUCK_AFTER_S = TRANSACTION_TIMEOUT_S + 15.0


def _bounded(what: str, call: Callable[..., Any], *args: Any) -> None:
    """Run a blocking librdkafka transaction call, ``call(*args)``, on a thread of its
    own, and give up on it after :data:`STUCK_AFTER_S`.

    Why: librdkafka 2.16 does not always honour the timeout it is given.
    ``send_offsets_to_transaction`` waited for ever (measured: over 10 minutes, with a
    60 s timeout) after the broker that was its group coordinator was killed and
    restarted: librdkafka never checks the coordinator request's own timeout, and never
    looks up again a coordinator that left the metadata (both reported to librdkafka).
    The call's thread is left to it; the caller drops the producer, and the next
    producer's ``init_transactions`` fences it.

    Raises:
        _StuckCall: the call did not return within :data:`STUCK_AFTER_S`.
        Exception: whatever the call raised.
    """
    done = threading.Event()
    outcome: list[BaseException] = []

    def run() -> None:
        try:
            call(*args)
        except BaseException as exc:
            outcome.append(exc)
        finally:
            done.set()

    threading.Thread(target=run, name=f"floodgate-sink-{what}", daemon=True).start()
    if not done.wait(STUCK_AFTER_S):
        raise _StuckCall(f"librdkafka's {what} did not return within {STUCK_AFTER_S:.0f} s")
    if outcome:
        raise outcome[0]


class KafkaTransactionalSink:
    """``foreachBatch`` function: one query's output, written effectively once.

    Args:
        query_group: the query group's name (for errors and logs).
        query: the query's name.
        codec: encodes the output tuples with the output stream's schema.
        topic: the output topic.
        key_columns: columns joined with ``|`` into the record key.
        input_topics: the topics of the query's input streams.
        group_id: the query's consumer group (input offsets are committed there).
        checkpoint_dir: the query's checkpoint location.
        bootstrap_servers: the Kafka cluster.
        client: extra librdkafka properties.
        guard: the output stream queue's guard (default: no bound).
    """

    def __init__(
        self,
        *,
        query_group: str,
        query: str,
        codec: StreamCodec,
        topic: str,
        key_columns: Sequence[str],
        input_topics: Sequence[str],
        group_id: str,
        checkpoint_dir: str,
        bootstrap_servers: str,
        client: Mapping[str, Any] | None = None,
        guard: OutputQueueGuard | None = None,
    ) -> None:
        self.query_group = query_group
        self.query = query
        self.codec = codec
        self.topic = topic
        self.key_columns = list(key_columns)
        self.key = TupleKey(key_columns)
        self._keys_in_schema = set(key_columns) <= set(codec.schema.field_names)
        self.input_topics = list(input_topics)
        self.group_id = group_id
        self.checkpoint_dir = checkpoint_dir
        self.bootstrap_servers = bootstrap_servers
        self.client = dict(client or {})
        self.guard = guard or OutputQueueGuard(
            query_group=query_group,
            stream=topic,
            reader=None,
            partitions=1,
            sleep_ms=0,
            retry_count=0,
        )
        self.transactional_id = sink_transactional_id(group_id)
        self._lock = threading.Lock()
        self._producer: Producer | None = None
        self._consumer: Consumer | None = None
        self._broker_gone: list[KafkaError] = []
        #: The broker went away since the producer's last successful commit.
        self._broker_lost_since_commit = False
        self._committed_once = False
        #: Transactions written again because the broker went away during them.
        self.transactions_renewed = 0
        #: Batches written and skipped as already written (for tests and metrics).
        self.batches_written = 0
        self.batches_skipped = 0
        #: The error of the last micro-batch that failed, as raised under the function.
        self.last_error: BaseException | None = None
        self.tuples_written = 0

    # -- clients -------------------------------------------------------------

    def prepare(self) -> threading.Thread:
        """Make the transactional producer (its ``init_transactions``) and the consumer
        now, in a thread of their own, so that the first micro-batch finds them made:
        the query's first planning runs meanwhile. On Apache Kafka 4.4 a second
        query's ``init_transactions`` took 0.5 s, which was all inside its first
        ``addBatch``.

        The first micro-batch waits for the thread (the sink's lock). A failure is
        logged at DEBUG and changes nothing: the first micro-batch makes the clients
        itself and fails as it would have. ``init_transactions`` fences an earlier
        producer of the same ``transactional.id`` (a zombie driver's) here, a trigger
        sooner than the first micro-batch would.

        Returns:
            The thread, started.
        """

        def make() -> None:
            with self._lock:
                try:
                    self._get_producer(PREPARE_TIMEOUT_S)
                    self._get_consumer()
                except Exception:
                    log.debug(
                        "query group %s query %s: output clients not made ahead of the "
                        "first micro-batch",
                        self.query_group,
                        self.query,
                        exc_info=True,
                    )

        thread = threading.Thread(
            target=make, name=f"floodgate-sink-{self.query}-prepare", daemon=True
        )
        thread.start()
        return thread

    def _get_producer(self, timeout_s: float = TRANSACTION_TIMEOUT_S) -> Producer:
        if self._producer is None:
            producer = Producer(
                kafka_settings(
                    self.bootstrap_servers,
                    {"linger.ms": 5, **self.client},
                    {
                        "transactional.id": self.transactional_id,
                        "enable.idempotence": True,
                        "acks": "all",
                        "error_cb": self._on_error,
                    },
                )
            )
            producer.init_transactions(timeout_s)
            self._producer = producer
        return self._producer

    def _get_consumer(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer(
                kafka_settings(
                    self.bootstrap_servers,
                    self.client,
                    {"group.id": self.group_id, "enable.auto.commit": False},
                )
            )
        return self._consumer

    # -- the batch -----------------------------------------------------------

    def end_offsets(self, spark: Any, batch_id: int) -> list[TopicPartition]:
        """The input end offsets of ``batch_id`` as topic partitions."""
        result: list[TopicPartition] = []
        for logged in read_offset_log(spark, self.checkpoint_dir, batch_id):
            for topic, per_partition in logged.items():
                if topic in self.input_topics and isinstance(per_partition, Mapping):
                    for p, o in sorted(per_partition.items(), key=lambda kv: int(kv[0])):
                        result.append(TopicPartition(topic, int(p), int(o)))
        return result

    def _marker(self, batch_id: int) -> str:
        return json.dumps({"checkpoint": self.checkpoint_dir, "batch": batch_id}, sort_keys=True)

    def already_written(self, batch_id: int, offsets: Sequence[TopicPartition]) -> bool:
        """Whether the consumer group already holds this batch's commit.

        The read is asked again for up to :data:`BROKER_WAIT_S` while the broker
        answers a transient error (:func:`~pipeline.kafka.retries.transient_kafka_error`):
        a group coordinator that moves to another broker answers NOT_COORDINATOR
        until the new one has loaded the group.

        Raises:
            KafkaException: the read failed for another reason, or for longer.
        """
        if not offsets:
            return False
        started = time.monotonic()
        retrying = broker_retrying(
            transient_kafka_error,
            BROKER_WAIT_S,
            lambda _attempt, error: log.warning(
                "FG-QG-009 query group %s query %s: reading the committed offsets of batch "
                "%d again (%.1f s so far): %s",
                self.query_group,
                self.query,
                batch_id,
                time.monotonic() - started,
                error,
            ),
        )
        committed = retrying(
            self._get_consumer().committed,
            [TopicPartition(tp.topic, tp.partition) for tp in offsets],
            timeout=30,
        )
        for tp in committed:
            try:
                marker = json.loads(tp.metadata or "{}")
            except json.JSONDecodeError:
                return False
            if (
                marker.get("checkpoint") != self.checkpoint_dir
                or int(marker.get("batch", -1)) < batch_id
            ):
                return False
        return True

    def __call__(self, df: Any, batch_id: int) -> None:
        """Write micro-batch ``batch_id`` (Spark's ``foreachBatch`` contract).

        Raises:
            QueryGroupHeld: the output did not fit in the output stream queue after
                every sleep; the batch is not committed (Spark terminates the query).
            BatchInterrupted: the group was held or stopped before the batch was written.
            OversizedBatchError: the output is larger than the whole output queue.
            MicroBatchError: Spark or the JVM failed under the batch (a cancelled job, an
                interruption by the query's stop); the full error, Java stack included,
                is logged and kept in :attr:`last_error`.
        """
        self.last_error = None
        try:
            self._write_batch(df, batch_id)
        except Exception as exc:
            self.last_error = exc
            safe = for_spark(exc, query_group=self.query_group, query=self.query, batch_id=batch_id)
            if safe is exc:
                raise
            log.error(
                "query group %s query %s: micro-batch %d failed",
                self.query_group,
                self.query,
                batch_id,
                exc_info=exc,
            )
            raise safe from None

    def _write_batch(self, df: Any, batch_id: int) -> None:
        with self._lock:
            if self.guard.interrupted.is_set():
                raise BatchInterrupted(
                    query_group=self.query_group, query=self.query, batch_id=batch_id
                )
            offsets = self.end_offsets(df.sparkSession, batch_id)
            if self.already_written(batch_id, offsets):
                # The batch still runs, to a sink that writes nothing: a stateful
                # query's state stores must commit this version, or the state would
                # miss the batch's tuples and Spark (>= 4.1) fails the query with
                # STATE_STORE_COMMIT_VALIDATION_FAILED ("foreachBatch ... returning from
                # the function early"). Replayed from the same offsets, the batch
                # rebuilds the same state.
                df.write.format("noop").mode("append").save()
                self.batches_skipped += 1
                log.info(
                    "query group %s query %s: batch %d already committed, its output "
                    "skipped (its state stores committed)",
                    self.query_group,
                    self.query,
                    batch_id,
                )
                return
            self.write(df.toArrow().to_pylist(), batch_id, offsets)

    @renamed_argument("rows", "tuples")
    def write(
        self,
        tuples: Sequence[Mapping[str, Any]],
        batch_id: int,
        offsets: Sequence[TopicPartition],
    ) -> None:
        """Produce ``tuples`` and commit ``offsets`` in one transaction, once the output
        stream queue has room for them (:meth:`OutputQueueGuard.reserve`).

        Args:
            tuples: the batch's output tuples, ``{column: value}`` (the rows of the
                micro-batch's DataFrame); columns the output schema lacks are left out.
                Its former name ``rows=`` is taken, with a ``DeprecationWarning``, until
                the next release.
            batch_id: the micro-batch's id.
            offsets: the batch's end offsets of the query's input streams, committed to
                the query's consumer group in the same transaction.

        Raises:
            QueryGroupHeld, BatchInterrupted, OversizedBatchError: see :meth:`__call__`;
                nothing was written.
            SchemaError: a tuple does not match the output schema (the query fails).
            QueryGroupError: the transaction failed; it was aborted, so nothing
                of the batch is visible to ``read_committed`` readers.
        """
        fields = self.codec.schema.field_names
        normalise, encode = self.codec.normalise, self.codec.encode_normalised
        encoded = []
        for given in tuples:
            # Normalised as the client normalises a put: the same key text
            # for the same values, whoever writes the stream.
            normalised = normalise({name: given.get(name) for name in fields})
            key = self.key(normalised if self._keys_in_schema else given)
            encoded.append((key, encode(normalised)))
        with self.guard.reserve(len(encoded), query=self.query, batch_id=batch_id):
            self._transaction(encoded, batch_id, offsets)
        self.batches_written += 1
        self.tuples_written += len(encoded)
        _failpoint("after-commit", batch_id)

    def _on_error(self, error: KafkaError) -> None:
        """librdkafka's ``error_cb`` (served on the calling thread by ``poll``/``flush``).

        When the broker goes away (:data:`BROKER_GONE`) the open transaction is
        abandoned (:meth:`_transaction` writes the batch again with a new producer),
        so the records this producer still holds, queued or in flight, are purged at
        once: none is retried to the broker when it is back. noida-db 0.2.3 took such
        retried records into a transaction its coordinator does not know, which no
        producer ends (the soak's hanging transactions; its last stable offset stayed
        below the high watermark until the broker's next start).
        """
        if error.code() in BROKER_GONE:
            self._broker_gone.append(error)
            self._broker_lost_since_commit = True
            producer = self._producer
            if producer is not None:
                with contextlib.suppress(KafkaException, RuntimeError):
                    producer.purge(in_queue=True, in_flight=True)

    def _transaction(
        self, encoded: Sequence[tuple[Any, bytes]], batch_id: int, offsets: Sequence[TopicPartition]
    ) -> None:
        """The batch's one transaction, written again with a new producer when the
        broker went away while it was open (at most :data:`TRANSACTION_ATTEMPTS` times).

        Why: a broker that restarts in the middle of a transaction must either abort
        it or, with its records, commit it. noida-db 0.2.3 does neither: at start it
        aborts the records it had, then takes the producer's retried in-flight records
        into a transaction its coordinator does not know, and the producer's
        ``send_offsets_to_transaction`` + ``commit_transaction`` then succeed with the
        *offsets only* -- the input is committed, its output lost (15 000 tuples in
        long soak run 3). So when ``error_cb`` reported the broker gone
        (:data:`BROKER_GONE`) before the commit, nothing is committed: the producer
        is dropped, and a new one's ``init_transactions`` bumps the epoch (fencing
        the old one: Kafka aborts its transaction; noida-db leaves stray records
        open until its next start, so the old one's records are purged as soon as
        ``error_cb`` reports the broker gone, :meth:`_on_error`, and none is retried
        into such a transaction) and writes the batch again. Not
        an abort and a retry on the same producer: noida-db's commit marker would
        then also commit the stray records (measured: 2 499 duplicates of 5 000).
        When the broker went away during the commit itself, the records are read back
        (``read_committed``); if they are not visible, the batch is written again.

        Raises:
            QueryGroupError: the transaction failed (it was aborted), or the broker
                went away during every attempt.
        """
        marker = self._marker(batch_id)
        unknown = False  # the last attempt's commit may have gone through
        for attempt in range(1, TRANSACTION_ATTEMPTS + 1):
            producer = self._get_producer()
            producer.poll(0)  # what happened before this transaction is not its concern
            if unknown and self._decided_committed(batch_id, offsets):
                self._committed()
                return
            if self._broker_lost_since_commit and self._committed_once:
                # A broker went away since the last commit: a new producer, so that no
                # coordinator cached before the loss is asked (librdkafka's
                # send_offsets_to_transaction waited for ever on a coordinator that
                # had left the metadata and come back).
                self._renew_producer(batch_id, attempt, "since the last commit")
                self._broker_lost_since_commit = False
                producer = self._get_producer()
                producer.poll(0)
            self._broker_gone.clear()
            delivered: dict[int, set[int]] = {}
            failed: list[KafkaError] = []

            def on_delivery(
                err: KafkaError | None,
                msg: Any,
                delivered: dict[int, set[int]] = delivered,
                failed: list[KafkaError] = failed,
            ) -> None:
                if err is None:
                    delivered.setdefault(msg.partition(), set()).add(msg.offset())
                else:
                    failed.append(err)

            try:
                producer.begin_transaction()
                for i, (key, value) in enumerate(encoded):
                    producer.produce(self.topic, key=key, value=value, on_delivery=on_delivery)
                    if i % 10_000 == 0:
                        producer.poll(0)
                _failpoint("mid-transaction", batch_id)
                undelivered = producer.flush(TRANSACTION_TIMEOUT_S)
                lasting = [e for e in failed if not _transient_delivery(e)]
                if lasting:
                    exc = KafkaException(lasting[0])
                    self._abort(producer, exc)
                    raise QueryGroupError(
                        f"batch {batch_id}: {len(failed)} of {len(encoded)} record(s) to "
                        f"{self.topic!r} were refused and the transaction was aborted: "
                        f"{lasting[0]}",
                        query_group=self.query_group,
                        query=self.query,
                    )
                if undelivered or failed or self._broker_gone:
                    # Records still queued, or timed out (flush counts those as done):
                    # a new producer fences this one, whose transaction Kafka aborts.
                    self._renew_producer(
                        batch_id,
                        attempt,
                        "while its records were sent"
                        + (f" ({len(failed)} timed out: {failed[0]})" if failed else ""),
                    )
                    continue
                _failpoint("records-sent", batch_id)
                if offsets:
                    group_metadata = self._get_consumer().consumer_group_metadata()
                    _bounded(
                        "send_offsets_to_transaction",
                        producer.send_offsets_to_transaction,
                        [
                            TopicPartition(tp.topic, tp.partition, tp.offset, metadata=marker)
                            for tp in offsets
                        ],
                        group_metadata,
                        TRANSACTION_TIMEOUT_S,
                    )
                _failpoint("before-commit", batch_id)
                try:
                    _bounded(
                        "commit_transaction", producer.commit_transaction, TRANSACTION_TIMEOUT_S
                    )
                except _StuckCall:
                    # The commit's outcome is unknown: its records tell.
                    self._producer = None
                    visible = self._visible(delivered) if delivered else False
                    if visible:
                        self._committed()
                        return
                    unknown = visible is None
                    raise
                producer.poll(0)
            except _StuckCall as stuck:
                self._producer = None  # abandoned to its thread; the next one fences it
                self._renew_producer(batch_id, attempt, f"and {stuck}")
                continue
            except KafkaException as exc:
                if self._fenced_by_broker_loss(exc):
                    # The coordinator aborted the transaction (or, on a commit retried
                    # across the loss, committed it: then its records are visible).
                    visible = self._visible(delivered) if delivered else False
                    if visible:
                        self._committed()
                        return
                    unknown = visible is None
                    self._renew_producer(batch_id, attempt, f"and fenced the producer ({exc})")
                    continue
                self._abort(producer, exc)
                raise QueryGroupError(
                    f"batch {batch_id}: output transaction to {self.topic!r} failed "
                    f"and was aborted: {exc}{self._fence_cause(exc)}",
                    query_group=self.query_group,
                    query=self.query,
                ) from exc
            if self._broker_gone:
                visible = self._visible(delivered)
                if not visible:
                    # Committed by the broker, but maybe without its records (noida-db
                    # 0.2.3, see above), or no answer from the broker yet: a commit
                    # that returned is decided, so the next producer, once its
                    # init_transactions has let the coordinator finish it, reads the
                    # consumer group's offsets first (:meth:`_decided_committed`).
                    unknown = visible is None
                    self._renew_producer(batch_id, attempt, "during its commit")
                    continue
            self._committed()
            return
        raise QueryGroupError(
            f"batch {batch_id}: the broker went away during each of {TRANSACTION_ATTEMPTS} "
            f"output transactions to {self.topic!r}; nothing of the batch is visible",
            query_group=self.query_group,
            query=self.query,
        )

    def _committed(self) -> None:
        self._broker_lost_since_commit = False
        self._committed_once = True

    def _fenced_by_broker_loss(self, exc: KafkaException) -> bool:
        """Whether ``exc`` fences this producer after the broker went away since its
        last commit (:data:`FENCED`): the transaction is written again by a new
        producer. A fence without a broker loss is a second producer with this
        ``transactional.id`` (a second driver of the query group), and fails the batch."""
        error = exc.args[0] if exc.args else None
        code = error.code() if isinstance(error, KafkaError) else None
        return code in FENCED and (self._broker_lost_since_commit or bool(self._broker_gone))

    def _fence_cause(self, exc: KafkaException) -> str:
        """What a fence of this producer means, for the error's text ("" for another
        error). Kafka fences a transactional producer for two reasons it does not tell
        apart: a newer producer with the same ``transactional.id`` (a second driver of
        this query group, which the sink must not fight), or the transaction
        coordinator aborting a transaction open for longer than
        ``transaction.timeout.ms`` (a network partition, a stopped leader)."""
        error = exc.args[0] if exc.args else None
        if not isinstance(error, KafkaError) or error.code() not in FENCED:
            return ""
        return (
            f" (fenced: either a second driver of query group {self.query_group!r} runs "
            f"with transactional.id {self.transactional_id!r}, or the transaction was open "
            "for longer than transaction.timeout.ms and its coordinator aborted it; stop any "
            "second driver, then start the group again on its checkpoint: nothing is lost)"
        )

    def _renew_producer(self, batch_id: int, attempt: int, when: str) -> None:
        log.warning(
            "FG-QG-008 query group %s query %s: the broker went away %s (%s); "
            "batch %d is written again by a new producer (attempt %d of %d failed)",
            self.query_group,
            self.query,
            when,
            self._broker_gone[0] if self._broker_gone else "undelivered records",
            batch_id,
            attempt,
            TRANSACTION_ATTEMPTS,
        )
        self._producer = None  # the next init_transactions fences this one
        self.transactions_renewed += 1

    def _decided_committed(self, batch_id: int, offsets: Sequence[TopicPartition]) -> bool:
        """After a commit whose outcome was unknown: whether it went through, read from
        the consumer group's committed offsets (:meth:`already_written`).

        Called once a new producer's ``init_transactions`` has returned: Kafka's
        transaction coordinator answers it only after it has completed the transaction
        the old producer left in ``PrepareCommit`` or ``PrepareAbort`` (and aborts an
        ongoing one), and the input offsets were sent in that transaction, so they are
        committed with its records or not at all. Spark's own Kafka sink has no such
        check: it is at least once.
        """
        written = self.already_written(batch_id, offsets)
        log.warning(
            "FG-QG-008 query group %s query %s: batch %d's commit had no answer; the "
            "consumer group says it %s",
            self.query_group,
            self.query,
            batch_id,
            "went through: not written again" if written else "did not: written again",
        )
        return written

    def _visible(self, delivered: Mapping[int, set[int]]) -> bool | None:
        """Whether every record at ``delivered`` (partition -> offsets) is visible to a
        ``read_committed`` reader, read back for up to :data:`VISIBLE_WAIT_S`.

        Returns:
            True when every record was read; False when the reader read past one that
            it never saw (aborted, or lost); None when the deadline passed first (the
            broker did not answer, or the transaction's markers are not written yet):
            the outcome is unknown.
        """
        if not delivered:
            return True
        missing = {p: set(offsets) for p, offsets in delivered.items()}
        last = {p: max(offsets) for p, offsets in delivered.items()}
        reader = Consumer(
            kafka_settings(
                self.bootstrap_servers,
                self.client,
                {
                    "group.id": verify_group_id(self.group_id),
                    "isolation.level": "read_committed",
                    "enable.auto.commit": False,
                    "enable.partition.eof": True,
                },
            )
        )
        try:
            reader.assign([TopicPartition(self.topic, p, min(o)) for p, o in missing.items()])
            pending = set(missing)
            deadline = time.monotonic() + VISIBLE_WAIT_S
            while pending and time.monotonic() < deadline:
                msg = reader.poll(0.5)
                if msg is None:
                    continue
                partition, offset, error = msg.partition(), msg.offset(), msg.error()
                if partition not in last or offset is None:
                    continue
                if error is None:
                    missing[partition].discard(offset)
                    if offset >= last[partition]:
                        pending.discard(partition)
                elif error.code() == KafkaError._PARTITION_EOF and offset > last[partition]:
                    pending.discard(partition)  # read past them: aborted ones were skipped
        finally:
            reader.close()
        if not any(missing.values()):
            return True
        if any(offsets for p, offsets in missing.items() if p not in pending):
            return False  # read past a record it never saw
        return None

    def _abort(self, producer: Producer, exc: KafkaException) -> None:
        error = exc.args[0] if exc.args else None
        fatal = bool(getattr(error, "fatal", lambda: False)())
        if not fatal:
            try:
                producer.abort_transaction(TRANSACTION_TIMEOUT_S)
                return
            except KafkaException:
                log.exception("abort of the output transaction failed; recreating the producer")
        self._producer = None  # a fresh init_transactions aborts whatever is open

    def close(self) -> None:
        """Release the producer and consumer."""
        with self._lock:
            if self._producer is not None:
                self._producer.flush(10)
                self._producer = None
            if self._consumer is not None:
                self._consumer.close()
                self._consumer = None

"""The gauges of a query group's stream queues: length, age (the ``..._lag_seconds``
gauges), hanging transactions."""

from __future__ import annotations

import logging
import threading
import time

from pipeline.config import QueryGroupConfig
from pipeline.metrics import QueryGroupMetrics
from pipeline.queues.age import QueueAge, StableOffsetWatch
from pipeline.queues.ledger import DeadLetters
from pipeline.queues.probe import QueueProbe
from pipeline.queues.snapshot import QueueSnapshot
from pipeline.spark.sink import TRANSACTION_TIMEOUT_S

log = logging.getLogger(__name__)


class QueueGauges:
    """Reads a query group's input and output stream queues and sets their gauges.

    One :class:`~pipeline.queues.probe.QueueProbe` per output stream and one per input
    stream that a query reads (the JVM sink reads an output stream queue itself, on the
    driver, before every micro-batch's write). Each
    :meth:`sample` sets, per stream: the queue length (tuples), the lag of its oldest
    tuple (seconds, :class:`~pipeline.queues.age.QueueAge`), and for output streams how
    long the last stable offset has not moved (seconds): past twice the transaction
    timeout a hanging transaction is logged once, ``FG-QG-007``, because every
    ``read_committed`` reader of the stream is blocked until Kafka aborts it. It also
    counts, per input stream, the tuples processed (the advance of the slowest reading
    query's committed offsets since the first sample) and the tuples in the group's
    dead-letter topic, by reason (:class:`~pipeline.queues.ledger.DeadLetters`).

    Args:
        config: the query group's config.
        bootstrap_servers: the Kafka cluster.
        metrics: the group's metric families.
    """

    def __init__(
        self, config: QueryGroupConfig, *, bootstrap_servers: str, metrics: QueryGroupMetrics
    ) -> None:
        self.config = config
        self.name = config.name
        self.bootstrap_servers = bootstrap_servers
        self.metrics = metrics
        #: Output stream -> its probe.
        self.output_probes: dict[str, QueueProbe] = {}
        #: Input stream -> its probe (streams no query reads have none).
        self.input_probes: dict[str, QueueProbe] = {}
        #: Output stream -> its latest snapshot.
        self.output_snapshots: dict[str, QueueSnapshot] = {}
        #: ``(output?, stream)`` -> the reader of its oldest tuple's age.
        self._ages: dict[tuple[bool, str], QueueAge] = {}
        self._stable_watches: dict[str, StableOffsetWatch] = {}
        self._hanging_reported: set[str] = set()
        #: ``(input stream, partition)`` -> committed offset at the last sample.
        self._committed: dict[tuple[str, int], int] = {}
        self._dead_letters: DeadLetters | None = None
        #: ``(stream, reason)`` -> dead-lettered tuples already added to the counter.
        self._dead_counted: dict[tuple[str, str], int] = {}
        #: One sample at a time: the monitor thread's and a caller's would otherwise
        #: interleave, and a length from one snapshot stand beside a lag from an older
        #: one (length 0, lag 11.7 s, seen in CI).
        self._sample_lock = threading.Lock()

    def add_output(self, stream: str) -> QueueProbe:
        """The probe of output stream ``stream`` (made on first use), its max queue size
        gauge set.

        Raises:
            BrokerError: the broker did not answer the topic's metadata.
        """
        probe = self.output_probes.get(stream)
        if probe is None:
            probe = QueueProbe.for_output_stream(
                self.config, stream, bootstrap_servers=self.bootstrap_servers
            )
            self.output_probes[stream] = probe
            self.metrics.output_queue_max_size.labels(self.name, stream).set(probe.max_queue_size)
        return probe

    def add_outputs(self) -> None:
        """A probe per output stream (:meth:`add_output`); every series of its sleeps
        and holds exists at 0 before the first (no "no data" panels)."""
        for stream in self.config.output_streams:
            self.add_output(stream)
            for family in (
                self.metrics.sleeps,
                self.metrics.holds,
                self.metrics.output_queue_check,
            ):
                family.labels(self.name, stream)

    def add_inputs(self) -> None:
        """A probe per input stream a query reads, its max queue size gauge set and its
        discarded-tuples series at 0."""
        for name in self.config.input_streams:
            if name in self.input_probes or not self.config.readers(name):
                continue
            probe = self.input_probes[name] = QueueProbe.for_input_stream(
                self.config, name, bootstrap_servers=self.bootstrap_servers
            )
            self.metrics.input_queue_max_size.labels(self.name, name).set(probe.max_queue_size)
            self.metrics.discarded.labels(self.name, name)

    def record_output(
        self, stream: str, snapshot: QueueSnapshot, check_s: float | None = None
    ) -> None:
        """Keep a fresh read of an output stream queue and set its length gauge;
        ``check_s``: how long a micro-batch's check took (seconds), observed."""
        self.output_snapshots[stream] = snapshot
        self.metrics.output_queue_length.labels(self.name, stream).set(snapshot.length)
        if check_s is not None:
            self.metrics.output_queue_check.labels(self.name, stream).observe(check_s)

    def refresh_outputs(self) -> None:
        """Read every output stream queue once (length only).

        Raises:
            BrokerError: the broker did not answer.
        """
        for name, probe in list(self.output_probes.items()):
            self.record_output(name, probe.snapshot())

    def sample_at_start(self) -> None:
        """:meth:`sample` as a group starts (the bases of its processed and dead-letter
        counters); a broker that does not answer is logged, and the counters start from
        the monitor's first reading."""
        try:
            self.sample()
        except Exception:
            log.warning("query group %s: queues not read at start", self.name, exc_info=True)

    def sample(self) -> None:
        """Read every input and output stream queue once: length, lag and
        unstable-time gauges.

        Raises:
            BrokerError: the broker did not answer.
        """
        with self._sample_lock:
            self._sample()

    def _age(self, stream: str, *, output: bool) -> QueueAge:
        age = self._ages.get((output, stream))
        if age is None:
            age = QueueAge.for_stream(
                self.config, stream, output=output, bootstrap_servers=self.bootstrap_servers
            )
            self._ages[(output, stream)] = age
        return age

    def _count_processed(self, stream: str, snapshot: QueueSnapshot) -> None:
        """Add the advance of each partition's committed offset since the last sample
        to ``floodgate_input_stream_processed_tuples_total``. The first sample of a
        partition is the base: its committed offset, or its log start before the
        group's first commit (where the queries start reading); an offset moved back
        (a reset of the group) is a new base."""
        counter = self.metrics.processed_tuples.labels(self.name, stream)
        for p, queue in snapshot.partitions.items():
            previous = self._committed.get((stream, p))
            if queue.committed is None:
                if previous is None:
                    self._committed[(stream, p)] = queue.log_start
                continue
            self._committed[(stream, p)] = queue.committed
            if previous is not None and queue.committed > previous:
                counter.inc(queue.committed - previous)

    def _count_dead_letters(self) -> None:
        """Bring ``floodgate_input_stream_dead_lettered_tuples_total`` up to what the
        group's dead-letter topic holds (read on from the last sample).

        Raises:
            BrokerError: the topic cannot be read.
        """
        if self._dead_letters is None:
            self._dead_letters = DeadLetters(
                self.bootstrap_servers, self.config.dead_letter_topic, self.config.kafka.client
            )
        self._dead_letters.refresh()
        for (stream, reason), n in self._dead_letters.counts().items():
            if stream not in self.config.input_streams:
                continue  # another group's, sharing the topic
            counted = self._dead_counted.get((stream, reason), 0)
            if n > counted:
                self.metrics.dead_lettered_tuples.labels(self.name, stream, reason).inc(n - counted)
                self._dead_counted[(stream, reason)] = n

    def _sample(self) -> None:
        for name, probe in list(self.input_probes.items()):
            snapshot = probe.snapshot()
            self.metrics.input_queue_length.labels(self.name, name).set(snapshot.length)
            self._count_processed(name, snapshot)
            age = self._age(name, output=False).age_seconds(snapshot)
            self.metrics.input_queue_lag.labels(self.name, name).set(age)
        for name, probe in list(self.output_probes.items()):
            snapshot = probe.snapshot()
            self.record_output(name, snapshot)
            age = self._age(name, output=True).age_seconds(snapshot)
            self.metrics.output_queue_lag.labels(self.name, name).set(age)
            stable = probe.last_stable_offsets()
            highs = {p: q.high for p, q in snapshot.partitions.items()}
            watch = self._stable_watches.setdefault(name, StableOffsetWatch())
            unstable = watch.observe(stable, highs, time.monotonic())
            self.metrics.output_unstable.labels(self.name, name).set(unstable)
            if unstable <= 2 * TRANSACTION_TIMEOUT_S:
                self._hanging_reported.discard(name)
            elif name not in self._hanging_reported:
                self._hanging_reported.add(name)  # once per hang
                log.error(
                    "FG-QG-007 query group %s: output stream %s has a hanging transaction: "
                    "its last stable offset has not moved for %.0f s (transaction timeout "
                    "%.0f s); read_committed readers are blocked until it is aborted",
                    self.name,
                    name,
                    unstable,
                    TRANSACTION_TIMEOUT_S,
                )
        self._count_dead_letters()  # last: a slow dead-letter topic delays no gauge

    def close(self) -> None:
        """Close every probe and age reader (their admin clients would keep reconnecting
        to a broker that is gone); later reads make new ones."""
        for probe in [*self.output_probes.values(), *self.input_probes.values()]:
            probe.close()
        for age in self._ages.values():
            age.close()
        if self._dead_letters is not None:
            self._dead_letters.close()
            self._dead_letters = None
        self.output_probes.clear()
        self.input_probes.clear()
        self._ages.clear()

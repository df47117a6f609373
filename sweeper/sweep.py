"""A sweep: one range ``[a, b)`` of a queue's partition moved from the broker into a
BLOB. Journaled in the catalog as in progress before its file exists, read from the
broker into ``<blob_dir>/.tmp-<name>`` (hashed as written, fsynced), renamed into
place, verified (:func:`sweeper.policy.verify`) and registered with its seal (SHA-256,
size, count, first and last offset: :class:`pipeline.swept.blob.BlobSeal`) -- or
removed, and the abort counted by reason. A full disk (``ENOSPC``) aborts it as
``write-failed`` before the rename, naming the file and the bytes free.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException

from pipeline.config import QueryGroupConfig
from pipeline.errors import DataLossError
from pipeline.kafka.clients import reader_settings
from pipeline.names import SWEEPER_GROUP_ID
from pipeline.offsets import planned_ends
from pipeline.queues.probe import QueueProbe
from pipeline.swept.blob import BlobSeal, blob_name
from pipeline.swept.catalog import SweepCatalog
from pipeline.swept.journal import WriteCleared
from pipeline.swept.reading import RANGE_CONSUMER, read_partition
from pipeline.swept.store import BlobStore
from pipeline.swept.tables import Blob
from sweeper.metrics import SweeperMetrics
from sweeper.policy import Abort, SweepRange, verify

log = logging.getLogger(__name__)

#: Give up a sweep whose reads from the broker make no progress for this long.
READ_STALL_TIMEOUT_S = 30.0


class SweepAborted(Exception):
    """A sweep that must not be registered (the BLOB is deleted)."""

    def __init__(self, reason: Abort, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


@dataclass
class SweptQueue:
    """One registered queue: an input stream of a query group, or an output stream
    marked ``swept`` (read by its reception groups through ``StreamOutput``).

    Attributes:
        query_group / stream / topic: what it is.
        checkpoints: the checkpoint directories of the queries that read it (their
            offset logs name the micro-batches Spark planned); none for an output
            stream.
        probe: reads its state from the broker (slowest of the readers' groups).
    """

    query_group: str
    stream: str
    topic: str
    checkpoints: list[Path]
    probe: QueueProbe


def swept_queues(
    groups: Sequence[QueryGroupConfig], bootstrap_servers: str, catalog: SweepCatalog
) -> list[SweptQueue]:
    """The queues the sweeper of ``groups`` sweeps: every input stream a query reads
    (its queries' checkpoints name the batches Spark planned), and every output stream
    marked ``swept`` (read by reception groups, not by Spark: no planned batches). Their
    probes subtract what ``catalog`` holds."""
    return [
        *(
            SweptQueue(
                config.name,
                stream,
                config.input_streams[stream].topic,
                [Path(config.checkpoint_root) / q for q in config.readers(stream)],
                QueueProbe.for_input_stream(
                    config, stream, bootstrap_servers=bootstrap_servers, swept=catalog
                ),
            )
            for config in groups
            for stream in config.input_streams
            if config.readers(stream)
        ),
        *(
            SweptQueue(
                config.name,
                stream,
                output.topic,
                [],
                QueueProbe.for_output_stream(
                    config, stream, bootstrap_servers=bootstrap_servers, swept=catalog
                ),
            )
            for config in groups
            for stream, output in config.output_streams.items()
            if output.swept
        ),
    ]


class RangeSweeper:
    """Sweeps ranges of the queues' partitions into BLOBs.

    Args:
        catalog: the sweep catalog.
        store: the BLOB store.
        metrics: the sweeper's metrics.
        labels: a topic's ``(query_group, stream)`` metric labels.
        bootstrap_servers: the cluster.
        client: the user's librdkafka pass-through.
        leading: whether this sweeper still leads (a sweep finished after the lead was
            lost is not registered).
        on_written: called with ``(topic, partition, range)`` after a BLOB is written
            and before it is verified (tests force an abort with it).
    """

    def __init__(
        self,
        catalog: SweepCatalog,
        store: BlobStore,
        metrics: SweeperMetrics,
        labels: Callable[[str], tuple[str, str]],
        *,
        bootstrap_servers: str,
        client: Mapping[str, Any],
        leading: Callable[[], bool],
        on_written: Callable[[str, int, SweepRange], None] | None = None,
    ) -> None:
        self.catalog = catalog
        self.store = store
        self.metrics = metrics
        self.labels = labels
        self.bootstrap_servers = bootstrap_servers
        self.client = dict(client)
        self.leading = leading
        self.on_written = on_written

    def sweep(self, queue: SweptQueue, p: int, sweep: SweepRange) -> Blob:
        """Sweep ``sweep`` of ``queue``'s partition ``p`` into a BLOB: journal its file,
        read the range from the broker into the temporary file (hashed as written),
        publish it, verify (:func:`sweeper.policy.verify`) and register it with its
        seal, its journal entry removed in the same transaction.

        Raises:
            SweepAborted: the BLOB must not be registered (it is removed, its journal
                entry cleared): with the :class:`~sweeper.policy.Abort` reason.
        """
        topic = queue.topic
        name = blob_name(topic, p, sweep.start, sweep.end)
        final = self.store.path(name)
        temporary = self.store.temporary(name)
        try:  # journaled before the file exists: only a journaled file is recovered
            self.catalog.begin_write(final, topic, p, sweep.start, sweep.end, now=time.time())
        except ValueError as exc:  # another sweeper writes this range now
            raise SweepAborted(Abort.OVERLAP, str(exc)) from exc
        try:
            seal = self._write(topic, p, sweep, temporary)
            self.store.publish(temporary, final)
            if self.on_written is not None:
                self.on_written(topic, p, sweep)
            snapshot = queue.probe.snapshot().partitions[p]
            committed = snapshot.committed if snapshot.committed is not None else snapshot.log_start
            planned = planned_ends(queue.checkpoints, topic).get(p)
            reason = verify(
                sweep, committed=committed, planned_end=planned, log_start=snapshot.log_start
            )
            if reason is not None:
                raise SweepAborted(
                    reason,
                    f"committed {committed}, planned batch end {planned}, "
                    f"log start {snapshot.log_start}",
                )
            if not self.leading():
                raise SweepAborted(Abort.NOT_LEADER, "the lead was lost during the sweep")
            size, tuples = self.store.size(final), seal.tuples
            if size != seal.bytes:
                raise SweepAborted(
                    Abort.WRITE_FAILED, f"{final} holds {size} bytes, {seal.bytes} were written"
                )
            try:
                blob = self.catalog.register(
                    topic,
                    p,
                    sweep.start,
                    sweep.end,
                    path=final,
                    size=size,
                    tuples=tuples,
                    now=time.time(),
                    seal=seal,
                    in_progress=True,
                )
            except WriteCleared as exc:  # a new leader's recovery took it
                raise SweepAborted(Abort.NOT_LEADER, str(exc)) from exc
            except ValueError as exc:  # the catalog keeps each chain disjoint
                raise SweepAborted(Abort.OVERLAP, str(exc)) from exc
        except BaseException:
            self._forget(final, temporary)
            raise
        labels = self.labels(topic)
        self.metrics.sweeps.labels(*labels).inc()
        self.metrics.swept_tuples.labels(*labels).inc(tuples)
        self.metrics.swept_bytes.labels(*labels).inc(size)
        log.info(
            "FG-SWP-001 swept %s[%d] [%d, %d): %d tuples, %d bytes into %s",
            topic,
            p,
            sweep.start,
            sweep.end,
            tuples,
            size,
            name,
        )
        return blob

    def _write(self, topic: str, p: int, sweep: SweepRange, temporary: str) -> BlobSeal:
        """Read ``sweep`` of ``topic[p]`` from the broker into ``temporary``, sealed.

        Raises:
            SweepAborted: the broker no longer holds the range, or the read or the
                write failed (``write-failed``; a failed write names ``temporary`` and
                the bytes free in ``blob_dir``, which a full disk's ``OSError`` does not).
        """
        try:
            return self.store.write(
                temporary, read_range(self.bootstrap_servers, topic, p, sweep, self.client)
            )
        except OSError as exc:  # a full disk says neither which file nor how full
            raise SweepAborted(
                Abort.WRITE_FAILED,
                f"{exc.__class__.__name__}: {exc} writing {temporary} ({self.store.room()})",
            ) from exc
        except KafkaException as exc:
            raise SweepAborted(Abort.WRITE_FAILED, f"{exc.__class__.__name__}: {exc}") from exc

    def _forget(self, final: str, temporary: str) -> None:
        """A sweep that is not registered: clear its journal entry, then remove its
        files -- only when the entry was still this sweep's (a recovery that took it
        removes them; a crash in between leaves them, journaled no more)."""
        try:
            mine = self.catalog.end_write(final)
        except Exception:  # the catalog is down: the entry stays, the next recovery
            log.warning("sweep of %s not forgotten: the catalog failed", final, exc_info=True)
            return
        if mine:
            self.store.remove(temporary)
            self.store.remove(final)


def range_reader_settings(
    bootstrap_servers: str, client: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The librdkafka properties of the sweeper's reader of a range: a reader that never
    commits (:data:`~pipeline.names.SWEEPER_GROUP_ID`), committed records only, with a
    range reader's fetch settings (:data:`~pipeline.swept.reading.RANGE_CONSUMER`).

    Raises:
        ConfigError: ``client`` sets a reserved property
            (:data:`~pipeline.kafka.clients.RESERVED_KAFKA_KEYS`).
    """
    return reader_settings(bootstrap_servers, client, group_id=SWEEPER_GROUP_ID, own=RANGE_CONSUMER)


def read_range(
    bootstrap_servers: str,
    topic: str,
    p: int,
    sweep: SweepRange,
    client: Mapping[str, Any] | None = None,
) -> Iterator[list[Any]]:
    """The committed records of ``[start, end)`` of a partition from the broker, in
    offset order, batch by batch as fetched (:func:`pipeline.swept.reading.read_partition`,
    the broker only; transaction markers and aborted records take offsets and are not
    records).

    Raises:
        SweepAborted: the broker no longer holds an offset of the range
            (``broker-truncated``), or reads made no progress (``write-failed``).
        KafkaException: another broker error.
    """
    consumer = Consumer(range_reader_settings(bootstrap_servers, client))
    try:
        yield from read_partition(
            consumer, topic, p, sweep.start, sweep.end, stall_timeout_s=READ_STALL_TIMEOUT_S
        )
    except DataLossError as exc:
        raise SweepAborted(
            Abort.BROKER_TRUNCATED, f"the broker no longer holds offset {exc.start}"
        ) from exc
    except KafkaException as exc:
        if exc.args and exc.args[0].code() == KafkaError._TIMED_OUT:
            raise SweepAborted(Abort.WRITE_FAILED, str(exc.args[0].str())) from exc
        raise
    finally:
        consumer.close()

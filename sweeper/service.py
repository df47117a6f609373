"""The sweep cycle (docs/architecture.md, "The sweeper").

Every ``sweep_interval_s``, per partition of each registered queue (the input stream
queues of the configured query groups), :meth:`Sweeper.cycle`:

1. reads the partition from the broker (high watermark, log start, the slowest
   consumer group's committed offset), the latest micro-batch Spark planned for it
   (the queries' checkpoint offset logs) and its BLOB chain (the catalog);
2. deletes the BLOBs whose last tuple the consumer has consumed (``unswept``), and
   truncates the broker up to the end of the last BLOB whose start the consumer has
   reached (``delete_records``: the swept range is then read from the BLOB);
3. asks :func:`sweeper.policy.plan` whether to sweep and which range ``[a, b)``; the
   BLOB store's capacity is checked first (full: no sweep, back-pressure holds);
4. sweeps: journals the BLOB's file as in progress in the catalog
   (:meth:`pipeline.swept.catalog.SweepCatalog.begin_write`), reads ``[a, b)`` from the
   broker into ``<blob_dir>/.tmp-<name>``, hashing it as it is written, fsyncs,
   renames it into place, verifies
   (:func:`sweeper.policy.verify`) and registers it in the catalog with its seal
   (SHA-256, size, count, first and last offset: :class:`pipeline.swept.blob.BlobSeal`),
   its journal entry removed in the same transaction -- or deletes it and counts the
   abort by reason. A full disk (``ENOSPC``) aborts the sweep as ``write-failed``
   before the rename: ``FG-SWP-002`` names the file and the bytes free in ``blob_dir``,
   the temporary file is removed and the catalog names no BLOB of the range; the broker
   keeps it, so back-pressure holds the producers until the disk has room again.

Before the broker is truncated past a BLOB's start, the BLOB's size and SHA-256 are
checked against the catalog (:func:`pipeline.swept.registered.check_blob`): a damaged BLOB
(``FG-SWP-007``, ``floodgate_sweeper_damaged_blobs_total``) holds the truncation back
at its start, so the broker keeps the range and readers read it from there. At start,
:meth:`Sweeper.recover` seals the BLOBs registered before checksums existed, after
checking their structure (:func:`pipeline.swept.registered.seal_blob`).

A ``kill -9`` at any point leaves the catalog naming only whole, verified BLOBs: the
file of a sweep the journal names as in progress (a temporary one, or one renamed but
not registered) is removed by :meth:`Sweeper.recover` when a sweeper next takes the
lead. The sweeper removes no other file: not one the catalog does not name (an
operator's notes, another sweeper's BLOBs), not one a row names outside ``blob_dir``
or under another name than the sweeper gives it
(:func:`pipeline.swept.registered.owned_files`: refused with a
:class:`~pipeline.errors.BlobPathError`). With several sweepers on one catalog, only
the leader (:mod:`pipeline.state.leader`) runs cycles and recovers; they share
``blob_dir``, which a sweeper of another catalog may not (:mod:`sweeper.lock`).

Stable log codes: ``FG-SWP-001`` a BLOB registered, ``FG-SWP-002`` a sweep aborted,
``FG-SWP-003`` the BLOB store is full (no more sweeps), ``FG-SWP-004`` it has room
again, ``FG-SWP-005`` the broker truncated, ``FG-SWP-006`` tuples unaccounted for
(the tuple ledger, :mod:`pipeline.queues.ledger`), ``FG-SWP-007`` a registered BLOB fails its
integrity check (no silent BLOB corruption).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from prometheus_client import CollectorRegistry

from pipeline.config import QueryGroupConfig
from pipeline.errors import BlobIntegrityError, BlobPathError, DataLossError
from pipeline.kafka.clients import kafka_settings, reader_settings
from pipeline.names import SWEEPER_GROUP_ID
from pipeline.offsets import planned_ends, replay_starts
from pipeline.queues.ledger import DeadLetters, LedgerRow, reconcile
from pipeline.queues.probe import QueueProbe
from pipeline.state.leader import LeaderElection
from pipeline.swept.blob import BlobSeal, blob_name
from pipeline.swept.catalog import SweepCatalog
from pipeline.swept.journal import WriteCleared
from pipeline.swept.reading import RANGE_CONSUMER, read_partition
from pipeline.swept.registered import (
    check_blob,
    check_blob_path,
    owned_files,
    owned_objects,
    seal_blob,
)
from pipeline.swept.store import LocalBlobStore, ObjectBlobStore, open_blob_store
from pipeline.swept.tables import Blob
from sweeper.config import SweeperSettings
from sweeper.lock import BlobDirLock, ObjectStoreClaim
from sweeper.metrics import SweeperMetrics
from sweeper.policy import (
    Abort,
    PartitionView,
    Skip,
    SweepRange,
    consumed,
    plan,
    truncate_to,
    verify,
)

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


@dataclass
class PartitionOutcome:
    """What one cycle did to one partition (for tests, logs and ``/status``)."""

    topic: str
    partition: int
    service_rate: int
    unswept: int
    decision: str
    blob: Blob | None = None
    truncated_to: int | None = None
    deleted: list[int] = field(default_factory=list)


class Sweeper:
    """The sweeper of the queues of ``groups``.

    Args:
        settings: the ``[sweeper]`` config.
        groups: the query groups whose input stream queues (and ``swept`` output
            stream queues) are swept.
        bootstrap_servers: the cluster.
        registry: where the metrics go.
        clock: ``time.monotonic`` (tests inject one).
        on_written: called with ``(topic, partition, range)`` after a BLOB is written
            and before it is verified (the window in which the checks before
            truncation can fail; tests use it to force an abort).

    ``blob_dir`` is made absolute and created 0700; the sweeper holds its lock file
    (:class:`sweeper.lock.BlobDirLock`) until :meth:`close` or the process ends, and
    records it in the catalog for the readers.

    Raises:
        ConfigError: a sweeper of another catalog holds ``blob_dir``, naming the
            directory and the holder's process id; or the catalog's BLOBs are in
            another directory (:meth:`SweepCatalog.record_blob_dir`); or ``blob_dir``
            is another user's or others can write to it
            (:func:`~pipeline.state.files.private_dir`; nothing was written).
    """

    def __init__(
        self,
        settings: SweeperSettings,
        groups: list[QueryGroupConfig],
        *,
        bootstrap_servers: str,
        registry: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_written: Callable[[str, int, SweepRange], None] | None = None,
    ) -> None:
        self.settings = settings
        self.bootstrap_servers = bootstrap_servers
        self.registry = registry or CollectorRegistry()
        self.metrics = SweeperMetrics(self.registry)
        self.clock = clock
        self.on_written = on_written
        # The BLOB store first: a folder another user owns or others can write to, or a
        # bucket that is not there, is refused before anything is written (the catalog
        # included).
        location, key = settings.blob_location
        self.store = open_blob_store(location, key=key)
        #: The local BLOB folder (``None``: the store is an object store).
        self.blob_dir = self.store.folder if isinstance(self.store, LocalBlobStore) else None
        self.catalog = SweepCatalog(settings.catalog_url)
        try:
            self.blob_dir_lock: BlobDirLock | ObjectStoreClaim = (
                BlobDirLock(self.store.folder, self.catalog.identity())
                if isinstance(self.store, LocalBlobStore)
                else ObjectStoreClaim(
                    cast(ObjectBlobStore, self.store), self.catalog.identity(), key=key
                )
            )
        except BaseException:
            self.catalog.close()
            raise
        try:
            self.catalog.record_blob_dir(self.store.location, key=key)
        except BaseException:
            self.blob_dir_lock.release()
            self.catalog.close()
            raise
        self.groups = list(groups)
        self._dead_letters: dict[str, DeadLetters] = {}
        #: The rows of the last reconciliation (:meth:`reconcile`).
        self.last_ledger: list[LedgerRow] = []
        self.queues = [
            *(
                SweptQueue(
                    config.name,
                    stream,
                    config.input_streams[stream].topic,
                    [Path(config.checkpoint_root) / q for q in config.readers(stream)],
                    QueueProbe.for_input_stream(
                        config, stream, bootstrap_servers=bootstrap_servers, swept=self.catalog
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
                    [],  # read by reception groups, not by Spark: no planned batches
                    QueueProbe.for_output_stream(
                        config, stream, bootstrap_servers=bootstrap_servers, swept=self.catalog
                    ),
                )
                for config in groups
                for stream, output in config.output_streams.items()
                if output.swept
            ),
        ]
        #: Topic -> the ``(query_group, stream)`` labels of its queue's metrics.
        self._queue_labels: dict[str, tuple[str, str]] = {}
        for queue in self.queues:  # partitions: at the first cycle
            self._queue_labels.setdefault(queue.topic, (queue.query_group, queue.stream))
            self.metrics.add_queue(queue.query_group, queue.stream)
        self._client = dict(groups[0].kafka.client) if groups else {}
        self.admin = AdminClient(kafka_settings(bootstrap_servers, self._client))
        self._previous: dict[tuple[str, int], tuple[int, float]] = {}
        self.full = False
        self.election = LeaderElection(
            settings.catalog_url,
            "sweeper",
            on_granted=self._granted,
            on_revoked=lambda: self.metrics.leader.set(0),
            check_interval_s=settings.leader_check_interval_s,
        )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_cycle: list[PartitionOutcome] = []
        #: Ids of the BLOBs reported damaged (``FG-SWP-007``), each reported once.
        self.damaged: set[int] = set()

    # -- lifecycle -------------------------------------------------------------

    def _owned(self, blob: Blob) -> list[str]:
        """The BLOB's files or objects this sweeper may remove
        (:func:`~pipeline.swept.registered.owned_files`,
        :func:`~pipeline.swept.registered.owned_objects`).

        Raises:
            BlobPathError: the row's path is not this sweeper's to remove.
        """
        if isinstance(self.store, LocalBlobStore):
            return [str(path) for path in owned_files(blob, self.store.location)]
        return owned_objects(blob, self.store.location)

    def recover(self) -> list[str]:
        """Finish what a sweeper killed mid-sweep left, and check the registered BLOBs'
        files. Run as the lead is granted (never on a follower, whose leader may be
        sweeping), and by tests.

        * The files of every entry of the catalog's journal -- a sweep in progress,
          or a forgotten BLOB whose file was not removed yet -- (``<blob_dir>/<name>``
          and ``<blob_dir>/.tmp-<name>``) are removed and the entry cleared -- only
          when it is the file the sweeper writes for that range, inside
          ``blob_dir`` with symbolic links resolved, and a regular file
          (:func:`pipeline.swept.registered.owned_files`); an entry naming any other
          path is cleared and its file left alone, logged as an error. Each entry
          is cleared before its files are removed, so a sweeper that is still
          writing it (a deposed leader that has not noticed) cannot register it.
        * Any other file in ``blob_dir`` is left alone: the catalog not naming a
          file does not make it the sweeper's (an operator's notes, another
          sweeper's BLOBs).
        * A registered BLOB whose path is outside ``blob_dir`` is reported
          (``FG-SWP-007``, reason ``outside``) and never opened; one whose file is
          missing is logged.
        * BLOBs registered before checksums are sealed (:meth:`_seal_unsealed`).

        Returns:
            The files (or objects' URLs) removed.
        """
        removed: list[str] = []
        for write in self.catalog.writes():
            if not self.catalog.end_write(write.path):
                continue  # registered, or recovered by another sweeper, meanwhile
            pending = Blob(
                0,
                write.topic,
                write.partition,
                write.start_offset,
                write.end_offset,
                write.path,
                0,
                0,
                write.since,
            )
            try:
                files = self._owned(pending)
            except BlobPathError as exc:
                log.error("a sweep in progress names a file the sweeper does not own: %s", exc)
                continue
            for path in files:
                self.store.remove(path)
                removed.append(path)
        for blob in self.catalog.all():
            try:
                check_blob_path(blob, self.store.location)
            except BlobPathError as exc:
                self._report_damaged(blob, exc, held_at=None)
                continue
            if self.store.size(blob.path) is None:
                log.error(
                    "BLOB %d of %s[%d] [%d, %d) is registered but its file %s is missing",
                    blob.id,
                    blob.topic,
                    blob.partition,
                    blob.start_offset,
                    blob.end_offset,
                    blob.path,
                )
        if removed:
            log.warning(
                "removed %d BLOB files of sweeps killed before they registered: %s",
                len(removed),
                removed,
            )
        self._seal_unsealed()
        self._refresh_gauges()
        return removed

    def _seal_unsealed(self) -> None:
        """Seal the BLOBs registered before checksums (``sha256`` NULL): each is read
        whole and checked (size, offsets, count) first; a damaged one is reported
        (``FG-SWP-007``) and left unsealed."""
        sealed = 0
        for blob in self.catalog.all():
            if blob.sha256 is not None or blob.id in self.damaged:
                continue
            if self.store.size(blob.path) is None:
                continue
            try:
                sealed += self.catalog.seal(blob.id, seal_blob(blob))
            except BlobIntegrityError as exc:
                self._report_damaged(blob, exc, held_at=None)
        if sealed:
            log.info("sealed %d BLOBs registered before checksums (SHA-256, offsets)", sealed)

    def labels(self, topic: str) -> tuple[str, str]:
        """The ``(query_group, stream)`` labels of ``topic``'s metrics: its queue's, or
        ``("", topic)`` for a topic no configured queue carries (BLOBs an earlier
        configuration left in the catalog)."""
        return self._queue_labels.get(topic, ("", topic))

    def _report_damaged(self, blob: Blob, exc: BlobIntegrityError, *, held_at: int | None) -> None:
        if blob.id in self.damaged:
            return
        self.damaged.add(blob.id)
        self.metrics.damaged.labels(*self.labels(blob.topic), exc.reason).inc()
        if held_at is not None:
            after = (
                f"the broker is not truncated past offset {held_at}: readers read the range "
                "from the broker while it holds it"
            )
        elif isinstance(exc, BlobPathError):
            after = (
                "the sweeper neither reads nor deletes that file and keeps the row "
                "(docs/runbook.md, 'Sweeper refusals')"
            )
        else:
            after = "its tuples are lost unless the broker still holds them"
        log.error("FG-SWP-007 %s; %s", exc, after)

    def _granted(self) -> None:
        """The lead is granted (from the election, before this instance acts as the
        leader): recover what a killed leader left, then count as the leader."""
        self.recover()
        self.metrics.leader.set(1)

    def start(self) -> Sweeper:
        """Take the leadership if free (recovering first, :meth:`recover`), and run a
        cycle every interval while leading."""
        self.election.start()
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="floodgate-sweeper", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop cycling (a sweep in progress finishes first) and give the lead up."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
            self._thread = None
        self.election.stop()
        for dead in self._dead_letters.values():
            dead.close()
        self._dead_letters.clear()

    def close(self) -> None:
        """:meth:`stop`, then release ``blob_dir`` (its lock file) and close the
        catalog: the instance is done."""
        self.stop()
        self.blob_dir_lock.release()
        self.catalog.close()

    def _loop(self) -> None:
        while not self._stop.wait(self.settings.sweep_interval_s):
            if not self.election.is_leader:
                continue
            try:
                self.cycle()
            except Exception:
                log.exception("sweep cycle failed")

    # -- the cycle -------------------------------------------------------------

    def cycle(self) -> list[PartitionOutcome]:
        """One pass over every partition of every registered queue."""
        outcomes = []
        for queue in self.queues:
            snapshot = queue.probe.snapshot()
            planned = planned_ends(queue.checkpoints, queue.topic)
            replay = replay_starts(queue.checkpoints, queue.topic)
            for p, part in sorted(snapshot.partitions.items()):
                committed = part.committed if part.committed is not None else part.log_start
                outcomes.append(
                    self._partition(
                        queue,
                        p,
                        committed=committed,
                        # None for a partition no query has a batch of yet (it starts
                        # from the committed offset); 0 while a log is unreadable.
                        replay_start=0 if replay is None else replay.get(p),
                        high=part.high,
                        log_start=part.log_start,
                        planned_end=planned.get(p),
                    )
                )
        self._has_room()  # logs the store filling up or clearing, swept or not
        self._refresh_gauges()
        self.last_cycle = outcomes
        try:
            self.reconcile()
        except Exception:
            log.warning("the tuple ledger was not reconciled this cycle", exc_info=True)
        return outcomes

    def reconcile(self) -> list[LedgerRow]:
        """The tuple ledger of every input stream queue swept (:mod:`pipeline.queues.ledger`),
        exported as ``floodgate_ledger_unaccounted_tuples``; rows that do not balance
        are logged (``FG-SWP-006``).

        Raises:
            BrokerError: the broker did not answer.
        """
        rows: list[LedgerRow] = []
        for config in self.groups:
            dead = self._dead_letters.get(config.name)
            if dead is None:
                dead = DeadLetters(
                    self.bootstrap_servers, config.dead_letter_topic, config.kafka.client
                )
                self._dead_letters[config.name] = dead
            probes = {q.stream: q.probe for q in self.queues if q.query_group == config.name}
            for row in reconcile(
                config,
                bootstrap_servers=self.bootstrap_servers,
                dead_letters=dead,
                catalog=self.catalog,
                probes=probes,
            ):
                rows.append(row)
                self.metrics.unaccounted.labels(
                    row.query_group, row.stream, str(row.partition)
                ).set(row.unaccounted)
                if not row.balanced:
                    log.error(
                        "FG-SWP-006 %d tuples of %s[%d] in [%d, %d) are unaccounted for: "
                        "not processed, gone from the broker, in no BLOB",
                        row.unaccounted,
                        row.topic,
                        row.partition,
                        row.committed or 0,
                        row.log_start,
                    )
        self.last_ledger = rows
        return rows

    def _service_rate(self, topic: str, p: int, committed: int) -> int:
        """x: tuples committed during the last interval (scaled to one interval)."""
        now = self.clock()
        previous = self._previous.get((topic, p))
        self._previous[(topic, p)] = (committed, now)
        serviced = self.metrics.serviced_tuples.labels(*self.labels(topic), str(p))
        if previous is None:
            return 0  # the series exists at 0 from the first cycle
        done, at = previous
        elapsed = max(now - at, 1e-9)
        rate = max(0, committed - done) / elapsed
        serviced.inc(max(0, committed - done))
        return round(rate * self.settings.sweep_interval_s)

    def _partition(
        self,
        queue: SweptQueue,
        p: int,
        *,
        committed: int,
        high: int,
        log_start: int,
        planned_end: int | None,
        replay_start: int | None = None,
    ) -> PartitionOutcome:
        topic = queue.topic
        x = self._service_rate(topic, p, committed)
        chain = self.catalog.chain(topic, p)
        ranges = [(b.start_offset, b.end_offset) for b in chain]
        outcome = PartitionOutcome(topic, p, x, 0, "")
        # Free what the consumer is past: the broker below a reached BLOB, used BLOBs;
        # never what a restarted query would read again (replay_starts).
        freed = committed if replay_start is None else min(committed, replay_start)
        target = truncate_to(ranges, committed=freed, log_start=log_start)
        if target is not None:
            target = self._checked(chain, log_start=log_start, target=target)
        if target is not None:
            self._truncate(topic, p, target, chain, log_start=log_start)
            outcome.truncated_to = target
            log_start = target
        for i in consumed(ranges, committed=freed):
            try:
                self.delete_blob(chain[i], unswept=True)
            except BlobPathError as exc:  # not the sweeper's file: reported, kept
                self._report_damaged(chain[i], exc, held_at=None)
                continue
            outcome.deleted.append(chain[i].id)
        chain = [b for b in chain if b.id not in outcome.deleted]
        view = PartitionView(
            committed=committed,
            high_watermark=high,
            log_start=log_start,
            service_rate=x,
            chain_end=chain[-1].end_offset if chain else None,
            planned_end=planned_end,
        )
        outcome.unswept = view.unswept
        decision = plan(view, front_extra=self.settings.front_extra)
        if isinstance(decision, Skip):
            self.metrics.skips.labels(*self.labels(topic), decision.value).inc()
            outcome.decision = decision.value
            return outcome
        if not self._has_room():
            self.metrics.skips.labels(*self.labels(topic), "store-full").inc()
            outcome.decision = "store-full"
            return outcome
        try:
            outcome.blob = self._sweep(queue, p, decision)
            outcome.decision = "swept"
        except SweepAborted as exc:
            self.metrics.aborts.labels(*self.labels(topic), exc.reason.value).inc()
            log.warning(
                "FG-SWP-002 sweep of %s[%d] [%d, %d) aborted (%s): %s",
                topic,
                p,
                decision.start,
                decision.end,
                exc.reason.value,
                exc,
            )
            outcome.decision = f"aborted:{exc.reason.value}"
        return outcome

    def _checked(self, chain: list[Blob], *, log_start: int, target: int) -> int | None:
        """Where the broker may be truncated to: ``target``, or the start of the first
        BLOB of ``[log_start, target)`` that fails :func:`check_blob` (``None``: not
        past ``log_start``); the broker's copy is then the range's only good one."""
        for blob in chain:
            if blob.end_offset <= log_start:
                continue
            if blob.start_offset >= target:
                break
            try:
                check_blob(blob)
            except BlobIntegrityError as exc:
                held = max(blob.start_offset, log_start)
                self._report_damaged(blob, exc, held_at=held)
                return held if held > log_start else None
        return target

    def _has_room(self) -> bool:
        used = self.catalog.used_bytes()
        full = used >= self.settings.blob_store_max_bytes
        if full != self.full:
            self.full = full
            if full:
                log.warning(
                    "FG-SWP-003 BLOB store full: %d of %d bytes (blob_store_max_bytes); no more "
                    "sweeps, back-pressure holds the producers",
                    used,
                    self.settings.blob_store_max_bytes,
                )
            else:
                log.warning(
                    "FG-SWP-004 BLOB store has room again: %d of %d bytes",
                    used,
                    self.settings.blob_store_max_bytes,
                )
        return not full

    def _sweep(self, queue: SweptQueue, p: int, sweep: SweepRange) -> Blob:
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
            if self._thread is not None and not self.election.is_leader:
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
                temporary, read_range(self.bootstrap_servers, topic, p, sweep, self._client)
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

    def _truncate(
        self, topic: str, p: int, target: int, chain: list[Blob], *, log_start: int
    ) -> None:
        futures = self.admin.delete_records([TopicPartition(topic, p, target)])
        for future in futures.values():
            future.result()
        # The BLOBs of the newly truncated range (those truncated before are counted).
        freed = sum(b.bytes for b in chain if log_start < b.end_offset <= target)
        self.metrics.freed.labels(*self.labels(topic)).inc(freed)
        log.info("FG-SWP-005 truncated %s[%d] to offset %d", topic, p, target)

    def delete_blob(self, blob: Blob, *, unswept: bool = False) -> None:
        """Forget a registered BLOB, then remove its file. The row goes in the
        transaction that journals the file (:meth:`SweepCatalog.delete`), so a crash
        between leaves a file :meth:`recover` removes, never a registered BLOB without
        its file.

        Args:
            blob: the catalog's row.
            unswept: its tuples were read back by the consumer (counted in
                ``floodgate_sweeper_unswept_tuples_total``).

        Raises:
            BlobPathError: the row's file is not the sweeper's to remove: outside
                ``blob_dir`` with symbolic links resolved (``outside``), not the name
                the sweeper gives that range's file (``name``), or not a regular
                file (``not-a-file``); names the BLOB id, the path and ``blob_dir``.
                Neither the row nor the file is touched.
        """
        files = self._owned(blob)
        self.catalog.delete(blob.id, journal=True)
        for path in files:  # its file, not the temporary one a recovery removes
            if path.rsplit("/", 1)[-1] == blob.path.rsplit("/", 1)[-1]:
                self.store.remove(path)
        self.catalog.end_write(blob.path)
        if unswept:
            self.metrics.unswept_tuples.labels(*self.labels(blob.topic)).inc(blob.tuples)

    def _refresh_gauges(self) -> None:
        blobs = self.catalog.all()
        by_topic: dict[str, list[Blob]] = {q.topic: [] for q in self.queues}
        for blob in blobs:
            by_topic.setdefault(blob.topic, []).append(blob)
        for topic, held in by_topic.items():
            self.metrics.blobs.labels(*self.labels(topic)).set(len(held))
            self.metrics.blob_bytes.labels(*self.labels(topic)).set(sum(b.bytes for b in held))
        swept = {(b.topic, b.partition) for b in blobs}
        for topic, p in self._previous:
            self.metrics.swept_state.labels(*self.labels(topic), str(p)).set(
                1 if (topic, p) in swept else 0
            )
        used = sum(b.bytes for b in blobs)
        self.metrics.store_used.set(used / self.settings.blob_store_max_bytes)

    def status(self) -> dict[str, Any]:
        """``GET /status``: leader, store, BLOB chains, the last cycle."""
        return {
            "leader": self.election.is_leader,
            "blob_store": {
                "used_bytes": self.catalog.used_bytes(),
                "max_bytes": self.settings.blob_store_max_bytes,
                "full": self.full,
            },
            "blobs": [
                {
                    "topic": b.topic,
                    "partition": b.partition,
                    "start": b.start_offset,
                    "end": b.end_offset,
                    "tuples": b.tuples,
                    "bytes": b.bytes,
                }
                for b in self.catalog.all()
            ],
            "last_cycle": [
                {
                    "topic": o.topic,
                    "partition": o.partition,
                    "service_rate": o.service_rate,
                    "unswept": o.unswept,
                    "decision": o.decision,
                }
                for o in self.last_cycle
            ],
        }


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
    client: dict[str, Any] | None = None,
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

"""The sweep cycle (docs/architecture.md, "The sweeper"): :class:`Sweeper`, which runs
the sweeps (:mod:`sweeper.sweep`), the freeing (:mod:`sweeper.unsweep`) and, as it takes
the lead, the recovery (:mod:`sweeper.recovery`).

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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from confluent_kafka.admin import AdminClient
from prometheus_client import CollectorRegistry

from pipeline.config import QueryGroupConfig
from pipeline.errors import BlobPathError
from pipeline.kafka.clients import kafka_settings
from pipeline.offsets import planned_ends, replay_starts
from pipeline.queues.ledger import DeadLetters, LedgerRow, reconcile
from pipeline.state.leader import LeaderElection
from pipeline.swept.catalog import SweepCatalog
from pipeline.swept.store import LocalBlobStore, ObjectBlobStore, open_blob_store
from pipeline.swept.tables import Blob
from sweeper.blobs import DamageReports, StoreRoom
from sweeper.config import SweeperSettings
from sweeper.lock import BlobDirLock, ObjectStoreClaim
from sweeper.metrics import SweeperMetrics
from sweeper.policy import (
    PartitionView,
    Skip,
    SweepRange,
    consumed,
    plan,
    truncate_to,
)
from sweeper.recovery import Recovery
from sweeper.sweep import RangeSweeper, SweepAborted, SweptQueue, swept_queues
from sweeper.unsweep import Unsweeper

log = logging.getLogger(__name__)


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
        self.queues = swept_queues(groups, bootstrap_servers, self.catalog)
        #: Topic -> the ``(query_group, stream)`` labels of its queue's metrics.
        self._queue_labels: dict[str, tuple[str, str]] = {}
        for queue in self.queues:  # partitions: at the first cycle
            self._queue_labels.setdefault(queue.topic, (queue.query_group, queue.stream))
            self.metrics.add_queue(queue.query_group, queue.stream)
        self._client = dict(groups[0].kafka.client) if groups else {}
        self.admin = AdminClient(kafka_settings(bootstrap_servers, self._client))
        self._previous: dict[tuple[str, int], tuple[int, float]] = {}
        self.room = StoreRoom(self.catalog, settings.blob_store_max_bytes)
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
        self.reports = DamageReports(self.metrics, self.labels)
        #: Ids of the BLOBs reported damaged (``FG-SWP-007``), each reported once.
        self.damaged = self.reports.damaged
        self.recovery = Recovery(self.catalog, self.store, self.reports)
        self.unsweeper = Unsweeper(
            self.catalog, self.store, self.admin, self.metrics, self.labels, self.reports
        )
        self.sweeper = RangeSweeper(
            self.catalog,
            self.store,
            self.metrics,
            self.labels,
            bootstrap_servers=bootstrap_servers,
            client=self._client,
            # A sweep of a sweeper running its loop is registered only while it leads.
            leading=lambda: self._thread is None or self.election.is_leader,
            on_written=on_written,
        )

    # -- lifecycle -------------------------------------------------------------

    def recover(self) -> list[str]:
        """Finish what a sweeper killed mid-sweep left, check the registered BLOBs'
        files and seal those registered before checksums
        (:meth:`sweeper.recovery.Recovery.recover`). Run as the lead is granted (never
        on a follower, whose leader may be sweeping), and by tests.

        Returns:
            The files (or objects' URLs) removed.
        """
        removed = self.recovery.recover()
        self._refresh_gauges()
        return removed

    def delete_blob(self, blob: Blob, *, unswept: bool = False) -> None:
        """Forget a registered BLOB, then remove its file
        (:meth:`sweeper.unsweep.Unsweeper.delete_blob`).

        Raises:
            BlobPathError: the row's file is not the sweeper's to remove; neither the
                row nor the file is touched.
        """
        self.unsweeper.delete_blob(blob, unswept=unswept)

    def labels(self, topic: str) -> tuple[str, str]:
        """The ``(query_group, stream)`` labels of ``topic``'s metrics: its queue's, or
        ``("", topic)`` for a topic no configured queue carries (BLOBs an earlier
        configuration left in the catalog)."""
        return self._queue_labels.get(topic, ("", topic))

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
        self.room.check()  # logs the store filling up or clearing, swept or not
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
            target = self.unsweeper.checked(chain, log_start=log_start, target=target)
        if target is not None:
            self.unsweeper.truncate(topic, p, target, chain, log_start=log_start)
            outcome.truncated_to = target
            log_start = target
        for i in consumed(ranges, committed=freed):
            try:
                self.delete_blob(chain[i], unswept=True)
            except BlobPathError as exc:  # not the sweeper's file: reported, kept
                self.reports.report(chain[i], exc, held_at=None)
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
        if not self.room.check():
            self.metrics.skips.labels(*self.labels(topic), "store-full").inc()
            outcome.decision = "store-full"
            return outcome
        try:
            outcome.blob = self.sweeper.sweep(queue, p, decision)
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
                "full": self.room.full,
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

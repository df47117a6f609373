"""Metrics of the sweeper service (docs/metrics.md, "Sweeper service"), on the registry it
is handed."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Gauge

from pipeline.metrics import Families, add_build_info
from pipeline.swept.registered import DAMAGE_REASONS
from sweeper.policy import Abort, Skip

NAMESPACE = "floodgate"
SUBSYSTEM = "sweeper"


class SweeperMetrics:
    """Families, labelled as every other Floodgate family: ``query_group`` and
    ``stream`` name the swept queue (an input stream, or a ``swept`` output stream, of
    a query group), ``partition`` its partition where the family is per partition:

    * ``floodgate_sweeper_swept_tuples_total`` / ``_swept_bytes_total`` (counters):
      tuples and BLOB bytes registered by sweeps;
    * ``floodgate_sweeper_unswept_tuples_total`` (counter): tuples of BLOBs the
      consumer read back and the sweeper then deleted;
    * ``floodgate_sweeper_blobs`` / ``_blob_bytes`` (gauges): held now;
    * ``floodgate_sweeper_sweeps_total`` (counter): BLOBs registered;
    * ``floodgate_sweeper_aborts_total{reason}`` (counter): BLOBs written then
      deleted (``consumer-reached``, ``batch-planned``, ``broker-truncated``,
      ``write-failed``...);
    * ``floodgate_sweeper_skips_total{reason}`` (counter): partition cycles not
      swept (``not-serviced``, ``not-growing``, ``nothing-to-sweep``, ``store-full``);
    * ``floodgate_sweeper_serviced_tuples_total{partition}`` (counter): tuples the
      queue's readers committed, as each cycle measures the service rate x; x per
      second is its ``rate()`` in PromQL;
    * ``floodgate_sweeper_swept_state{partition}`` (gauge, 0/1): the partition
      has BLOBs (it is swept: part of its backlog is in its BLOB chain);
    * ``floodgate_sweeper_blob_store_used_ratio`` (gauge, 0..): used / max bytes;
    * ``floodgate_sweeper_broker_freed_bytes_total`` (counter): BLOB bytes of the
      swept ranges truncated from the broker, each counted once. An estimate: a BLOB
      holds the same records, and the broker's own size of them (Kafka's
      DescribeLogDirs) is not available through librdkafka;
    * ``floodgate_sweeper_leader`` (gauge, 0/1): this instance sweeps.
    * ``floodgate_sweeper_damaged_blobs_total{reason}`` (counter): registered
      BLOBs found not to be what the catalog recorded, each counted once
      per sweeper process, ``reason`` as :class:`pipeline.errors.BlobIntegrityError`
      (``missing``, ``size``, ``sha256``, ``offset``, ``count``, ``unreadable``;
      ``outside``, ``not-a-file``, ``name`` for a row naming a file that is not the
      sweeper's, :class:`pipeline.errors.BlobPathError`);
    * ``floodgate_ledger_unaccounted_tuples{partition}`` (gauge): the tuple ledger's
      unaccounted tuples of each input stream partition of the swept query groups,
      reconciled every cycle (:mod:`pipeline.queues.ledger`); 0 when all is well;
    * ``floodgate_build_info`` (:func:`pipeline.metrics.add_build_info`).

    A BLOB of a topic no configured queue carries (left in the catalog by an earlier
    configuration) is labelled with an empty ``query_group`` and its topic as
    ``stream``.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        add_build_info(registry)
        families = Families(registry, SUBSYSTEM)
        gauge, counter = families.gauge, families.counter
        queue = ("query_group", "stream")
        partition = (*queue, "partition")

        self.swept_tuples = counter("swept_tuples", "Tuples swept into BLOBs.", queue)
        self.swept_bytes = counter("swept_bytes", "BLOB bytes written by sweeps.", queue)
        self.unswept_tuples = counter(
            "unswept_tuples", "Tuples of BLOBs read back and deleted.", queue
        )
        self.blobs = gauge("blobs", "BLOBs held.", queue)
        self.blob_bytes = gauge("blob_bytes", "Bytes of the BLOBs held.", queue)
        self.sweeps = counter("sweeps", "BLOBs registered.", queue)
        self.aborts = counter("aborts", "Sweeps aborted, by reason.", (*queue, "reason"))
        self.skips = counter("skips", "Partition cycles not swept, by reason.", (*queue, "reason"))
        self.serviced_tuples = counter(
            "serviced_tuples",
            "Tuples the queue's readers committed, measured each cycle (rate(): the "
            "service rate x).",
            partition,
        )
        self.swept_state = gauge("swept_state", "1 while the partition has BLOBs.", partition)
        self.store_used = gauge("blob_store_used_ratio", "BLOB store bytes used / max.")
        self.freed = counter(
            "broker_freed_bytes",
            "BLOB bytes of swept ranges truncated from the broker.",
            queue,
        )
        self.leader = gauge("leader", "1 while this instance sweeps.")
        self.damaged = counter(
            "damaged_blobs",
            "Registered BLOBs that fail their integrity check, by reason.",
            (*queue, "reason"),
        )
        self.unaccounted = Gauge(
            "ledger_unaccounted_tuples",
            "Tuples of an input stream partition neither processed, dead-lettered, swept "
            "nor queued (0 when all is well).",
            partition,
            namespace=NAMESPACE,
            registry=registry,
        )

    def add_queue(self, query_group: str, stream: str, partitions: Iterable[int] = ()) -> None:
        """Make every series of a registered queue exist, at 0, before its first sweep
        (Prometheus' advice on missing series: a dashboard shows "none yet" and
        ``increase()`` sees the first abort)."""
        queue = (query_group, stream)
        for family in (
            self.swept_tuples,
            self.swept_bytes,
            self.unswept_tuples,
            self.sweeps,
            self.freed,
        ):
            family.labels(*queue)
        self.blobs.labels(*queue).set(0)
        self.blob_bytes.labels(*queue).set(0)
        for abort in Abort:
            self.aborts.labels(*queue, abort.value)
        for reason in DAMAGE_REASONS:
            self.damaged.labels(*queue, reason)
        for skip in [*Skip, "store-full"]:
            self.skips.labels(*queue, str(skip))
        for p in partitions:
            self.swept_state.labels(*queue, str(p)).set(0)
            self.serviced_tuples.labels(*queue, str(p))

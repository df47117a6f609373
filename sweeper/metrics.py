"""Metrics of the sweeper service (docs/metrics.md, "Sweeper service"), on the registry it
is handed."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Gauge

from pipeline.metrics import Families
from pipeline.swept.catalog import DAMAGE_REASONS
from sweeper.policy import Abort, Skip

NAMESPACE = "floodgate"
SUBSYSTEM = "sweeper"


class SweeperMetrics:
    """Families (``topic`` is the queue's topic):

    * ``floodgate_sweeper_swept_tuples_total{topic}`` / ``_swept_bytes_total{topic}``
      (counters): tuples and BLOB bytes registered by sweeps;
    * ``floodgate_sweeper_unswept_tuples_total{topic}`` (counter): tuples of BLOBs the
      consumer read back and the sweeper then deleted;
    * ``floodgate_sweeper_blobs{topic}`` / ``_blob_bytes{topic}`` (gauges): held now;
    * ``floodgate_sweeper_sweeps_total{topic}`` (counter): BLOBs registered;
    * ``floodgate_sweeper_aborts_total{topic,reason}`` (counter): BLOBs written then
      deleted (``consumer-reached``, ``batch-planned``, ``broker-truncated``,
      ``write-failed``);
    * ``floodgate_sweeper_skips_total{topic,reason}`` (counter): partition cycles not
      swept (``not-serviced``, ``not-growing``, ``nothing-to-sweep``, ``store-full``);
    * ``floodgate_sweeper_service_rate_tuples_per_second{topic,partition}`` (gauge): x
      over the interval;
    * ``floodgate_sweeper_swept_state{topic,partition}`` (gauge, 0/1): the partition
      has BLOBs (it is swept: part of its backlog is in its BLOB chain);
    * ``floodgate_sweeper_blob_store_used_ratio`` (gauge, 0..): used / max bytes;
    * ``floodgate_sweeper_broker_freed_bytes_total{topic}`` (counter): BLOB bytes of the
      swept ranges truncated from the broker, each counted once. An estimate: a BLOB
      holds the same records, and the broker's own size of them (Kafka's
      DescribeLogDirs) is not available through librdkafka;
    * ``floodgate_sweeper_leader`` (gauge, 0/1): this instance sweeps.
    * ``floodgate_sweeper_damaged_blobs_total{topic,reason}`` (counter): registered
      BLOBs found not to be what the catalog recorded (issue 26), each counted once
      per sweeper process, ``reason`` as :class:`pipeline.errors.BlobIntegrityError`
      (``missing``, ``size``, ``sha256``, ``offset``, ``count``, ``unreadable``);
    * ``floodgate_ledger_unaccounted_tuples{query_group,stream,partition}`` (gauge): the
      tuple ledger's unaccounted tuples of each input stream partition of the swept
      query groups, reconciled every cycle (:mod:`pipeline.services.ledger`); 0 when all is well.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        families = Families(registry, SUBSYSTEM)
        gauge, counter = families.gauge, families.counter

        self.swept_tuples = counter("swept_tuples", "Tuples swept into BLOBs.", ("topic",))
        self.swept_bytes = counter("swept_bytes", "BLOB bytes written by sweeps.", ("topic",))
        self.unswept_tuples = counter(
            "unswept_tuples", "Tuples of BLOBs read back and deleted.", ("topic",)
        )
        self.blobs = gauge("blobs", "BLOBs held.", ("topic",))
        self.blob_bytes = gauge("blob_bytes", "Bytes of the BLOBs held.", ("topic",))
        self.sweeps = counter("sweeps", "BLOBs registered.", ("topic",))
        self.aborts = counter("aborts", "Sweeps aborted, by reason.", ("topic", "reason"))
        self.skips = counter("skips", "Partition cycles not swept, by reason.", ("topic", "reason"))
        self.service_rate = gauge(
            "service_rate_tuples_per_second",
            "Tuples the consumer group committed per second over the last interval.",
            ("topic", "partition"),
        )
        self.swept_state = gauge(
            "swept_state", "1 while the partition has BLOBs.", ("topic", "partition")
        )
        self.store_used = gauge("blob_store_used_ratio", "BLOB store bytes used / max.")
        self.freed = counter(
            "broker_freed_bytes",
            "BLOB bytes of swept ranges truncated from the broker.",
            ("topic",),
        )
        self.leader = gauge("leader", "1 while this instance sweeps.")
        self.damaged = counter(
            "damaged_blobs",
            "Registered BLOBs that fail their integrity check, by reason.",
            ("topic", "reason"),
        )
        self.unaccounted = Gauge(
            "ledger_unaccounted_tuples",
            "Tuples of an input stream partition neither processed, dead-lettered, swept "
            "nor queued (0 when all is well).",
            ("query_group", "stream", "partition"),
            namespace=NAMESPACE,
            registry=registry,
        )

    def add_queue(self, topic: str, partitions: Iterable[int] = ()) -> None:
        """Make every series of a registered queue's topic exist, at 0, before its
        first sweep (Prometheus' advice on missing series: a dashboard shows "none
        yet" and ``increase()`` sees the first abort)."""
        for family in (
            self.swept_tuples,
            self.swept_bytes,
            self.unswept_tuples,
            self.sweeps,
            self.freed,
        ):
            family.labels(topic)
        self.blobs.labels(topic).set(0)
        self.blob_bytes.labels(topic).set(0)
        for abort in Abort:
            self.aborts.labels(topic, abort.value)
        for reason in DAMAGE_REASONS:
            self.damaged.labels(topic, reason)
        for skip in [*Skip, "store-full"]:
            self.skips.labels(topic, str(skip))
        for p in partitions:
            self.swept_state.labels(topic, str(p)).set(0)
            self.service_rate.labels(topic, str(p)).set(0)

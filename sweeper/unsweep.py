"""Freeing what the consumers are past: the broker truncated up to the end of the last
BLOB whose start the consumer has reached (each BLOB checked first, so a damaged one
holds the truncation at its start), and the BLOBs whose last tuple it has consumed
deleted (*unswept*).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from pipeline.errors import BlobIntegrityError
from pipeline.swept.catalog import SweepCatalog
from pipeline.swept.registered import check_blob
from pipeline.swept.store import BlobStore
from pipeline.swept.tables import Blob
from sweeper.blobs import DamageReports, owned
from sweeper.metrics import SweeperMetrics

log = logging.getLogger(__name__)


class Unsweeper:
    """Frees the broker and the BLOB store behind the consumers.

    Args:
        catalog: the sweep catalog.
        store: the BLOB store.
        admin: an admin client of the cluster (``delete_records``).
        metrics: the sweeper's metrics.
        labels: a topic's ``(query_group, stream)`` metric labels.
        reports: where a damaged BLOB is reported.
    """

    def __init__(
        self,
        catalog: SweepCatalog,
        store: BlobStore,
        admin: AdminClient,
        metrics: SweeperMetrics,
        labels: Callable[[str], tuple[str, str]],
        reports: DamageReports,
    ) -> None:
        self.catalog = catalog
        self.store = store
        self.admin = admin
        self.metrics = metrics
        self.labels = labels
        self.reports = reports

    def checked(self, chain: list[Blob], *, log_start: int, target: int) -> int | None:
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
                self.reports.report(blob, exc, held_at=held)
                return held if held > log_start else None
        return target

    def truncate(
        self, topic: str, p: int, target: int, chain: list[Blob], *, log_start: int
    ) -> None:
        """Truncate the broker's ``topic[p]`` below ``target`` (``delete_records``): the
        range is read from its BLOBs from now on; the bytes of the BLOBs newly covered
        count as freed.

        Raises:
            KafkaException: the broker refused or did not answer.
        """
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
        between leaves a file :meth:`~sweeper.recovery.Recovery.recover` removes,
        never a registered BLOB without its file.

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
        files = owned(self.store, blob)
        self.catalog.delete(blob.id, journal=True)
        for path in files:  # its file, not the temporary one a recovery removes
            if path.rsplit("/", 1)[-1] == blob.path.rsplit("/", 1)[-1]:
                self.store.remove(path)
        self.catalog.end_write(blob.path)
        if unswept:
            self.metrics.unswept_tuples.labels(*self.labels(blob.topic)).inc(blob.tuples)

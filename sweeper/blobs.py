"""The sweeper's hold on its BLOBs: which files of a catalog row it may remove, and
reporting a BLOB that fails its checks (``FG-SWP-007``), once each.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from pipeline.errors import BlobIntegrityError, BlobPathError
from pipeline.swept.catalog import SweepCatalog
from pipeline.swept.registered import owned_files, owned_objects
from pipeline.swept.store import BlobStore, LocalBlobStore
from pipeline.swept.tables import Blob
from sweeper.metrics import SweeperMetrics

log = logging.getLogger(__name__)


def owned(store: BlobStore, blob: Blob) -> list[str]:
    """The BLOB's files (or objects' URLs) the sweeper of ``store`` may remove: its own
    and the temporary one it is written to, those that exist
    (:func:`~pipeline.swept.registered.owned_files`,
    :func:`~pipeline.swept.registered.owned_objects`).

    Raises:
        BlobPathError: the row's path is not this sweeper's to remove.
    """
    if isinstance(store, LocalBlobStore):
        return [str(path) for path in owned_files(blob, store.location)]
    return owned_objects(blob, store.location)


class DamageReports:
    """The BLOBs reported damaged (``FG-SWP-007``, counted in
    ``floodgate_sweeper_damaged_blobs_total`` by reason), each reported once.

    Args:
        metrics: the sweeper's metrics.
        labels: a topic's ``(query_group, stream)`` metric labels.
    """

    def __init__(self, metrics: SweeperMetrics, labels: Callable[[str], tuple[str, str]]) -> None:
        self.metrics = metrics
        self.labels = labels
        #: Ids of the BLOBs reported damaged.
        self.damaged: set[int] = set()

    def report(self, blob: Blob, exc: BlobIntegrityError, *, held_at: int | None) -> None:
        """Count and log a damaged BLOB, saying what happens to its range: the broker
        held at ``held_at`` (not truncated past it), the row kept and its file left
        alone (a path that is not the sweeper's), or its tuples lost unless the broker
        still holds them."""
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


class StoreRoom:
    """Whether the BLOB store has room for another sweep: the bytes of the registered
    BLOBs under ``blob_store_max_bytes``. A full store sweeps no more, so back-pressure
    holds the producers; the change either way is logged once (``FG-SWP-003``,
    ``FG-SWP-004``).

    Args:
        catalog: the sweep catalog (its registered bytes).
        max_bytes: ``blob_store_max_bytes``.
    """

    def __init__(self, catalog: SweepCatalog, max_bytes: int) -> None:
        self.catalog = catalog
        self.max_bytes = max_bytes
        #: Whether the store was full at the last :meth:`check`.
        self.full = False

    def check(self) -> bool:
        """Whether there is room now (logs a change since the last check)."""
        used = self.catalog.used_bytes()
        full = used >= self.max_bytes
        if full != self.full:
            self.full = full
            if full:
                log.warning(
                    "FG-SWP-003 BLOB store full: %d of %d bytes (blob_store_max_bytes); no more "
                    "sweeps, back-pressure holds the producers",
                    used,
                    self.max_bytes,
                )
            else:
                log.warning(
                    "FG-SWP-004 BLOB store has room again: %d of %d bytes", used, self.max_bytes
                )
        return not full

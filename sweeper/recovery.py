"""What a sweeper does as it takes the lead: finish what a sweeper killed mid-sweep
left (the files the catalog's journal names), check the registered BLOBs' files, and
seal the BLOBs registered before checksums.

A ``kill -9`` at any point leaves the catalog naming only whole, verified BLOBs: the
file of a sweep the journal names as in progress (a temporary one, or one renamed but
not registered) is removed here when a sweeper next takes the lead; no other file is.
"""

from __future__ import annotations

import logging

from pipeline.errors import BlobIntegrityError, BlobPathError
from pipeline.swept.catalog import SweepCatalog
from pipeline.swept.registered import check_blob_path, seal_blob
from pipeline.swept.store import BlobStore
from pipeline.swept.tables import Blob
from sweeper.blobs import DamageReports, owned

log = logging.getLogger(__name__)


class Recovery:
    """A sweeper's recovery of its catalog and BLOB store.

    Args:
        catalog: the sweep catalog.
        store: the BLOB store.
        reports: where a damaged BLOB is reported.
    """

    def __init__(
        self,
        catalog: SweepCatalog,
        store: BlobStore,
        reports: DamageReports,
    ) -> None:
        self.catalog = catalog
        self.store = store
        self.reports = reports

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
        * BLOBs registered before checksums are sealed (:meth:`seal_unsealed`).

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
                files = owned(self.store, pending)
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
                self.reports.report(blob, exc, held_at=None)
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
        self.seal_unsealed()
        return removed

    def seal_unsealed(self) -> None:
        """Seal the BLOBs registered before checksums (``sha256`` NULL): each is read
        whole and checked (size, offsets, count) first; a damaged one is reported
        (``FG-SWP-007``) and left unsealed."""
        sealed = 0
        for blob in self.catalog.all():
            if blob.sha256 is not None or blob.id in self.reports.damaged:
                continue
            if self.store.size(blob.path) is None:
                continue
            try:
                sealed += self.catalog.seal(blob.id, seal_blob(blob))
            except BlobIntegrityError as exc:
                self.reports.report(blob, exc, held_at=None)
        if sealed:
            log.info("sealed %d BLOBs registered before checksums (SHA-256, offsets)", sealed)

"""The sweeper's journal in the sweep catalog (``floodgate_blob_writes``): a BLOB file is
named there before it is written, and the entry goes in the transaction that registers
it; a deleted BLOB's file is named there in the transaction that forgets its row, until
the file is gone. The sweeper's recovery removes only the files the journal names, so
it never removes a file it did not write.
"""

from __future__ import annotations

import threading

from sqlalchemy import delete, insert, select
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError

from pipeline.swept.tables import BlobWrite, blob_writes


class WriteCleared(ValueError):
    """A BLOB's in-progress entry was gone when it was to be registered: another
    sweeper's recovery (:meth:`SweepJournal.end_write`) took it, and removes the file."""


class SweepJournal:
    """The journal's operations, a part of :class:`~pipeline.swept.catalog.SweepCatalog`
    (which gives it its ``engine`` and its ``_lock``)."""

    engine: Engine
    _lock: threading.Lock

    def begin_write(
        self, path: str, topic: str, partition: int, start: int, end: int, *, now: float
    ) -> None:
        """Journal a sweep before its BLOB file is written (committed on return): the
        file ``path`` (and ``.tmp-<name>`` beside it) of ``[start, end)`` of the
        topic partition; ``now`` in epoch seconds. Only a journaled file is ever
        removed by the sweeper's recovery.

        Raises:
            ValueError: ``path`` is journaled already (another sweeper writes it now,
                or a killed sweep's entry awaits :meth:`Sweeper.recover`).
        """
        try:
            with self._lock, self.engine.begin() as conn:
                journal_file(conn, path, topic, partition, start, end, since=now)
        except IntegrityError as exc:
            raise ValueError(f"BLOB {path} is being written already (journaled)") from exc

    def end_write(self, path: str) -> bool:
        """Remove a sweep's in-progress entry (its BLOB was deleted, or is being
        recovered).

        Returns:
            Whether this call removed it (``False``: gone already: registered, or
            taken by another sweeper's recovery).
        """
        with self._lock, self.engine.begin() as conn:
            done = conn.execute(delete(blob_writes).where(blob_writes.c.path == path))
        return bool(done.rowcount)

    def writes(self) -> list[BlobWrite]:
        """The journal's entries (sweeps in progress, files being removed), oldest
        first."""
        with self.engine.connect() as conn:
            query = select(blob_writes).order_by(blob_writes.c.since, blob_writes.c.path)
            return [BlobWrite(**row._mapping) for row in conn.execute(query)]


def journal_file(
    conn: Connection, path: str, topic: str, partition: int, start: int, end: int, *, since: float
) -> None:
    """Add an entry to the sweeper's journal (``floodgate_blob_writes``)."""
    conn.execute(
        insert(blob_writes).values(
            path=path,
            topic=topic,
            partition=partition,
            start_offset=start,
            end_offset=end,
            since=since,
        )
    )

"""The sweep catalog: which BLOB holds which offsets (:class:`SweepCatalog`).

Besides the BLOB chains (``floodgate_blobs``), the catalog keeps the sweeper's BLOB
directory and the catalog's id (``floodgate_blob_store``, one row) and the sweeps in
progress (``floodgate_blob_writes``, the sweeper's journal: :mod:`pipeline.swept.journal`).
The tables are :mod:`pipeline.swept.tables`. Readers check every row's path against
the recorded directory before they open the file
(:func:`~pipeline.swept.registered.check_blob_path`): the directory comes from the
catalog, the one place the Spark executors, the reception and the sweeper all read, so
a row can name no file outside it. That guards against a misconfigured or stray row,
not against whoever can rewrite the catalog itself (they could record another
directory too): the catalog is the sweeper user's, as its BLOBs are.
"""

from __future__ import annotations

import functools
import os
import threading
import time
import uuid

from sqlalchemy import delete, func, insert, select, text, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError

from pipeline.errors import BlobIntegrityError, ConfigError
from pipeline.state.database import (
    add_columns,
    advisory_lock_key,
    create_database_engine,
    create_tables,
)
from pipeline.swept.blob import BlobSeal
from pipeline.swept.journal import SweepJournal, WriteCleared, journal_file
from pipeline.swept.registered import resolved, seal_blob
from pipeline.swept.store import is_object_url
from pipeline.swept.tables import (
    ADDED_COLUMNS,
    STORE_DIR,
    Blob,
    blob_store,
    blob_writes,
    blobs,
    metadata,
)


class SweepCatalog(SweepJournal):
    """The BLOB chains of every swept partition.

    Args:
        url: SQLAlchemy URL (``sqlite:///path`` by default; the folder is created).

    Also a :class:`pipeline.queues.probe.SweptCounter`: :meth:`swept` is what queue
    accounting subtracts, so swept tuples stop counting against a queue's max.
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine: Engine = create_database_engine(url)
        create_tables(metadata, self.engine)
        add_columns(self.engine, ADDED_COLUMNS)
        self._lock = threading.Lock()

    def register(
        self,
        topic: str,
        partition: int,
        start: int,
        end: int,
        *,
        path: str,
        size: int,
        tuples: int,
        now: float,
        seal: BlobSeal | None = None,
        in_progress: bool = False,
    ) -> Blob:
        """Add a BLOB at the end of its partition's chain, with its seal.

        Args:
            topic, partition, start, end: the range ``[start, end)`` it holds.
            path: its file; size: its bytes; tuples: its records; now: epoch seconds.
            seal: what :func:`write_sealed_blob` returned; ``None``: computed here
                from the file at ``path`` (read whole and checked).
            in_progress: ``path`` was journaled by :meth:`begin_write`: its entry is
                removed in the transaction that registers the BLOB.

        Raises:
            WriteCleared: (a ``ValueError``) ``in_progress`` and the entry is gone:
                another sweeper's recovery took it; nothing is registered.
            ValueError: the seal disagrees with ``size`` or ``tuples``, or the file
                cannot be read (``seal`` ``None``); or it overlaps a registered BLOB
                (the chain stays ordered and
                disjoint, also when two sweepers register at once: on PostgreSQL the
                check and the insert hold a transaction-scoped advisory lock of the
                partition; SQLite lets one writer at a time).
        """
        if seal is None:
            unsealed = Blob(0, topic, partition, start, end, path, size, tuples, now)
            try:
                seal = seal_blob(unsealed)
            except BlobIntegrityError as exc:
                raise ValueError(f"BLOB {path} cannot be registered: {exc}") from exc
        if (seal.bytes, seal.tuples) != (size, tuples):
            raise ValueError(
                f"BLOB {path}: size {size} and tuples {tuples} given, its seal says "
                f"{seal.bytes} and {seal.tuples}"
            )
        with self._lock, self.engine.begin() as conn:
            if self.engine.dialect.name == "postgresql":
                conn.execute(
                    text("SELECT pg_advisory_xact_lock(:key)"),
                    {"key": advisory_lock_key(f"floodgate_blobs:{topic}:{partition}")},
                )
            overlap = conn.execute(
                select(blobs.c.id).where(
                    blobs.c.topic == topic,
                    blobs.c.partition == partition,
                    blobs.c.start_offset < end,
                    blobs.c.end_offset > start,
                )
            ).first()
            if overlap is not None:
                raise ValueError(
                    f"{topic}[{partition}] [{start}, {end}) overlaps registered BLOB {overlap.id}"
                )
            if in_progress:
                journaled = conn.execute(delete(blob_writes).where(blob_writes.c.path == path))
                if not journaled.rowcount:
                    raise WriteCleared(
                        f"BLOB {path}: its in-progress entry is gone (another sweeper's "
                        "recovery took it and removes the file): not registered"
                    )
            blob_dir = conn.execute(select(STORE_DIR)).scalar()
            key = conn.execute(
                insert(blobs).values(
                    topic=topic,
                    partition=partition,
                    start_offset=start,
                    end_offset=end,
                    path=path,
                    bytes=size,
                    tuples=tuples,
                    created=now,
                    sha256=seal.sha256,
                    first_offset=seal.first_offset,
                    last_offset=seal.last_offset,
                )
            ).inserted_primary_key
            assert key is not None
        return Blob(
            int(key[0]),
            topic,
            partition,
            start,
            end,
            path,
            size,
            tuples,
            now,
            seal.sha256,
            seal.first_offset,
            seal.last_offset,
            blob_dir,
        )

    def seal(self, blob_id: int, seal: BlobSeal) -> bool:
        """Record the seal of a BLOB registered before checksums.

        Returns:
            Whether the row was sealed now (``False``: gone, or sealed already).
        """
        with self._lock, self.engine.begin() as conn:
            done = conn.execute(
                update(blobs)
                .where(blobs.c.id == blob_id, blobs.c.sha256.is_(None))
                .values(
                    sha256=seal.sha256,
                    first_offset=seal.first_offset,
                    last_offset=seal.last_offset,
                )
            )
        return bool(done.rowcount)

    def chain(self, topic: str, partition: int) -> list[Blob]:
        """The partition's BLOBs in offset order."""
        query = (
            select(blobs, STORE_DIR)
            .where(blobs.c.topic == topic, blobs.c.partition == partition)
            .order_by(blobs.c.start_offset)
        )
        with self.engine.connect() as conn:
            return [Blob(**row._mapping) for row in conn.execute(query)]

    def all(self) -> list[Blob]:
        """Every registered BLOB."""
        with self.engine.connect() as conn:
            query = select(blobs, STORE_DIR).order_by(
                blobs.c.topic, blobs.c.partition, blobs.c.start_offset
            )
            return [Blob(**row._mapping) for row in conn.execute(query)]

    def covering(self, topic: str, partition: int, start: int, end: int) -> list[Blob]:
        """The BLOBs that hold offsets of ``[start, end)``, in offset order."""
        query = (
            select(blobs, STORE_DIR)
            .where(
                blobs.c.topic == topic,
                blobs.c.partition == partition,
                blobs.c.end_offset > start,
                blobs.c.start_offset < end,
            )
            .order_by(blobs.c.start_offset)
        )
        with self.engine.connect() as conn:
            return [Blob(**row._mapping) for row in conn.execute(query)]

    def swept(self, topic: str, partition: int, position: int) -> int:
        """Offsets of ``[position, oo)`` of a partition held in BLOBs (queue accounting)."""
        greatest = func.max if self.engine.dialect.name == "sqlite" else func.greatest
        held = blobs.c.end_offset - greatest(blobs.c.start_offset, position)
        query = select(func.coalesce(func.sum(held), 0)).where(
            blobs.c.topic == topic, blobs.c.partition == partition, blobs.c.end_offset > position
        )
        with self.engine.connect() as conn:
            return int(conn.execute(query).scalar_one())

    def delete(self, blob_id: int, *, journal: bool = False) -> None:
        """Forget a BLOB (its file is the caller's to remove).

        Args:
            blob_id: its row.
            journal: journal its file in the same transaction, as a sweep in progress
                is (:meth:`begin_write`): the sweeper's recovery removes it if the
                caller dies before it does; the caller calls :meth:`end_write` once
                the file is gone.
        """
        with self._lock, self.engine.begin() as conn:
            row = conn.execute(select(blobs).where(blobs.c.id == blob_id)).first()
            if row is None:
                return
            conn.execute(delete(blobs).where(blobs.c.id == blob_id))
            if journal:
                conn.execute(delete(blob_writes).where(blob_writes.c.path == row.path))
                journal_file(
                    conn,
                    row.path,
                    row.topic,
                    row.partition,
                    row.start_offset,
                    row.end_offset,
                    since=time.time(),
                )

    def identity(self) -> str:
        """The catalog's id, 32 hex digits: made at random the first time it is
        asked for, then kept (``floodgate_blob_store``). Its sweepers write it into
        their BLOB directory's lock file: sweepers of one catalog share the
        directory, one of another catalog is refused."""
        for _attempt in range(3):
            with self.engine.connect() as conn:
                found = conn.execute(
                    select(blob_store.c.catalog_id).where(blob_store.c.id == 1)
                ).scalar()
            if found is not None:
                return str(found)
            try:
                with self._lock, self.engine.begin() as conn:
                    conn.execute(
                        insert(blob_store).values(
                            id=1, catalog_id=uuid.uuid4().hex, blob_dir=None, since=time.time()
                        )
                    )
            except IntegrityError:
                continue  # another process made it first: read it
        raise RuntimeError(f"the sweep catalog {self.engine.url!r} keeps no id")

    def blob_dir(self) -> str | None:
        """The BLOB directory a sweeper recorded (absolute, as its config names it),
        or ``None``."""
        with self.engine.connect() as conn:
            found = conn.execute(select(STORE_DIR)).scalar()
        return None if found is None else str(found)

    def record_blob_dir(self, blob_dir: str, *, key: str = "sweeper.blob_dir") -> None:
        """Record the sweeper's BLOB directory, the one readers check every BLOB path
        against. The same directory (symbolic links resolved) is kept as recorded.

        Args:
            blob_dir: the BLOB store's location: a folder (made absolute here) or an
                object store's ``s3://bucket/prefix``
                (:attr:`pipeline.swept.store.BlobStore.location`).
            key: the setting that named it, for the refusal.

        Raises:
            ConfigError: another directory is recorded and the catalog still holds
                BLOBs or sweeps in progress there (its readers would refuse them
                all); names both directories.
        """
        directory = blob_dir if is_object_url(blob_dir) else os.path.abspath(blob_dir)
        self.identity()
        with self._lock, self.engine.begin() as conn:
            recorded = conn.execute(select(STORE_DIR)).scalar()
            if recorded is not None and resolved(recorded) == resolved(directory):
                return
            if recorded is not None:
                held = conn.execute(select(func.count()).select_from(blobs)).scalar_one()
                held += conn.execute(select(func.count()).select_from(blob_writes)).scalar_one()
                if held:
                    raise ConfigError(
                        f"{key} is {directory}, but this catalog's {held} BLOBs "
                        f"and sweeps in progress are in {recorded}, the directory its "
                        "readers check every BLOB path against: a sweeper of this catalog "
                        "must use it (another directory only once the catalog is empty)",
                        key=key,
                        value=directory,
                        allowed=recorded,
                    )
            conn.execute(
                update(blob_store)
                .where(blob_store.c.id == 1)
                .values(blob_dir=directory, since=time.time())
            )

    def used_bytes(self) -> int:
        """Bytes of every registered BLOB."""
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.coalesce(func.sum(blobs.c.bytes), 0))).scalar_one())

    def close(self) -> None:
        self.engine.dispose()


@functools.cache
def catalog_for(url: str) -> SweepCatalog:
    """One :class:`SweepCatalog` per URL per process (queue probes share it)."""
    return SweepCatalog(url)

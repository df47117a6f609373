"""The sweep catalog: which BLOB holds which offsets, and checking a BLOB against it."""

from __future__ import annotations

import array
import functools
import hashlib
import itertools
import logging
import operator
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    delete,
    func,
    insert,
    inspect,
    select,
    text,
    update,
)
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError

from pipeline.errors import BlobIntegrityError
from pipeline.services.database import (
    advisory_lock_key,
    create_database_engine,
    create_tables,
)
from pipeline.swept.blob import _UNREADABLE, BlobSeal, SweptRecord, _batch_records, _rows, _unpacked

log = logging.getLogger(__name__)


#: The ``reason`` of a :class:`~pipeline.errors.BlobIntegrityError` (a metric label).
DAMAGE_REASONS = ("missing", "size", "sha256", "offset", "count", "unreadable")


#: Unsealed BLOBs (registered before checksums) already logged by this process.
_unsealed_logged: set[tuple[str, int]] = set()


def _damaged(
    blob: Blob, reason: str, message: str, offset: int | None = None
) -> BlobIntegrityError:
    error = BlobIntegrityError(
        message,
        blob_id=blob.id or None,  # 0: not registered yet
        path=blob.path,
        reason=reason,
        topic=blob.topic,
        partition=blob.partition,
        start=blob.start_offset,
        end=blob.end_offset,
        offset=offset,
    )
    log.error("FG-BLOB-002 %s", error)
    return error


def _open_checked(blob: Blob) -> Any:
    """The BLOB's file, open at its start, its size and (when sealed) SHA-256 checked.

    Raises:
        BlobIntegrityError: the file is missing, or its size or digest differs.
    """
    try:
        src = open(blob.path, "rb")  # noqa: SIM115 - the caller closes it
    except OSError as exc:
        raise _damaged(blob, "missing", f"{exc.__class__.__name__}: {exc}") from exc
    try:
        size = os.fstat(src.fileno()).st_size
        if size != blob.bytes:
            raise _damaged(blob, "size", f"the file holds {size} bytes, the catalog {blob.bytes}")
        if blob.sha256 is None:
            if (blob.path, blob.id) not in _unsealed_logged:
                _unsealed_logged.add((blob.path, blob.id))
                log.warning(
                    "FG-BLOB-001 BLOB %d (%s) of %s[%d] has no SHA-256 in the catalog "
                    "(registered before checksums): read with the size, offset and count "
                    "checks only",
                    blob.id,
                    blob.path,
                    blob.topic,
                    blob.partition,
                )
        else:
            digest = hashlib.file_digest(src, "sha256").hexdigest()
            if digest != blob.sha256:
                raise _damaged(
                    blob, "sha256", f"the file's SHA-256 is {digest}, the catalog's {blob.sha256}"
                )
            src.seek(0)
    except BaseException:
        src.close()
        raise
    return src


def _increasing(offsets: array.array[int]) -> bool:
    return all(map(operator.lt, offsets, itertools.islice(offsets, 1, None)))


def read_registered(blob: Blob) -> Iterator[list[SweptRecord]]:
    """The records of a registered BLOB, batch by batch, in offset order, checked
    against its catalog row (issue 26: no silent BLOB corruption).

    Before any record is yielded: the file's size and SHA-256 are the recorded ones.
    While reading: offsets are strictly increasing (not contiguous: transaction
    markers and aborted records take offsets without being records), inside
    ``[start_offset, end_offset)``, the first is ``first_offset``. At the end of the
    file: the last is ``last_offset`` and the count is ``tuples``. A row without a
    seal (registered before checksums) gets every check but the digest and the
    first/last offsets.

    Raises:
        BlobIntegrityError: a check failed (``reason``: ``missing``, ``size``,
            ``sha256``, ``offset``, ``count``, ``unreadable``); logged as
            ``FG-BLOB-002``. Records of the BLOB yielded before an ``offset`` error
            are inside its range and in order; nothing past the error is read.
    """
    src = _open_checked(blob)
    with src:
        count = 0
        previous = blob.start_offset - 1
        try:
            for row in _rows(src):
                offsets = _unpacked("q", row["offsets"])
                if not offsets:
                    continue
                first = offsets[0]
                if count == 0 and blob.first_offset is not None and first != blob.first_offset:
                    raise _damaged(
                        blob,
                        "offset",
                        f"its first offset is {first}, the catalog's {blob.first_offset}",
                        first,
                    )
                if first <= previous or offsets[-1] >= blob.end_offset or not _increasing(offsets):
                    bad, before = _first_out_of_order(offsets, previous, blob.end_offset)
                    raise _damaged(
                        blob,
                        "offset",
                        f"offset {bad} after {before} is not strictly increasing inside "
                        f"[{blob.start_offset}, {blob.end_offset})",
                        bad,
                    )
                previous = offsets[-1]
                batch = _batch_records(row, blob.topic, blob.partition)
                count += len(batch)
                yield batch
        except _UNREADABLE as exc:
            raise _damaged(blob, "unreadable", f"{exc.__class__.__name__}: {exc}") from exc
        if count != blob.tuples:
            raise _damaged(blob, "count", f"it holds {count} records, the catalog {blob.tuples}")
        last = previous if count else None
        if blob.sha256 is not None and last != blob.last_offset:
            raise _damaged(
                blob, "offset", f"its last offset is {last}, the catalog's {blob.last_offset}", last
            )


def _first_out_of_order(offsets: array.array[int], previous: int, end: int) -> tuple[int, int]:
    """``(the first offset not after the one before it or not before end, that one)``."""
    for offset in offsets:
        if offset <= previous or offset >= end:
            return offset, previous
        previous = offset
    raise AssertionError("no offset out of order")  # pragma: no cover


def seal_blob(blob: Blob) -> BlobSeal:
    """Check a registered BLOB whole (:func:`read_registered`) and return its seal
    (the sweeper seals rows registered before checksums with it).

    Raises:
        BlobIntegrityError: as :func:`read_registered`.
    """
    first: int | None = None
    last: int | None = None
    count = 0
    for batch in read_registered(blob):
        if first is None:
            first = batch[0].offset()
        last = batch[-1].offset()
        count += len(batch)
    with open(blob.path, "rb") as src:
        digest = hashlib.file_digest(src, "sha256").hexdigest()
    return BlobSeal(digest, blob.bytes, count, first, last)


def check_blob(blob: Blob) -> None:
    """Check a registered BLOB's size and SHA-256 (a full :func:`seal_blob` check when
    it has no SHA-256 yet), without decoding its records: what the sweeper does before
    it truncates the broker copy of the BLOB's range.

    Raises:
        BlobIntegrityError: as :func:`read_registered`.
    """
    if blob.sha256 is None:
        seal_blob(blob)
        return
    _open_checked(blob).close()


metadata = MetaData()


blobs = Table(
    "floodgate_blobs",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("topic", String, nullable=False),
    Column("partition", Integer, nullable=False),
    # Kafka offsets are 64-bit; PostgreSQL's INTEGER is not.
    Column("start_offset", BigInteger, nullable=False),
    Column("end_offset", BigInteger, nullable=False),
    Column("path", String, nullable=False),
    Column("bytes", BigInteger, nullable=False),
    Column("tuples", BigInteger, nullable=False),
    Column("created", Float, nullable=False),
    # The seal (issue 26); NULL in rows registered before checksums existed.
    Column("sha256", String(64), nullable=True),
    Column("first_offset", BigInteger, nullable=True),
    Column("last_offset", BigInteger, nullable=True),
    Index("floodgate_blobs_chain", "topic", "partition", "start_offset", unique=True),
)


#: Columns added to ``floodgate_blobs`` after its first release, with their SQL types:
#: an existing catalog gets them (NULL) when it is opened.
_ADDED_COLUMNS = {"sha256": "VARCHAR(64)", "first_offset": "BIGINT", "last_offset": "BIGINT"}


@dataclass(frozen=True)
class Blob:
    """One registered BLOB: ``[start_offset, end_offset)`` of a topic partition, and
    its seal (:class:`BlobSeal`; ``sha256`` ``None``: registered before checksums)."""

    id: int
    topic: str
    partition: int
    start_offset: int
    end_offset: int
    path: str
    bytes: int
    tuples: int
    created: float
    sha256: str | None = None
    first_offset: int | None = None
    last_offset: int | None = None


class SweepCatalog:
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
        self._add_columns()
        self._lock = threading.Lock()

    def _add_columns(self) -> None:
        """Give a catalog made before checksums its seal columns (NULL in old rows).
        Safe when several processes open it at once: a column another added meanwhile
        is found on the second look."""
        for attempt in range(2):
            present = {c["name"] for c in inspect(self.engine).get_columns("floodgate_blobs")}
            missing = [name for name in _ADDED_COLUMNS if name not in present]
            if not missing:
                return
            try:
                with self.engine.begin() as conn:
                    for name in missing:
                        kind = _ADDED_COLUMNS[name]
                        conn.execute(text(f"ALTER TABLE floodgate_blobs ADD COLUMN {name} {kind}"))
            except DBAPIError:
                if attempt:
                    raise

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
    ) -> Blob:
        """Add a BLOB at the end of its partition's chain, with its seal.

        Args:
            topic, partition, start, end: the range ``[start, end)`` it holds.
            path: its file; size: its bytes; tuples: its records; now: epoch seconds.
            seal: what :func:`write_sealed_blob` returned; ``None``: computed here
                from the file at ``path`` (read whole and checked).

        Raises:
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
            select(blobs)
            .where(blobs.c.topic == topic, blobs.c.partition == partition)
            .order_by(blobs.c.start_offset)
        )
        with self.engine.connect() as conn:
            return [Blob(**row._mapping) for row in conn.execute(query)]

    def all(self) -> list[Blob]:
        """Every registered BLOB."""
        with self.engine.connect() as conn:
            query = select(blobs).order_by(blobs.c.topic, blobs.c.partition, blobs.c.start_offset)
            return [Blob(**row._mapping) for row in conn.execute(query)]

    def covering(self, topic: str, partition: int, start: int, end: int) -> list[Blob]:
        """The BLOBs that hold offsets of ``[start, end)``, in offset order."""
        query = (
            select(blobs)
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

    def delete(self, blob_id: int) -> None:
        """Forget a BLOB (its file is the caller's to remove)."""
        with self._lock, self.engine.begin() as conn:
            conn.execute(delete(blobs).where(blobs.c.id == blob_id))

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

"""The sweep catalog: which BLOB holds which offsets, and checking a BLOB against it.

Besides the BLOB chains (``floodgate_blobs``), the catalog keeps the sweeper's BLOB
directory and the catalog's id (``floodgate_blob_store``, one row) and the sweeps in
progress (``floodgate_blob_writes``, the sweeper's journal: a BLOB file is named
there before it is written, and the entry goes in the transaction that registers
it; a deleted BLOB's file is named there in the transaction that forgets its row,
until the file is gone). The sweeper's recovery removes only the files the journal
names. Readers check every row's path against the recorded directory before they
open the file (:func:`check_blob_path`): the directory comes from the catalog, the
one place the Spark executors, the reception and the sweeper all read, so a row can
name no file outside it. That guards against a misconfigured or stray row, not
against whoever can rewrite the catalog itself (they could record another
directory too): the catalog is the sweeper user's, as its BLOBs are.
"""

from __future__ import annotations

import array
import errno
import functools
import hashlib
import itertools
import logging
import operator
import os
import stat
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
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
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError, IntegrityError

from pipeline.errors import BlobIntegrityError, BlobPathError, ConfigError
from pipeline.state.database import (
    advisory_lock_key,
    create_database_engine,
    create_tables,
)
from pipeline.swept.blob import (
    UNREADABLE,
    BlobSeal,
    SweptRecord,
    blob_batch_records,
    blob_name,
    records_of_batch,
    unpack_column,
)
from pipeline.swept.store import TEMPORARY_PREFIX, is_object_url, object_size, open_object

log = logging.getLogger(__name__)


#: The ``reason`` of a :class:`~pipeline.errors.BlobIntegrityError` (a metric label).
DAMAGE_REASONS = (
    "missing",
    "size",
    "sha256",
    "offset",
    "count",
    "unreadable",
    # A row naming a file that is not a BLOB of the catalog's (BlobPathError).
    "outside",
    "not-a-file",
    "name",
)


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


def _refused(blob: Blob, blob_dir: str | None, reason: str, message: str) -> BlobPathError:
    error = BlobPathError(
        message,
        blob_id=blob.id or None,
        path=blob.path,
        blob_dir=blob_dir,
        reason=reason,
        topic=blob.topic,
        partition=blob.partition,
        start=blob.start_offset,
        end=blob.end_offset,
    )
    log.error("FG-BLOB-002 %s", error)
    return error


def inside(path: str, directory: str) -> bool:
    """Whether ``path`` lies inside ``directory`` once both are resolved (symbolic
    links, ``..``; relative paths from the working directory): what a BLOB path
    must be, checked before its file is opened or deleted.

    An object store's (``s3://bucket/prefix``) has no links to resolve: the path must
    be ``<directory>/<name>`` as written, with one plain segment for ``name`` (no
    ``/``, ``.`` or ``..``), and a path of one kind is never inside a directory of the
    other."""
    if is_object_url(directory) or is_object_url(path):
        base = directory.rstrip("/") + "/"
        name = path[len(base) :] if path.startswith(base) else ""
        return is_object_url(directory) and name not in ("", ".", "..") and "/" not in name
    base = os.path.realpath(directory)
    real = os.path.realpath(path)
    return real != base and os.path.commonpath([real, base]) == base


def check_blob_path(blob: Blob, blob_dir: str | None = None) -> None:
    """Refuse a row whose file is not inside the BLOB directory, symbolic links
    resolved (``/dev/zero``, a file in ``/tmp``, a link in the directory that points
    out of it). Nothing is opened.

    Args:
        blob: the row.
        blob_dir: the directory to check against; ``None``: the one the catalog
            recorded when the row was read (``blob.blob_dir``). With neither (a
            catalog no sweeper has recorded a directory in yet), nothing is checked
            here; readers still open only a regular file, never through a link.

    Raises:
        BlobPathError: ``reason`` ``"outside"``, naming the BLOB id, its path and
            the directory; logged as ``FG-BLOB-002``.
    """
    directory = blob_dir if blob_dir is not None else blob.blob_dir
    if directory is not None and not inside(blob.path, directory):
        raise _refused(
            blob,
            directory,
            "outside",
            f"its file resolves to {_resolved(blob.path)}, outside the BLOB "
            f"directory {directory}: not the sweeper's, neither read nor deleted",
        )


def _resolved(path: str) -> str:
    """A file's path with symbolic links resolved; an object URL as it is."""
    return path if is_object_url(path) else os.path.realpath(path)


def owned_objects(blob: Blob, blob_dir: str) -> list[str]:
    """:func:`owned_files` for an object store's BLOB (``blob_dir`` is
    ``s3://bucket/prefix``): its object and its temporary one, those that exist.

    Raises:
        BlobPathError: ``reason`` ``"outside"`` or ``"name"``; nothing is removed.
        OSError: the store did not answer.
    """
    check_blob_path(blob, blob_dir)
    name = blob_name(blob.topic, blob.partition, blob.start_offset, blob.end_offset)
    final = f"{blob_dir.rstrip('/')}/{name}"
    if blob.path != final:
        raise _refused(
            blob,
            blob_dir,
            "name",
            f"it is not {final}, the object the sweeper writes for that range: not removed",
        )
    temporary = f"{blob_dir.rstrip('/')}/{TEMPORARY_PREFIX}{name}"
    return [url for url in (final, temporary) if object_size(url) is not None]


def owned_files(blob: Blob, blob_dir: str) -> list[Path]:
    """The files of a BLOB that the sweeper of ``blob_dir`` may remove: its file and
    the temporary one it is written to (``.tmp-<name>``), those that exist.

    A row's path is the sweeper's only when it is ``<blob_dir>/<name>`` with symbolic
    links resolved and ``<name>`` the one :func:`~pipeline.swept.blob.blob_name` gives
    the row's topic, partition and range; and each file must be a regular one (a
    symbolic link is not removed either: it is not a file the sweeper wrote).

    Args:
        blob: a registered row, or a journaled sweep's (``id`` 0).
        blob_dir: the sweeper's BLOB directory.

    Returns:
        Up to two paths, the BLOB's file first.

    Raises:
        BlobPathError: ``reason`` ``"outside"``, ``"name"`` or ``"not-a-file"``,
            naming the BLOB id, the path and ``blob_dir``; nothing is removed.
    """
    check_blob_path(blob, blob_dir)
    name = blob_name(blob.topic, blob.partition, blob.start_offset, blob.end_offset)
    path = Path(blob.path)
    if path.name != name or os.path.realpath(path.parent) != os.path.realpath(blob_dir):
        raise _refused(
            blob,
            blob_dir,
            "name",
            f"it is not {os.path.join(blob_dir, name)}, the file the sweeper writes for "
            "that range: not removed",
        )
    found = []
    for candidate in (path, path.with_name(f"{TEMPORARY_PREFIX}{name}")):
        try:
            mode = os.lstat(candidate).st_mode
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(mode):
            raise _refused(
                blob,
                blob_dir,
                "not-a-file",
                f"{candidate} is not a regular file (mode {stat.filemode(mode)}): not removed",
            )
        found.append(candidate)
    return found


def _open_file(blob: Blob) -> Any:
    """The BLOB's file, open for reading at its start: inside the BLOB directory
    (:func:`check_blob_path`), opened without following a symbolic link, and a
    regular file (a device or a FIFO is never read: ``/dev/zero`` would be hashed
    for ever). An object store's BLOB (``s3://``) is opened as an object
    (:func:`pipeline.swept.store.open_object`): a seekable file with ``size()``.

    Raises:
        BlobPathError: outside the directory, or not a regular file.
        BlobIntegrityError: the file cannot be opened (``missing``).
    """
    check_blob_path(blob)
    if is_object_url(blob.path):
        try:
            return open_object(blob.path)
        except (OSError, ValueError) as exc:
            raise _damaged(blob, "missing", f"{exc.__class__.__name__}: {exc}") from exc
    try:
        # O_NONBLOCK: opening a FIFO planted at the name must not wait for a writer.
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        fd = os.open(blob.path, flags)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK):  # O_NOFOLLOW met a link
            raise _refused(
                blob, blob.blob_dir, "not-a-file", "it is a symbolic link: never followed"
            ) from exc
        raise _damaged(blob, "missing", f"{exc.__class__.__name__}: {exc}") from exc
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _refused(
                blob,
                blob.blob_dir,
                "not-a-file",
                f"it is not a regular file (mode {stat.filemode(mode)}): not read",
            )
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def _open_checked(blob: Blob) -> Any:
    """The BLOB's file (:func:`_open_file`), open at its start, its size and (when
    sealed) SHA-256 checked.

    Raises:
        BlobPathError: as :func:`_open_file`.
        BlobIntegrityError: the file is missing, or its size or digest differs.
    """
    src = _open_file(blob)
    try:
        size = src.size() if is_object_url(blob.path) else os.fstat(src.fileno()).st_size
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
    against its catalog row (no silent BLOB corruption).

    Before any record is yielded: the file's size and SHA-256 are the recorded ones.
    While reading: offsets are strictly increasing (not contiguous: transaction
    markers and aborted records take offsets without being records), inside
    ``[start_offset, end_offset)``, the first is ``first_offset``. At the end of the
    file: the last is ``last_offset`` and the count is ``tuples``. A row without a
    seal (registered before checksums) gets every check but the digest and the
    first/last offsets.

    Before the file is opened: its path is inside the catalog's BLOB directory, and
    it is a regular file reached without a symbolic link (:func:`check_blob_path`).

    Raises:
        BlobIntegrityError: a check failed (``reason``: ``missing``, ``size``,
            ``sha256``, ``offset``, ``count``, ``unreadable``); logged as
            ``FG-BLOB-002``. Records of the BLOB yielded before an ``offset`` error
            are inside its range and in order; nothing past the error is read.
        BlobPathError: (a ``BlobIntegrityError``) the path is outside the BLOB
            directory or is not a regular file; nothing was read.
    """
    src = _open_checked(blob)
    with src:
        count = 0
        previous = blob.start_offset - 1
        try:
            for batch_record in blob_batch_records(src):
                offsets = unpack_column("q", batch_record["offsets"])
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
                batch = records_of_batch(batch_record, blob.topic, blob.partition)
                count += len(batch)
                yield batch
        except UNREADABLE as exc:
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
    with _open_file(blob) as src:
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
    # The seal (no silent BLOB corruption); NULL in rows registered before checksums existed.
    Column("sha256", String(64), nullable=True),
    Column("first_offset", BigInteger, nullable=True),
    Column("last_offset", BigInteger, nullable=True),
    Index("floodgate_blobs_chain", "topic", "partition", "start_offset", unique=True),
)


#: One row (``id`` 1): the catalog's id and the sweeper's BLOB directory.
blob_store = Table(
    "floodgate_blob_store",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    # 32 hex digits: written into the BLOB directory's lock file by its sweepers.
    Column("catalog_id", String(32), nullable=False),
    # Absolute, as the sweeper's config names it; NULL until a sweeper records one.
    Column("blob_dir", String, nullable=True),
    Column("since", Float, nullable=False),
)


#: The sweeper's journal: a BLOB file being written, named before it is created.
blob_writes = Table(
    "floodgate_blob_writes",
    metadata,
    Column("path", String, primary_key=True),
    Column("topic", String, nullable=False),
    Column("partition", Integer, nullable=False),
    Column("start_offset", BigInteger, nullable=False),
    Column("end_offset", BigInteger, nullable=False),
    Column("since", Float, nullable=False),
)


#: The recorded BLOB directory, read with every row (``Blob.blob_dir``).
_STORE_DIR = (
    select(blob_store.c.blob_dir).where(blob_store.c.id == 1).scalar_subquery().label("blob_dir")
)


#: Columns added to ``floodgate_blobs`` after its first release, with their SQL types:
#: an existing catalog gets them (NULL) when it is opened.
_ADDED_COLUMNS = {"sha256": "VARCHAR(64)", "first_offset": "BIGINT", "last_offset": "BIGINT"}


@dataclass(frozen=True)
class Blob:
    """One registered BLOB: ``[start_offset, end_offset)`` of a topic partition, and
    its seal (:class:`BlobSeal`; ``sha256`` ``None``: registered before checksums).

    ``blob_dir`` is the catalog's BLOB directory when the row was read (``None``: no
    sweeper has recorded one): readers refuse a ``path`` outside it."""

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
    blob_dir: str | None = None


@dataclass(frozen=True)
class BlobWrite:
    """An entry of the sweeper's journal (``floodgate_blob_writes``): a sweep in
    progress, or a forgotten BLOB whose file is being removed. ``path`` is the BLOB
    file (and ``.tmp-<name>`` beside it while it is written), ``[start_offset,
    end_offset)`` the range of the topic partition, ``since`` epoch seconds."""

    path: str
    topic: str
    partition: int
    start_offset: int
    end_offset: int
    since: float


class WriteCleared(ValueError):
    """A BLOB's in-progress entry was gone when it was to be registered: another
    sweeper's recovery (:meth:`SweepCatalog.end_write`) took it, and removes the file."""


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
            blob_dir = conn.execute(select(_STORE_DIR)).scalar()
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
            select(blobs, _STORE_DIR)
            .where(blobs.c.topic == topic, blobs.c.partition == partition)
            .order_by(blobs.c.start_offset)
        )
        with self.engine.connect() as conn:
            return [Blob(**row._mapping) for row in conn.execute(query)]

    def all(self) -> list[Blob]:
        """Every registered BLOB."""
        with self.engine.connect() as conn:
            query = select(blobs, _STORE_DIR).order_by(
                blobs.c.topic, blobs.c.partition, blobs.c.start_offset
            )
            return [Blob(**row._mapping) for row in conn.execute(query)]

    def covering(self, topic: str, partition: int, start: int, end: int) -> list[Blob]:
        """The BLOBs that hold offsets of ``[start, end)``, in offset order."""
        query = (
            select(blobs, _STORE_DIR)
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
                _journal(
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
            found = conn.execute(select(_STORE_DIR)).scalar()
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
            recorded = conn.execute(select(_STORE_DIR)).scalar()
            if recorded is not None and _resolved(recorded) == _resolved(directory):
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
                _journal(conn, path, topic, partition, start, end, since=now)
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

    def used_bytes(self) -> int:
        """Bytes of every registered BLOB."""
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.coalesce(func.sum(blobs.c.bytes), 0))).scalar_one())

    def close(self) -> None:
        self.engine.dispose()


def _journal(
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


@functools.cache
def catalog_for(url: str) -> SweepCatalog:
    """One :class:`SweepCatalog` per URL per process (queue probes share it)."""
    return SweepCatalog(url)

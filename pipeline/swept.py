"""Swept tuples: the BLOB format and the sweep catalog (README, "The sweeper service").

The sweeper (``sweeper/``) moves the backlog of a slow-but-serviced queue out of the
broker into BLOBs; the data path reads them back (unsweep). Both sides need this
module, so it lives in ``pipeline/`` (which never imports ``sweeper/``).

**A BLOB** is one Avro object container file (fastavro) holding a contiguous offset
range ``[a, b)`` of one topic partition: each Kafka record's offset, timestamp and
its type, key, value and headers, byte for byte (a swept tuple comes back exactly as
it was put), column by column, one Avro record per fetched batch (:data:`BLOB_SCHEMA`).
Kafka transaction markers take offsets without being records, so a BLOB may hold fewer
records than ``b - a``; the catalog keeps both.

**Reading a range** (:func:`read_partition`) is one loop for the Spark source, the
reception API and the sweeper: from the broker while it holds an offset, from the
BLOB chain when it does not, a :class:`~pipeline.errors.DataLossError` when neither
does.

**The catalog** (SQLAlchemy; SQLite by default) is each partition's BLOB chain,
ordered by offset: ``floodgate_blobs(topic, partition, start_offset, end_offset,
path, bytes, tuples, created, sha256, first_offset, last_offset)``. A BLOB is
registered only after it is written, renamed into place and verified, so a
registered row always names a whole file.

**Integrity** (issue 26: no silent BLOB corruption). The catalog row is the BLOB's
seal (:class:`BlobSeal`): the SHA-256 of the whole file, its size, its record count
and its first and last record offsets, computed while the file is written. Every
read of a registered BLOB (:func:`read_registered`) checks the size and the SHA-256
before it yields any record, then that the offsets it parses are strictly
increasing, inside the registered ``[start_offset, end_offset)`` and begin and end
at the recorded first and last offsets, and that the count is the recorded one. A
mismatch is a :class:`~pipeline.errors.BlobIntegrityError` (a ``DataLossError``)
naming the BLOB, the topic, the partition and the offsets. Strictly increasing
rather than contiguous: transaction markers and aborted records take offsets
without being records, so a committed range has gaps. A per-file digest in the
catalog, not the Avro codecs' block checksums: it also catches a truncation at a
block boundary and blocks swapped or dropped, which per-block checksums do not.

Rows registered before checksums existed (``sha256`` NULL) are still read, with the
size, offset-range and count checks only (logged once per BLOB, ``FG-BLOB-001``);
the sweeper seals them when it starts (:func:`seal_blob`), after checking them the
same way.
"""

from __future__ import annotations

import array
import contextlib
import functools
import gc
import hashlib
import io
import itertools
import logging
import operator
import os
import sys
import threading
import time
from collections.abc import Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

import fastavro
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
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

from pipeline.database import (
    advisory_lock_key,
    create_database_engine,
    create_tables,
    private_file,
)
from pipeline.errors import BlobIntegrityError, DataLossError

log = logging.getLogger(__name__)

#: Records per BLOB batch when the records come one by one (:func:`write_blob` of an
#: iterable of records): a broker fetch gives its own batches (up to 10 000).
BLOB_BATCH_RECORDS = 10_000

#: The Avro schema of one BLOB batch: a run of consecutive Kafka records, column by
#: column. Integers are packed little-endian (``offsets`` and ``timestamps`` int64,
#: ``*_lengths`` int32 with -1 for a null key or value), one byte of timestamp type
#: per record, keys and values concatenated. Headers are sparse: one row per header,
#: naming its record by index in the batch. Columns rather than one Avro record per
#: Kafka record: the Python work per record is then a few method calls on write and
#: a slice on read (sweep 0.35x -> 0.98x a plain consume, unsweep 0.73x -> 2.5x a
#: broker read: bench/README.md, the sweeper).
BLOB_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "SweptBatch",
    "namespace": "floodgate.sweep",
    "fields": [
        {"name": "offsets", "type": "bytes"},
        {"name": "timestamps", "type": "bytes"},
        {"name": "timestamp_types", "type": "bytes"},
        {"name": "key_lengths", "type": "bytes"},
        {"name": "keys", "type": "bytes"},
        {"name": "value_lengths", "type": "bytes"},
        {"name": "values", "type": "bytes"},
        {
            "name": "headers",
            "type": {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": "Header",
                    "fields": [
                        {"name": "record", "type": "int"},
                        {"name": "key", "type": "string"},
                        {"name": "value", "type": ["null", "bytes"], "default": None},
                    ],
                },
            },
            "default": [],
        },
    ],
}
PARSED_BLOB_SCHEMA = fastavro.parse_schema(BLOB_SCHEMA)
_LITTLE = sys.byteorder == "little"


class SweptRecord:
    """A Kafka record read back from a BLOB, with the accessors of a
    ``confluent_kafka.Message`` that the data path uses (``topic()``, ``partition()``,
    ``offset()``, ``timestamp()``, ``key()``, ``value()``, ``headers()``, ``error()``),
    so a swept tuple is decoded exactly as one read from the broker."""

    __slots__ = (
        "_headers",
        "_key",
        "_offset",
        "_partition",
        "_timestamp",
        "_timestamp_type",
        "_topic",
        "_value",
    )

    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        timestamp_type: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes | None]] | None,
    ) -> None:
        # The timestamp as two ints, not a tuple: one tracked object less per record,
        # and the cyclic GC's passes over those made reading back 2x slower.
        self._topic = topic
        self._partition = partition
        self._offset = offset
        self._timestamp_type = timestamp_type
        self._timestamp = timestamp
        self._key = key
        self._value = value
        self._headers = headers

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def timestamp(self) -> tuple[int, int]:
        """``(timestamp type, epoch milliseconds)`` as ``Message.timestamp()``."""
        return self._timestamp_type, self._timestamp

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def headers(self) -> list[tuple[str, bytes | None]] | None:
        return self._headers

    def error(self) -> None:
        return None

    def __repr__(self) -> str:
        return f"SweptRecord({self._topic}[{self._partition}]@{self._offset})"


def _packed(typecode: str, values: Iterable[int]) -> bytes:
    packed = array.array(typecode, values)
    if not _LITTLE:
        packed.byteswap()
    return packed.tobytes()


def _unpacked(typecode: str, data: bytes) -> array.array[int]:
    unpacked = array.array(typecode)
    unpacked.frombytes(data)
    if not _LITTLE:
        unpacked.byteswap()
    return unpacked


def _column(items: list[bytes | None]) -> tuple[bytes, bytes]:
    """``(int32 lengths with -1 for None, concatenated bytes)`` of keys or values."""
    if None not in items:
        return _packed("i", map(len, items)), b"".join(items)  # type: ignore[arg-type]
    return (
        _packed("i", [-1 if item is None else len(item) for item in items]),
        b"".join([item for item in items if item is not None]),
    )


def _split(lengths: array.array[int], data: bytes) -> list[bytes | None]:
    """The inverse of :func:`_column`."""
    n = len(lengths)
    if not data and (n == 0 or max(lengths) < 0):
        return [None] * n
    if min(lengths, default=0) >= 0:
        ends = list(itertools.accumulate(lengths, initial=0))
        if ends[-1] != len(data):
            raise ValueError(f"a BLOB column holds {len(data)} bytes, its lengths {ends[-1]}")
        return [data[a:b] for a, b in itertools.pairwise(ends)]
    out: list[bytes | None] = []
    at = 0
    for length in lengths:
        if length < 0:
            out.append(None)
        else:
            out.append(data[at : at + length])
            at += length
    if at != len(data):
        raise ValueError(f"a BLOB column holds {len(data)} bytes, its lengths {at}")
    return out


def _batch_row(batch: Sequence[Any]) -> dict[str, Any]:
    """One Avro :data:`BLOB_SCHEMA` record of a run of Kafka records."""
    # Two passes over timestamp() rather than a list of its tuples: a list of 10 000
    # live tuples sets off the cyclic GC's passes, which cost more than the calls.
    kinds = bytes([m.timestamp()[0] for m in batch])
    timestamps = [m.timestamp()[1] for m in batch]
    key_lengths, keys = _column([m.key() for m in batch])
    value_lengths, values = _column([m.value() for m in batch])
    headers = [m.headers() for m in batch]
    return {
        "offsets": _packed("q", [m.offset() for m in batch]),
        "timestamps": _packed("q", timestamps),
        "timestamp_types": kinds,
        "key_lengths": key_lengths,
        "keys": keys,
        "value_lengths": value_lengths,
        "values": values,
        "headers": (
            [
                {"record": i, "key": k, "value": v}
                for i, record_headers in enumerate(headers)
                if record_headers
                for k, v in record_headers
            ]
            if any(headers)
            else []
        ),
    }


def _batch_records(row: dict[str, Any], topic: str, partition: int) -> list[SweptRecord]:
    """The records of one BLOB batch (the inverse of :func:`_batch_row`)."""
    offsets = _unpacked("q", row["offsets"])
    timestamps = _unpacked("q", row["timestamps"])
    keys = _split(_unpacked("i", row["key_lengths"]), row["keys"])
    values = _split(_unpacked("i", row["value_lengths"]), row["values"])
    n = len(offsets)
    headers: list[list[tuple[str, bytes | None]] | None] = [None] * n
    for header in row["headers"]:
        at = header["record"]
        held = headers[at]
        if held is None:
            held = headers[at] = []
        held.append((header["key"], header["value"]))
    if not (len(timestamps) == len(row["timestamp_types"]) == len(keys) == len(values) == n):
        raise ValueError("the columns of a BLOB batch differ in length")
    with _gc_paused():
        return list(
            map(
                SweptRecord,
                itertools.repeat(topic, n),
                itertools.repeat(partition, n),
                offsets,
                row["timestamp_types"],
                timestamps,
                keys,
                values,
                headers,
            )
        )


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """No cyclic GC pass while a batch of records is built.

    A batch is up to 10 000 new objects that stay alive together and hold no
    cycles; every 700 of them would set off a pass over the young objects, which
    made reading a BLOB back 1.9x slower (bench/README.md, the sweeper). The
    collector is enabled again as it was found, and the next allocation lets it
    catch up.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@dataclass(frozen=True)
class BlobSeal:
    """What a BLOB must be, recorded in the catalog when it is registered and checked
    on every read (issue 26: no silent BLOB corruption).

    Attributes:
        sha256: SHA-256 of the whole file, 64 lowercase hex digits.
        bytes: the file's size in bytes.
        tuples: how many Kafka records it holds.
        first_offset, last_offset: the offsets of its first and last record
            (``None``: it holds none; a range of only transaction markers).
    """

    sha256: str
    bytes: int
    tuples: int
    first_offset: int | None
    last_offset: int | None


class _HashingFile(io.RawIOBase):
    """A write-only file that passes every byte to ``out`` and to a SHA-256."""

    def __init__(self, out: Any) -> None:
        super().__init__()
        self.out = out
        self.digest = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self.digest.update(data)
        self.size += len(data)
        self.out.write(data)
        return len(data)

    def flush(self) -> None:
        self.out.flush()


def write_sealed_blob(path: Path, batches: Iterable[Sequence[Any]]) -> BlobSeal:
    """Write runs of consecutive Kafka records (``confluent_kafka.Message`` or
    :class:`SweptRecord`, as a broker fetch returns them: lists, in offset order) to an
    Avro container file at ``path``, one :data:`BLOB_SCHEMA` record per run, flushed
    and fsynced; hash the bytes as they are written.

    Returns:
        The BLOB's :class:`BlobSeal`, for :meth:`SweepCatalog.register`.
    """
    count = 0
    first: int | None = None
    last: int | None = None

    def rows() -> Iterator[dict[str, Any]]:
        nonlocal count, first, last
        for batch in batches:
            if batch:
                count += len(batch)
                if first is None:
                    first = batch[0].offset()
                last = batch[-1].offset()
                yield _batch_row(batch)

    # Tuples are the producers' data: the BLOB is its owner's alone (issue 26).
    with os.fdopen(private_file(path, flags=os.O_WRONLY | os.O_TRUNC), "wb") as out:
        hashing = _HashingFile(out)
        fastavro.writer(
            cast(IO[bytes], hashing),
            PARSED_BLOB_SCHEMA,
            rows(),
            codec="null",
            sync_interval=1 << 20,
        )
        out.flush()
        os.fsync(out.fileno())
    return BlobSeal(hashing.digest.hexdigest(), hashing.size, count, first, last)


def write_blob(path: Path, batches: Iterable[Sequence[Any]]) -> int:
    """:func:`write_sealed_blob`, returning how many Kafka records were written."""
    return write_sealed_blob(path, batches).tuples


def batched(records: Iterable[Any], size: int = BLOB_BATCH_RECORDS) -> Iterator[list[Any]]:
    """Records one by one -> lists of up to ``size`` (for :func:`write_blob`)."""
    it = iter(records)
    while batch := list(itertools.islice(it, size)):
        yield batch


def _rows(src: Any) -> Iterator[dict[str, Any]]:
    """The Avro records of an open BLOB file.

    Raises:
        ValueError: the file is not an Avro container of :data:`BLOB_SCHEMA` records.
    """
    reader = fastavro.reader(src)
    name = reader.writer_schema.get("name") if isinstance(reader.writer_schema, dict) else None
    if name != "floodgate.sweep.SweptBatch":
        raise ValueError(f"an Avro file of {name!r} records, not floodgate.sweep.SweptBatch")
    for row in reader:
        assert isinstance(row, dict)
        yield row


#: What a damaged BLOB file makes the Avro reader or the column decoding raise.
_UNREADABLE = (OSError, EOFError, ValueError, KeyError, TypeError, StopIteration)


def read_blob_batches(path: str | Path, topic: str, partition: int) -> Iterator[list[SweptRecord]]:
    """The records of a BLOB file, batch by batch, as written: no catalog, so no
    integrity check beyond the file's own structure (readers of registered BLOBs use
    :func:`read_registered`).

    Raises:
        DataLossError: the file is missing, truncated or not a BLOB.
    """
    try:
        with open(path, "rb") as src:
            for row in _rows(src):
                yield _batch_records(row, topic, partition)
    except _UNREADABLE as exc:
        raise DataLossError(
            f"BLOB {path} cannot be read: {exc.__class__.__name__}: {exc}",
            topic=topic,
            partition=partition,
            start=-1,
            end=-1,
            available_from=None,
        ) from exc


def read_blob(path: str | Path, topic: str, partition: int) -> Iterator[SweptRecord]:
    """The records of a BLOB file one by one, as written (see :func:`read_blob_batches`).

    Raises:
        DataLossError: the file is missing, truncated or not a BLOB.
    """
    for batch in read_blob_batches(path, topic, partition):
        yield from batch


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

    Also a :class:`pipeline.queues.SweptCounter`: :meth:`swept` is what queue
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


class _Failed(Iterator[list[SweptRecord]]):
    """An iterator of batches that, once it raised a :class:`DataLossError`, raises it
    again on every later ``next``: a generator (or ``itertools.chain``) that raised is
    merely exhausted, and a caller that went on would take the damaged BLOB's range as
    read and commit past it."""

    def __init__(self, batches: Iterator[list[SweptRecord]]) -> None:
        self._batches = batches
        self._error: DataLossError | None = None

    def __next__(self) -> list[SweptRecord]:
        if self._error is not None:
            raise self._error
        try:
            return next(self._batches)
        except DataLossError as exc:
            self._error = exc
            raise


class _Records(Iterator[SweptRecord]):
    """:func:`swept_records`."""

    def __init__(self, batches: Iterator[list[SweptRecord]]) -> None:
        self._batches = _Failed(batches) if not isinstance(batches, _Failed) else batches
        self._batch: Iterator[SweptRecord] = iter(())

    def __next__(self) -> SweptRecord:
        while True:
            record = next(self._batch, None)
            if record is not None:
                return record
            self._batch = iter(next(self._batches))  # StopIteration: the end


def swept_records(batches: Iterator[list[SweptRecord]]) -> Iterator[SweptRecord]:
    """The records of :meth:`BlobReader.read`'s batches one by one; after a
    :class:`DataLossError` every later ``next`` raises it again, so a reader that
    catches it and reads on never skips the damaged range."""
    return _Records(batches)


class BlobReader:
    """Reads swept offsets back in Kafka order (unsweep), for the Spark source and
    ``StreamOutput.get``.

    Args:
        catalog: the sweep catalog.
    """

    def __init__(self, catalog: SweepCatalog) -> None:
        self.catalog = catalog

    def read(
        self, topic: str, partition: int, start: int, end: int
    ) -> tuple[Iterator[list[SweptRecord]], int]:
        """The records of ``[start, end)`` held in BLOBs, from ``start`` on while the
        chain is contiguous (the files are read lazily, one at a time).

        Returns:
            ``(batches of records in offset order, the next offset not covered)``: the
            caller reads from the broker from there.

        Raises:
            DataLossError: ``start`` is in no BLOB (and, the caller found, not in the
                broker either), naming topic, partition and offsets.
            BlobIntegrityError: (a ``DataLossError``, raised when the BLOB's records
                are read) a BLOB file is missing or is not what its catalog row says
                (:func:`read_registered`); the batches stop before it.
        """
        chain: list[Blob] = []
        position = start
        for blob in self.catalog.covering(topic, partition, start, end):
            if blob.start_offset > position:
                break  # a gap: the broker holds the rest, or nothing does
            chain.append(blob)
            position = min(end, blob.end_offset)
            if position >= end:
                break
        if not chain:
            raise DataLossError(
                f"offset {start} is neither in the broker nor in any BLOB",
                topic=topic,
                partition=partition,
                start=start,
                end=end,
                available_from=None,
            )

        def batches() -> Iterator[list[SweptRecord]]:
            for blob in chain:
                for batch in read_registered(blob):
                    if batch[-1].offset() < start:
                        continue
                    if batch[0].offset() >= end:
                        return
                    if batch[0].offset() < start or batch[-1].offset() >= end:
                        batch = [r for r in batch if start <= r.offset() < end]
                    yield batch

        return _Failed(batches()), position


#: What a consumer reading ranges through :func:`read_partition` needs: an offset the
#: broker no longer holds is an error (read from BLOBs, or a ``DataLossError``), never
#: a reset; partition ends are reported. And librdkafka prefetches up to 100 000
#: messages by default: with the embedded broker that costs it 2.8 s of CPU per 336 776
#: tuples against 0.2 s at 10 000 (bench/README.md), and a range is read to a known end.
RANGE_CONSUMER: dict[str, Any] = {
    "auto.offset.reset": "error",
    "enable.partition.eof": True,
    "queued.min.messages": 10_000,
}


def read_partition(
    consumer: Consumer,
    topic: str,
    partition: int,
    start: int,
    end: int,
    *,
    blobs: BlobReader | None = None,
    batch_records: int = BLOB_BATCH_RECORDS,
    stall_timeout_s: float = 60.0,
) -> Generator[list[Any], None, None]:
    """The records of ``[start, end)`` of a partition in offset order, in batches as
    the broker fetches them: from the broker while it holds them, and from the BLOB
    chain where the sweeper moved them (unsweep, when ``blobs`` is given). The Spark
    source, the reception API and the sweeper all read a range through this.

    Args:
        consumer: a consumer with :data:`RANGE_CONSUMER`'s settings, assigned by
            this function; ``isolation.level`` is the caller's.
        topic, partition, start, end: the range.
        blobs: the BLOB reader; ``None`` for a reader of the broker only (the sweeper).
        batch_records: most records a broker fetch returns at once.
        stall_timeout_s: how long reads may make no progress.

    Yields:
        Lists of ``confluent_kafka.Message`` / :class:`SweptRecord`. Transaction
        markers and aborted records take offsets and are not records, so the range
        may hold fewer records than ``end - start``.

    Raises:
        DataLossError: an offset of the range is held neither by the broker nor by a
            BLOB (``available_from`` is the broker's log start).
        KafkaException: another broker error, or no progress for ``stall_timeout_s``
            (``_TIMED_OUT``).
    """
    tp = TopicPartition(topic, partition)
    next_offset = start
    if blobs is not None:
        low, _ = consumer.get_watermark_offsets(tp, timeout=10)
        if next_offset < low:
            swept, next_offset = read_swept(blobs, topic, partition, next_offset, end, low)
            yield from swept
    if next_offset >= end:
        return
    # Unassigned when done: an assigned partition is fetched all along, and a broker
    # that answers a fetch at the log end at once (noida-db ignores fetch.wait.max.ms)
    # turns a long-lived reader's idle assignment into a busy loop of both.
    try:
        consumer.assign([TopicPartition(topic, partition, next_offset)])
        last_progress = time.monotonic()
        while next_offset < end:
            with _gc_paused():  # up to batch_records new Message objects, no cycles
                messages = consumer.consume(
                    num_messages=min(batch_records, end - next_offset), timeout=1.0
                )
            if not messages:
                position = consumer.position([tp])[0].offset
                if position >= end:  # the tail was transaction markers
                    return
                if time.monotonic() - last_progress > stall_timeout_s:
                    raise KafkaException(
                        KafkaError(
                            KafkaError._TIMED_OUT,
                            f"no progress reading {topic}[{partition}] at offset {next_offset} "
                            f"(range ends at {end}) for {stall_timeout_s:.0f} s",
                        )
                    )
                continue
            last_progress = time.monotonic()
            truncated: KafkaError | None = None
            at_end = False
            if any(m.error() is not None for m in messages):
                messages, truncated, at_end = _sift(messages, end)
            kept = _before(messages, end)
            if kept:
                yield kept
                next_offset = kept[-1].offset() + 1
            if at_end or len(kept) < len(messages):
                return
            if truncated is None:
                continue
            low, _ = consumer.get_watermark_offsets(tp, timeout=10)
            if blobs is None or next_offset >= low:
                raise DataLossError(
                    f"the broker no longer holds offset {next_offset} ({truncated.str()})",
                    topic=topic,
                    partition=partition,
                    start=next_offset,
                    end=end,
                    available_from=low,
                )
            # Swept while this range was reading: BLOBs hold the rest up to low.
            swept, next_offset = read_swept(blobs, topic, partition, next_offset, end, low)
            yield from swept
            if next_offset >= end:
                return
            consumer.assign([TopicPartition(topic, partition, next_offset)])
    finally:
        with contextlib.suppress(RuntimeError, KafkaException):  # closed meanwhile: nothing to do
            consumer.unassign()


def _sift(messages: list[Any], end: int) -> tuple[list[Any], KafkaError | None, bool]:
    """A fetched batch with errors in it: ``(the records before the first stop, the
    out-of-range error that stopped it, whether the partition's end past ``end`` did)``.

    Raises:
        KafkaException: any other error.
    """
    records: list[Any] = []
    for message in messages:
        error = message.error()
        if error is None:
            records.append(message)
        elif error.code() == KafkaError._PARTITION_EOF:
            if (message.offset() or 0) >= end:
                return records, None, True
        elif error.code() in (KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET):
            return records, error, False
        else:
            raise KafkaException(error)
    return records, None, False


def _before(messages: list[Any], end: int) -> list[Any]:
    """The messages of an offset-ordered list before ``end``."""
    if not messages or messages[-1].offset() < end:
        return messages
    return [m for m in messages if m.offset() < end]


def read_swept(
    blobs: BlobReader, topic: str, partition: int, start: int, end: int, low: int
) -> tuple[Iterator[list[SweptRecord]], int]:
    """Swept records from ``start`` up to the broker's log start ``low`` (or ``end``),
    batch by batch, and the offset after them (where the broker takes over).

    Raises:
        DataLossError: ``start`` is held neither by the broker (it is below ``low``)
            nor by a BLOB; names topic, partition, offsets and the log start.
    """
    try:
        return blobs.read(topic, partition, start, min(end, low))
    except DataLossError as exc:
        raise DataLossError(
            f"offset {start} is neither in the broker (log start {low}) nor in any BLOB "
            "of the sweep catalog",
            topic=topic,
            partition=partition,
            start=start,
            end=end,
            available_from=low,
        ) from exc


def blob_name(topic: str, partition: int, start: int, end: int) -> str:
    """The file name of a BLOB (readable, unique per range)."""
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in topic)
    return f"{safe}-{partition}-{start:020d}-{end:020d}.avro"


__all__ = [
    "BLOB_SCHEMA",
    "DAMAGE_REASONS",
    "RANGE_CONSUMER",
    "Blob",
    "BlobReader",
    "BlobSeal",
    "SweepCatalog",
    "SweptRecord",
    "batched",
    "blob_name",
    "catalog_for",
    "check_blob",
    "read_blob",
    "read_blob_batches",
    "read_partition",
    "read_registered",
    "read_swept",
    "seal_blob",
    "swept_records",
    "write_blob",
    "write_sealed_blob",
]

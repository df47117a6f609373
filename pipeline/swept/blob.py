"""The swept BLOB file format: Avro container files of column batches, sealed."""

from __future__ import annotations

import array
import contextlib
import gc
import hashlib
import io
import itertools
import json
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

import fastavro

from pipeline.errors import DataLossError
from pipeline.resources import schema_dir
from pipeline.state.files import private_file

#: Kafka records per BLOB batch when the records come one by one (:func:`write_blob` of
#: an iterable of records): a broker fetch gives its own batches (up to 10 000). A BLOB
#: keeps each Kafka record whole (offset, timestamp type, key, headers), so *record*
#: here is Kafka's (docs/glossary.md).
BLOB_BATCH_RECORDS = 10_000


#: The Avro schema of one BLOB batch (``schemas/formats/swept_batch.avsc``, which the
#: Spark source's jar packs and reads too): a run of consecutive Kafka records, column by
#: column; the file's ``doc`` says how each column is packed. Columns rather than one
#: Avro record per Kafka record: the Python work per record is then a few method calls
#: on write and a slice on read (sweep 0.35x -> 0.98x a plain consume, unsweep 0.73x ->
#: 2.5x a broker read: bench/README.md, the sweeper).
BLOB_SCHEMA: dict[str, Any] = json.loads(
    (schema_dir() / "formats" / "swept_batch.avsc").read_text(encoding="utf-8")
)


PARSED_BLOB_SCHEMA = fastavro.parse_schema(BLOB_SCHEMA)


_LITTLE = sys.byteorder == "little"


class SweptRecord:
    """A Kafka record read back from a BLOB, with the accessors of a
    ``confluent_kafka.Message`` that the data path uses (``topic()``, ``partition()``,
    ``offset()``, ``timestamp()``, ``key()``, ``value()``, ``headers()``, ``error()``),
    so a swept tuple is decoded exactly as one read from the broker.

    A *record*, not a tuple: it is the Kafka record that carried the tuple, with the
    offset, timestamp type and headers the broker gave it (docs/glossary.md)."""

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


def unpack_column(typecode: str, data: bytes) -> array.array[int]:
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


def _batch_record(batch: Sequence[Any]) -> dict[str, Any]:
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


def records_of_batch(batch_record: dict[str, Any], topic: str, partition: int) -> list[SweptRecord]:
    """The Kafka records of one BLOB batch, from its Avro :data:`BLOB_SCHEMA` record
    (the inverse of :func:`_batch_record`)."""
    offsets = unpack_column("q", batch_record["offsets"])
    timestamps = unpack_column("q", batch_record["timestamps"])
    keys = _split(unpack_column("i", batch_record["key_lengths"]), batch_record["keys"])
    values = _split(unpack_column("i", batch_record["value_lengths"]), batch_record["values"])
    n = len(offsets)
    headers: list[list[tuple[str, bytes | None]] | None] = [None] * n
    for header in batch_record["headers"]:
        at = header["record"]
        held = headers[at]
        if held is None:
            held = headers[at] = []
        held.append((header["key"], header["value"]))
    if not (
        len(timestamps) == len(batch_record["timestamp_types"]) == len(keys) == len(values) == n
    ):
        raise ValueError("the columns of a BLOB batch differ in length")
    with gc_paused():
        return list(
            map(
                SweptRecord,
                itertools.repeat(topic, n),
                itertools.repeat(partition, n),
                offsets,
                batch_record["timestamp_types"],
                timestamps,
                keys,
                values,
                headers,
            )
        )


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
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
    on every read (no silent BLOB corruption).

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


def write_sealed(out: Any, batches: Iterable[Sequence[Any]]) -> BlobSeal:
    """Write runs of consecutive Kafka records (``confluent_kafka.Message`` or
    :class:`SweptRecord`, as a broker fetch returns them: lists, in offset order) to the
    binary stream ``out`` as an Avro container file, one :data:`BLOB_SCHEMA` record per
    run, hashing the bytes as they are written. Neither flushed to disk nor closed
    here: the store does that (:func:`write_sealed_blob` for a file,
    :class:`pipeline.swept.store.ObjectBlobStore` for an object).

    Returns:
        The BLOB's :class:`BlobSeal`, for :meth:`SweepCatalog.register`.

    Raises:
        OSError: ``out`` refused a write.
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
                yield _batch_record(batch)

    hashing = _HashingFile(out)
    fastavro.writer(
        cast(IO[bytes], hashing),
        PARSED_BLOB_SCHEMA,
        rows(),
        codec="null",
        sync_interval=1 << 20,
    )
    return BlobSeal(hashing.digest.hexdigest(), hashing.size, count, first, last)


def write_sealed_blob(path: Path, batches: Iterable[Sequence[Any]]) -> BlobSeal:
    """:func:`write_sealed` into a new file at ``path`` of our user's alone, flushed
    and fsynced. Written under a temporary name, a BLOB takes its own with
    :func:`publish_blob`.

    Returns:
        The BLOB's :class:`BlobSeal`, for :meth:`SweepCatalog.register`.

    Raises:
        OSError: the file cannot be created or written (a full disk).
    """
    # Tuples are the producers' data: the BLOB is its owner's alone.
    with os.fdopen(private_file(path, flags=os.O_WRONLY | os.O_TRUNC), "wb") as out:
        seal = write_sealed(out, batches)
        out.flush()
        os.fsync(out.fileno())
    return seal


def publish_blob(temporary: Path, final: Path) -> None:
    """Give a BLOB that :func:`write_sealed_blob` wrote (and fsynced) at ``temporary``
    its ``final`` name, durably: rename it over ``final``, then fsync their folder. A
    rename is in the folder's data, not the file's: until the folder is synced, a power
    loss may bring back the folder without it (POSIX ``rename``; ext4 and XFS order
    nothing here). Everything that makes a BLOB durable is in this module: the file's
    fsync in :func:`write_sealed_blob`, the rename and the folder's fsync here.

    Raises:
        OSError: the rename or the fsync failed (``temporary`` may be left; the
            sweeper's journal names it for removal).
    """
    os.replace(temporary, final)
    folder = os.open(final.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def write_blob(path: Path, batches: Iterable[Sequence[Any]]) -> int:
    """:func:`write_sealed_blob`, returning how many Kafka records were written."""
    return write_sealed_blob(path, batches).tuples


def batched(records: Iterable[Any], size: int = BLOB_BATCH_RECORDS) -> Iterator[list[Any]]:
    """Records one by one -> lists of up to ``size`` (for :func:`write_blob`)."""
    it = iter(records)
    while batch := list(itertools.islice(it, size)):
        yield batch


def blob_batch_records(src: Any) -> Iterator[dict[str, Any]]:
    """The Avro records of an open BLOB file, one per batch (:data:`BLOB_SCHEMA`).

    Raises:
        ValueError: the file is not an Avro container of :data:`BLOB_SCHEMA` records.
    """
    reader = fastavro.reader(src)
    name = reader.writer_schema.get("name") if isinstance(reader.writer_schema, dict) else None
    if name != "floodgate.sweep.SweptBatch":
        raise ValueError(f"an Avro file of {name!r} records, not floodgate.sweep.SweptBatch")
    for batch_record in reader:
        assert isinstance(batch_record, dict)
        yield batch_record


#: What a damaged BLOB file makes the Avro reader or the column decoding raise.
UNREADABLE = (OSError, EOFError, ValueError, KeyError, TypeError, StopIteration)


def read_blob_batches(path: str | Path, topic: str, partition: int) -> Iterator[list[SweptRecord]]:
    """The records of a BLOB file, batch by batch, as written: no catalog, so no
    integrity check beyond the file's own structure (readers of registered BLOBs use
    :func:`read_registered`).

    Raises:
        DataLossError: the file is missing, truncated or not a BLOB.
    """
    try:
        with open(path, "rb") as src:
            for batch_record in blob_batch_records(src):
                yield records_of_batch(batch_record, topic, partition)
    except UNREADABLE as exc:
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


def blob_name(topic: str, partition: int, start: int, end: int) -> str:
    """The file name of a BLOB (readable, unique per range)."""
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in topic)
    return f"{safe}-{partition}-{start:020d}-{end:020d}.avro"

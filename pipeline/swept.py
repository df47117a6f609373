"""Swept tuples: the BLOB format and the sweep catalog (DESIGN.md section 4.3).

The sweeper (``sweeper/``) moves the backlog of a slow-but-serviced queue out of the
broker into BLOBs; the data path reads them back (unsweep). Both sides need this
module, so it lives in ``pipeline/`` (which never imports ``sweeper/``).

**A BLOB** is one Avro object container file (fastavro) holding a contiguous offset
range ``[a, b)`` of one topic partition, one Avro record per Kafka record: offset,
timestamp and its type, key, value and headers, byte for byte (seed
001_ba86cf144862657d.txt: "messages are moved from memory and stored in a binary
large object"). Kafka transaction markers take offsets without being records, so a
BLOB may hold fewer records than ``b - a``; the catalog keeps both.

**The catalog** (SQLAlchemy; SQLite by default) is each partition's BLOB chain,
ordered by offset: ``floodgate_blobs(topic, partition, start_offset, end_offset,
path, bytes, tuples, created)``. A BLOB is registered only after it is written,
renamed into place and verified, so a registered row always names a whole file.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fastavro
from sqlalchemy import (
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
    select,
)
from sqlalchemy.engine import Engine

from pipeline.database import create_database_engine, create_tables
from pipeline.errors import DataLossError

#: The Avro schema of one swept Kafka record.
BLOB_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "SweptRecord",
    "namespace": "floodgate.sweep",
    "fields": [
        {"name": "offset", "type": "long"},
        {"name": "timestamp", "type": "long"},
        {"name": "timestamp_type", "type": "int"},
        {"name": "key", "type": ["null", "bytes"], "default": None},
        {"name": "value", "type": ["null", "bytes"], "default": None},
        {
            "name": "headers",
            "type": {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": "Header",
                    "fields": [
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


class SweptRecord:
    """A Kafka record read back from a BLOB, with the accessors of a
    ``confluent_kafka.Message`` that the data path uses (``topic()``, ``partition()``,
    ``offset()``, ``timestamp()``, ``key()``, ``value()``, ``headers()``, ``error()``),
    so a swept tuple is decoded exactly as one read from the broker."""

    __slots__ = ("_headers", "_key", "_offset", "_partition", "_timestamp", "_topic", "_value")

    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        timestamp: tuple[int, int],
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes | None]] | None,
    ) -> None:
        self._topic = topic
        self._partition = partition
        self._offset = offset
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
        return self._timestamp

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


def write_blob(path: Path, records: Iterable[Any]) -> int:
    """Write Kafka records (``confluent_kafka.Message`` or :class:`SweptRecord`) to an
    Avro container file at ``path``, flushed and fsynced; how many were written."""
    count = 0

    def rows() -> Iterator[dict[str, Any]]:
        nonlocal count
        for message in records:
            ts_type, ts = message.timestamp()
            count += 1
            yield {
                "offset": message.offset(),
                "timestamp": ts,
                "timestamp_type": ts_type,
                "key": message.key(),
                "value": message.value(),
                "headers": [{"key": k, "value": v} for k, v in (message.headers() or [])],
            }

    with open(path, "wb") as out:
        fastavro.writer(out, PARSED_BLOB_SCHEMA, rows(), codec="null", sync_interval=1 << 20)
        out.flush()
        os.fsync(out.fileno())
    return count


def read_blob(path: str | Path, topic: str, partition: int) -> Iterator[SweptRecord]:
    """The records of a BLOB, in offset order.

    Raises:
        DataLossError: the file is missing, truncated or not a BLOB.
    """
    try:
        with open(path, "rb") as src:
            for row in fastavro.reader(src):
                assert isinstance(row, dict)
                headers = row["headers"]
                yield SweptRecord(
                    topic,
                    partition,
                    row["offset"],
                    (row["timestamp_type"], row["timestamp"]),
                    row["key"],
                    row["value"],
                    [(h["key"], h["value"]) for h in headers] if headers else None,
                )
    except (OSError, EOFError, ValueError, StopIteration) as exc:
        raise DataLossError(
            f"BLOB {path} cannot be read: {exc.__class__.__name__}: {exc}",
            topic=topic,
            partition=partition,
            start=-1,
            end=-1,
            available_from=None,
        ) from exc


metadata = MetaData()

blobs = Table(
    "floodgate_blobs",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("topic", String, nullable=False),
    Column("partition", Integer, nullable=False),
    Column("start_offset", Integer, nullable=False),
    Column("end_offset", Integer, nullable=False),
    Column("path", String, nullable=False),
    Column("bytes", Integer, nullable=False),
    Column("tuples", Integer, nullable=False),
    Column("created", Float, nullable=False),
    Index("floodgate_blobs_chain", "topic", "partition", "start_offset", unique=True),
)


@dataclass(frozen=True)
class Blob:
    """One registered BLOB: ``[start_offset, end_offset)`` of a topic partition."""

    id: int
    topic: str
    partition: int
    start_offset: int
    end_offset: int
    path: str
    bytes: int
    tuples: int
    created: float


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
    ) -> Blob:
        """Add a BLOB at the end of its partition's chain.

        Raises:
            ValueError: it overlaps a registered BLOB (the chain stays ordered and
                disjoint).
        """
        with self._lock, self.engine.begin() as conn:
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
                )
            ).inserted_primary_key
            assert key is not None
        return Blob(int(key[0]), topic, partition, start, end, path, size, tuples, now)

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
    ) -> tuple[Iterator[SweptRecord], int]:
        """The records of ``[start, end)`` held in BLOBs, from ``start`` on while the
        chain is contiguous (the files are read lazily, one at a time).

        Returns:
            ``(records in offset order, the next offset not covered)``: the caller
            reads from the broker from there.

        Raises:
            DataLossError: ``start`` is in no BLOB (and, the caller found, not in the
                broker either), naming topic, partition and offsets.
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

        def records() -> Iterator[SweptRecord]:
            for blob in chain:
                for record in read_blob(blob.path, topic, partition):
                    if start <= record.offset() < end:
                        yield record

        return records(), position


def blob_name(topic: str, partition: int, start: int, end: int) -> str:
    """The file name of a BLOB (readable, unique per range)."""
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in topic)
    return f"{safe}-{partition}-{start:020d}-{end:020d}.avro"


__all__ = [
    "BLOB_SCHEMA",
    "Blob",
    "BlobReader",
    "SweepCatalog",
    "SweptRecord",
    "blob_name",
    "catalog_for",
    "read_blob",
    "write_blob",
]

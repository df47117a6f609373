"""The sweep catalog's schema: its three tables, the rows read from them, and the
columns a catalog made by an older Floodgate is given when it is opened.

* ``floodgate_blobs``: the BLOB chains, a row per BLOB (:class:`Blob`), with its seal;
* ``floodgate_blob_store``: one row, the catalog's id and the sweeper's BLOB directory;
* ``floodgate_blob_writes``: the sweeper's journal (:class:`BlobWrite`), a BLOB file
  named before it is written, or while a forgotten BLOB's file is removed.

The Spark source reads the same tables (``io.floodgate.spark.swept.SweepCatalogReader``);
docs/formats.md describes them.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import (
    BigInteger,
    Column,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    select,
)

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
STORE_DIR = (
    select(blob_store.c.blob_dir).where(blob_store.c.id == 1).scalar_subquery().label("blob_dir")
)


#: Columns added to ``floodgate_blobs`` after its first release (the seal): a catalog
#: made before them gets them, NULL, when it is opened
#: (:func:`~pipeline.state.database.add_columns`).
ADDED_COLUMNS: dict[Table, tuple[str, ...]] = {blobs: ("sha256", "first_offset", "last_offset")}


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

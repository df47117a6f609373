"""The swept-BLOB golden files (tests/golden/blobs/, made by tests/golden/make_blobs.py;
docs/formats.md, "Swept BLOBs"): the Python reader gives back exactly the records
expected.json lists, through the catalog catalog.sql makes, seals checked. The JVM
source's test (jvm/src/test/java/io/floodgate/spark/swept/GoldenBlobTest.java) reads
the same files to the same records."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fastavro
import pytest

from pipeline.errors import BlobIntegrityError, DataLossError
from pipeline.swept.blob import BLOB_SCHEMA, SweptRecord
from pipeline.swept.catalog import SweepCatalog
from pipeline.swept.reading import BlobReader, read_swept, swept_records

GOLDEN = Path(__file__).resolve().parents[4] / "tests" / "golden" / "blobs"
EXPECTED = json.loads((GOLDEN / "expected.json").read_text(encoding="utf-8"))
SEALS = json.loads((GOLDEN / "seal.json").read_text())
TOPIC = EXPECTED["topic"]
PARTITION = EXPECTED["partition"]


def make_catalog(folder: Path, blob_dir: Path) -> str:
    """A SQLite catalog from catalog.sql whose BLOB directory is ``blob_dir``; its URL."""
    database = folder / "catalog.db"
    sql = (GOLDEN / "catalog.sql").read_text().replace("@BLOB_DIR@", str(blob_dir))
    db = sqlite3.connect(database)
    db.executescript(sql)
    db.close()
    return f"sqlite:///{database}"


@pytest.fixture
def catalog(tmp_path: Path) -> Iterator[SweepCatalog]:
    made = SweepCatalog(make_catalog(tmp_path, GOLDEN))
    yield made
    made.close()


def _as_golden(record: SweptRecord) -> dict[str, Any]:
    kind, timestamp = record.timestamp()
    key, value = record.key(), record.value()
    return {
        "offset": record.offset(),
        "timestamp_type": kind,
        "timestamp": timestamp,
        "key": None if key is None else key.hex(),
        "value": None if value is None else value.hex(),
        "headers": [[k, None if v is None else v.hex()] for k, v in record.headers() or []],
    }


def _read(catalog: SweepCatalog, start: int, end: int, low: int) -> tuple[list[Any], int]:
    batches, next_offset = read_swept(BlobReader(catalog), TOPIC, PARTITION, start, end, low)
    return [_as_golden(r) for r in swept_records(batches)], next_offset


def test_the_chain_reads_to_the_expected_records(catalog: SweepCatalog) -> None:
    records, next_offset = _read(catalog, 100, 120, low=120)
    assert records == EXPECTED["records"]
    assert next_offset == 120


def test_a_range_inside_the_chain_reads_its_records_only(catalog: SweepCatalog) -> None:
    records, next_offset = _read(catalog, 103, 117, low=200)
    assert records == [r for r in EXPECTED["records"] if 103 <= r["offset"] < 117]
    assert next_offset == 117


def test_the_broker_takes_over_at_its_log_start(catalog: SweepCatalog) -> None:
    records, next_offset = _read(catalog, 105, 130, low=112)
    assert [r["offset"] for r in records] == [105, 106, 108, 109, 110, 111]
    assert next_offset == 112


def test_an_offset_in_no_blob_is_data_loss(catalog: SweepCatalog) -> None:
    with pytest.raises(
        DataLossError, match=r"offset 99 is neither in the broker \(log start 150\)"
    ):
        _read(catalog, 99, 120, low=150)


def test_the_seals_are_the_files_and_the_catalog_rows(catalog: SweepCatalog) -> None:
    rows = {Path(blob.path).name: blob for blob in catalog.chain(TOPIC, PARTITION)}
    assert sorted(rows) == sorted(seal["file"] for seal in SEALS["blobs"])
    for seal in SEALS["blobs"]:
        data = (GOLDEN / seal["file"]).read_bytes()
        assert (hashlib.sha256(data).hexdigest(), len(data)) == (seal["sha256"], seal["bytes"])
        row = rows[seal["file"]]
        assert (row.sha256, row.bytes, row.tuples, row.first_offset, row.last_offset) == (
            seal["sha256"],
            seal["bytes"],
            seal["tuples"],
            seal["first_offset"],
            seal["last_offset"],
        )


def test_the_files_carry_the_blob_schema() -> None:
    canonical = fastavro.schema.to_parsing_canonical_form(BLOB_SCHEMA)
    for seal in SEALS["blobs"]:
        with open(GOLDEN / seal["file"], "rb") as src:
            written = json.loads(fastavro.reader(src).metadata["avro.schema"])
        assert fastavro.schema.to_parsing_canonical_form(written) == canonical


def test_the_catalog_tables_are_the_ones_the_catalog_makes(tmp_path: Path) -> None:
    golden = sqlite3.connect(make_catalog(tmp_path, GOLDEN).removeprefix("sqlite:///"))
    fresh_catalog = SweepCatalog(f"sqlite:///{tmp_path / 'fresh.db'}")
    fresh_catalog.close()
    fresh = sqlite3.connect(tmp_path / "fresh.db")
    for table in ("floodgate_blobs", "floodgate_blob_store"):
        query = f"PRAGMA table_info({table})"
        assert golden.execute(query).fetchall() == fresh.execute(query).fetchall()


def test_a_blob_differing_from_its_seal_is_refused(tmp_path: Path) -> None:
    """One flipped byte of a copy, in a directory of its own: the copy is refused on its
    SHA-256 before a record is given (the JVM test does the same)."""
    blob_dir = tmp_path / "blobs"
    blob_dir.mkdir()
    for seal in SEALS["blobs"]:
        data = bytearray((GOLDEN / seal["file"]).read_bytes())
        if seal["first_offset"] == 110:
            data[-20] ^= 0x01
        (blob_dir / seal["file"]).write_bytes(bytes(data))
    catalog = SweepCatalog(make_catalog(tmp_path, blob_dir))
    try:
        batches, _ = read_swept(BlobReader(catalog), TOPIC, PARTITION, 100, 120, 120)
        records = swept_records(batches)
        assert [next(records).offset() for _ in range(9)][-1] == 109
        with pytest.raises(BlobIntegrityError, match=r"\(sha256\)") as caught:
            next(records)
        assert caught.value.reason == "sha256"
    finally:
        catalog.close()

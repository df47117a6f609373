"""BLOB integrity, no broker: a registered BLOB is read only if
it is what the sweeper wrote -- its size and SHA-256 as the catalog recorded them,
its offsets strictly increasing inside the registered range, from the recorded first
to the recorded last, as many as recorded. Anything else is a ``DataLossError``
naming the BLOB, the partition and the offsets, raised before a record of the BLOB is
yielded (and again on every later read)."""

from __future__ import annotations

import array
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import create_engine, text

from pipeline.errors import BlobIntegrityError, DataLossError
from pipeline.swept.blob import SweptRecord, batched, read_blob, write_sealed_blob
from pipeline.swept.catalog import SweepCatalog
from pipeline.swept.reading import BlobReader, swept_records
from pipeline.swept.registered import read_registered, seal_blob
from pipeline.swept.tables import Blob

TOPIC = "flights"
PARTITION = 2


def _records(start: int, end: int, *, gap_at: int | None = None) -> list[SweptRecord]:
    """Records of ``[start, end)``; the offset ``gap_at`` is a transaction marker."""
    return [
        SweptRecord(
            TOPIC,
            PARTITION,
            offset,
            1,
            1_700_000_000_000 + offset,
            b"key-%05d" % offset,
            b"value-%05d" % offset,
            [("h", b"x")] if offset % 3 == 0 else None,
        )
        for offset in range(start, end)
        if offset != gap_at
    ]


def _fields(r: SweptRecord) -> tuple[object, ...]:
    return (r.offset(), r.timestamp(), r.key(), r.value(), r.headers())


def _register(catalog: SweepCatalog, folder: Path, start: int, end: int) -> Blob:
    path = folder / f"{start}-{end}.avro"
    seal = write_sealed_blob(path, batched(_records(start, end, gap_at=end - 3), size=4))
    return catalog.register(
        TOPIC,
        PARTITION,
        start,
        end,
        path=str(path),
        size=seal.bytes,
        tuples=seal.tuples,
        now=0.0,
        seal=seal,
    )


@pytest.fixture
def catalog(tmp_path: Path) -> Iterator[SweepCatalog]:
    made = SweepCatalog(f"sqlite:///{tmp_path / 'catalog.db'}")
    yield made
    made.close()


def _flip(path: Path, at: int, mask: int = 0x01) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= mask
    path.write_bytes(bytes(data))


def _read(catalog: SweepCatalog, start: int, end: int) -> list[SweptRecord]:
    batches, _ = BlobReader(catalog).read(TOPIC, PARTITION, start, end)
    return [r for b in batches for r in b]


def test_an_unmodified_blob_reads_back_exactly_its_tuples_in_order(
    catalog: SweepCatalog, tmp_path: Path
) -> None:
    blob = _register(catalog, tmp_path, 10, 30)
    assert blob.sha256 is not None and len(blob.sha256) == 64
    assert (blob.first_offset, blob.last_offset, blob.tuples) == (10, 29, 19)
    assert [_fields(r) for r in _read(catalog, 10, 30)] == [
        _fields(r) for r in _records(10, 30, gap_at=27)
    ]
    assert [r.offset() for r in _read(catalog, 12, 28)] == [*range(12, 27)]


def test_a_flipped_byte_in_a_value_is_a_data_loss_error_naming_blob_partition_offsets(
    catalog: SweepCatalog, tmp_path: Path
) -> None:
    blob = _register(catalog, tmp_path, 10, 30)
    path = Path(blob.path)
    _flip(path, path.read_bytes().index(b"value-00017") + 10)  # "7" -> "6"
    # The file's own structure does not show it: an unchecked read gets another tuple.
    assert b"value-00016" in [r.value() for r in read_blob(path, TOPIC, PARTITION)][6:8]
    batches, _ = BlobReader(catalog).read(TOPIC, PARTITION, 10, 30)
    with pytest.raises(DataLossError) as caught:
        next(batches)  # not one record of the BLOB
    error = caught.value
    assert isinstance(error, BlobIntegrityError)
    assert (error.reason, error.blob_id, error.path) == ("sha256", blob.id, blob.path)
    assert (error.topic, error.partition, error.start, error.end) == (TOPIC, PARTITION, 10, 30)
    assert f"BLOB {blob.id} ({blob.path}) fails its integrity check (sha256)" in str(error)
    assert f"topic 'flights' partition {PARTITION}, offsets [10, 30)" in str(error)
    with pytest.raises(BlobIntegrityError):  # and again: the range is never skipped
        next(batches)


def _offsets_at(path: Path, offsets: list[int]) -> int:
    """Where a BLOB batch's packed offsets column starts in the file."""
    packed = array.array("q", offsets)
    if sys.byteorder != "little":
        packed.byteswap()
    return path.read_bytes().index(packed.tobytes())


def test_a_flipped_offset_is_a_data_loss_error_not_a_dropped_tuple(
    catalog: SweepCatalog, tmp_path: Path
) -> None:
    blob = _register(catalog, tmp_path, 10, 30)
    path = Path(blob.path)
    # The last batch holds 26, 28, 29 (27 is a marker): 29 -> 93, past the range's end.
    _flip(path, _offsets_at(path, [26, 28, 29]) + 16, 0x40)
    assert [r.offset() for r in read_blob(path, TOPIC, PARTITION)][-1] == 93
    with pytest.raises(BlobIntegrityError, match=r"\(sha256\)"):
        _read(catalog, 10, 30)


def test_without_a_checksum_the_offsets_and_the_count_are_still_checked(
    tmp_path: Path,
) -> None:
    """A row registered before checksums (no SHA-256): an offset out of the range, out
    of order, or a record too few is still a DataLossError naming the offset."""
    path = tmp_path / "old.avro"
    seal = write_sealed_blob(path, batched(_records(10, 30, gap_at=27), size=4))
    old = Blob(7, TOPIC, PARTITION, 10, 30, str(path), seal.bytes, seal.tuples, 0.0)
    assert [r.offset() for b in read_registered(old) for r in b][-2:] == [28, 29]
    at = _offsets_at(path, [26, 28, 29])
    original = path.read_bytes()

    _flip(path, at + 16, 0x40)  # 29 -> 93: past the end
    with pytest.raises(BlobIntegrityError) as caught:
        list(read_registered(old))
    assert (caught.value.reason, caught.value.offset) == ("offset", 93)
    assert "offset 93 after 28 is not strictly increasing inside [10, 30)" in str(caught.value)

    path.write_bytes(original)
    _flip(path, at + 8, 0x06)  # 28 -> 26: not increasing
    with pytest.raises(BlobIntegrityError, match="offset 26 after 26"):
        list(read_registered(old))

    path.write_bytes(original)
    fewer = Blob(7, TOPIC, PARTITION, 10, 30, str(path), seal.bytes, seal.tuples + 1, 0.0)
    with pytest.raises(BlobIntegrityError, match=r"\(count\): it holds 19 records, the catalog 20"):
        list(read_registered(fewer))


def test_a_truncated_blob_is_a_data_loss_error_before_any_record(
    catalog: SweepCatalog, tmp_path: Path
) -> None:
    blob = _register(catalog, tmp_path, 10, 30)
    path = Path(blob.path)
    path.write_bytes(path.read_bytes()[:-40])
    with pytest.raises(BlobIntegrityError, match=r"\(size\): the file holds \d+ bytes"):
        _read(catalog, 10, 30)
    path.unlink()
    with pytest.raises(BlobIntegrityError, match=r"\(missing\)"):
        _read(catalog, 10, 30)


@pytest.fixture(scope="module")
def sealed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Blob, bytes]:
    """A BLOB of three Avro blocks (a small sync interval is not needed: 3 batches)."""
    path = tmp_path_factory.mktemp("sealed") / "b.avro"
    seal = write_sealed_blob(path, batched(_records(100, 130, gap_at=110), size=8))
    blob = Blob(
        1,
        TOPIC,
        PARTITION,
        100,
        130,
        str(path),
        seal.bytes,
        seal.tuples,
        0.0,
        seal.sha256,
        seal.first_offset,
        seal.last_offset,
    )
    return blob, path.read_bytes()


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(where=st.floats(0, 1, exclude_max=True), mask=st.integers(1, 255))
def test_any_single_byte_flip_anywhere_in_a_blob_is_detected(
    sealed: tuple[Blob, bytes], tmp_path: Path, where: float, mask: int
) -> None:
    blob, original = sealed
    at = int(where * len(original))
    damaged = bytearray(original)
    damaged[at] ^= mask
    path = tmp_path / "damaged.avro"
    path.write_bytes(bytes(damaged))
    copy = Blob(**{**blob.__dict__, "path": str(path)})
    read: list[SweptRecord] = []
    with pytest.raises(BlobIntegrityError):
        for batch in read_registered(copy):
            read.extend(batch)
    assert read == []  # detected before any record was handed out


def test_the_unmodified_sealed_blob_passes(sealed: tuple[Blob, bytes]) -> None:
    blob, _ = sealed
    assert [_fields(r) for b in read_registered(blob) for r in b] == [
        _fields(r) for r in _records(100, 130, gap_at=110)
    ]
    assert seal_blob(blob).sha256 == blob.sha256


def test_swept_records_raise_again_after_a_data_loss_error(
    catalog: SweepCatalog, tmp_path: Path
) -> None:
    blob = _register(catalog, tmp_path, 10, 30)
    _flip(Path(blob.path), 200)
    batches, covered_to = BlobReader(catalog).read(TOPIC, PARTITION, 10, 30)
    records = swept_records(batches)
    for _ in range(3):
        with pytest.raises(BlobIntegrityError):
            next(records)
    assert covered_to == 30


def test_register_seals_a_blob_from_its_file_and_refuses_one_that_disagrees(
    catalog: SweepCatalog, tmp_path: Path
) -> None:
    path = tmp_path / "b.avro"
    seal = write_sealed_blob(path, [_records(0, 10)])
    with pytest.raises(ValueError, match=r"b\.avro cannot be registered: .*\(size\)"):
        catalog.register(TOPIC, 0, 0, 10, path=str(path), size=5, tuples=10, now=0.0)
    blob = catalog.register(TOPIC, 0, 0, 10, path=str(path), size=seal.bytes, tuples=10, now=0.0)
    assert (blob.sha256, blob.first_offset, blob.last_offset) == (seal.sha256, 0, 9)
    assert catalog.chain(TOPIC, 0) == [blob]


def test_a_catalog_made_before_checksums_is_migrated_and_its_blobs_read_then_sealed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    path = tmp_path / "old.avro"
    seal = write_sealed_blob(path, batched(_records(10, 30), size=4))
    engine = create_engine(url)
    with engine.begin() as conn:  # the table as the first release made it
        conn.execute(
            text(
                "CREATE TABLE floodgate_blobs (id INTEGER PRIMARY KEY AUTOINCREMENT, "
                "topic VARCHAR NOT NULL, partition INTEGER NOT NULL, start_offset BIGINT NOT "
                "NULL, end_offset BIGINT NOT NULL, path VARCHAR NOT NULL, bytes BIGINT NOT "
                "NULL, tuples BIGINT NOT NULL, created FLOAT NOT NULL)"
            )
        )
        conn.execute(
            text(
                "INSERT INTO floodgate_blobs (topic, partition, start_offset, end_offset, "
                "path, bytes, tuples, created) VALUES (:t, :p, 10, 30, :path, :b, 20, 0)"
            ),
            {"t": TOPIC, "p": PARTITION, "path": str(path), "b": seal.bytes},
        )
    engine.dispose()
    catalog = SweepCatalog(url)
    (old,) = catalog.all()
    assert (old.sha256, old.first_offset, old.last_offset) == (None, None, None)
    with caplog.at_level(logging.WARNING, logger="pipeline.swept"):
        assert [r.offset() for r in _read(catalog, 10, 30)] == [*range(10, 30)]
    assert f"FG-BLOB-001 BLOB {old.id} ({path}) of flights[{PARTITION}] has no SHA-256" in (
        caplog.text
    )
    assert catalog.seal(old.id, seal_blob(old)) and not catalog.seal(old.id, seal)
    (sealed_now,) = catalog.all()
    assert (sealed_now.sha256, sealed_now.first_offset, sealed_now.last_offset) == (
        seal.sha256,
        10,
        29,
    )
    _flip(path, path.read_bytes().index(b"value-00012"))
    with pytest.raises(BlobIntegrityError, match=r"\(sha256\)"):
        _read(catalog, 10, 30)
    catalog.close()

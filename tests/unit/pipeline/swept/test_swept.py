"""BLOB files and the sweep catalog (no broker): byte-exact records, ordered disjoint
chains, the swept count queue accounting subtracts, and reads back in Kafka order."""

from __future__ import annotations

import itertools
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pipeline.swept.blob as blob_module
from pipeline.errors import DataLossError
from pipeline.swept.blob import (
    BlobSeal,
    SweptRecord,
    batched,
    publish_blob,
    read_blob,
    read_blob_batches,
    write_blob,
    write_sealed_blob,
)
from pipeline.swept.catalog import SweepCatalog
from pipeline.swept.reading import BlobReader


def _record(offset: int, *, key: bytes | None = b"k", headers: bool = True) -> SweptRecord:
    return SweptRecord(
        "t",
        0,
        offset,
        1,
        1_700_000_000_000 + offset,
        key,
        bytes([offset % 256]) * 3 + b"\x00\xff",
        [("floodgate.reason", b"x"), ("empty", None)] if headers else None,
    )


def test_a_published_blob_is_under_its_final_name_only(tmp_path: Path) -> None:
    temporary, final = tmp_path / ".tmp-b.avro", tmp_path / "b.avro"
    final.write_bytes(b"an older BLOB of the same name, never registered")
    seal = write_sealed_blob(temporary, [[_record(1), _record(2)]])
    publish_blob(temporary, final)
    assert not temporary.exists()
    assert final.stat().st_size == seal.bytes
    assert [r.offset() for r in read_blob(final, "t", 0)] == [1, 2]


def test_a_blob_holds_each_record_byte_for_byte(tmp_path: Path) -> None:
    records = [_record(10), _record(11, key=None, headers=False), _record(13)]
    path = tmp_path / "b.avro"
    assert write_blob(path, [records]) == 3
    back = list(read_blob(path, "t", 0))
    assert [
        (r.offset(), r.timestamp(), r.key(), r.value(), r.headers(), r.topic(), r.partition())
        for r in back
    ] == [
        (r.offset(), r.timestamp(), r.key(), r.value(), r.headers(), r.topic(), r.partition())
        for r in records
    ]


def test_a_blobs_batch_record_holds_the_batchs_kafka_records(tmp_path: Path) -> None:
    path = tmp_path / "b.avro"
    write_blob(path, [[_record(10), _record(11)]])
    with path.open("rb") as src:
        (batch_record,) = list(blob_module.blob_batch_records(src))
    records = blob_module.records_of_batch(batch_record=batch_record, topic="t", partition=0)
    assert [r.offset() for r in records] == [10, 11]


_bytes = st.none() | st.binary(max_size=40)
_kafka_record = st.tuples(
    st.integers(0, 2),  # timestamp type: none, create time, log append time
    st.integers(-1, 2**62),
    _bytes,
    _bytes,
    st.none() | st.lists(st.tuples(st.text(max_size=8), _bytes), min_size=1, max_size=3),
)


@settings(max_examples=80, deadline=None)
@given(
    records=st.lists(_kafka_record, max_size=60),
    gaps=st.lists(st.integers(1, 3), min_size=60, max_size=60),
    size=st.integers(1, 25),
)
def test_any_records_come_back_byte_for_byte_in_batches_of_any_size(
    tmp_path_factory: pytest.TempPathFactory,
    records: list[tuple[int, int, bytes | None, bytes | None, Any]],
    gaps: list[int],
    size: int,
) -> None:
    offsets = list(itertools.accumulate(gaps[: len(records)], initial=7))  # markers: gaps
    written = [
        SweptRecord("t", 3, offset, kind, ts, key, value, headers)
        for offset, (kind, ts, key, value, headers) in zip(offsets, records, strict=False)
    ]
    path = tmp_path_factory.mktemp("blob") / "b.avro"
    assert write_blob(path, batched(written, size)) == len(written)
    batches = list(read_blob_batches(path, "t", 3))
    assert [len(b) for b in batches] == [len(b) for b in batched(written, size)]

    def fields(r: SweptRecord) -> tuple[Any, ...]:
        return (
            r.topic(),
            r.partition(),
            r.offset(),
            r.timestamp(),
            r.key(),
            r.value(),
            r.headers(),
        )

    assert [fields(r) for b in batches for r in b] == [fields(r) for r in written]


def test_a_truncated_blob_is_a_data_loss_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "b.avro"
    write_blob(path, batched(_record(i) for i in range(200)))
    path.write_bytes(path.read_bytes()[:-40])
    with pytest.raises(DataLossError, match=r"b\.avro cannot be read"):
        list(read_blob(path, "t", 0))


def _catalog(tmp_path: Path) -> SweepCatalog:
    return SweepCatalog(f"sqlite:///{tmp_path / 'catalog.db'}")


def _sweep(catalog: SweepCatalog, tmp_path: Path, start: int, end: int) -> None:
    path = tmp_path / f"{start}-{end}.avro"
    n = write_blob(path, batched((_record(i) for i in range(start, end)), size=4))
    catalog.register("t", 0, start, end, path=str(path), size=path.stat().st_size, tuples=n, now=0)


def test_the_chain_is_ordered_and_refuses_overlaps(tmp_path: Path) -> None:
    catalog = _catalog(tmp_path)
    _sweep(catalog, tmp_path, 20, 30)
    _sweep(catalog, tmp_path, 10, 20)
    assert [(b.start_offset, b.end_offset) for b in catalog.chain("t", 0)] == [(10, 20), (20, 30)]
    with pytest.raises(ValueError, match=r"\[25, 35\) overlaps"):
        _sweep(catalog, tmp_path, 25, 35)
    assert catalog.chain("t", 1) == []


def test_reads_come_back_in_order_then_stop_at_a_gap_and_fail_loudly_outside(
    tmp_path: Path,
) -> None:
    catalog = _catalog(tmp_path)
    _sweep(catalog, tmp_path, 10, 20)
    _sweep(catalog, tmp_path, 20, 30)
    _sweep(catalog, tmp_path, 40, 50)
    reader = BlobReader(catalog)
    batches, next_offset = reader.read("t", 0, 15, 45)
    assert next_offset == 30 and [r.offset() for b in batches for r in b] == list(range(15, 30))
    batches, next_offset = reader.read("t", 0, 42, 44)
    assert next_offset == 44 and [r.offset() for b in batches for r in b] == [42, 43]
    with pytest.raises(DataLossError, match="offset 35 is neither in the broker nor in any BLOB"):
        reader.read("t", 0, 35, 45)


@settings(max_examples=60, deadline=None)
@given(
    cuts=st.lists(st.integers(0, 300), min_size=0, max_size=12, unique=True),
    position=st.integers(0, 320),
)
def test_swept_counts_the_offsets_held_in_blobs_from_the_position_on(
    tmp_path_factory: pytest.TempPathFactory, cuts: list[int], position: int
) -> None:
    tmp_path = tmp_path_factory.mktemp("catalog")
    catalog = SweepCatalog(f"sqlite:///{tmp_path / 'catalog.db'}")
    bounds = sorted(cuts)
    ranges = list(zip(bounds[0::2], bounds[1::2], strict=False))  # disjoint, with gaps
    for start, end in ranges:
        # No file: the seal is given (the accounting reads only the catalog).
        seal = BlobSeal("0" * 64, end - start, end - start, start, end - 1)
        catalog.register(
            "t",
            0,
            start,
            end,
            path=f"{start}.avro",
            size=end - start,
            tuples=end - start,
            now=0,
            seal=seal,
        )
    expected = sum(max(0, end - max(start, position)) for start, end in ranges)
    assert catalog.swept("t", 0, position) == expected
    assert catalog.used_bytes() == sum(end - start for start, end in ranges)
    catalog.close()


def test_an_avro_file_of_other_records_is_not_read_as_a_blob(tmp_path: Path) -> None:
    import fastavro

    path = tmp_path / "other.avro"
    schema = {"type": "record", "name": "Other", "fields": [{"name": "x", "type": "long"}]}
    with open(path, "wb") as out:
        fastavro.writer(out, fastavro.parse_schema(schema), [{"x": 1}])
    with pytest.raises(DataLossError, match=r"other\.avro cannot be read: .*'Other' records"):
        list(read_blob(path, "t", 0))


def test_blobs_and_the_catalog_are_their_owners_alone(tmp_path: Path) -> None:
    """BLOBs hold producers' tuples: 0600 in a folder made 0700, and the SQLite
    catalog likewise, whatever the umask lets through."""
    previous = os.umask(0)  # what would make every file world-readable and writable
    try:
        blob = tmp_path / "blobs" / "t" / "b.avro"
        write_blob(blob, [[_record(1), _record(2)]])
        catalog = tmp_path / "state" / "catalog.db"
        SweepCatalog(f"sqlite:///{catalog}").register(
            "t", 0, 1, 3, path=str(blob), size=blob.stat().st_size, tuples=2, now=0.0
        )
    finally:
        os.umask(previous)
    assert stat.S_IMODE(blob.stat().st_mode) == 0o600
    assert stat.S_IMODE(blob.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(catalog.stat().st_mode) == 0o600
    assert stat.S_IMODE(catalog.parent.stat().st_mode) == 0o700
    for wal in catalog.parent.glob("catalog.db-*"):
        assert stat.S_IMODE(wal.stat().st_mode) == 0o600, wal

"""The sweeper touches only its own, no broker: a sweeper
of no query groups, its catalog and its BLOB directory.

Found at 88f3718: ``Sweeper.recover()`` deleted every file of ``blob_dir`` its catalog
did not name (an operator's notes, another stream's ``.avro``); a catalog row could
name any path, which the sweeper deleted and readers hashed (``/dev/zero`` for ever).
Now recovery removes only the files its journal names as in progress, a row's file
is read or deleted only inside ``blob_dir`` and only as a regular file, and a sweeper
of another catalog cannot share ``blob_dir``."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.errors import BlobPathError, ConfigError, UntrustedFileError
from pipeline.swept.blob import BlobSeal, SweptRecord, blob_name, write_sealed_blob
from pipeline.swept.catalog import SweepCatalog
from pipeline.swept.reading import BlobReader
from pipeline.swept.registered import check_blob
from pipeline.swept.tables import Blob
from sweeper.config import SweeperSettings
from sweeper.lock import LOCK_NAME
from sweeper.service import Sweeper

TOPIC = "flights"


def _sweeper(tmp_path: Path, blob_dir: Path, catalog: str = "catalog.db") -> Sweeper:
    settings = SweeperSettings(
        catalog_url=f"sqlite:///{tmp_path / catalog}", blob_dir=str(blob_dir)
    )
    return Sweeper(settings, [], bootstrap_servers="127.0.0.1:1")


@pytest.fixture
def sweepers() -> Iterator[list[Sweeper]]:
    made: list[Sweeper] = []
    yield made
    for sweeper in made:
        sweeper.close()


@pytest.fixture
def sweeper(tmp_path: Path, sweepers: list[Sweeper]) -> Sweeper:
    """A sweeper on ``tmp_path/blobs``, which holds an operator's notes."""
    made = _sweeper(tmp_path, tmp_path / "blobs")
    sweepers.append(made)
    (made.blob_dir / "operator-notes.txt").write_text("do not delete\n")
    return made


def _records(start: int, end: int) -> list[SweptRecord]:
    return [SweptRecord(TOPIC, 0, o, 1, o, None, b"v%d" % o, None) for o in range(start, end)]


def _row(
    catalog: SweepCatalog, path: str | Path, start: int, end: int, seal: BlobSeal | None = None
) -> Blob:
    """A row of ``[start, end)`` naming ``path``, whatever is there (as a stray or
    hand-made row would), or with ``seal`` the BLOB written there."""
    seal = seal or BlobSeal("0" * 64, 100, end - start, start, end - 1)
    return catalog.register(
        TOPIC, 0, start, end, path=str(path), size=seal.bytes, tuples=seal.tuples, now=0, seal=seal
    )


def _blob(catalog: SweepCatalog, path: Path, start: int, end: int) -> Blob:
    """A whole BLOB of ``[start, end)`` written at ``path`` and registered there."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return _row(catalog, path, start, end, write_sealed_blob(path, [_records(start, end)]))


def test_recovery_leaves_files_it_did_not_write_and_removes_a_killed_sweeps_blob(
    sweeper: Sweeper,
) -> None:
    blob_dir = sweeper.blob_dir
    notes = blob_dir / "operator-notes.txt"
    # Another stream's BLOB (another sweeper's, or a copy kept by hand): named as a
    # BLOB is, but no row and no journal entry of this catalog names it.
    foreign = blob_dir / blob_name("other-stream", 3, 0, 50)
    write_sealed_blob(foreign, [_records(0, 50)])
    registered = _blob(sweeper.catalog, blob_dir / blob_name(TOPIC, 0, 0, 10), 0, 10)

    assert sweeper.recover() == []
    assert notes.read_text() == "do not delete\n"
    assert foreign.is_file() and Path(registered.path).is_file()

    # A sweep killed after it journaled its file (renamed into place, not
    # registered) and one killed while it wrote the temporary file.
    renamed = blob_dir / blob_name(TOPIC, 0, 10, 20)
    writing = blob_dir / blob_name(TOPIC, 0, 20, 30)
    sweeper.catalog.begin_write(str(renamed), TOPIC, 0, 10, 20, now=1.0)
    sweeper.catalog.begin_write(str(writing), TOPIC, 0, 20, 30, now=2.0)
    write_sealed_blob(renamed, [_records(10, 20)])
    write_sealed_blob(writing.with_name(f".tmp-{writing.name}"), [_records(20, 30)])

    assert sweeper.recover() == [str(renamed), str(writing.with_name(f".tmp-{writing.name}"))]
    assert sweeper.catalog.writes() == []
    assert sorted(p.name for p in blob_dir.iterdir()) == sorted(
        [LOCK_NAME, notes.name, foreign.name, Path(registered.path).name]
    )
    assert [b.id for b in sweeper.catalog.all()] == [registered.id]

    # Killed between forgetting a consumed BLOB and removing its file.
    sweeper.catalog.delete(registered.id, journal=True)
    assert sweeper.recover() == [registered.path]
    assert sorted(p.name for p in blob_dir.iterdir()) == sorted(
        [LOCK_NAME, notes.name, foreign.name]
    )


def test_a_killed_sweep_can_no_longer_register_once_recovered(sweeper: Sweeper) -> None:
    """A deposed leader still writing when the new one recovers: its entry is taken
    first, so its registration is refused rather than naming a removed file."""
    path = sweeper.blob_dir / blob_name(TOPIC, 0, 0, 10)
    sweeper.catalog.begin_write(str(path), TOPIC, 0, 0, 10, now=0.0)
    with pytest.raises(ValueError, match="being written already"):
        sweeper.catalog.begin_write(str(path), TOPIC, 0, 0, 10, now=0.0)
    seal = BlobSeal("0" * 64, 10, 10, 0, 9)
    path.write_bytes(b"a killed sweep's")
    assert sweeper.recover() == [str(path)]
    with pytest.raises(ValueError, match="in-progress entry is gone"):
        sweeper.catalog.register(
            TOPIC, 0, 0, 10, path=str(path), size=10, tuples=10, now=0, seal=seal, in_progress=True
        )
    assert sweeper.catalog.all() == []


def test_a_row_outside_blob_dir_is_refused_by_readers_and_by_the_sweeper(
    tmp_path: Path, sweeper: Sweeper, caplog: pytest.LogCaptureFixture
) -> None:
    blob_dir, catalog = sweeper.blob_dir, sweeper.catalog
    # A whole, sealed BLOB -- but in another folder: what a stray row could name.
    elsewhere = _blob(catalog, tmp_path / "elsewhere" / blob_name(TOPIC, 0, 0, 10), 0, 10)
    zero = _row(catalog, "/dev/zero", 10, 20)
    # A link in blob_dir, named as the sweeper names the range, pointing out of it.
    link = blob_dir / blob_name(TOPIC, 0, 20, 30)
    link.symlink_to(elsewhere.path)
    linked = _row(catalog, str(link), 20, 30)
    reader = BlobReader(catalog)

    for row in (elsewhere, zero, linked):
        batches, _ = reader.read(TOPIC, 0, row.start_offset, row.end_offset)
        with pytest.raises(BlobPathError) as refused:
            next(batches)
        error = refused.value
        assert (error.blob_id, error.path, error.reason) == (row.id, row.path, "outside")
        assert error.blob_dir == str(blob_dir)
        assert f"BLOB {row.id} ({row.path})" in str(error) and str(blob_dir) in str(error)
        with pytest.raises(BlobPathError, match="outside"):
            check_blob(row)  # what the sweeper checks before it truncates the broker

    with caplog.at_level(logging.ERROR, logger="sweeper.service"):
        sweeper.recover()
    for row in (elsewhere, zero, linked):
        assert f"FG-SWP-007 data loss on topic '{TOPIC}' partition 0, offsets " in caplog.text
        assert f"BLOB {row.id} ({row.path}) fails its integrity check (outside)" in caplog.text
    outside = sweeper.registry.get_sample_value(
        "floodgate_sweeper_damaged_blobs_total",
        {"query_group": "", "stream": TOPIC, "reason": "outside"},
    )
    assert outside == 3

    for row in (elsewhere, zero, linked):
        with pytest.raises(BlobPathError, match="outside"):
            sweeper.delete_blob(row, unswept=True)
    assert Path(elsewhere.path).is_file() and link.is_symlink()
    assert [b.id for b in catalog.all()] == [elsewhere.id, zero.id, linked.id]


def test_a_row_inside_blob_dir_is_read_or_deleted_only_as_the_sweepers_regular_file(
    sweeper: Sweeper,
) -> None:
    blob_dir, catalog = sweeper.blob_dir, sweeper.catalog
    notes = blob_dir / "operator-notes.txt"
    misnamed = _row(catalog, str(notes), 0, 10)
    fifo = blob_dir / blob_name(TOPIC, 0, 10, 20)
    os.mkfifo(fifo)  # opened for reading, it would wait for a writer for ever
    piped = _row(catalog, str(fifo), 10, 20)

    with pytest.raises(BlobPathError, match="name") as refused:
        sweeper.delete_blob(misnamed)
    assert refused.value.reason == "name" and notes.read_text() == "do not delete\n"
    batches, _ = BlobReader(catalog).read(TOPIC, 0, 10, 20)
    with pytest.raises(BlobPathError, match="not a regular file") as refused:
        next(batches)
    assert refused.value.reason == "not-a-file"
    with pytest.raises(BlobPathError) as refused:
        sweeper.delete_blob(piped)
    assert refused.value.reason == "not-a-file" and stat.S_ISFIFO(fifo.lstat().st_mode)
    assert [b.id for b in catalog.all()] == [misnamed.id, piped.id]


def test_without_a_recorded_blob_dir_readers_still_read_only_regular_files(
    tmp_path: Path,
) -> None:
    """A catalog no sweeper has recorded a directory in (made before this check):
    a row naming a device is refused by its kind, without reading it."""
    catalog = SweepCatalog(f"sqlite:///{tmp_path / 'catalog.db'}")
    zero = _row(catalog, "/dev/zero", 0, 10)
    assert zero.blob_dir is None
    batches, _ = BlobReader(catalog).read(TOPIC, 0, 0, 10)
    with pytest.raises(BlobPathError, match="not a regular file") as refused:
        next(batches)
    assert (refused.value.reason, refused.value.blob_dir) == ("not-a-file", None)
    catalog.close()


def test_a_sweeper_of_another_catalog_is_refused_the_blob_dir(
    tmp_path: Path, sweepers: list[Sweeper]
) -> None:
    blob_dir = tmp_path / "blobs"
    first = _sweeper(tmp_path, blob_dir, "a.db")
    sweepers.append(first)
    # The sweepers of one catalog share it (they elect the one that sweeps).
    peer = _sweeper(tmp_path, blob_dir, "a.db")
    sweepers.append(peer)
    with pytest.raises(ConfigError) as refused:
        _sweeper(tmp_path, blob_dir, "b.db")
    message = str(refused.value)
    assert f"sweeper.blob_dir {blob_dir} is held by a sweeper of another catalog" in message
    assert f"process {os.getpid()}" in message and refused.value.key == "sweeper.blob_dir"
    assert stat.S_IMODE((blob_dir / LOCK_NAME).stat().st_mode) == 0o600

    first.close()
    peer.close()
    sweepers.clear()
    sweepers.append(_sweeper(tmp_path, blob_dir, "b.db"))  # free again


def test_a_blob_dir_others_can_write_to_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    blob_dir = tmp_path / "blobs"
    blob_dir.mkdir()
    blob_dir.chmod(0o777)
    with pytest.raises(ConfigError, match=r"sweeper\.blob_dir") as refused:
        _sweeper(tmp_path, blob_dir)
    assert "777" in str(refused.value)
    assert list(blob_dir.iterdir()) == [] and not (tmp_path / "catalog.db").exists()


def test_a_symbolic_link_at_the_lock_files_name_is_refused(tmp_path: Path) -> None:
    blob_dir = tmp_path / "blobs"
    blob_dir.mkdir()
    target = tmp_path / "target"
    (blob_dir / LOCK_NAME).symlink_to(target)
    with pytest.raises(UntrustedFileError, match="a symbolic link"):
        _sweeper(tmp_path, blob_dir)
    assert not target.exists()


def test_a_catalog_keeps_its_blob_dir_while_it_holds_blobs(
    tmp_path: Path, sweepers: list[Sweeper]
) -> None:
    first = _sweeper(tmp_path, tmp_path / "blobs")
    _blob(first.catalog, first.blob_dir / blob_name(TOPIC, 0, 0, 10), 0, 10)
    first.close()
    with pytest.raises(
        ConfigError, match=f"1 BLOBs and sweeps in progress are in {first.blob_dir}"
    ):
        _sweeper(tmp_path, tmp_path / "moved")
    sweeper = _sweeper(tmp_path, tmp_path / "blobs")
    sweepers.append(sweeper)
    assert sweeper.catalog.blob_dir() == str(tmp_path / "blobs")


#: What may lie in blob_dir: (a journal entry names it, its file is there, where).
#: ``where``: "final" (renamed into place), "tmp" (being written), "none" (no file
#: yet), "outside" (the entry names a file in another folder), "misnamed" (the entry
#: names a file of blob_dir under another name than its range's).
_KINDS = st.sampled_from(["final", "tmp", "none", "outside", "misnamed"])


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    journaled=st.lists(_KINDS, max_size=6),
    foreign=st.lists(st.sampled_from(["notes", "avro", "tmp-avro", "registered"]), max_size=5),
)
def test_recovery_removes_exactly_the_journaled_files_it_owns(
    tmp_path_factory: pytest.TempPathFactory, journaled: list[str], foreign: list[str]
) -> None:
    root = tmp_path_factory.mktemp("recover")
    sweeper = _sweeper(root, root / "blobs")
    blob_dir, catalog = sweeper.blob_dir, sweeper.catalog
    kept: set[Path] = {blob_dir / LOCK_NAME}
    expected: list[Path] = []
    for i, kind in enumerate(foreign):
        start = 1_000 + 10 * i
        if kind == "registered":
            path = blob_dir / blob_name(TOPIC, 0, start, start + 10)
            kept.add(Path(_blob(catalog, path, start, start + 10).path))
            continue
        name = {
            "notes": f"notes-{i}.txt",
            "avro": blob_name("other", 0, start, start + 10),
            "tmp-avro": f".tmp-{blob_name('other', 0, start, start + 10)}",
        }[kind]
        (blob_dir / name).write_bytes(b"not yours")
        kept.add(blob_dir / name)
    for i, kind in enumerate(journaled):
        start = 10 * i
        name = blob_name(TOPIC, 0, start, start + 10)
        final = blob_dir / name
        if kind == "outside":
            final = root / "elsewhere" / name
            final.parent.mkdir(exist_ok=True)
            final.write_bytes(b"not in blob_dir")
            kept.add(final)
        elif kind == "misnamed":
            final = blob_dir / f"keep-{i}.avro"
            final.write_bytes(b"named otherwise")
            kept.add(final)
        elif kind in ("final", "tmp"):
            made = final if kind == "final" else final.with_name(f".tmp-{name}")
            made.write_bytes(b"a killed sweep's")
            expected.append(made)
        catalog.begin_write(str(final), TOPIC, 0, start, start + 10, now=float(i))

    removed = sweeper.recover()

    assert removed == [str(p) for p in expected]
    assert catalog.writes() == []
    assert {p for p in kept if p.exists()} == kept
    assert set(blob_dir.iterdir()) == {p for p in kept if p.parent == blob_dir}
    sweeper.close()

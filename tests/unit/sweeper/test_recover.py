"""The sweeper's start seals the BLOBs a catalog made before checksums holds: each
is read whole and checked first; a damaged one is reported
(``FG-SWP-007``, ``floodgate_sweeper_damaged_blobs_total``) and left unsealed. No
broker: a sweeper of no query groups touches none until it cycles."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from sqlalchemy import update

from pipeline.swept.blob import SweptRecord, write_sealed_blob
from pipeline.swept.catalog import SweepCatalog
from pipeline.swept.tables import blobs
from sweeper.config import SweeperSettings
from sweeper.service import Sweeper


def _unsealed(catalog: SweepCatalog, folder: Path, start: int, end: int, shift: int = 0) -> int:
    """A BLOB of ``[start, end)`` registered as an old sweeper did: no seal. ``shift``
    moves every offset written (a BLOB not holding what its row says)."""
    path = folder / f"{start}.avro"
    records = [
        SweptRecord("t", 0, o + shift, 1, o, None, b"v%d" % o, None) for o in range(start, end)
    ]
    seal = write_sealed_blob(path, [records])
    blob = catalog.register(
        "t", 0, start, end, path=str(path), size=seal.bytes, tuples=end - start, now=0, seal=seal
    )
    with catalog.engine.begin() as conn:
        conn.execute(
            update(blobs)
            .where(blobs.c.id == blob.id)
            .values(sha256=None, first_offset=None, last_offset=None)
        )
    return blob.id


def test_recover_seals_intact_old_blobs_and_reports_damaged_ones(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = SweeperSettings(
        catalog_url=f"sqlite:///{tmp_path / 'catalog.db'}", blob_dir=str(tmp_path / "blobs")
    )
    catalog = SweepCatalog(settings.catalog_url)
    (tmp_path / "blobs").mkdir()
    intact = _unsealed(catalog, tmp_path / "blobs", 0, 10)
    moved = _unsealed(catalog, tmp_path / "blobs", 10, 20, shift=15)  # 25..34: past 20
    catalog.close()

    sweeper = Sweeper(settings, [], bootstrap_servers="127.0.0.1:1")
    with caplog.at_level(logging.ERROR, logger="sweeper.service"):
        assert sweeper.recover() == []
    by_id = {b.id: b for b in sweeper.catalog.all()}
    assert by_id[intact].sha256 is not None
    assert (by_id[intact].first_offset, by_id[intact].last_offset) == (0, 9)
    assert by_id[moved].sha256 is None and sweeper.damaged == {moved}
    assert (
        "FG-SWP-007 data loss on topic 't' partition 0, offsets [10, 20): BLOB "
        f"{moved} ({by_id[moved].path}) fails its integrity check (offset): offset 25 after 9"
    ) in caplog.text
    # No configured queue carries topic t: its stream label is the topic, no query group.
    damaged = sweeper.registry.get_sample_value(
        "floodgate_sweeper_damaged_blobs_total",
        {"query_group": "", "stream": "t", "reason": "offset"},
    )
    assert damaged == 1
    sweeper.catalog.close()

"""``floodgate sweeper blobs --verify``: every registered BLOB
checked against its catalog row, exit code 1 when one is damaged. No broker."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from pipeline.swept.blob import SweptRecord, write_sealed_blob
from pipeline.swept.catalog import SweepCatalog
from sweeper.cli import app

runner = CliRunner()


def test_blobs_verify_names_the_damaged_blob_and_exits_1(tmp_path: Path) -> None:
    catalog_url = f"sqlite:///{tmp_path / 'catalog.db'}"
    config = tmp_path / "sweeper.toml"
    config.write_text(f'[sweeper]\ncatalog_url = "{catalog_url}"\nblob_dir = "{tmp_path}"\n')
    catalog = SweepCatalog(catalog_url)
    paths = []
    for start in (0, 10):
        path = tmp_path / f"b{start}.avro"
        records = [
            SweptRecord("t", 0, o, 1, o, None, b"value %d" % o, None)
            for o in range(start, start + 10)
        ]
        seal = write_sealed_blob(path, [records])
        catalog.register(
            "t", 0, start, start + 10, path=str(path), size=seal.bytes, tuples=10, now=0, seal=seal
        )
        paths.append(path)
    catalog.close()

    intact = runner.invoke(app, ["blobs", "--config", str(config), "--verify"])
    assert intact.exit_code == 0, intact.output
    assert intact.output.count(" ok ") == 2 and "DAMAGED" not in intact.output

    data = bytearray(paths[1].read_bytes())
    data[data.index(b"value 15")] ^= 0x20
    paths[1].write_bytes(bytes(data))
    damaged = runner.invoke(app, ["blobs", "--config", str(config), "--verify"])
    assert damaged.exit_code == 1
    assert damaged.output.count(" ok ") == 1
    assert "DAMAGED" in damaged.output and "1 damaged BLOBs" in damaged.output


def test_blobs_json_gives_the_catalog_rows_with_their_check(tmp_path: Path) -> None:
    import json

    catalog_url = f"sqlite:///{tmp_path / 'catalog.db'}"
    config = tmp_path / "sweeper.toml"
    config.write_text(f'[sweeper]\ncatalog_url = "{catalog_url}"\nblob_dir = "{tmp_path}"\n')
    catalog = SweepCatalog(catalog_url)
    path = tmp_path / "b0.avro"
    records = [SweptRecord("t", 0, o, 1, o, None, b"value %d" % o, None) for o in range(10)]
    seal = write_sealed_blob(path, [records])
    catalog.register("t", 0, 0, 10, path=str(path), size=seal.bytes, tuples=10, now=0, seal=seal)
    catalog.close()

    shown = runner.invoke(app, ["blobs", "--config", str(config), "--verify", "--json"])

    assert shown.exit_code == 0, shown.output
    (row,) = json.loads(shown.stdout)
    assert (row["topic"], row["start_offset"], row["end_offset"]) == ("t", 0, 10)
    assert row["path"] == str(path) and row["check"] == "ok"

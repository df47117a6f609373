"""Remake the swept-BLOB golden files of tests/golden/blobs/ (docs/formats.md, "Swept
BLOBs"), which the Python and the JVM readers' tests both read.

Run from the repository's root: ``.venv/bin/python tests/golden/make_blobs.py``.

It writes, with the Python side's own writer and catalog:

* two BLOBs of ``flights[3]``, a chain ``[100, 110)`` + ``[110, 120)``
  (:func:`~pipeline.swept.blob.write_sealed_blob`; the first in two batches, offsets
  107 and 119 transaction markers, so not records), holding null and empty keys and
  values, repeated and null-valued headers, a non-ASCII header key and all three
  timestamp types;
* ``seal.json``: each BLOB's file name and :class:`~pipeline.swept.blob.BlobSeal`;
* ``catalog.sql``: a SQLite dump of the sweep catalog that registers them
  (:class:`~pipeline.swept.catalog.SweepCatalog`), its BLOB directory and paths
  written as ``@BLOB_DIR@`` for the reader's tests to fill in;
* ``expected.json``: the records, as both readers must give them back.

Avro container files begin with a random sync marker, so a remade BLOB has another
SHA-256 (and seal.json and catalog.sql follow it); the records stay the same.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from pipeline.swept.blob import SweptRecord, blob_name, write_sealed_blob  # noqa: E402
from pipeline.swept.catalog import SweepCatalog  # noqa: E402

OUT = Path(__file__).resolve().parent / "blobs"
TOPIC = "flights"
PARTITION = 3
#: Stands for the BLOB directory in catalog.sql.
BLOB_DIR = "@BLOB_DIR@"
#: confluent-kafka's timestamp kinds, as the BLOB stores them.
NONE, CREATE_TIME, LOG_APPEND_TIME = 0, 1, 2


def _record(
    offset: int,
    *,
    key: bytes | None = b"k",
    value: bytes | None = b"v",
    kind: int = CREATE_TIME,
    headers: list[tuple[str, bytes | None]] | None = None,
) -> SweptRecord:
    timestamp = -1 if kind == NONE else 1_767_225_600_000 + offset
    return SweptRecord(TOPIC, PARTITION, offset, kind, timestamp, key, value, headers)


def batches() -> list[list[list[SweptRecord]]]:
    """The BLOBs' batches: ``[BLOB][batch][record]``."""
    first = [
        [
            _record(100, key=b"alpha", value=b"\x00\x01\xfe\xff", headers=[("trace", b"abc")]),
            _record(101, key=None, value=b"no key"),
            _record(102, key=b"no value", value=None),
            _record(103, key=b"empty value", value=b""),
            _record(104, key=b"", value=b"empty key"),
        ],
        [
            _record(105, headers=[("a", b"1"), ("a", b"2"), ("nul", None)]),
            _record(106, key=None, value=None),
            # 107: a transaction marker
            _record(108, kind=LOG_APPEND_TIME, value=b"log append time"),
            _record(109, kind=NONE, value=b"no timestamp"),
        ],
    ]
    second = [
        [
            _record(110, key=b"k110", value=b"v110", headers=[("cl\u00e9", b"\x00\xff")]),
            *(_record(o, key=b"k%d" % o, value=b"v%d" % o) for o in range(111, 119)),
            # 119: a transaction marker
        ]
    ]
    return [first, second]


def _hex(data: bytes | None) -> str | None:
    return None if data is None else data.hex()


def main() -> None:
    OUT.mkdir(exist_ok=True)
    for old in OUT.glob("*.avro"):
        old.unlink()
    ranges = [(100, 110), (110, 120)]
    seals = []
    expected = []
    with tempfile.TemporaryDirectory() as tmp:
        catalog = SweepCatalog(f"sqlite:///{Path(tmp) / 'catalog.db'}")
        catalog.record_blob_dir(tmp)
        for (start, end), blob in zip(ranges, batches(), strict=True):
            name = blob_name(TOPIC, PARTITION, start, end)
            seal = write_sealed_blob(OUT / name, blob)
            (OUT / name).chmod(0o644)
            seals.append({"file": name, **dataclasses.asdict(seal)})
            catalog.register(
                TOPIC,
                PARTITION,
                start,
                end,
                path=f"{tmp}/{name}",
                size=seal.bytes,
                tuples=seal.tuples,
                now=0.0,
                seal=seal,
            )
            expected += [
                {
                    "offset": r.offset(),
                    "timestamp_type": r.timestamp()[0],
                    "timestamp": r.timestamp()[1],
                    "key": _hex(r.key()),
                    "value": _hex(r.value()),
                    "headers": [[k, _hex(v)] for k, v in r.headers() or []],
                }
                for batch in blob
                for r in batch
            ]
        catalog.close()
        db = sqlite3.connect(Path(tmp) / "catalog.db")
        with db:
            db.execute("UPDATE floodgate_blob_store SET catalog_id = ?, since = 0", ("0" * 32,))
        dump = "\n".join(db.iterdump()).replace(tmp, BLOB_DIR)
        db.close()
    (OUT / "catalog.sql").write_text(dump + "\n")
    head = {"topic": TOPIC, "partition": PARTITION}
    (OUT / "seal.json").write_text(json.dumps(head | {"blobs": seals}, indent=2) + "\n")
    rows = ",\n".join(f"  {json.dumps(record, ensure_ascii=False)}" for record in expected)
    (OUT / "expected.json").write_text(
        json.dumps(head)[:-1] + ', "records": [\n' + rows + "\n]}\n", encoding="utf-8"
    )


if __name__ == "__main__":
    main()

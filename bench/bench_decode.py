"""Benchmark: the source's decode, tuple by tuple against a container block (issue 9).

What is measured, in this one process, over the first ``--limit`` flights encoded
once with the flights codec (Avro single-object encoding):

* **baseline, tuple by tuple**: ``StreamCodec.decode(value, logical=False)`` per
  tuple (``fastavro.schemaless_reader``: a dict per tuple), then
  ``pyarrow.RecordBatch.from_pylist`` of each 8 192 rows: the source's read path
  before issue 9, and its fallback since;
* **block**: :class:`pipeline.serde.block.BlockDecoder` on each 8 192 values (the bodies
  laid end to end in one in-memory Avro container block with a check field each,
  read by polars into Arrow): the source's read path since issue 9.

Both give the same Arrow table (checked). Each figure is the best of ``--repeat``
runs (the least disturbed by the rest of the machine); the ratio is block ÷ baseline.

Run: ``.venv/bin/python bench/bench_decode.py [--limit 100000] [--repeat 5]``.
"""

from __future__ import annotations

import time

import common
import pyarrow as pa
from common import console

from pipeline.demo.flights import flight_records, load_flights
from pipeline.serde.block import BlockDecoder
from pipeline.serde.codec import StreamCodec
from pipeline.serde.schemas import SchemaRepository

CHUNK = 8_192


def main() -> None:
    parser = common.argument_parser(__doc__, repeat=5)
    common.add_flights_arguments(parser, limit=100_000, limit_help="first N flights")
    args = parser.parse_args()
    schemas = SchemaRepository.load()
    codec = StreamCodec("flights", schemas.get("flight"), schemas)
    values = [codec.encode(r) for r in flight_records(load_flights(args.limit))]
    chunks = [values[i : i + CHUNK] for i in range(0, len(values), CHUNK)]
    decoder = BlockDecoder(codec)
    block_tables = [decoder.decode(c) for c in chunks]
    if any(t is None for t in block_tables):
        raise RuntimeError("the block decoder refused well-formed flights")
    schema = block_tables[0].schema  # type: ignore[union-attr]

    def per_tuple() -> list[pa.RecordBatch]:
        return [
            pa.RecordBatch.from_pylist([codec.decode(v, logical=False) for v in c], schema=schema)
            for c in chunks
        ]

    def block() -> list[pa.Table]:
        return [decoder.decode(c) for c in chunks]

    if pa.Table.from_batches(per_tuple()) != pa.concat_tables(block()):
        raise RuntimeError("the two decodes differ")
    best = {}
    for name, run in (("baseline: tuple by tuple + from_pylist", per_tuple), ("block", block)):
        times = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            run()
            times.append(time.perf_counter() - start)
        best[name] = min(times)
        console.print(
            f"{name}: {1e6 * best[name] / len(values):.2f} µs a flight "
            f"({len(values) / best[name]:,.0f} flights/s; runs "
            + ", ".join(f"{t:.3f}" for t in times)
            + " s)"
        )
    base, fast = best.values()
    console.print(f"block / baseline: {base / fast:.2f}x the speed ({len(values):,} flights)")


if __name__ == "__main__":
    main()

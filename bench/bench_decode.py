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

Then the same flights in the Confluent wire format (``encoding = "confluent"``), half
written with the stream's schema and half with the same schema registered again under
another id (another ``doc``), interleaved, so each micro-batch has two schema ids:

* **Confluent baseline, tuple by tuple**: ``ConfluentCodec.decode(value,
  logical=False)`` per tuple (confluent-kafka's ``AvroDeserializer``), then
  ``from_pylist``: the source's Confluent read path before issue 40, and its fallback;
* **Confluent block**: :class:`pipeline.serde.confluent_block.ConfluentBlockDecoder`
  (the tuples grouped by schema id, one container block per id, rows put back in order).

The registry is ``--registry-url`` (or ``FLOODGATE_TEST_SCHEMA_REGISTRY_URL``); without
one, Apicurio Registry is started as the tests start it
(``tests/integration/registry/apicurio.py``); ``--no-confluent`` skips these rows.

Both paths give the same Arrow table (checked). Each figure is the best of ``--repeat``
runs (the least disturbed by the rest of the machine); the ratio is block ÷ baseline.

Run: ``.venv/bin/python bench/bench_decode.py [--limit 100000] [--repeat 5]``.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import common
import pyarrow as pa
from common import console

from pipeline.demo.flights import flight_tuples, load_flights
from pipeline.serde.block import BlockDecoder
from pipeline.serde.codec import StreamCodec
from pipeline.serde.confluent import ConfluentCodec, stream_codec
from pipeline.serde.confluent_block import ConfluentBlockDecoder
from pipeline.serde.schemas import SchemaRepository

CHUNK = 8_192


def best_of(runs: dict[str, Callable[[], Any]], repeat: int, tuples: int) -> dict[str, float]:
    """The best time of ``repeat`` runs of each, printed per tuple (µs) and per second."""
    best = {}
    for name, run in runs.items():
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            run()
            times.append(time.perf_counter() - start)
        best[name] = min(times)
        console.print(
            f"{name}: {1e6 * best[name] / tuples:.2f} µs a flight "
            f"({tuples / best[name]:,.0f} flights/s; runs "
            + ", ".join(f"{t:.3f}" for t in times)
            + " s)"
        )
    return best


@contextlib.contextmanager
def registry(url: str | None) -> Iterator[str]:
    """``url``, else Apicurio Registry started as the tests start it (stopped after)."""
    if url:
        yield url
        return
    sys.path.insert(0, str(common.ROOT))
    from tests.integration.registry.apicurio import schema_registry

    with schema_registry() as started:
        yield started


def confluent_values(url: str, schemas: SchemaRepository, records: list[Any]) -> Any:
    """``(codec, values)``: ``records`` in the Confluent wire format on a new topic,
    alternately under the stream's schema and under the same schema with another
    ``doc`` (a second schema id that encodes alike)."""
    from confluent_kafka.schema_registry import topic_subject_name_strategy
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    topic = f"bench.decode.{uuid.uuid4().hex[:8]}"
    codec = stream_codec(
        "flights",
        schemas.get("flight"),
        schemas,
        encoding="confluent",
        topic=topic,
        registry={"url": url},
    )
    assert isinstance(codec, ConfluentCodec)
    twin = {**schemas.get("flight").schema, "doc": "the flight schema, registered again"}
    twin_writer = AvroSerializer(
        codec.client,
        json.dumps(twin),
        conf={"auto.register.schemas": True, "subject.name.strategy": topic_subject_name_strategy},
    )
    context = SerializationContext(topic, MessageField.VALUE)
    values = [
        codec.encode(r) if i % 2 == 0 else twin_writer(dict(codec.normalise(r)), context)
        for i, r in enumerate(records)
    ]
    return codec, values


def main() -> None:
    parser = common.argument_parser(__doc__, repeat=5)
    common.add_flights_arguments(parser, limit=100_000, limit_help="first N flights")
    parser.add_argument(
        "--registry-url",
        default=os.environ.get("FLOODGATE_TEST_SCHEMA_REGISTRY_URL"),
        help="a Schema Registry (Confluent API) for the Confluent rows; default: start one",
    )
    parser.add_argument("--no-confluent", action="store_true", help="skip the Confluent rows")
    args = parser.parse_args()
    schemas = SchemaRepository.load()
    codec = StreamCodec("flights", schemas.get("flight"), schemas)
    values = [codec.encode(r) for r in flight_tuples(load_flights(args.limit))]
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
    best = best_of(
        {"baseline: tuple by tuple + from_pylist": per_tuple, "block": block},
        args.repeat,
        len(values),
    )
    base, fast = best.values()
    console.print(f"block / baseline: {base / fast:.2f}x the speed ({len(values):,} flights)")
    if args.no_confluent:
        return
    records = list(flight_tuples(load_flights(args.limit)))
    with registry(args.registry_url) as url:
        confluent, framed = confluent_values(url, schemas, records)
        framed_chunks = [framed[i : i + CHUNK] for i in range(0, len(framed), CHUNK)]
        confluent_decoder = ConfluentBlockDecoder(confluent)

        def confluent_per_tuple() -> list[pa.RecordBatch]:
            return [
                pa.RecordBatch.from_pylist(
                    [confluent.decode(v, logical=False) for v in c], schema=schema
                )
                for c in framed_chunks
            ]

        def confluent_block() -> list[pa.Table]:
            tables = [confluent_decoder.decode(c) for c in framed_chunks]
            if any(t is None for t in tables):
                raise RuntimeError("the Confluent block decoder refused well-formed flights")
            return tables  # type: ignore[return-value]

        if pa.Table.from_batches(confluent_per_tuple()) != pa.concat_tables(confluent_block()):
            raise RuntimeError("the two Confluent decodes differ")
        best = best_of(
            {
                "Confluent baseline: tuple by tuple + from_pylist": confluent_per_tuple,
                "Confluent block, 2 schema ids a batch": confluent_block,
            },
            args.repeat,
            len(framed),
        )
    base, fast = best.values()
    console.print(
        f"Confluent block / baseline: {base / fast:.2f}x the speed ({len(framed):,} flights)"
    )


if __name__ == "__main__":
    main()

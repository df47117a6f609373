"""The codec-matched limit's consumer decode (``bench_limit.py``, limit (b)): a batch of
single-object encoded tuples read as one Avro container block by polars, into Arrow.

This was the removed Python Spark source's decoder (``pipeline.serde.block``); the
source on the JVM decodes now, and this benchmark is its one user, so it lives here
(polars comes with the ``bench`` extra)."""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import fastavro
import numpy as np
from fastavro.schema import parse_schema

from pipeline.serde.codec import StreamCodec, int_fields
from pipeline.serde.schemas import HEADER_SIZE, MAGIC, strip_logical_types

#: Name of the check field the block decoder appends to every record (never a user field:
#: Avro names may not start with two underscores in Floodgate's schemas).
_CHECK_FIELD = "__floodgate_check"


#: First check value; record ``i`` of a block carries ``_CHECK_BASE + i``. A misaligned
#: read (a body shorter or longer than its schema says) reads some other number there.
_CHECK_BASE = 0x2F6B_3C59_A1D4_E807


#: The sync marker of the in-memory container (any 16 bytes; never written anywhere).
_SYNC = bytes.fromhex("466c6f6f64676174652d626c6f636b21")


def _zigzag_varint(n: int) -> bytes:
    """Avro's binary encoding of a ``long``: zig-zag, then base-128 little-endian."""
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


#: The encoded check values built so far (:func:`_checks`), shared by every encoder.
_check_values: list[bytes] = []


def _checks(n: int) -> list[bytes]:
    """The encoded check values of records ``0 .. n-1`` (built once, then reused)."""
    while len(_check_values) < n:
        _check_values.append(_zigzag_varint(_CHECK_BASE + len(_check_values)))
    return _check_values


class BlockDecoder:
    """Decode many single-object encoded tuples of one stream at once, into Arrow columns.

    The per-tuple path (:meth:`StreamCodec.decode`, ``fastavro.schemaless_reader``)
    builds a Python dict per tuple: ~6.5 µs a flight on the 2-core development machine.
    Here the Avro bodies are laid end to end as the one block of an in-memory Avro
    object container file (Avro specification, "Object Container Files": the header
    holds the writer schema, a block is a record count, a byte count and the records'
    bodies, so a single-object body *is* a block record) and read by polars' Avro
    reader in Rust into Arrow columns: ~1.3 µs a flight, with no per-tuple Python
    object beyond the body slice.

    Bodies are only self-delimiting through their schema, so one malformed body would
    shift every record after it. Each body is therefore followed by a ``long`` check
    field (``_CHECK_BASE + i``) that the container's schema appends to the record: the
    block is vouched for only when every row reads back exactly its own check value
    and the row count matches. A block that is not vouched for (a tuple without the
    stream's marker and fingerprint, a body that does not fit, a type polars does not
    read) is answered with ``None``: the caller decodes it tuple by tuple, which names
    the bad tuple (``bad-marker``, ``unknown-fingerprint``, ``bad-body``) for the
    dead-letter topic. A body with trailing bytes fails the check too and is then
    accepted by the per-tuple path, as fastavro reads only what the schema asks for.

    One leniency remains: polars reads any branch index of a ``["null", T]`` union
    other than 0 as ``T``, where fastavro refuses an index outside the union
    (``bad-body``). A body with such an index, aligned in every other byte, is
    therefore decoded here rather than dead-lettered. Telling it apart would take a
    walk over every body in Python, the cost this class exists to avoid.

    Args:
        codec: the stream's codec; its schema is the writer schema the fast path
            accepts (tuples written with an older schema take the per-tuple path and
            Avro schema resolution).
    """

    def __init__(self, codec: StreamCodec) -> None:
        self.codec = codec
        self._header = MAGIC + codec.schema.fingerprint
        record = strip_logical_types(codec.schema.schema)
        # An Avro int and long have the same zig-zag varint on the wire; polars would
        # wrap an int varint beyond 32 bits silently, so ints are read as longs and
        # narrowed with an overflow check (the per-tuple path calls that ``bad-value``).
        self._int_fields = int_fields(record)
        fields = [
            {**f, "type": _widen_int(f["type"])} if f["name"] in self._int_fields else f
            for f in record["fields"]
        ]
        record = {**record, "fields": [*fields, {"name": _CHECK_FIELD, "type": "long"}]}
        buffer = io.BytesIO()
        writer = fastavro.write.Writer(buffer, parse_schema(record), sync_marker=_SYNC)
        writer.flush()
        self._container_header = buffer.getvalue()
        #: ``False`` once polars failed on a block no per-tuple decode faulted: the
        #: schema has a type polars reads differently, so the fast path stays off;
        #: off from the start for a stream in another encoding than single-object.
        self.enabled = codec.encoding == "single-object"

    def decode(self, values: Sequence[bytes | None]) -> Any | None:
        """Decode ``values`` (single-object encoded tuples) into one Arrow table.

        Args:
            values: the tuples' bytes, e.g. Kafka record values.

        Returns:
            A ``pyarrow.Table`` with one row per value, in order, and the schema's
            fields as columns, logical types stripped (``timestamp-millis`` as int64
            epoch ms, ``date`` as int32 epoch days); or ``None`` when the block cannot
            be vouched for (see the class): decode it tuple by tuple then.
        """
        if not self.enabled or not values:
            return None
        header = self._header
        bodies: list[bytes] = []
        append = bodies.append
        for value in values:
            if value is None or not value.startswith(header):
                return None
            append(value[HEADER_SIZE:])
        return self.decode_bodies(bodies)

    def decode_bodies(self, bodies: Sequence[bytes]) -> Any | None:
        """Decode Avro bodies written with the stream's schema (no framing) into one
        Arrow table, as one container block with a check field per body.

        Args:
            bodies: the tuples' Avro bodies, framing cut off; at least one.

        Returns:
            As :meth:`decode`: a ``pyarrow.Table`` of one row per body, in order, or
            ``None`` when the block cannot be vouched for.
        """
        checks = _checks(len(bodies))
        parts: list[bytes] = []
        append = parts.append
        for body, check in zip(bodies, checks, strict=False):  # checks may be longer
            append(body)
            append(check)
        data = b"".join(parts)
        block = b"".join(
            (
                self._container_header,
                _zigzag_varint(len(bodies)),
                _zigzag_varint(len(data)),
                data,
                _SYNC,
            )
        )
        import polars as pl
        import pyarrow as pa
        import pyarrow.compute as pc

        try:
            table = pl.read_avro(io.BytesIO(block)).to_arrow()
        except (Exception, pl.exceptions.PanicException):
            # A bad body makes polars raise its own errors, or panic (a BaseException)
            # on a length that runs past the block: either way, not vouched for.
            return None
        if table.num_rows != len(bodies):
            return None
        expected = np.arange(_CHECK_BASE, _CHECK_BASE + len(bodies), dtype=np.int64)
        if not pc.all(pc.equal(table.column(_CHECK_FIELD), pa.array(expected))).as_py():
            return None
        table = table.drop_columns([_CHECK_FIELD])
        for name in self._int_fields:
            index = table.schema.get_field_index(name)
            try:
                narrow = pc.cast(table.column(index), pa.int32())  # safe: refuses overflow
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                return None
            table = table.set_column(index, name, narrow)
        return table


def _widen_int(avro_type: Any) -> Any:
    """``int`` -> ``long`` in a field type (also inside a union)."""
    if isinstance(avro_type, list):
        return [_widen_int(t) for t in avro_type]
    return "long" if avro_type == "int" else avro_type

"""Whole micro-batches at once: the block encoder and decoder.

:class:`BlockEncoder` encodes a column batch of tuples (Arrow) into their single-object
encodings without a Python object per tuple; :class:`BlockDecoder` decodes a batch of
encoded tuples as one Avro container block, read by polars into Arrow, and falls back
to tuple-by-tuple decoding when it cannot vouch for the block."""

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


#: Avro primitive types :class:`BlockEncoder` writes itself, with a logical type or not.
_BLOCK_ENCODED = frozenset({"int", "long", "string", "bytes", "double", "float", "boolean"})


def _zigzag_varints(values: Any) -> tuple[Any, list[Any]]:
    """Avro's zig-zag varints of int64 ``values`` (Avro specification, "Binary Encoding").

    Returns:
        ``(lengths, groups)``: bytes per value (1-10), and the j-th byte of every value
        (continuation bit set where the value goes on), for j < max(lengths).
    """
    v = values.astype(np.int64, copy=False)
    zigzag = ((v << 1) ^ (v >> 63)).view(np.uint64)
    lengths = np.ones(len(zigzag), dtype=np.int64)
    rest = zigzag >> np.uint64(7)
    groups = []
    low = zigzag
    while True:
        more = rest != 0
        groups.append(
            ((low & np.uint64(0x7F)) | (more.astype(np.uint64) << np.uint64(7))).astype(np.uint8)
        )
        if not more.any():
            return lengths, groups
        lengths += more
        low, rest = rest, rest >> np.uint64(7)


def epoch_millis(column: Any) -> Any | None:
    """A ``timestamp-millis`` column as epoch milliseconds: an Arrow ``timestamp`` of
    whole milliseconds (any unit, any zone) cast to ``int64``, an integer column as it
    is (fastavro takes epoch-millisecond ints too); ``None`` for any other type or a
    timestamp with a fraction of a millisecond (the per-tuple path judges those)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_integer(column.type):
        return column
    if not pa.types.is_timestamp(column.type):
        return None
    try:
        millis = pc.cast(column, pa.timestamp("ms", column.type.tz))  # safe: no fraction
    except pa.ArrowInvalid:
        return None
    return pc.cast(millis, pa.int64())


def _scatter_varints(out: Any, positions: Any, lengths: Any, groups: list[Any], rows: Any) -> None:
    """Write the varints of ``rows`` (a boolean mask) at ``positions`` into ``out``."""
    for j, group in enumerate(groups):
        mask = rows & (lengths > j)
        out[positions[mask] + j] = group[mask]


class BlockEncoder:
    """Encode a table of tuples of one stream as single-object Avro, a column at a time.

    The per-tuple path (:meth:`StreamCodec.encode`, ``fastavro.schemaless_writer``) takes
    a dict per tuple: ~9 µs a flight on the 2-core development machine, half of the
    demo replay's CPU (py-spy, issue 9). Here every column of an Arrow table is turned
    into its Avro bytes with numpy (zig-zag varints for ``int``/``long``, a length
    varint and the UTF-8 bytes for ``string``, IEEE 754 little-endian for ``double``
    and ``float``, one byte for ``boolean`` and for a union's branch index) and the
    columns are interleaved row by row behind the ``C3 01`` + fingerprint header: the
    same bytes fastavro writes (property-tested against it), with no Python object
    per tuple but the result.

    Only what it can write exactly is written here: a table whose columns are the
    schema's fields (any order), with top-level fields of those primitive types (a
    ``timestamp-millis`` long from epoch-millisecond integers, or from an Arrow
    ``timestamp`` of whole milliseconds) or two-branch unions of one of them with
    ``null``. Anything else -- another column set, a nested or logical type it does
    not know, a null in a field that is not nullable, an ``int`` beyond 32 bits --
    is answered with ``None``, and the caller encodes tuple by tuple, which raises the
    :class:`~pipeline.errors.SchemaError` that names the field.

    A stream in another encoding than single-object (``confluent``) is never written
    here: :attr:`enabled` is ``False``.

    Args:
        codec: the stream's codec (its schema is the writer schema).
    """

    def __init__(self, codec: StreamCodec) -> None:
        self.codec = codec
        self._header = np.frombuffer(MAGIC + codec.schema.fingerprint, dtype=np.uint8)
        self._fields: list[tuple[str, str, int | None]] | None = []
        if codec.encoding != "single-object":  # another framing: tuple by tuple
            self._fields = None
            return
        for f in codec.schema.schema.get("fields", []):
            plan = self._plan(f["type"])
            if plan is None:
                self._fields = None
                break
            self._fields.append((f["name"], *plan))

    @staticmethod
    def _plan(avro_type: Any) -> tuple[str, int | None] | None:
        """``(primitive, null branch index or None)`` of a field type it can write."""
        null_index = None
        if isinstance(avro_type, list):
            if len(avro_type) != 2 or "null" not in avro_type:
                return None
            null_index = avro_type.index("null")
            avro_type = avro_type[1 - null_index]
        logical = None
        if isinstance(avro_type, dict):
            logical = avro_type.get("logicalType")
            avro_type = avro_type.get("type")
        if avro_type not in _BLOCK_ENCODED:
            return None
        if logical is not None and (avro_type, logical) != ("long", "timestamp-millis"):
            return None
        return ("timestamp-millis" if logical else avro_type), null_index

    @property
    def enabled(self) -> bool:
        """Whether the schema's fields are all of kinds this encoder writes."""
        return self._fields is not None

    def encode(self, table: Any) -> list[bytes] | None:
        """Encode every row of ``table`` (a ``pyarrow.Table`` or ``RecordBatch``).

        Returns:
            One single-object encoded tuple per row, in order; ``None`` when the table
            is not one this encoder writes exactly (see the class docstring).
        """
        import pyarrow as pa

        if self._fields is None or set(table.column_names) != {n for n, _, _ in self._fields}:
            return None
        rows = table.num_rows
        pieces = []
        try:
            for name, kind, null_index in self._fields:
                column = table.column(name)
                if isinstance(column, pa.ChunkedArray):
                    column = column.combine_chunks()
                piece = self._column(column, kind, null_index)
                if piece is None:
                    return None
                pieces.append(piece)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            return None
        header = len(self._header)
        sizes = np.full(rows, header, dtype=np.int64)
        for lengths, _ in pieces:
            sizes += lengths
        ends = np.cumsum(sizes)
        starts = ends - sizes
        out = np.empty(int(ends[-1]) if rows else 0, dtype=np.uint8)
        for j in range(header):
            out[starts + j] = self._header[j]
        positions = starts + header
        for lengths, write in pieces:
            write(out, positions)
            positions = positions + lengths
        data = out.tobytes()
        return [data[s:e] for s, e in zip(starts.tolist(), ends.tolist(), strict=True)]

    def _column(self, column: Any, kind: str, null_index: int | None) -> Any:
        """``(lengths, write)`` of one column: bytes per row, and ``write(out,
        positions)`` that puts them at ``positions``; ``None`` if it cannot."""
        rows = len(column)
        valid = np.ones(rows, dtype=bool)
        if column.null_count:
            if null_index is None:
                return None
            valid = column.is_valid().to_numpy(zero_copy_only=False)
        value = self._values(column, kind, valid)
        if value is None:
            return None
        value_lengths, write_value = value
        if null_index is None:
            return value_lengths, write_value
        branch = np.where(valid, 2 * (1 - null_index), 2 * null_index).astype(np.uint8)

        def write(out: Any, positions: Any) -> None:
            out[positions] = branch
            write_value(out, positions + 1)

        return 1 + value_lengths, write

    @staticmethod
    def _values(column: Any, kind: str, valid: Any) -> Any:
        """``(lengths, write)`` of the non-null values of a column (zero length where
        null); ``None`` if the column's Arrow type is not one it writes as ``kind``."""
        import pyarrow as pa
        import pyarrow.compute as pc

        arrow_type = column.type
        if kind in ("int", "long", "timestamp-millis"):
            if kind == "timestamp-millis":
                column = epoch_millis(column)
                if column is None:
                    return None
            elif not pa.types.is_integer(arrow_type):
                return None
            if kind == "int":
                column = pc.cast(column, pa.int32())  # refuses what 32 bits cannot hold
            numbers = pc.fill_null(column, 0).to_numpy(zero_copy_only=False)
            if numbers.dtype == np.uint64 and (numbers > np.iinfo(np.int64).max).any():
                return None
            lengths, groups = _zigzag_varints(numbers)

            def write_number(out: Any, positions: Any) -> None:
                _scatter_varints(out, positions, lengths, groups, valid)

            return np.where(valid, lengths, 0), write_number
        if kind in ("string", "bytes"):
            if kind == "string" and not (
                pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)
            ):
                return None
            if kind == "bytes" and not (
                pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type)
            ):
                return None
            if column.null_count:
                column = pc.fill_null(column, pa.scalar(b"" if kind == "bytes" else "", arrow_type))
            offsets = np.frombuffer(
                column.buffers()[1],
                dtype=np.int64
                if pa.types.is_large_string(arrow_type) or pa.types.is_large_binary(arrow_type)
                else np.int32,
            )[column.offset : column.offset + len(column) + 1].astype(np.int64)
            data_buffer = column.buffers()[2]
            data = (
                np.frombuffer(data_buffer, dtype=np.uint8)[offsets[0] : offsets[-1]]
                if data_buffer is not None
                else np.empty(0, dtype=np.uint8)
            )
            sizes = np.diff(offsets)
            lengths, groups = _zigzag_varints(sizes)
            relative = offsets[:-1] - offsets[0]

            def write_text(out: Any, positions: Any) -> None:
                _scatter_varints(out, positions, lengths, groups, valid)
                if len(data):
                    shift = positions + lengths - relative
                    out[np.repeat(shift, sizes) + np.arange(len(data))] = data

            return np.where(valid, lengths + sizes, 0), write_text
        if kind in ("double", "float"):
            if not (pa.types.is_floating(arrow_type) or pa.types.is_integer(arrow_type)):
                return None
            if kind == "float" and pa.types.is_integer(arrow_type):
                return None
            dtype = np.dtype("<f8" if kind == "double" else "<f4")
            numbers = pc.fill_null(column, 0).to_numpy(zero_copy_only=False)
            raw = numbers.astype(dtype).view(np.uint8).reshape(-1, dtype.itemsize)
            width = dtype.itemsize

            def write_float(out: Any, positions: Any) -> None:
                at = positions[valid]
                for j in range(width):
                    out[at + j] = raw[valid, j]

            return np.where(valid, width, 0), write_float
        if kind == "boolean":
            if not pa.types.is_boolean(arrow_type):
                return None
            flags = pc.fill_null(column, False).to_numpy(zero_copy_only=False).astype(np.uint8)

            def write_flag(out: Any, positions: Any) -> None:
                out[positions[valid]] = flags[valid]

            return np.where(valid, 1, 0), write_flag
        return None

"""Avro encoding of tuples with fastavro, and the schema repository.

Tuples are written in Avro *single-object encoding* (Avro specification,
"Single-object encoding"): the two-byte marker ``C3 01``, the 8-byte
little-endian CRC-64-AVRO fingerprint of the writer schema's Parsing Canonical
Form, then the Avro binary body. A reader therefore knows the writer's schema
without a schema registry: it looks the fingerprint up in the
:class:`SchemaRepository` (every ``.avsc`` file of ``schemas/``), and resolves
the writer schema to its own reader schema when they differ (Avro schema
resolution, so a stream's schema can evolve).

Schemas are parsed once and reused; records are written with
``strict_allow_default=True`` so an extra field, or a missing field
without a default, is refused; an Avro ``int`` outside 32 bits (which fastavro
would write as a varint without complaint) is refused too; and fastavro's
``ValueError``/``TypeError`` are wrapped in :class:`~pipeline.errors.SchemaError`
naming the stream and the field.
"""

from __future__ import annotations

import copy
import io
import json
import math
import operator
import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from functools import cached_property
from pathlib import Path
from typing import Any, cast

import fastavro
import numpy as np
from fastavro.schema import fingerprint as _fastavro_fingerprint
from fastavro.schema import parse_schema, to_parsing_canonical_form
from fastavro.validation import ValidationError as _AvroValidationError
from fastavro.validation import validate as _validate

from pipeline.errors import DeserializationError, SchemaError
from pipeline.resources import schema_dir

#: The two marker bytes that open every single-object encoded tuple.
MAGIC = b"\xc3\x01"
#: Bytes before the Avro body: marker + 8-byte fingerprint.
HEADER_SIZE = 10


Schema = dict[str, Any]


def fingerprint(schema: Schema) -> bytes:
    """The 8-byte CRC-64-AVRO fingerprint of a schema, little-endian, as written in the header.

    Args:
        schema: a schema as a dict (parsed or not).

    Returns:
        8 bytes.
    """
    canonical = to_parsing_canonical_form(parse_schema(copy.deepcopy(schema)))
    # fastavro returns the fingerprint's bytes in little-endian order as hex.
    return bytes.fromhex(_fastavro_fingerprint(canonical, "CRC-64-AVRO"))


def strip_logical_types(schema: Any) -> Any:
    """Return a copy of ``schema`` with every ``logicalType`` removed.

    The binary layout is unchanged (logical types only annotate); decoding with the
    stripped schema yields the underlying ints and longs (e.g. epoch milliseconds for
    ``timestamp-millis``), which is several times faster than building ``datetime``
    objects and is what the Spark source wants for Arrow anyway.
    """
    if isinstance(schema, dict):
        return {k: strip_logical_types(v) for k, v in schema.items() if k != "logicalType"}
    if isinstance(schema, list):
        return [strip_logical_types(v) for v in schema]
    return schema


@dataclass(frozen=True)
class RegisteredSchema:
    """A schema of the repository.

    Attributes:
        name: the file stem (``flight`` for ``schemas/flight.avsc``).
        schema: the schema as written in the file.
        fingerprint: its 8-byte CRC-64-AVRO fingerprint.
    """

    name: str
    schema: Schema
    fingerprint: bytes
    _parsed: dict[bool, Schema] = field(default_factory=dict, repr=False, compare=False)

    def parsed(self, *, logical: bool = True) -> Schema:
        """The fastavro-parsed schema, with (default) or without logical types."""
        if logical not in self._parsed:
            raw = self.schema if logical else strip_logical_types(self.schema)
            self._parsed[logical] = cast(Schema, parse_schema(copy.deepcopy(raw)))
        return self._parsed[logical]

    @cached_property
    def field_names(self) -> list[str]:
        """Top-level field names, in order."""
        return [f["name"] for f in self.schema.get("fields", [])]


class SchemaRepository:
    """The Avro schemas Floodgate knows, by name and by fingerprint.

    Args:
        schemas: ``{name: schema dict}``.

    Raises:
        SchemaError: a schema does not parse.
    """

    def __init__(self, schemas: Mapping[str, Schema]) -> None:
        self._by_name: dict[str, RegisteredSchema] = {}
        self._by_fingerprint: dict[bytes, RegisteredSchema] = {}
        for name, schema in schemas.items():
            try:
                fp = fingerprint(schema)
            except Exception as exc:
                raise SchemaError(f"schema {name!r} does not parse: {exc}", stream=name) from exc
            registered = RegisteredSchema(name=name, schema=schema, fingerprint=fp)
            self._by_name[name] = registered
            self._by_fingerprint[fp] = registered

    @classmethod
    def load(cls, directory: str | Path | None = None) -> SchemaRepository:
        """Load every ``*.avsc`` file of a directory (default: the schemas Floodgate
        ships, :func:`pipeline.resources.schema_dir`).

        Raises:
            SchemaError: the directory is missing or a file is not a valid schema.
        """
        directory = Path(directory) if directory is not None else schema_dir()
        if not directory.is_dir():
            raise SchemaError(f"schema directory {str(directory)!r} does not exist", stream="*")
        schemas: dict[str, Schema] = {}
        for path in sorted(directory.glob("*.avsc")):
            try:
                schemas[path.stem] = json.loads(path.read_text(encoding="utf-8"))
            except json.JSONDecodeError as exc:
                raise SchemaError(f"{path}: not JSON: {exc}", stream=path.stem) from exc
        return cls(schemas)

    def get(self, name: str) -> RegisteredSchema:
        """The schema named ``name``.

        Raises:
            SchemaError: no such schema; the message lists the known ones.
        """
        try:
            return self._by_name[name]
        except KeyError:
            raise SchemaError(
                f"no schema named {name!r}; known: {sorted(self._by_name)}", stream=name
            ) from None

    def by_fingerprint(self, fp: bytes) -> RegisteredSchema | None:
        """The schema with this 8-byte fingerprint, or ``None``."""
        return self._by_fingerprint.get(fp)

    def names(self) -> list[str]:
        """Names of every schema, sorted."""
        return sorted(self._by_name)

    def as_json(self) -> str:
        """The whole repository as JSON (``{name: schema}``), to ship to Spark workers."""
        return json.dumps({name: r.schema for name, r in self._by_name.items()})

    @classmethod
    def from_json(cls, text: str) -> SchemaRepository:
        """Inverse of :meth:`as_json`."""
        return cls(json.loads(text))


class TupleKey:
    """The Kafka key of a tuple: its key fields' values joined with ``|``.

    The one rule for every stream, input or output (``key = [...]`` in the query
    group file): each value is written as the text of what Avro stores for it, so one
    tuple has one key however its values were given (issue 26):

    * ``None`` is the empty string;
    * a ``datetime`` is its UTC epoch milliseconds (what ``timestamp-millis`` stores;
      sub-millisecond digits dropped, as Avro does); a naive ``datetime`` is taken as
      UTC, as the Avro specification defines ``timestamp-millis`` as an instant in
      UTC (never the process's local time zone);
    * a ``date`` is its days since 1970-01-01 (what the ``date`` logical type stores);
    * anything else is ``str(value)``: an ``int`` as its digits, a ``str`` as it is.

    So ``datetime(2013, 1, 1, 5, tzinfo=UTC)``, ``datetime(2013, 1, 1, 5)`` and
    ``1357016400000`` give the same key. A float for an ``int``/``long`` field is made
    an ``int`` (or refused) by :meth:`StreamCodec.normalise` before the key is taken;
    both the back-pressure client and the query groups' sinks build keys from
    normalised tuples, so a stream's tuples land on the same partitions whoever
    writes them. No key fields means no key.

    Args:
        fields: the key fields, in order.
    """

    def __init__(self, fields: Sequence[str]) -> None:
        self.fields = list(fields)
        self._get = operator.itemgetter(*self.fields) if self.fields else None

    def __call__(self, record: Mapping[str, Any]) -> bytes | None:
        """The key of ``record``; a missing field counts as ``None``.

        Returns:
            UTF-8 bytes, or ``None`` when the stream has no key fields.
        """
        if self._get is None:
            return None
        try:
            values = self._get(record)
        except KeyError:
            values = tuple(record.get(f) for f in self.fields)
        if len(self.fields) == 1:
            values = (values,)
        return "|".join(map(key_text, values)).encode()


#: 1970-01-01, the origin of Avro's ``date`` and ``timestamp-millis``.
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_DATE = _EPOCH.date()


def epoch_ms(value: datetime) -> int:
    """UTC epoch milliseconds of a ``datetime``, as Avro's ``timestamp-millis`` stores
    it: whole milliseconds, rounded towards the past; a naive ``datetime`` is taken as
    UTC (Avro specification, "Timestamps": an instant on the global timeline in UTC).
    Integer arithmetic: no float rounding at any magnitude."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def key_text(value: Any) -> str:
    """The text of one key field's value (the rule of :class:`TupleKey`)."""
    if value is None:
        return ""
    kind = type(value)
    if kind is int or kind is str:
        return str(value)
    if isinstance(value, datetime):
        return str(epoch_ms(value))
    if isinstance(value, date):
        return str((value - _EPOCH_DATE).days)
    return str(value)


class StreamCodec:
    """Encode and decode the tuples of one stream.

    Args:
        stream: the stream's name (used in errors).
        schema: the stream's schema: the writer schema when encoding, the reader
            schema when decoding.
        repository: where writer schemas are looked up by fingerprint when decoding.
    """

    def __init__(self, stream: str, schema: RegisteredSchema, repository: SchemaRepository) -> None:
        self.stream = stream
        self.schema = schema
        self.repository = repository
        self._header = MAGIC + schema.fingerprint
        self._writer = schema.parsed(logical=True)
        self._int_fields = _int_fields(schema.schema)
        self._checks = _field_checks(schema.schema)

    def normalise(self, record: Any) -> Mapping[str, Any]:
        """``record`` checked against the Python types the schema's fields take, with
        each value in the one form it is encoded and keyed from (issue 26: fastavro
        alone truncates ``1400.7`` into an ``int`` field and writes ``True`` as 1).

        Per top-level field type (also as the non-null branch of ``["null", T]``):

        * ``int``, ``long``: an ``int``; a float with no fraction (``1545.0``) becomes
          that ``int``; a float with one (``1400.7``), NaN, infinity and a ``bool``
          are refused; an ``int`` outside 32 bits is refused for ``int``;
        * ``timestamp-millis``: epoch milliseconds as an ``int`` (or a float with no
          fraction), or a ``datetime``, which becomes its UTC epoch milliseconds (a
          naive one is taken as UTC: :func:`epoch_ms`); a ``bool`` is refused;
        * ``date``: a ``date`` (days since 1970-01-01 once encoded) or those days as an
          ``int``; a ``datetime`` (a time of day Avro would drop) and a ``bool`` are refused;
        * ``double``, ``float``: a float, or an ``int`` (made a float); a ``bool`` is refused;
        * ``boolean``: a ``bool`` only (fastavro writes any truthy value as true).

        Values of other types are left to the encoder, which names the field too.

        Args:
            record: one tuple, ``{field: value}``.

        Returns:
            ``record`` itself when nothing needed changing, else a normalised copy.

        Raises:
            SchemaError: ``record`` is not a mapping (names its type), or a value is
                refused (names the field, the value and what the field takes).
        """
        if not isinstance(record, Mapping):
            raise SchemaError(
                f"stream {self.stream!r}: a tuple must be a dict of field -> value "
                f"(fields {self.schema.field_names}), not {type(record).__name__} "
                f"{_short(record)}",
                stream=self.stream,
            )
        changed: dict[str, Any] | None = None
        for name, accepted, convert, int32 in self._checks:
            value = record.get(name)
            if value is None:
                continue
            if type(value) in accepted and (not int32 or _INT_MIN <= value <= _INT_MAX):
                continue
            try:
                normal = convert(value)
            except (TypeError, ValueError, OverflowError) as exc:
                raise SchemaError(
                    f"stream {self.stream!r}: field {name!r} = {_short(value)} "
                    f"({type(value).__name__}) is refused: {exc}",
                    stream=self.stream,
                    field=name,
                ) from None
            if normal is not value:
                if changed is None:
                    changed = dict(record)
                changed[name] = normal
        return record if changed is None else changed

    def encode(self, record: Mapping[str, Any]) -> bytes:
        """Encode one tuple as single-object Avro.

        Args:
            record: ``{field: value}``; logical types take Python values
                (``datetime`` for ``timestamp-millis``, ``date`` for ``date``);
                normalised first (:meth:`normalise`).

        Returns:
            ``C3 01`` + fingerprint + Avro body.

        Raises:
            SchemaError: the record does not match the schema; names the field.
        """
        return self.encode_normalised(self.normalise(record))

    def encode_normalised(self, record: Mapping[str, Any]) -> bytes:
        """:meth:`encode` of a record :meth:`normalise` returned (not normalised again)."""
        buffer = io.BytesIO()
        buffer.write(self._header)
        try:
            # strict_allow_default: exactly the schema's fields, but a missing field
            # that has a default takes it (fastavro: it replaces ``strict``).
            fastavro.schemaless_writer(buffer, self._writer, record, strict_allow_default=True)
        except (ValueError, TypeError, KeyError, AttributeError, struct.error) as exc:
            raise self._encode_error(record, exc) from exc
        return buffer.getvalue()

    def encode_many(self, records: Iterator[Mapping[str, Any]] | list[Any]) -> list[bytes]:
        """Encode several tuples; same errors as :meth:`encode`."""
        return [self.encode(r) for r in records]

    def _encode_error(self, record: Mapping[str, Any], exc: Exception) -> SchemaError:
        field_name = _offending_field(self.schema, record)
        if field_name is not None:
            value = record.get(field_name, "<missing>")
            return SchemaError(
                f"stream {self.stream!r}: field {field_name!r} = {value!r} does not match "
                f"schema {self.schema.name!r}: {exc}",
                stream=self.stream,
                field=field_name,
            )
        return SchemaError(
            f"stream {self.stream!r}: tuple does not match schema {self.schema.name!r}: {exc}",
            stream=self.stream,
        )

    def writer_schema_of(self, data: bytes) -> RegisteredSchema:
        """The registered writer schema named by an encoded tuple's header.

        Raises:
            DeserializationError: ``bad-marker`` (not single-object Avro) or
                ``unknown-fingerprint``.
        """
        if len(data) < HEADER_SIZE or data[:2] != MAGIC:
            raise DeserializationError(
                f"not Avro single-object encoding (starts {bytes(data[:4]).hex() or 'empty'}, "
                f"expected marker c301)",
                reason="bad-marker",
                stream=self.stream,
            )
        fp = bytes(data[2:HEADER_SIZE])
        if fp == self.schema.fingerprint:
            return self.schema
        writer = self.repository.by_fingerprint(fp)
        if writer is None:
            raise DeserializationError(
                f"unknown schema fingerprint {fp.hex()}; the schema repository knows "
                f"{self.repository.names()}",
                reason="unknown-fingerprint",
                stream=self.stream,
            )
        return writer

    def decode(self, data: bytes, *, logical: bool = True) -> dict[str, Any]:
        """Decode one tuple into the stream's schema.

        Args:
            data: single-object encoded bytes.
            logical: ``False`` leaves logical types as their underlying ints/longs.

        Returns:
            ``{field: value}`` shaped by the stream's (reader) schema.

        Raises:
            DeserializationError: ``bad-marker``, ``unknown-fingerprint``, or
                ``bad-body`` (the body is not valid for the writer schema).
        """
        writer = self.writer_schema_of(data)
        reader = None if writer is self.schema else self.schema.parsed(logical=logical)
        try:
            record = fastavro.schemaless_reader(
                io.BytesIO(data[HEADER_SIZE:]), writer.parsed(logical=logical), reader
            )
        except Exception as exc:
            raise DeserializationError(
                f"Avro body does not decode with schema {writer.name!r}: "
                f"{type(exc).__name__}: {exc}",
                reason="bad-body",
                stream=self.stream,
            ) from exc
        if not isinstance(record, dict):
            raise DeserializationError(
                f"Avro body decodes to {type(record).__name__}, not a record",
                reason="bad-body",
                stream=self.stream,
            )
        return record


_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1


def _short(value: Any) -> str:
    """``repr(value)``, cut to 80 characters for an error message."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _whole(value: Any) -> int:
    """An integer given as an ``int`` or a float with no fraction (``1545.0``).

    Raises:
        TypeError: a ``bool``, or not a number.
        ValueError: a float with a fraction, NaN or infinity.
    """
    if isinstance(value, bool | np.bool_):
        raise TypeError("a bool is not an integer; give an int")
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        if not math.isfinite(value) or not float(value).is_integer():
            raise ValueError(
                "an integer field takes an int, or a float with no fraction (1545.0); "
                "it is never truncated"
            )
        return int(value)
    raise TypeError(f"an integer field takes an int, not {type(value).__name__}")


def _to_int(value: Any) -> int:
    number = _whole(value)
    if not _INT_MIN <= number <= _INT_MAX:
        raise ValueError(f"{number} is outside Avro int's 32 bits ({_INT_MIN}..{_INT_MAX})")
    return number


def _to_timestamp_millis(value: Any) -> int:
    if isinstance(value, datetime):
        return epoch_ms(value)
    try:
        return _whole(value)
    except TypeError:
        raise TypeError(
            "a timestamp-millis field takes a datetime (naive: UTC) or epoch milliseconds "
            f"as an int, not {type(value).__name__}"
        ) from None


def _to_date(value: Any) -> Any:
    if isinstance(value, datetime):
        raise TypeError("a date field takes a date (or days since 1970-01-01), not a datetime")
    if isinstance(value, date):
        return value
    try:
        return _to_int(value)
    except TypeError:
        raise TypeError(
            f"a date field takes a date or days since 1970-01-01 as an int, not "
            f"{type(value).__name__}"
        ) from None


def _to_float(value: Any) -> float:
    if isinstance(value, bool | np.bool_):
        raise TypeError("a bool is not a number; give a float")
    if isinstance(value, int | float | np.integer | np.floating):
        return float(value)
    raise TypeError(f"a floating-point field takes a float or an int, not {type(value).__name__}")


def _to_bool(value: Any) -> bool:
    if isinstance(value, np.bool_):
        return bool(value)
    raise TypeError(f"a boolean field takes True or False, not {type(value).__name__}")


#: ``(types taken as they are, conversion of any other value)`` per field kind.
_CHECKS: dict[str, tuple[frozenset[type], Any]] = {
    "int": (frozenset({int}), _to_int),
    "long": (frozenset({int}), _whole),
    "timestamp-millis": (frozenset({int}), _to_timestamp_millis),
    "date": (frozenset({date}), _to_date),
    "double": (frozenset({float}), _to_float),
    "float": (frozenset({float}), _to_float),
    "boolean": (frozenset({bool}), _to_bool),
}


def _field_kind(avro_type: Any) -> str | None:
    """The :data:`_CHECKS` kind of a field type (or of ``T`` in ``["null", T]``)."""
    if isinstance(avro_type, list):
        others = [t for t in avro_type if t != "null"]
        if len(others) != 1:
            return None
        avro_type = others[0]
    logical = None
    if isinstance(avro_type, dict):
        logical = avro_type.get("logicalType")
        avro_type = avro_type.get("type")
    if logical is not None:
        kind = {("long", "timestamp-millis"): "timestamp-millis", ("int", "date"): "date"}
        return kind.get((avro_type, logical))
    return avro_type if avro_type in _CHECKS else None


def _field_checks(schema: Schema) -> list[tuple[str, frozenset[type], Any, bool]]:
    """``(field, types taken as they are, conversion of other values, int32)`` of every
    top-level field :meth:`StreamCodec.normalise` checks; ``int32``: an ``int`` field,
    whose values are range-checked too."""
    checks = []
    for f in schema.get("fields", []):
        kind = _field_kind(f["type"])
        if kind is not None:
            accepted, convert = _CHECKS[kind]
            checks.append((f["name"], accepted, convert, kind == "int"))
    return checks


def field_kind(schema: Schema, name: str) -> str | None:
    """What a top-level field holds: ``int``, ``long``, ``timestamp-millis``, ``date``,
    ``double``, ``float``, ``boolean`` or ``string`` (also as ``T`` of ``["null", T]``);
    ``None`` for another type or no such field."""
    for f in schema.get("fields", []):
        if f["name"] == name:
            types = f["type"] if isinstance(f["type"], list) else [f["type"]]
            if [t for t in types if t != "null"] == ["string"]:
                return "string"
            return _field_kind(f["type"])
    return None


def _int_fields(schema: Schema) -> list[str]:
    """Top-level fields whose type is Avro ``int`` (or ``["null", "int"]``), logical or not."""
    names = []
    for f in schema.get("fields", []):
        types = f["type"] if isinstance(f["type"], list) else [f["type"]]
        for t in types:
            base = t.get("type") if isinstance(t, dict) else t
            if base == "int":
                names.append(f["name"])
                break
    return names


def _offending_field(schema: RegisteredSchema, record: Mapping[str, Any]) -> str | None:
    """Name the first top-level field of ``record`` that does not validate."""
    if not isinstance(record, Mapping):
        return None
    for f in schema.schema.get("fields", []):
        name = f["name"]
        if name not in record:
            if "default" not in f:
                return str(name)
            continue
        value = record[name]
        if (
            name in _int_fields(schema.schema)
            and isinstance(value, int)
            and not _INT_MIN <= value <= _INT_MAX
        ):
            return str(name)
        try:
            _validate(value, _field_schema(schema, name), raise_errors=True)
        except (_AvroValidationError, ValueError, TypeError):
            return str(name)
    extra = [k for k in record if k not in schema.field_names]
    return str(extra[0]) if extra else None


def _field_schema(schema: RegisteredSchema, name: str) -> Any:
    parsed = schema.parsed(logical=True)
    for f in parsed["fields"]:
        if f["name"] == name:
            return f["type"]
    raise KeyError(name)


# --------------------------------------------------------------------------- block decoding

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
        self._int_fields = _int_fields(record)
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
        #: schema has a type polars reads differently, so the fast path stays off.
        self.enabled = True

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
        checks = _checks(len(values))
        parts: list[bytes] = []
        append = parts.append
        for value, check in zip(values, checks, strict=False):  # checks may be longer
            if value is None or not value.startswith(header):
                return None
            append(value[HEADER_SIZE:])
            append(check)
        data = b"".join(parts)
        block = b"".join(
            (
                self._container_header,
                _zigzag_varint(len(values)),
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
        if table.num_rows != len(values):
            return None
        expected = np.arange(_CHECK_BASE, _CHECK_BASE + len(values), dtype=np.int64)
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


# --------------------------------------------------------------------------- block encoding

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

    Args:
        codec: the stream's codec (its schema is the writer schema).
    """

    def __init__(self, codec: StreamCodec) -> None:
        self.codec = codec
        self._header = np.frombuffer(MAGIC + codec.schema.fingerprint, dtype=np.uint8)
        self._fields: list[tuple[str, str, int | None]] | None = []
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

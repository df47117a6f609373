"""A stream's codec: tuples to single-object encoded Avro and back, with their keys."""

from __future__ import annotations

import io
import math
import operator
import struct
from collections.abc import Mapping, Sequence
from datetime import UTC, date, datetime
from typing import Any

import fastavro
import numpy as np
from fastavro.validation import ValidationError as _AvroValidationError
from fastavro.validation import validate as _validate

from pipeline.errors import DeserializationError, SchemaError
from pipeline.serde.schemas import HEADER_SIZE, MAGIC, RegisteredSchema, Schema, SchemaRepository

#: The range of an Avro ``int`` (32 bits, signed).
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1


class TupleKey:
    """The Kafka key of a tuple: its key fields' values joined with ``|``.

    The one rule for every stream, input or output (``key = [...]`` in the query
    group file): each value is written as the text of what Avro stores for it, so one
    tuple has one key however its values were given:

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

    #: How the stream's tuples are framed: Avro single-object encoding here;
    #: ``confluent`` for :class:`~pipeline.serde.confluent.ConfluentCodec`.
    encoding = "single-object"

    def __init__(self, stream: str, schema: RegisteredSchema, repository: SchemaRepository) -> None:
        self.stream = stream
        self.schema = schema
        self.repository = repository
        self._header = MAGIC + schema.fingerprint
        self._writer = schema.parsed(logical=True)
        self._int_fields = int_fields(schema.schema)
        self._checks = _field_checks(schema.schema)

    def normalise(self, record: Any) -> Mapping[str, Any]:
        """``record`` checked against the Python types the schema's fields take, with
        each value in the one form it is encoded and keyed from (fastavro alone
        truncates ``1400.7`` into an ``int`` field and writes ``True`` as 1).

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
        return self._record(record)

    def _record(self, decoded: Any) -> dict[str, Any]:
        """``decoded`` when it is a record (a dict); else ``DeserializationError``
        (``bad-body``): a stream's values are Avro records."""
        if not isinstance(decoded, dict):
            raise DeserializationError(
                f"Avro body decodes to {type(decoded).__name__}, not a record",
                reason="bad-body",
                stream=self.stream,
            )
        return decoded


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


def int_fields(schema: Schema) -> list[str]:
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
            name in int_fields(schema.schema)
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

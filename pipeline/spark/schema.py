"""A stream's Avro schema as a Spark schema: the columns the source reads."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from pipeline.errors import SchemaError
from pipeline.serde.schemas import RegisteredSchema

#: Columns the source adds to every decoded stream's own fields (Floodgate's names).
METADATA_COLUMNS = ("event_time", "_key", "_partition", "_offset", "_timestamp")

#: Spark's Kafka source columns (``KafkaRecordToRowConverter.kafkaSchema``), every one
#: nullable as there: ``key`` and ``value`` binary (raw bytes), ``topic`` string,
#: ``partition`` int, ``offset`` long, ``timestamp`` timestamp, ``timestampType`` int
#: (0 CreateTime, 1 LogAppendTime); ``headers`` only with ``includeHeaders``.
KAFKA_SCHEMA = StructType(
    [
        StructField("key", BinaryType(), True),
        StructField("value", BinaryType(), True),
        StructField("topic", StringType(), True),
        StructField("partition", IntegerType(), True),
        StructField("offset", LongType(), True),
        StructField("timestamp", TimestampType(), True),
        StructField("timestampType", IntegerType(), True),
    ]
)

#: Spark's ``headers`` column: ``array<struct<key: string, value: binary>>``.
HEADERS_FIELD = StructField(
    "headers",
    ArrayType(
        StructType(
            [StructField("key", StringType(), True), StructField("value", BinaryType(), True)]
        ),
        True,
    ),
    True,
)


_AVRO_TO_SPARK: dict[str, DataType] = {
    "int": IntegerType(),
    "long": LongType(),
    "float": FloatType(),
    "double": DoubleType(),
    "boolean": BooleanType(),
    "string": StringType(),
    "bytes": BinaryType(),
    "enum": StringType(),
}


_LOGICAL_TO_SPARK: dict[str, DataType] = {
    "timestamp-millis": TimestampType(),
    "timestamp-micros": TimestampType(),
    "date": DateType(),
}


def _spark_field(stream: str, avro_field: Mapping[str, Any]) -> StructField:
    name = avro_field["name"]
    avro_type = avro_field["type"]
    nullable = False
    if isinstance(avro_type, list):
        branches = [t for t in avro_type if t != "null"]
        nullable = len(branches) < len(avro_type)
        if len(branches) != 1:
            raise SchemaError(
                f"stream {stream!r}: field {name!r} is a union of {avro_type}; the source "
                'supports only ["null", T]',
                stream=stream,
                field=name,
            )
        avro_type = branches[0]
    if isinstance(avro_type, Mapping):
        logical = avro_type.get("logicalType")
        if logical in _LOGICAL_TO_SPARK:
            return StructField(name, _LOGICAL_TO_SPARK[logical], nullable)
        avro_type = avro_type.get("type")
    if isinstance(avro_type, str) and avro_type in _AVRO_TO_SPARK:
        return StructField(name, _AVRO_TO_SPARK[avro_type], nullable)
    raise SchemaError(
        f"stream {stream!r}: field {name!r} has Avro type {avro_type!r}, which the source "
        f"does not map to a Spark column (supported: {sorted(_AVRO_TO_SPARK)} and "
        f"{sorted(_LOGICAL_TO_SPARK)})",
        stream=stream,
        field=name,
    )


def kafka_columns(include_headers: bool) -> list[StructField]:
    """Spark's Kafka source columns (:data:`KAFKA_SCHEMA`), ``headers`` last when
    ``include_headers``."""
    return [*KAFKA_SCHEMA.fields, *([HEADERS_FIELD] if include_headers else [])]


def key_struct(stream: str, key_schema: RegisteredSchema) -> StructType:
    """The ``key`` column of a stream whose key is in the Confluent wire format: a
    struct of the key record's fields (:func:`pipeline.serde.confluent.key_schema`),
    each typed as the same field of the stream's columns (a ``timestamp-millis`` field
    a timestamp, a ``date`` a date), nullable as there.

    Raises:
        SchemaError: a key field's Avro type has no Spark column type here.
    """
    return StructType([_spark_field(stream, f) for f in key_schema.schema["fields"]])


def spark_schema(
    stream: str,
    schema: RegisteredSchema | None,
    *,
    include_headers: bool = False,
    key_schema: RegisteredSchema | None = None,
) -> StructType:
    """The Spark schema of a stream read by this source.

    Args:
        stream: the stream's name (for errors).
        schema: the stream's Avro schema; ``None`` when the source decodes nothing.
        include_headers: option ``includeHeaders``: add Spark's ``headers`` column.
        key_schema: the key record's schema of ``keyEncoding = confluent``: the
            ``key`` column is then :func:`key_struct`, not binary (``_key`` stays the
            key's bytes).

    Returns:
        Without a schema, Spark's Kafka source columns exactly (:func:`kafka_columns`).
        With one: the Avro record's fields in order, then ``event_time`` (timestamp),
        ``_key`` (binary), ``_partition`` (int), ``_offset`` (long) and ``_timestamp``
        (the Kafka record timestamp), then Spark's Kafka columns but those whose
        names a field of the stream takes (the stream's field wins).

    Raises:
        SchemaError: a field's Avro type has no Spark column type here, or a field
            clashes with a metadata column.
    """
    if schema is None:
        return StructType(kafka_columns(include_headers))
    fields = [_spark_field(stream, f) for f in schema.schema.get("fields", [])]
    clash = {f.name for f in fields} & set(METADATA_COLUMNS)
    if clash:
        raise SchemaError(
            f"stream {stream!r}: fields {sorted(clash)} clash with the source's metadata columns",
            stream=stream,
        )
    names = {f.name for f in fields}
    return StructType(
        [
            *fields,
            StructField("event_time", TimestampType(), True),
            StructField("_key", BinaryType(), True),
            StructField("_partition", IntegerType(), False),
            StructField("_offset", LongType(), False),
            StructField("_timestamp", TimestampType(), True),
            *(
                StructField("key", key_struct(stream, key_schema), True)
                if f.name == "key" and key_schema is not None
                else f
                for f in kafka_columns(include_headers)
                if f.name not in names
            ),
        ]
    )

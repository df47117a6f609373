"""What a query group checks before its queries run, so that a bad file is refused at
start with the key at fault, never mid-stream: every schema it names exists, each input
stream's ``timestamp_field`` is a field of its schema, and each query's SQL analyses and
produces every field of its output stream's schema and every column of its key.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from pipeline.config import QueryGroupConfig
from pipeline.errors import ConfigError
from pipeline.serde.schemas import SchemaRepository


def check_schemas(config: QueryGroupConfig, schemas: SchemaRepository) -> None:
    """Refuse a file naming a schema ``schemas`` does not hold, or a ``timestamp_field``
    its input stream's schema does not have.

    Raises:
        ConfigError: naming the key, the value and the schemas or fields there are.
    """
    for kind, streams in (
        ("input_streams", config.input_streams),
        ("output_streams", config.output_streams),
    ):
        for name, stream in streams.items():
            if stream.schema_ not in schemas.names():
                raise ConfigError(
                    f"{kind}.{name}.schema = {stream.schema_!r}: no such schema; "
                    f"known: {schemas.names()}",
                    key=f"{kind}.{name}.schema",
                    value=stream.schema_,
                    allowed=", ".join(schemas.names()),
                )
    for name, stream in config.input_streams.items():
        fields = schemas.get(stream.schema_).field_names
        if stream.timestamp_field and stream.timestamp_field not in fields:
            raise ConfigError(
                f"input_streams.{name}.timestamp_field = {stream.timestamp_field!r} is not a "
                f"field of schema {stream.schema_!r}; fields: {fields}",
                key=f"input_streams.{name}.timestamp_field",
                value=stream.timestamp_field,
                allowed=", ".join(fields),
            )


def analysed_query(
    spark: SparkSession, config: QueryGroupConfig, schemas: SchemaRepository, name: str
) -> DataFrame:
    """Query ``name``'s SQL analysed over the input views registered in ``spark``,
    checked against its output stream: every field of the stream's schema and every
    column of its key is a column the query produces.

    Raises:
        ConfigError: the SQL does not analyse (``queries.<name>.sql``, Spark's reason),
            a schema field is missing (naming the columns produced), or a key column is
            (``output_streams.<stream>.key``).
    """
    query_config = config.queries[name]
    output = config.output_streams[query_config.output]
    try:
        df = spark.sql(query_config.sql)
    except Exception as exc:
        raise ConfigError(
            f"queries.{name}.sql does not analyse: {exc}", key=f"queries.{name}.sql"
        ) from exc
    schema = schemas.get(output.schema_)
    missing = [f for f in schema.field_names if f not in df.columns]
    if missing:
        raise ConfigError(
            f"queries.{name}: columns {missing} of output schema {output.schema_!r} are not "
            f"produced by the query; it produces {df.columns}",
            key=f"queries.{name}.sql",
            allowed=", ".join(schema.field_names),
        )
    absent_keys = [k for k in output.key if k not in df.columns]
    if absent_keys:
        raise ConfigError(
            f"output_streams.{query_config.output}.key names columns {absent_keys} the query "
            f"{name!r} does not produce; it produces {df.columns}",
            key=f"output_streams.{query_config.output}.key",
            value=output.key,
            allowed=", ".join(df.columns),
        )
    return df

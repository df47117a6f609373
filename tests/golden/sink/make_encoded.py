"""Remake tests/golden/sink/encoded.json: the bytes a query's output rows become, as the
Python codec writes them, which the JVM sink's encoder (``TupleEncoderGoldenTest``,
``io.floodgate.spark.write.TupleEncoder``) must give byte for byte.

Run from the repository's root: ``.venv/bin/python tests/golden/sink/make_encoded.py``.
``tests/unit/pipeline/spark/test_golden_encoded.py`` makes the cases again in memory
and fails when the file is not what this script writes, so the file cannot drift
from the Python codec it was made with.

Each case is a query's output: the output stream's Avro schema, the Spark columns of its
rows (name and Spark type, as ``DataType.simpleString`` names them), the key columns,
the encoding (``single-object``, or ``confluent`` with the registry's schema id), and
rows. A row's ``values`` are in Spark's internal form, one per column: numbers,
``"NaN"``/``"Infinity"``/``"-Infinity"`` for those floats, a ``date`` as days since
1970-01-01, a ``timestamp``/``timestamp_ntz`` as epoch microseconds, a ``binary`` as
hex. The row is handed to the Python side as Spark hands it through Arrow
(``DataFrame.toArrow().to_pylist()``: a ``pyarrow`` array of the Arrow type Spark gives
the column, read back as Python values), then written as the Python ``foreachBatch``
sink the JVM sink replaced wrote it (:func:`python_write`: every schema field taken from
the row and normalised, the key from the normalised tuple when every key column is a
schema field, then encoded). The expected ``key``/``value`` are hex (``key`` ``null``:
no key columns); a row the sink refuses has ``error`` instead, the Python
``SchemaError``'s text, and ``error_parts``, the pieces of it the JVM's refusal must
contain too (the value's Python ``repr`` is left out for a ``datetime``, and fastavro's
own words after "does not match schema").

Confluent cases are written by ``ConfluentCodec`` on confluent-kafka's mock registry
(``mock://``), whose next id is set to :data:`SCHEMA_ID` first.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any
from unittest import mock

import pyarrow as pa

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from pipeline.errors import SchemaError  # noqa: E402
from pipeline.serde.codec import StreamCodec  # noqa: E402
from pipeline.serde.confluent import ConfluentCodec  # noqa: E402
from pipeline.serde.schemas import RegisteredSchema, SchemaRepository, fingerprint  # noqa: E402

OUT = Path(__file__).resolve().parent / "encoded.json"

#: The schema id of the Confluent cases: four distinct bytes, so the big-endian
#: order of the framing shows.
SCHEMA_ID = 0x01020304

#: The Arrow type Spark's ``toArrow`` gives each Spark type (timestamps in the
#: session's time zone, here UTC; the instant is the same in any).
ARROW = {
    "tinyint": pa.int8(),
    "smallint": pa.int16(),
    "int": pa.int32(),
    "bigint": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "boolean": pa.bool_(),
    "string": pa.string(),
    "binary": pa.binary(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
}

_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _schema(name: str) -> dict[str, Any]:
    loaded = json.loads((ROOT / "schemas" / f"{name}.avsc").read_text(encoding="utf-8"))
    return dict(loaded)


def _record(fields: list[dict[str, Any]], name: str = "Golden") -> dict[str, Any]:
    return {"type": "record", "name": name, "namespace": "floodgate.golden", "fields": fields}


TS_MILLIS = {"type": "long", "logicalType": "timestamp-millis"}
TS_MICROS = {"type": "long", "logicalType": "timestamp-micros"}
DATE = {"type": "int", "logicalType": "date"}
ENUM = {"type": "enum", "name": "Colour", "symbols": ["RED", "GREEN", "BLUE"]}

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
#: 2**60 + 2**36 + 1: a float from this long directly rounds up; through a double
#: (as Python's float(), then fastavro's float32) it ties to even, down. The JVM
#: must take the Python path.
LONG_TO_FLOAT_TWICE_ROUNDED = 2**60 + 2**36 + 1


def _flight_row(**changes: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "year": 2013,
        "month": 1,
        "day": 1,
        "dep_time": 517,
        "sched_dep_time": 515,
        "dep_delay": 2,
        "arr_time": 830,
        "sched_arr_time": 819,
        "arr_delay": 11,
        "carrier": "UA",
        "flight": 1545,
        "tailnum": "N14228",
        "origin": "EWR",
        "dest": "IAH",
        "air_time": 227,
        "distance": 1400,
        "hour": 5,
        "minute": 15,
        "time_hour": 1_357_034_400_000_000,
        "event_time": 1_357_034_400_000_000,
        "_partition": 3,
    }
    row.update(changes)
    return row


FLIGHT_COLUMNS = [
    ["year", "int"],
    ["month", "int"],
    ["day", "int"],
    ["dep_time", "int"],
    ["sched_dep_time", "int"],
    ["dep_delay", "int"],
    ["arr_time", "int"],
    ["sched_arr_time", "int"],
    ["arr_delay", "int"],
    ["carrier", "string"],
    ["flight", "int"],
    ["tailnum", "string"],
    ["origin", "string"],
    ["dest", "string"],
    ["air_time", "int"],
    ["distance", "int"],
    ["hour", "int"],
    ["minute", "int"],
    ["time_hour", "timestamp"],
    # Not fields of the schema: left out of the value.
    ["event_time", "timestamp"],
    ["_partition", "int"],
]


def _flight_rows() -> list[list[Any]]:
    rows = [
        _flight_row(),
        # A cancelled flight: the nullable fields null.
        _flight_row(dep_time=None, dep_delay=None, arr_time=None, arr_delay=None, air_time=None),
        _flight_row(tailnum=None, carrier="B6", flight=-1, dep_delay=-43),
        _flight_row(dep_delay=INT_MIN, arr_delay=INT_MAX, tailnum="Ñ漢字🙂", origin=""),
        # Before 1970, sub-millisecond: millis rounded towards the past.
        _flight_row(time_hour=-1, year=1969),
        _flight_row(time_hour=-1_001, distance=0),
        _flight_row(time_hour=1_357_034_400_000_999),
    ]
    return [[row[name] for name, _ in FLIGHT_COLUMNS] for row in rows]


DELAYS_COLUMNS = [
    ["carrier", "string"],
    ["day", "date"],
    ["flights", "bigint"],
    ["departures", "bigint"],
    ["mean_dep_delay", "double"],
    ["mean_arr_delay", "double"],
]

DELAYS_ROWS = [
    ["UA", 15706, 165, 160, 12.639240506329115, 5.841772151898734],
    ["AA", -1, 0, 0, None, None],
    ["9E", 0, LONG_MAX, LONG_MIN, "NaN", "Infinity"],
    ["B6", 15707, 3, 3, -0.0, "-Infinity"],
    ["EV", 2932896, 1, 1, 1e-05, 1e16],
]

EVERY_TYPE_SCHEMA = _record(
    [
        {"name": "i", "type": "int"},
        {"name": "l", "type": "long"},
        {"name": "f", "type": "float"},
        {"name": "d", "type": "double"},
        {"name": "b", "type": "boolean"},
        {"name": "s", "type": "string"},
        {"name": "by", "type": "bytes"},
        {"name": "e", "type": ENUM},
        {"name": "tm", "type": TS_MILLIS},
        {"name": "tu", "type": TS_MICROS},
        {"name": "dt", "type": DATE},
        {"name": "ni", "type": ["null", "int"], "default": None},
        {"name": "ns", "type": ["string", "null"], "default": "none"},
        {"name": "nd", "type": ["null", DATE], "default": None},
        {"name": "ntm", "type": ["null", TS_MILLIS], "default": None},
        {"name": "nl", "type": ["null", "long"], "default": None},
    ],
    name="EveryType",
)

EVERY_TYPE_COLUMNS = [
    ["extra", "string"],
    ["i", "int"],
    ["l", "bigint"],
    ["f", "float"],
    ["d", "double"],
    ["b", "boolean"],
    ["s", "string"],
    ["by", "binary"],
    ["e", "string"],
    ["tm", "timestamp"],
    ["tu", "timestamp"],
    ["dt", "date"],
    ["ni", "int"],
    ["ns", "string"],
    ["nd", "date"],
    ["ntm", "timestamp"],
    # nl: no column, so null (the sink takes every schema field from the row).
]

EVERY_TYPE_ROWS = [
    ["x", 1, 2, 0.5, 0.1, True, "a", "00ff", "GREEN", 0, 0, 0, 7, "n", 1, 5, ],
    ["", -1, -2, -1.5, -2.5, False, "", "", "RED", -1, -1, -1, None, None, None, None],
    [None, INT_MAX, LONG_MAX, "NaN", "Infinity", True, "é|ü", "7c", "BLUE",
     1_577_836_800_123_456, 1_577_836_800_123_456, 18262, INT_MIN, "🙂", 18262,
     -1_577_836_800_123_456],
    ["y", INT_MIN, LONG_MIN, 3.4028234663852886e38, 5e-324, False, "a\x00b", "00", "RED",
     -999, 999, -719162, 0, "", -719162, 1],
]  # fmt: skip


def _small(
    name: str, avro: Any, spark: str, rows: Sequence[Any], *, key: bool = True
) -> dict[str, Any]:
    """A case of one field ``x`` of Avro type ``avro`` from a column of ``spark``, keyed
    by it (the key then comes from the normalised value)."""
    field: dict[str, Any] = {"name": "x", "type": avro}
    return {
        "name": name,
        "schema": _record([field]),
        "columns": [["x", spark]],
        "key": ["x"] if key else [],
        "rows": [[v] for v in rows],
    }


def _conversions() -> list[dict[str, Any]]:
    """Every Avro type from the Spark types a query gives it: taken, converted, refused
    (StreamCodec.normalise, then fastavro)."""
    big = 2**53 + 1
    return [
        _small("int from int", "int", "int", [0, -1, INT_MAX, INT_MIN, None]),
        _small("int from tinyint", "int", "tinyint", [127, -128]),
        _small("int from smallint", "int", "smallint", [32767, -32768]),
        _small("int from bigint", "int", "bigint", [INT_MAX, INT_MIN, INT_MAX + 1, INT_MIN - 1]),
        _small(
            "int from double",
            "int",
            "double",
            [1545.0, -0.0, -7.0, 1400.7, "NaN", "Infinity", "-Infinity", 2147483648.0],
        ),
        _small("int from float", "int", "float", [3.0, 0.5]),
        _small("int from boolean", "int", "boolean", [True]),
        _small("int from string", "int", "string", ["5"]),
        _small("int from date", "int", "date", [1]),
        _small("long from int", "long", "int", [INT_MIN, 5]),
        _small("long from bigint", "long", "bigint", [LONG_MAX, LONG_MIN, 0, None]),
        _small("long from double", "long", "double", [1e15, -2.0, 9.2e18, 1.5, "NaN"]),
        _small("long from boolean", "long", "boolean", [False]),
        _small("long from timestamp", "long", "timestamp", [0]),
        _small("nullable int", ["null", "int"], "int", [None, 5, INT_MIN]),
        _small("nullable int from bigint", ["null", "int"], "bigint", [None, INT_MAX + 1]),
        _small("int or null", ["int", "null"], "int", [None, 5]),
        _small(
            "float from float",
            "float",
            "float",
            [0.1, -1.5, "NaN", "Infinity", 3.4028234663852886e38, 1.401298464324817e-45],
        ),
        _small("float from double", "float", "double", [0.1, 1e300, -1e-50, "-Infinity"]),
        _small("float from int", "float", "int", [16777217, -3]),
        _small("float from bigint", "float", "bigint", [LONG_TO_FLOAT_TWICE_ROUNDED, big]),
        _small("float from boolean", "float", "boolean", [True]),
        _small(
            "double from double",
            "double",
            "double",
            [0.1, -0.0, "NaN", "Infinity", "-Infinity", 1.7976931348623157e308, 5e-324],
        ),
        _small("double from int", "double", "int", [5, INT_MIN]),
        _small("double from bigint", "double", "bigint", [big, LONG_MAX]),
        _small("double from float", "double", "float", [0.1, -2.5]),
        _small("double from boolean", "double", "boolean", [False]),
        _small("double from string", "double", "string", ["1.5"]),
        _small("nullable double", ["null", "double"], "double", [None, 2.5]),
        # Not a null: fastavro writes None as false into a "boolean" field (the JVM
        # refuses it, as every other field that is no union with null).
        _small("boolean from boolean", "boolean", "boolean", [True, False]),
        _small("boolean from int", "boolean", "int", [1]),
        _small("string from string", "string", "string", ["", "a|b", "Ñ漢字🙂", "tab\t", None]),
        _small("string from int", "string", "int", [5]),
        _small("string from binary", "string", "binary", ["6162"]),
        _small("nullable string", ["null", "string"], "string", [None, "x"]),
        _small("bytes from binary", "bytes", "binary", ["", "00ff10"]),
        _small("bytes from string", "bytes", "string", ["ab"]),
        _small("enum from string", ENUM, "string", ["RED", "BLUE", "PURPLE", "red"]),
        _small("enum from int", ENUM, "int", [1]),
        _small("nullable enum", ["null", ENUM], "string", [None, "GREEN"]),
        _small(
            "timestamp-millis from timestamp",
            TS_MILLIS,
            "timestamp",
            [0, -1, -1000, -1001, 1_357_016_400_000_123, None],
        ),
        _small("timestamp-millis from timestamp_ntz", TS_MILLIS, "timestamp_ntz", [-1, 1_999]),
        _small("timestamp-millis from bigint", TS_MILLIS, "bigint", [1_357_016_400_000, -5]),
        _small("timestamp-millis from int", TS_MILLIS, "int", [-5]),
        _small("timestamp-millis from double", TS_MILLIS, "double", [1_357_016_400_000.0, 0.5]),
        _small("timestamp-millis from date", TS_MILLIS, "date", [1]),
        _small("timestamp-millis from boolean", TS_MILLIS, "boolean", [True]),
        _small("timestamp-millis from string", TS_MILLIS, "string", ["2013-01-01"]),
        _small("nullable timestamp-millis", ["null", TS_MILLIS], "timestamp", [None, -1, 1_001]),
        _small(
            "timestamp-micros from timestamp",
            TS_MICROS,
            "timestamp",
            [1_577_836_800_123_456, -1, 0, -1_000_001],
        ),
        _small("timestamp-micros from timestamp_ntz", TS_MICROS, "timestamp_ntz", [-1, 7]),
        _small("timestamp-micros from bigint", TS_MICROS, "bigint", [123, -1]),
        _small("timestamp-micros from date", TS_MICROS, "date", [1]),
        _small("nullable timestamp-micros", ["null", TS_MICROS], "timestamp", [None, 1]),
        _small("date from date", DATE, "date", [0, -1, 15706, -719162, 2932896]),
        _small("date from int", DATE, "int", [15706, -1]),
        _small("date from bigint", DATE, "bigint", [15706, INT_MAX + 1]),
        _small("date from double", DATE, "double", [15706.0, 0.5]),
        _small("date from timestamp", DATE, "timestamp", [0]),
        _small("date from boolean", DATE, "boolean", [False]),
        _small("date from string", DATE, "string", ["2013-01-01"]),
        _small("nullable date", ["null", DATE], "date", [None, 1]),
    ]


#: Float keys: Python's ``str`` of a float (its shortest repr), which the JVM writes
#: too; a float32 column as the Python float of its value.
FLOAT_KEYS = [
    1.0,
    -0.0,
    0.0,
    0.1,
    1e16,
    9999999999999998.0,
    1e15,
    123456789.123,
    1e-05,
    0.0001,
    1.5e-07,
    2e23,
    5e-324,
    1.7976931348623157e308,
    -2.5e-310,
    0.30000000000000004,
    1.2345678901234568e17,
    "NaN",
    "Infinity",
    "-Infinity",
    None,
]

RAW_KEY_COLUMNS = [
    ["v", "int"],
    ["k_double", "double"],
    ["k_float", "float"],
    ["k_bool", "boolean"],
    ["k_int", "int"],
    ["k_long", "bigint"],
    ["k_str", "string"],
    ["k_ts", "timestamp"],
    ["k_ntz", "timestamp_ntz"],
    ["k_date", "date"],
    ["k_bin", "binary"],
]


def _raw_key_rows() -> list[list[Any]]:
    rows = []
    bools = [True, False, None]
    strings = ["UA", "", "a|b", "Ñ漢字🙂", None]
    binaries = ["", "616263", "00ff27", "27", "2722", "5c0a0d09", None]
    stamps = [0, -1, 1_357_016_400_000_999, -1_000, None]
    for i, d in enumerate(FLOAT_KEYS):
        f = FLOAT_KEYS[(i + 3) % len(FLOAT_KEYS)]
        rows.append(
            [
                i,
                d,
                f,
                bools[i % 3],
                [0, -1, INT_MAX, INT_MIN, None][i % 5],
                [LONG_MAX, LONG_MIN, 0, None][i % 4],
                strings[i % 5],
                stamps[i % 5],
                stamps[(i + 1) % 5],
                [0, -1, 15706, None][i % 4],
                binaries[i % 7],
            ]
        )
    return rows


def cases() -> list[dict[str, Any]]:
    """Every case, without its expected bytes (:func:`expected` adds them)."""
    flight = _schema("flight")
    delays = _schema("delays_by_carrier_day")
    made = [
        {
            "name": "flight",
            "schema": flight,
            "columns": FLIGHT_COLUMNS,
            "key": ["carrier", "flight"],
            "rows": _flight_rows(),
        },
        {
            "name": "flight, Confluent wire format",
            "schema": flight,
            "columns": FLIGHT_COLUMNS,
            "key": ["origin", "time_hour"],
            "encoding": "confluent",
            "rows": _flight_rows(),
        },
        {
            "name": "flight, keyed by a column that is no field",
            "schema": flight,
            "columns": FLIGHT_COLUMNS,
            "key": ["carrier", "event_time", "_partition"],
            "rows": _flight_rows(),
        },
        {
            "name": "delays_by_carrier_day",
            "schema": delays,
            "columns": DELAYS_COLUMNS,
            "key": ["carrier", "day", "mean_dep_delay"],
            "rows": DELAYS_ROWS,
        },
        {
            "name": "delays_by_carrier_day, Confluent wire format",
            "schema": delays,
            "columns": DELAYS_COLUMNS,
            "key": [],
            "encoding": "confluent",
            "rows": DELAYS_ROWS,
        },
        {
            "name": "every type",
            "schema": EVERY_TYPE_SCHEMA,
            "columns": EVERY_TYPE_COLUMNS,
            "key": ["s", "i", "l", "f", "d", "b", "by", "e", "tm", "tu", "dt", "ni", "nl"],
            "rows": EVERY_TYPE_ROWS,
        },
        {
            "name": "every type, Confluent wire format, unkeyed",
            "schema": EVERY_TYPE_SCHEMA,
            "columns": EVERY_TYPE_COLUMNS,
            "key": [],
            "encoding": "confluent",
            "rows": EVERY_TYPE_ROWS,
        },
        {
            "name": "raw key: columns that are no fields, as Python's str gives them",
            "schema": _record([{"name": "v", "type": "int"}]),
            "columns": RAW_KEY_COLUMNS,
            "key": [
                "k_double",
                "k_float",
                "k_bool",
                "k_int",
                "k_long",
                "k_str",
                "k_ts",
                "k_ntz",
                "k_date",
                "k_bin",
                "no_such_column",
            ],
            "rows": _raw_key_rows(),
        },
        {
            "name": "missing columns: null, never the field's default",
            "schema": _record(
                [
                    {"name": "x", "type": "int"},
                    {"name": "a", "type": ["null", "long"], "default": None},
                    {"name": "b", "type": ["long", "null"], "default": 3},
                    {"name": "c", "type": ["string", "null"], "default": "c"},
                ]
            ),
            "columns": [["x", "int"]],
            "key": ["x", "a", "b"],
            "rows": [[1], [None]],
        },
        {
            "name": "a missing column of a non-null field with a default is refused",
            "schema": _record(
                [{"name": "x", "type": "int"}, {"name": "z", "type": "long", "default": 3}]
            ),
            "columns": [["x", "int"]],
            "key": [],
            "rows": [[1]],
        },
        *_conversions(),
    ]
    for case in made:
        case["rows"] = [_float32(row, case["columns"]) for row in case["rows"]]
        case.setdefault("encoding", "single-object")
        if case["encoding"] == "confluent":
            case["schema_id"] = SCHEMA_ID
    return made


def _float32(row: list[Any], columns: list[list[str]]) -> list[Any]:
    """``row`` with each finite value of a ``float`` column as the float32 Spark holds
    (its exact value as a Python float, which the JVM reads back into a float)."""
    return [
        _spark_float(pa.array([v], pa.float32())[0].as_py())
        if spark == "float" and isinstance(v, float)
        else v
        for v, (_, spark) in zip(row, columns, strict=True)
    ]


def _spark_float(value: float) -> float | str:
    """A float in the file: non-finite ones as the text JSON has no number for."""
    if math.isfinite(value):
        return value
    if math.isnan(value):
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


def python_values(case: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of ``case`` as ``toArrow().to_pylist()`` gives them to the Python sink."""
    arrays = []
    for i, (_, spark) in enumerate(case["columns"]):
        values = [_arrow_input(row[i], spark) for row in case["rows"]]
        arrays.append(pa.array(values, type=ARROW[spark]))
    names = [name for name, _ in case["columns"]]
    return pa.Table.from_arrays(arrays, names=names).to_pylist()


def _arrow_input(value: Any, spark: str) -> Any:
    if value is None:
        return None
    if spark == "binary":
        return bytes.fromhex(value)
    if spark in ("float", "double") and isinstance(value, str):
        return _NON_FINITE[value]
    return value


def python_write(
    codec: StreamCodec, key_columns: Sequence[str], given: dict[str, Any]
) -> tuple[bytes | None, bytes]:
    """The record one output row becomes: ``(key, value)``.

    Every field of the schema is taken from the row (a missing column is ``None``,
    whatever the field's default) and normalised as the back-pressure client normalises
    a put; the key is taken from the normalised tuple when every key column is a schema
    field, else from the row as given; the value is the normalised tuple encoded.

    Raises:
        SchemaError: the row does not fit the schema.
    """
    from pipeline.serde.codec import TupleKey

    fields = codec.schema.field_names
    normalised = codec.normalise({name: given.get(name) for name in fields})
    keys_in_schema = set(key_columns) <= set(fields)
    key = TupleKey(key_columns)(normalised if keys_in_schema else given)
    return key, codec.encode_normalised(normalised)


def _codec(case: dict[str, Any]) -> StreamCodec:
    schema = case["schema"]
    registered = RegisteredSchema(name="golden", schema=schema, fingerprint=fingerprint(schema))
    repository = SchemaRepository({"golden": schema})
    if case["encoding"] == "single-object":
        return StreamCodec("golden", registered, repository)
    from confluent_kafka import schema_registry

    with mock.patch.object(
        schema_registry, "SchemaRegistryClient", schema_registry.SchemaRegistryClient.new_client
    ):
        codec = ConfluentCodec(
            "golden", registered, repository, topic="golden", registry={"url": "mock://golden"}
        )
    codec.client._store.max_id = case["schema_id"] - 1
    return codec


def expected(case: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of ``case`` with what the Python sink makes of each."""
    codec = _codec(case)
    out = []
    for spark_row, given in zip(case["rows"], python_values(case), strict=True):
        row: dict[str, Any] = {"values": spark_row}
        try:
            key, value = python_write(codec, case["key"], given)
        except SchemaError as exc:
            row["error"] = str(exc)
            row["error_parts"] = _error_parts(str(exc), exc, given)
        else:
            if case["encoding"] == "confluent":
                assert value[:5] == b"\x00" + case["schema_id"].to_bytes(4, "big"), value.hex()
            row["key"] = None if key is None else key.hex()
            row["value"] = value.hex()
        out.append(row)
    return out


def _error_parts(message: str, exc: SchemaError, given: dict[str, Any]) -> list[str]:
    """What of a refusal's text the JVM must give too: the stream, the field, the value
    (a ``datetime``'s ``repr`` names its time zone object: left out), and the reason
    (fastavro's own words after "does not match schema" left out)."""
    assert exc.field is not None, message
    value = given.get(exc.field)
    head = f"stream 'golden': field {exc.field!r} = "
    rest = message.removeprefix(head)
    assert rest != message, message
    shown = repr(value)
    parts = [head]
    if not isinstance(value, datetime):
        assert rest.startswith(shown), message
        parts.append(head + shown)
    rest = rest.removeprefix(shown)
    if " does not match schema" in rest:
        parts.append(" does not match schema")
    else:
        parts.append(rest)
    return parts


def document() -> dict[str, Any]:
    """The whole golden file, as a JSON document."""
    made = []
    for case in cases():
        rows = expected(case)
        made.append({k: v for k, v in case.items() if k != "rows"} | {"rows": rows})
    return {"cases": made}


def _json(value: Any) -> str:
    """One value as the file writes it: UTF-8 text as it is, no NaN or infinity."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


def render(doc: dict[str, Any]) -> str:
    """``doc`` as the file holds it: one line per row, the rest indented."""
    lines = ["{", '  "cases": [']
    for i, case in enumerate(doc["cases"]):
        lines.append("    {")
        for name, value in case.items():
            if name == "rows":
                continue
            lines.append(f"      {json.dumps(name)}: {_json(value)},")
        lines.append('      "rows": [')
        rows = [f"        {_json(r)}" for r in case["rows"]]
        lines.append(",\n".join(rows))
        lines.append("      ]")
        lines.append("    }" + ("," if i < len(doc["cases"]) - 1 else ""))
    lines += ["  ]", "}"]
    return "\n".join(lines) + "\n"


def main() -> None:
    OUT.write_text(render(document()), encoding="utf-8")


if __name__ == "__main__":
    main()

"""Unit tests of :mod:`pipeline.serde`: single-object Avro encoding and the schema repository.

No broker, no Spark: bytes in, bytes out.
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, date, datetime, timedelta, timezone
from typing import Any

import pyarrow as pa
import pytest
from fastavro.schema import parse_schema, to_parsing_canonical_form
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.demo.flights import flight_table, flight_tuples, load_flights
from pipeline.errors import DeserializationError, SchemaError
from pipeline.serde.block import BlockEncoder
from pipeline.serde.codec import StreamCodec, TupleKey
from pipeline.serde.schemas import HEADER_SIZE, MAGIC, SchemaRepository, fingerprint

# --------------------------------------------------------------------------- CRC-64-AVRO

#: Avro specification, "Schema Fingerprints": the initial value of CRC-64-AVRO.
CRC64_EMPTY = 0xC15D213AA4D7A795


def _crc64_table() -> list[int]:
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (CRC64_EMPTY if fp & 1 else 0)
        table.append(fp)
    return table


_CRC64_TABLE = _crc64_table()


def crc64_avro(data: bytes) -> int:
    """CRC-64-AVRO of ``data`` (the table-driven algorithm of the Avro specification)."""
    fp = CRC64_EMPTY
    for byte in data:
        fp = (fp >> 8) ^ _CRC64_TABLE[(fp ^ byte) & 0xFF]
    return fp


def expected_fingerprint(schema: dict[str, Any]) -> bytes:
    """The 8 header bytes: CRC-64-AVRO of the Parsing Canonical Form, little-endian."""
    canonical = to_parsing_canonical_form(parse_schema(copy.deepcopy(schema)))
    return crc64_avro(canonical.encode("utf-8")).to_bytes(8, "little")


def test_reference_crc64_matches_published_vectors() -> None:
    # Known answers of the Avro reference implementations (schema-tests: "null", "int").
    assert crc64_avro(b'"null"') == 7195948357588979594
    assert crc64_avro(b'"int"') == 8247732601305521295


# --------------------------------------------------------------------------- fixtures

V1 = {"type": "record", "name": "R", "namespace": "test", "fields": [{"name": "a", "type": "int"}]}
V2 = {
    "type": "record",
    "name": "R",
    "namespace": "test",
    "fields": [
        {"name": "a", "type": "int"},
        {"name": "b", "type": "string", "default": "x"},
    ],
}


@pytest.fixture(scope="module")
def repo() -> SchemaRepository:
    return SchemaRepository.load()


@pytest.fixture(scope="module")
def codec(repo: SchemaRepository) -> StreamCodec:
    return StreamCodec("flights", repo.get("flight"), repo)


@pytest.fixture(scope="module")
def flights() -> list[dict[str, Any]]:
    return list(flight_tuples(load_flights(limit=200)))


@pytest.fixture
def flight(flights: list[dict[str, Any]]) -> dict[str, Any]:
    return dict(flights[0])


# --------------------------------------------------------------------------- layout


def test_canonical_form_of_small_schema_is_the_spec_form() -> None:
    # Parsing Canonical Form: fullname, attributes in order name/type/fields, no spaces.
    canonical = to_parsing_canonical_form(parse_schema(copy.deepcopy(V1)))
    assert canonical == '{"name":"test.R","type":"record","fields":[{"name":"a","type":"int"}]}'


@pytest.mark.parametrize("name", ["flight", "delays_by_origin_hour", "delays_by_carrier_day"])
def test_fingerprint_is_crc64_avro_of_canonical_form_little_endian(
    repo: SchemaRepository, name: str
) -> None:
    schema = repo.get(name).schema
    assert fingerprint(schema) == expected_fingerprint(schema)
    assert repo.get(name).fingerprint == expected_fingerprint(schema)


def test_fingerprint_of_small_schema() -> None:
    assert fingerprint(V1) == expected_fingerprint(V1)
    assert fingerprint(V1) != fingerprint(V2)


def test_encoding_is_marker_then_fingerprint_then_body(
    codec: StreamCodec, repo: SchemaRepository, flight: dict[str, Any]
) -> None:
    data = codec.encode(flight)
    assert data[:2] == b"\xc3\x01"
    assert data[:2] == MAGIC
    assert data[2:10] == expected_fingerprint(repo.get("flight").schema)
    assert HEADER_SIZE == 10
    assert len(data) > HEADER_SIZE


# --------------------------------------------------------------------------- round trip


def test_sample_has_nulls_and_values(flights: list[dict[str, Any]]) -> None:
    # The round trip below must exercise both branches of the nullable unions.
    assert len(flights) == 200
    assert any(r["dep_time"] is None for r in flights)
    assert any(r["dep_time"] is not None for r in flights)


def test_round_trip_without_logical_types_is_identity(
    codec: StreamCodec, flights: list[dict[str, Any]]
) -> None:
    encoded = [codec.encode(r) for r in flights]
    assert len(encoded) == len(flights)
    decoded = [codec.decode(data, logical=False) for data in encoded]
    assert decoded == flights
    assert all(type(r["time_hour"]) is int for r in decoded)


def test_round_trip_with_logical_types_gives_utc_datetimes(
    codec: StreamCodec, flights: list[dict[str, Any]]
) -> None:
    for record in flights:
        decoded = codec.decode(codec.encode(record))
        time_hour = decoded.pop("time_hour")
        assert isinstance(time_hour, datetime)
        assert time_hour.utcoffset() is not None
        assert time_hour.utcoffset().total_seconds() == 0
        assert time_hour == datetime.fromtimestamp(record["time_hour"] / 1000, tz=UTC)
        assert decoded == {k: v for k, v in record.items() if k != "time_hour"}


# --------------------------------------------------------------------------- decode errors


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xc3",
        b'{"year": 2013, "month": 1}',
        b"\x00\x01" + bytes(8) + b"\x02",
        b"\xc3\x02" + bytes(8) + b"\x02",
    ],
    ids=["empty", "one-byte", "json", "zero-marker", "wrong-second-byte"],
)
def test_decode_without_marker_is_bad_marker(codec: StreamCodec, data: bytes) -> None:
    with pytest.raises(DeserializationError) as info:
        codec.decode(data)
    assert info.value.reason == "bad-marker"
    assert info.value.stream == "flights"
    assert info.value.topic is None


def test_decode_replaced_marker_of_real_tuple_is_bad_marker(
    codec: StreamCodec, flight: dict[str, Any]
) -> None:
    data = b"\x00\x00" + codec.encode(flight)[2:]
    with pytest.raises(DeserializationError) as info:
        codec.decode(data)
    assert info.value.reason == "bad-marker"


def test_decode_unknown_fingerprint(codec: StreamCodec, flight: dict[str, Any]) -> None:
    unknown = crc64_avro(b'"string"').to_bytes(8, "little")
    assert codec.repository.by_fingerprint(unknown) is None
    data = MAGIC + unknown + codec.encode(flight)[HEADER_SIZE:]
    with pytest.raises(DeserializationError) as info:
        codec.decode(data)
    assert info.value.reason == "unknown-fingerprint"
    assert unknown.hex() in str(info.value)


@pytest.mark.parametrize("keep", [0, 1, -1], ids=["no-body", "one-byte", "last-byte-cut"])
def test_decode_truncated_body_is_bad_body(
    codec: StreamCodec, flight: dict[str, Any], keep: int
) -> None:
    data = codec.encode(flight)
    truncated = data[:-1] if keep == -1 else data[: HEADER_SIZE + keep]
    with pytest.raises(DeserializationError) as info:
        codec.decode(truncated)
    assert info.value.reason == "bad-body"
    assert "'flight'" in str(info.value)


def test_error_at_names_topic_partition_and_offset(codec: StreamCodec) -> None:
    with pytest.raises(DeserializationError) as info:
        codec.decode(b"not avro")
    original = info.value
    located = original.at(topic="flights-topic", partition=3, offset=1234)

    assert isinstance(located, DeserializationError)
    assert isinstance(located, ValueError)
    assert (located.topic, located.partition, located.offset) == ("flights-topic", 3, 1234)
    assert located.reason == "bad-marker"
    assert located.stream == "flights"
    text = str(located)
    assert "'flights-topic'" in text
    assert "partition 3" in text
    assert "offset 1234" in text
    assert "not Avro single-object encoding" in text
    # The original is left as it was.
    assert original.topic is None
    assert "partition" not in str(original)


def test_error_at_twice_names_only_the_last_place(codec: StreamCodec) -> None:
    with pytest.raises(DeserializationError) as info:
        codec.decode(b"not avro")
    located = info.value.at(topic="a", partition=1, offset=2).at(topic="b", partition=5, offset=6)
    assert "'b'" in str(located)
    assert "'a'" not in str(located)
    assert str(located).count("(topic ") == 1


# --------------------------------------------------------------------------- encode errors


def test_encode_wrong_type_names_the_field(codec: StreamCodec, flight: dict[str, Any]) -> None:
    flight["distance"] = "far"
    with pytest.raises(SchemaError) as info:
        codec.encode(flight)
    assert info.value.field == "distance"
    assert info.value.stream == "flights"
    assert "'distance'" in str(info.value)
    assert "'far'" in str(info.value)


def test_encode_missing_required_field_names_it(codec: StreamCodec, flight: dict[str, Any]) -> None:
    del flight["carrier"]
    with pytest.raises(SchemaError) as info:
        codec.encode(flight)
    assert info.value.field == "carrier"
    assert "'carrier'" in str(info.value)


def test_encode_extra_field_is_refused(codec: StreamCodec, flight: dict[str, Any]) -> None:
    flight["gate"] = "B12"
    with pytest.raises(SchemaError) as info:
        codec.encode(flight)
    assert info.value.field == "gate"
    assert "'gate'" in str(info.value)


def test_encode_missing_field_with_a_default_takes_the_default(
    codec: StreamCodec, flight: dict[str, Any]
) -> None:
    flight["tailnum"] = "N14228"
    del flight["tailnum"]
    assert codec.decode(codec.encode(flight))["tailnum"] is None


def test_encode_int_out_of_32_bit_range_is_refused(
    codec: StreamCodec, flight: dict[str, Any]
) -> None:
    flight["distance"] = 2**40
    with pytest.raises(SchemaError) as info:
        codec.encode(flight)
    assert info.value.field == "distance"


# --------------------------------------------------------------------------- evolution


@pytest.fixture(scope="module")
def evolving() -> SchemaRepository:
    return SchemaRepository({"r_v1": V1, "r_v2": V2})


def test_written_with_v1_read_with_v2_gets_default(evolving: SchemaRepository) -> None:
    writer = StreamCodec("r", evolving.get("r_v1"), evolving)
    reader = StreamCodec("r", evolving.get("r_v2"), evolving)
    data = writer.encode({"a": 7})
    assert data[2:HEADER_SIZE] == fingerprint(V1)
    assert reader.decode(data) == {"a": 7, "b": "x"}


def test_written_with_v2_read_with_v1_drops_new_field(evolving: SchemaRepository) -> None:
    writer = StreamCodec("r", evolving.get("r_v2"), evolving)
    reader = StreamCodec("r", evolving.get("r_v1"), evolving)
    assert reader.decode(writer.encode({"a": -3, "b": "kept?"})) == {"a": -3}


def test_reader_without_writer_schema_is_unknown_fingerprint(evolving: SchemaRepository) -> None:
    data = StreamCodec("r", evolving.get("r_v1"), evolving).encode({"a": 1})
    only_v2 = SchemaRepository({"r_v2": V2})
    with pytest.raises(DeserializationError) as info:
        StreamCodec("r", only_v2.get("r_v2"), only_v2).decode(data)
    assert info.value.reason == "unknown-fingerprint"


# --------------------------------------------------------------------------- repository


def test_get_unknown_name_lists_known_names(repo: SchemaRepository) -> None:
    with pytest.raises(SchemaError) as info:
        repo.get("flihgt")
    text = str(info.value)
    assert "'flihgt'" in text
    for name in ("flight", "delays_by_origin_hour", "delays_by_carrier_day"):
        assert f"'{name}'" in text
    assert info.value.stream == "flihgt"


def test_load_reads_every_avsc(repo: SchemaRepository) -> None:
    assert repo.names() == [
        "delays_by_carrier_day",
        "delays_by_origin_hour",
        "flight",
        "job_event",
        "job_request",
    ]
    assert repo.get("flight").field_names[:3] == ["year", "month", "day"]


def test_as_json_is_every_schema_by_name(repo: SchemaRepository) -> None:
    assert json.loads(repo.as_json()) == {name: repo.get(name).schema for name in repo.names()}


def test_schema_that_does_not_parse_is_refused() -> None:
    with pytest.raises(SchemaError) as info:
        SchemaRepository({"broken": {"type": "record", "name": "B", "fields": [{"name": "x"}]}})
    assert info.value.stream == "broken"
    assert "'broken'" in str(info.value)


def test_a_date_logical_type_encodes_and_decodes() -> None:
    repo = SchemaRepository.load()
    codec = StreamCodec("delays_by_carrier_day", repo.get("delays_by_carrier_day"), repo)
    record = {
        "carrier": "UA",
        "day": date(2013, 7, 4),
        "flights": 3,
        "departures": 2,
        "mean_dep_delay": 1.5,
        "mean_arr_delay": None,
    }
    assert codec.decode(codec.encode(record)) == record


def test_the_tuple_key_rule_is_one_for_every_stream() -> None:
    key = TupleKey(["carrier", "flight", "time_hour"])
    assert (
        key({"carrier": "UA", "flight": 1545, "time_hour": 1357034400000})
        == b"UA|1545|1357034400000"
    )
    # Nulls are empty, a missing field counts as null; datetimes and dates are what
    # Avro stores for them: epoch milliseconds (a naive datetime as UTC) and epoch days.
    assert key({"carrier": None, "flight": 7}) == b"|7|"
    assert (
        TupleKey(["origin", "hour_start"])(
            {"origin": "EWR", "hour_start": datetime(2013, 1, 1, 10, tzinfo=UTC)}
        )
        == b"EWR|1357034400000"
    )
    assert TupleKey(["hour_start"])({"hour_start": datetime(2013, 1, 1, 10)}) == b"1357034400000"
    assert TupleKey(["day"])({"day": date(2013, 7, 4)}) == b"15890"
    assert TupleKey([])({"carrier": "UA"}) is None


# --------------------------------------------------------------------------- strict types, one key


def _flight_codec() -> StreamCodec:
    repo = SchemaRepository.load()
    return StreamCodec("flights", repo.get("flight"), repo)


FLIGHT = {
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
    "time_hour": 1357034400000,
}
FLIGHT_KEY = TupleKey(["carrier", "flight", "time_hour"])

#: Instants Avro's ``timestamp-millis`` and Python's ``datetime`` both hold (years 1..9999).
_MS_RANGE = (-62_135_596_800_000 + 86_400_000, 253_402_300_799_999 - 86_400_000)


def _representations(ms: int, micros: int, offset_min: int) -> list[Any]:
    """The one instant ``ms`` (epoch milliseconds, plus ``micros`` < 1000 below Avro's
    precision) in every form ``put`` accepts for a ``timestamp-millis`` field."""
    aware = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms, microseconds=micros)
    elsewhere = aware.astimezone(timezone(timedelta(minutes=offset_min)))
    forms: list[Any] = [ms, aware, aware.replace(tzinfo=None)]
    if elsewhere.year == aware.year:  # astimezone can leave datetime's range at year 1/9999
        forms.append(elsewhere)
    if abs(ms) < 2**53:  # a float holds the integer exactly
        forms.append(float(ms))
    return forms


@given(
    ms=st.integers(*_MS_RANGE),
    micros=st.integers(0, 999),
    offset_min=st.integers(-23 * 60, 23 * 60),
)
@settings(max_examples=300, deadline=None)
def test_one_instant_in_any_accepted_form_has_one_key_and_one_encoding(
    ms: int, micros: int, offset_min: int
) -> None:
    """An aware datetime, a naive one (UTC), another zone's, epoch ms as an
    int or an integral float: one Kafka key and one value, so one partition and the
    per-key order kept."""
    codec = _flight_codec()
    keys, values = set(), set()
    for form in _representations(ms, micros, offset_min):
        for flight in (1545, 1545.0):
            record = codec.normalise(dict(FLIGHT, time_hour=form, flight=flight))
            keys.add(FLIGHT_KEY(record))
            values.add(codec.encode_normalised(record))
    assert keys == {f"UA|1545|{ms}".encode()}
    assert len(values) == 1
    assert codec.decode(values.pop(), logical=False)["time_hour"] == ms


def test_a_naive_datetime_is_utc_whatever_the_local_time_zone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """fastavro alone writes a naive datetime as local time (``time.mktime``): under
    TZ=America/New_York the same wall time would be another instant, and another key."""
    import time

    codec = _flight_codec()
    naive = datetime(2013, 1, 1, 10)
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        value = codec.encode(dict(FLIGHT, time_hour=naive))
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    assert codec.decode(value, logical=False)["time_hour"] == 1357034400000


@given(number=st.floats(allow_nan=True, allow_infinity=True).filter(lambda x: not x.is_integer()))
@settings(max_examples=200, deadline=None)
def test_a_float_with_a_fraction_is_never_truncated_into_an_int_field(number: float) -> None:
    codec = _flight_codec()
    for field in ("flight", "dep_delay", "time_hour"):
        with pytest.raises(SchemaError) as info:
            codec.encode(dict(FLIGHT, **{field: number}))
        assert info.value.field == field
        assert f"field {field!r}" in str(info.value) and "never truncated" in str(info.value)


@pytest.mark.parametrize(
    ("schema_name", "field", "value", "allowed"),
    [
        ("flight", "flight", True, "give an int"),  # int
        ("flight", "dep_delay", False, "give an int"),  # ["null", "int"]
        ("flight", "time_hour", True, "not bool"),  # timestamp-millis
        ("delays_by_carrier_day", "flights", True, "give an int"),  # long
        ("delays_by_carrier_day", "mean_dep_delay", True, "give a float"),  # ["null", "double"]
        ("delays_by_carrier_day", "day", datetime(2013, 7, 4, 12), "not a datetime"),  # date
        ("job_request", "queueable", 1, "True or False"),  # boolean
        ("job_request", "queueable", "no", "True or False"),
        ("flight", "flight", 2**31, "32 bits"),
    ],
)
def test_a_value_of_the_wrong_kind_is_refused_naming_the_field(
    schema_name: str, field: str, value: Any, allowed: str
) -> None:
    repo = SchemaRepository.load()
    codec = StreamCodec(schema_name, repo.get(schema_name), repo)
    with pytest.raises(SchemaError) as info:
        codec.normalise({field: value})
    assert info.value.field == field
    assert f"field {field!r}" in str(info.value) and allowed in str(info.value)


def test_values_are_normalised_to_what_avro_stores() -> None:
    repo = SchemaRepository.load()
    codec = StreamCodec("delays", repo.get("delays_by_carrier_day"), repo)
    record = {"carrier": "UA", "day": date(2013, 7, 4), "flights": 3.0, "departures": 2}
    normal = codec.normalise({**record, "mean_dep_delay": 2, "mean_arr_delay": None})
    assert normal == {**record, "flights": 3, "mean_dep_delay": 2.0, "mean_arr_delay": None}
    assert type(normal["flights"]) is int and type(normal["mean_dep_delay"]) is float
    same = {**record, "flights": 3, "mean_dep_delay": 2.0, "mean_arr_delay": None}
    assert codec.normalise(same) is same  # nothing to change: no copy


@pytest.mark.parametrize("given_", [("UA", 1545), ["UA"], "UA|1545", 1545, None])
def test_a_tuple_that_is_not_a_dict_is_refused_naming_its_type(given_: Any) -> None:
    codec = _flight_codec()
    with pytest.raises(SchemaError) as info:
        codec.encode(given_)
    assert f"not {type(given_).__name__}" in str(info.value)
    assert "a tuple must be a dict of field -> value" in str(info.value)


# --------------------------------------------------------------------------- block encoding


def test_block_encoding_of_the_flights_equals_encoding_tuple_by_tuple(
    codec: StreamCodec,
) -> None:
    df = load_flights(limit=2_000)
    table = flight_table(df)
    encoded = BlockEncoder(codec).encode(table)
    assert encoded == [codec.encode(r) for r in flight_tuples(df)]
    # a slice (non-zero Arrow offsets, strings included) encodes the same rows
    assert BlockEncoder(codec).encode(table.slice(517, 300)) == encoded[517:817]


#: Every kind the block encoder writes, plain and in both orders of a null union.
_PRIMITIVES: dict[str, Any] = {
    "int": (pa.int32(), st.integers(-(2**31), 2**31 - 1)),
    "long": (pa.int64(), st.integers(-(2**63), 2**63 - 1)),
    "string": (pa.string(), st.text(max_size=40)),
    "bytes": (pa.binary(), st.binary(max_size=40)),
    "double": (pa.float64(), st.floats(allow_nan=False, width=64)),
    "float": (pa.float32(), st.floats(allow_nan=False, width=32)),
    "boolean": (pa.bool_(), st.booleans()),
    "ts": (pa.int64(), st.integers(-(2**62), 2**62)),
}


def _avro_type(kind: str) -> Any:
    return {"type": "long", "logicalType": "timestamp-millis"} if kind == "ts" else kind


@st.composite
def _tables(draw: Any) -> tuple[dict[str, Any], Any, list[dict[str, Any]]]:
    kinds = draw(st.lists(st.sampled_from(sorted(_PRIMITIVES)), min_size=1, max_size=6))
    unions = draw(
        st.lists(st.sampled_from([None, "first", "last"]), min_size=len(kinds), max_size=len(kinds))
    )
    rows = draw(st.integers(0, 25))
    fields, columns, names = [], {}, []
    for i, (kind, union) in enumerate(zip(kinds, unions, strict=True)):
        name = f"f{i}"
        names.append(name)
        arrow_type, values = _PRIMITIVES[kind]
        avro = _avro_type(kind)
        strategy = values if union is None else st.one_of(st.none(), values)
        if union is not None:
            avro = ["null", avro] if union == "first" else [avro, "null"]
        fields.append({"name": name, "type": avro})
        columns[name] = pa.array(draw(st.lists(strategy, min_size=rows, max_size=rows)), arrow_type)
    schema = {"type": "record", "name": "T", "namespace": "test", "fields": fields}
    table = pa.table(columns)
    return schema, table, table.to_pylist()


@settings(max_examples=150, deadline=None)
@given(_tables(), st.integers(0, 5))
def test_block_encoding_is_byte_for_byte_fastavro(
    drawn: tuple[dict[str, Any], Any, list[dict[str, Any]]], skip: int
) -> None:
    """Whatever the primitive types, nulls and values, the block encoder writes the
    bytes fastavro writes, row for row, sliced or not."""
    schema, table, rows = drawn
    repo = SchemaRepository({"t": schema})
    codec = StreamCodec("t", repo.get("t"), repo)
    expected = [codec.encode(r) for r in rows]
    assert BlockEncoder(codec).encode(table) == expected
    assert BlockEncoder(codec).encode(table.slice(skip)) == expected[skip:]


def test_block_encoding_leaves_what_it_cannot_write_exactly_to_the_per_tuple_path(
    codec: StreamCodec,
) -> None:
    table = flight_table(load_flights(limit=50))
    encoder = BlockEncoder(codec)
    # a null in a field that is not nullable (the per-tuple path names it)
    years = table.column("year").to_pylist()
    years[3] = None
    nulled = table.set_column(0, "year", pa.array(years, pa.int32()))
    assert encoder.encode(nulled) is None
    # an int beyond 32 bits
    wide = table.set_column(0, "year", pa.array([2**31] * 50, pa.int64()))
    assert encoder.encode(wide) is None
    # a column too many, a column too few
    assert encoder.encode(table.append_column("extra", pa.array([1] * 50))) is None
    assert encoder.encode(table.drop_columns(["tailnum"])) is None
    # a timestamp with a fraction of a millisecond; one of whole ms is written
    index = table.schema.get_field_index("time_hour")
    micros = pa.array(table.column("time_hour").to_numpy() * 1000 + 1, pa.timestamp("us", "UTC"))
    assert encoder.encode(table.set_column(index, "time_hour", micros)) is None
    millis = pa.array(table.column("time_hour").to_numpy(), pa.timestamp("ms", "UTC"))
    assert encoder.encode(table.set_column(index, "time_hour", millis)) == encoder.encode(table)
    # a string where the schema has an int
    text = table.set_column(0, "year", pa.array(["2013"] * 50))
    assert encoder.encode(text) is None


def test_a_schema_with_a_nested_type_is_not_block_encoded(repo: SchemaRepository) -> None:
    nested = {
        "type": "record",
        "name": "N",
        "fields": [{"name": "xs", "type": {"type": "array", "items": "int"}}],
    }
    repository = SchemaRepository({"n": nested})
    encoder = BlockEncoder(StreamCodec("n", repository.get("n"), repository))
    assert not encoder.enabled
    assert encoder.encode(pa.table({"xs": [[1, 2]]})) is None

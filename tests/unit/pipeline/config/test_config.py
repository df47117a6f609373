"""Unit tests of :mod:`pipeline.config`: loading, validation, resolution, overrides.

Every call passes ``env=`` explicitly so a ``FLOODGATE__*`` variable in the
developer's shell cannot change the outcome.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from pipeline.config import (
    SYSTEM_DEFAULTS,
    KafkaConfig,
    bootstrap_from,
    load_query_group,
    parse_query_group,
)
from pipeline.errors import ConfigError
from pipeline.serde.schemas import SchemaRepository
from sweeper.config import load_sweeper_config

FLIGHTS_TOML = Path(__file__).resolve().parents[4] / "conf" / "flights.toml"

MINIMAL: dict[str, Any] = {
    "query_group": {"name": "g"},
    "input_streams": {"flights": {"topic": "flights", "schema": "flight"}},
    "output_streams": {"out": {"topic": "out", "schema": "delays_by_origin_hour"}},
    "queries": {"q": {"sql": "SELECT 1", "output": "out"}},
}


@pytest.fixture
def raw() -> dict[str, Any]:
    return copy.deepcopy(MINIMAL)


def allowed_keys(text: str) -> list[str]:
    """The comma-separated keys after ``allowed here:`` in an unknown-key message."""
    _, _, tail = text.partition("allowed here: ")
    return [key.strip() for key in tail.splitlines()[0].split(",")] if tail else []


def refused(raw: dict[str, Any]) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_query_group(raw, env={})
    return info.value


# --------------------------------------------------------------------------- the shipped file


def test_flights_toml_loads_and_resolves() -> None:
    config = load_query_group(FLIGHTS_TOML, env={})
    assert config.name == "flights"
    assert config.query_group.trigger_interval_ms == 1000
    assert config.query_group.no_data_micro_batches is False

    flights = config.input_settings("flights")
    assert flights.max_tuples_per_trigger == 150000
    assert flights.partitions == 4

    out = config.output_settings("delays_by_origin_hour")
    assert out.partitions == 2
    # Not set in the file: inherited from the group (max tuples) and the system (replication).
    assert out.max_tuples_per_trigger == 150000
    assert out.replication_factor == SYSTEM_DEFAULTS.replication_factor

    assert config.input_streams["flights"].timestamp_mode == "data_source"
    assert config.input_streams["flights"].timestamp_field == "time_hour"
    assert set(config.queries) == {"delays_by_origin_hour", "delays_by_carrier_day"}
    assert config.dead_letter_topic == "flights.dead-letter"
    assert config.checkpoint_root == ".floodgate/checkpoints/flights"


# --------------------------------------------------------------------------- three levels


def test_unset_everywhere_falls_back_to_system_defaults(raw: dict[str, Any]) -> None:
    config = parse_query_group(raw, env={})
    resolved = config.input_settings("flights")
    assert resolved.partitions == SYSTEM_DEFAULTS.partitions
    assert resolved.replication_factor == SYSTEM_DEFAULTS.replication_factor
    assert resolved.max_tuples_per_trigger == SYSTEM_DEFAULTS.max_tuples_per_trigger
    assert SYSTEM_DEFAULTS.partitions is not None
    assert SYSTEM_DEFAULTS.max_tuples_per_trigger is not None


def test_group_level_overrides_system_defaults(raw: dict[str, Any]) -> None:
    group_partitions = SYSTEM_DEFAULTS.partitions + 3
    raw["query_group"]["partitions"] = group_partitions
    config = parse_query_group(raw, env={})
    assert config.input_settings("flights").partitions == group_partitions
    assert config.output_settings("out").partitions == group_partitions
    # Unset at the group level: still the system default.
    assert config.input_settings("flights").max_tuples_per_trigger == (
        SYSTEM_DEFAULTS.max_tuples_per_trigger
    )


def test_stream_level_wins_over_group_level(raw: dict[str, Any]) -> None:
    raw["query_group"]["partitions"] = 3
    raw["query_group"]["max_tuples_per_trigger"] = 1000
    raw["input_streams"]["flights"]["max_tuples_per_trigger"] = 77
    raw["output_streams"]["out"]["partitions"] = 9
    config = parse_query_group(raw, env={})

    flights = config.input_settings("flights")
    assert flights.max_tuples_per_trigger == 77
    assert flights.partitions == 3

    out = config.output_settings("out")
    assert out.partitions == 9
    assert out.max_tuples_per_trigger == 1000


# --------------------------------------------------------------------------- refusals


def test_unknown_key_is_named_with_allowed_keys(raw: dict[str, Any]) -> None:
    raw["query_group"]["trigger_intervall_ms"] = 250
    error = refused(raw)
    text = str(error)
    assert error.key == "query_group.trigger_intervall_ms"
    assert "query_group.trigger_intervall_ms" in text
    listed = allowed_keys(text)
    assert "trigger_interval_ms" in listed
    assert "checkpoint_dir" in listed
    assert "trigger_intervall_ms" not in listed
    assert error.allowed is not None
    assert "trigger_interval_ms" in [key.strip() for key in error.allowed.split(",")]
    assert isinstance(error, ValueError)


@pytest.mark.parametrize("value", ["python", "jvm"])
def test_the_removed_source_setting_is_refused_saying_what_to_do(
    raw: dict[str, Any], value: str
) -> None:
    """``query_group.source`` went with the Python source: a file that still sets it,
    even to the one source left, is refused naming the key, with what to do."""
    raw["query_group"]["source"] = value
    error = refused(raw)
    text = str(error)
    assert error.key == "query_group.source"
    assert "'query_group.source'" in text
    assert "removed with the Python source" in text
    assert "delete the line" in text


def test_the_removed_source_setting_is_refused_from_the_environment_too(
    raw: dict[str, Any],
) -> None:
    with pytest.raises(ConfigError) as info:
        parse_query_group(raw, env={"FLOODGATE__QUERY_GROUP__SOURCE": "python"})
    assert info.value.key == "query_group.source"
    assert "removed with the Python source" in str(info.value)


def test_unknown_key_in_a_stream_lists_that_sections_keys(raw: dict[str, Any]) -> None:
    raw["input_streams"]["flights"]["watermarks"] = "1 hour"
    error = refused(raw)
    assert error.key == "input_streams.flights.watermarks"
    listed = allowed_keys(str(error))
    assert "watermark" in listed
    assert "schema" in listed  # the alias, as written in the file
    assert "schema_" not in listed


def test_bad_literal_names_key_value_and_allowed_values(raw: dict[str, Any]) -> None:
    raw["input_streams"]["flights"]["timestamp_mode"] = "wallclock"
    error = refused(raw)
    text = str(error)
    assert error.key == "input_streams.flights.timestamp_mode"
    assert error.value == "wallclock"
    assert "input_streams.flights.timestamp_mode" in text
    assert "'wallclock'" in text
    assert "'server'" in text
    assert "'data_source'" in text


@pytest.mark.parametrize("watermark", ["2 hourz", "2hours", "hours", "-1 hour", ""])
def test_bad_watermark_is_refused(raw: dict[str, Any], watermark: str) -> None:
    raw["input_streams"]["flights"]["watermark"] = watermark
    error = refused(raw)
    assert error.key == "input_streams.flights.watermark"
    assert error.value == watermark


@pytest.mark.parametrize("watermark", ["2 hours", "1 hour", "500 milliseconds", "10 Minutes"])
def test_good_watermark_is_kept(raw: dict[str, Any], watermark: str) -> None:
    raw["input_streams"]["flights"]["watermark"] = watermark
    assert parse_query_group(raw, env={}).input_streams["flights"].watermark == watermark


def test_data_source_mode_needs_timestamp_field(raw: dict[str, Any]) -> None:
    raw["input_streams"]["flights"]["timestamp_mode"] = "data_source"
    error = refused(raw)
    assert "timestamp_field" in str(error)
    assert error.key is not None
    assert error.key.startswith("input_streams.flights")

    raw["input_streams"]["flights"]["timestamp_field"] = "time_hour"
    config = parse_query_group(raw, env={})
    assert config.input_streams["flights"].timestamp_field == "time_hour"


def test_timestamp_field_without_data_source_mode_is_refused(raw: dict[str, Any]) -> None:
    raw["input_streams"]["flights"]["timestamp_field"] = "time_hour"
    assert "timestamp_field" in str(refused(raw))


def test_a_starting_timestamp_reaches_the_stream_typed(raw: dict[str, Any]) -> None:
    raw["input_streams"]["flights"]["starting_timestamp_ms"] = 1_357_000_000_000
    raw["input_streams"]["flights"]["starting_timestamp_strategy"] = "latest"
    stream = parse_query_group(raw, env={}).input_streams["flights"]
    assert (stream.starting_timestamp_ms, stream.starting_timestamp_strategy) == (
        1_357_000_000_000,
        "latest",
    )


@pytest.mark.parametrize(
    "given",
    [{}, {"starting_timestamp_ms": 1_357_000_000_000}],
    ids=["without-timestamp", "with-timestamp"],
)
def test_a_query_group_dumped_and_read_again_is_the_same(
    raw: dict[str, Any], given: dict[str, Any]
) -> None:
    """A tool that writes a parsed file back (``model_dump``) writes every default: the
    defaults of where a stream starts are no choice the file is refused for."""
    raw["input_streams"]["flights"].update(given)
    config = parse_query_group(raw, env={})
    dumped = config.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert parse_query_group(dumped, env={}) == config


@pytest.mark.parametrize(
    ("given", "named"),
    [
        ({"starting_timestamp_ms": -1}, "starting_timestamp_ms"),
        ({"starting_timestamp_ms": 5, "starting_offsets": "earliest"}, "starting_offsets"),
        ({"starting_timestamp_strategy": "latest"}, "starting_timestamp_strategy"),
        ({"starting_timestamp_ms": 5, "starting_timestamp_strategy": "next"}, "'error'"),
    ],
    ids=["negative", "with-starting-offsets", "strategy-alone", "unknown-strategy"],
)
def test_a_bad_starting_timestamp_is_refused_naming_the_key(
    raw: dict[str, Any], given: dict[str, Any], named: str
) -> None:
    raw["input_streams"]["flights"].update(given)
    error = refused(raw)
    assert error.key is not None and error.key.startswith("input_streams.flights")
    assert named in str(error)


def test_query_output_must_name_an_output_stream(raw: dict[str, Any]) -> None:
    raw["queries"]["q"]["output"] = "nowhere"
    text = str(refused(raw))
    assert "'nowhere'" in text
    assert "queries.q.output" in text


def test_query_output_error_names_key_and_hides_secrets(raw: dict[str, Any]) -> None:
    raw["kafka"] = {"client": {"sasl.password": "hunter2"}}
    raw["queries"]["q"]["output"] = "nowhere"
    error = refused(raw)
    assert "hunter2" not in str(error)
    assert error.key == "queries.q.output"


def test_max_tuples_per_trigger_zero_is_refused(raw: dict[str, Any]) -> None:
    raw["input_streams"]["flights"]["max_tuples_per_trigger"] = 0
    error = refused(raw)
    assert error.key == "input_streams.flights.max_tuples_per_trigger"
    assert error.value == 0


# --------------------------------------------------------------------------- a renamed key


@pytest.mark.parametrize("section", ["query_group", "input_streams.flights", "output_streams.out"])
def test_max_rows_per_trigger_is_refused_as_an_unknown_key(
    raw: dict[str, Any], section: str
) -> None:
    """``max_tuples_per_trigger`` was never released as ``max_rows_per_trigger``: the old
    name is an unknown key like any other, and the message lists the new one."""
    node = raw
    for part in section.split("."):
        node = node[part]
    node["max_rows_per_trigger"] = 321
    error = refused(raw)
    assert error.key == f"{section}.max_rows_per_trigger"
    assert f"{section}.max_rows_per_trigger" in str(error)
    assert "max_tuples_per_trigger" in allowed_keys(str(error))


def test_max_rows_per_trigger_is_refused_from_the_environment_too(raw: dict[str, Any]) -> None:
    with pytest.raises(ConfigError) as info:
        parse_query_group(raw, env={"FLOODGATE__QUERY_GROUP__MAX_ROWS_PER_TRIGGER": "42"})
    assert info.value.key == "query_group.max_rows_per_trigger"


def test_missing_key_is_named(raw: dict[str, Any]) -> None:
    del raw["input_streams"]["flights"]["topic"]
    error = refused(raw)
    assert error.key == "input_streams.flights.topic"
    assert "missing key 'input_streams.flights.topic'" in str(error)


def test_non_toml_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text("[query_group\nname = = 'x'\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_query_group(path, env={})
    assert str(path) in str(info.value)
    assert "not valid TOML" in str(info.value)


def test_missing_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "absent.toml"
    with pytest.raises(ConfigError) as info:
        load_query_group(path, env={})
    assert str(path) in str(info.value)
    assert "no such query group file" in str(info.value)


def test_load_names_the_file_in_validation_errors(tmp_path: Path) -> None:
    path = tmp_path / "typo.toml"
    text = FLIGHTS_TOML.read_text(encoding="utf-8").replace(
        "trigger_interval_ms = ", "trigger_intervall_ms = ", 1
    )
    assert "trigger_intervall_ms" in text
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_query_group(path, env={})
    assert str(info.value).startswith(f"{path}:")
    assert info.value.key == "query_group.trigger_intervall_ms"


# --------------------------------------------------------------------------- environment


def test_env_overrides_apply_and_are_typed(raw: dict[str, Any]) -> None:
    env = {
        "FLOODGATE__QUERY_GROUP__TRIGGER_INTERVAL_MS": "250",
        "FLOODGATE__INPUT_STREAMS__FLIGHTS__TOPIC": "other",
        "UNRELATED": "1",
    }
    config = parse_query_group(raw, env=env)
    assert config.query_group.trigger_interval_ms == 250
    assert type(config.query_group.trigger_interval_ms) is int
    assert config.input_streams["flights"].topic == "other"
    # The input mapping is not changed.
    assert raw["input_streams"]["flights"]["topic"] == "flights"
    assert "trigger_interval_ms" not in raw["query_group"]


def test_env_override_is_validated_like_the_file(raw: dict[str, Any]) -> None:
    with pytest.raises(ConfigError) as info:
        parse_query_group(raw, env={"FLOODGATE__QUERY_GROUP__TRIGGER_INTERVAL_MS": "soon"})
    assert info.value.key == "query_group.trigger_interval_ms"
    assert info.value.value == "soon"


def test_the_services_overrides_are_theirs_and_a_top_level_key_is_overridden(
    raw: dict[str, Any],
) -> None:
    """One environment serves every component (docker-compose.yml): a query group takes
    its own sections' overrides and leaves the admission service's and the sweeper's."""
    config = parse_query_group(
        raw,
        env={
            "FLOODGATE__ADMISSION__HOST": "0.0.0.0",
            "FLOODGATE__SWEEPER__QUERY_GROUPS": '["conf/flights.toml"]',
            "FLOODGATE__SCHEMA_DIR": "/elsewhere",
            "FLOODGATE__QUERY_GROUP__METRICS_PORT": "8790",
        },
    )
    assert config.schema_dir == "/elsewhere"
    assert config.query_group.metrics_port == 8790


def test_env_override_through_a_scalar_is_refused(raw: dict[str, Any]) -> None:
    with pytest.raises(ConfigError) as info:
        parse_query_group(raw, env={"FLOODGATE__QUERY_GROUP__NAME__X": "1"})
    assert info.value.key == "query_group.name.x"
    assert "FLOODGATE__QUERY_GROUP__NAME__X" in str(info.value)


def test_bootstrap_env_wins_over_config() -> None:
    kafka = KafkaConfig(bootstrap_servers="a:1")
    assert bootstrap_from(kafka, env={"FLOODGATE_KAFKA_BOOTSTRAP": "b:2"}) == "b:2"
    assert bootstrap_from(kafka, env={}) == "a:1"
    assert bootstrap_from(KafkaConfig(), env={}) is None


def test_a_swept_output_stream_needs_the_sweep_catalog(raw: dict[str, Any]) -> None:
    raw["output_streams"]["out"]["swept"] = True
    error = refused(raw)
    assert error.key == "output_streams.out.swept"
    assert "needs query_group.sweep_catalog_url" in str(error)
    raw["query_group"]["sweep_catalog_url"] = "sqlite:///catalog.db"
    assert parse_query_group(raw, env={}).output_streams["out"].swept


# --------------------------------------------------------------------------- fields of the schema


@pytest.mark.parametrize(
    ("kind", "stream", "key", "value"),
    [
        ("input_streams", "flights", "key", ["carrier", "flight_no"]),
        ("output_streams", "out", "key", ["origin", "hour"]),
        ("input_streams", "flights", "timestamp_field", "event_time"),
    ],
)
def test_a_key_field_not_in_the_schema_is_refused_at_load(
    raw: dict[str, Any], kind: str, stream: str, key: str, value: Any
) -> None:
    """Accepted, such a key would make every put fail with a NullKeyError blaming
    the tuples. The error names the key, the field and the schema's fields."""
    raw[kind][stream][key] = value
    if key == "timestamp_field":
        raw[kind][stream]["timestamp_mode"] = "data_source"
    error = refused(raw)
    wrong = value[-1] if isinstance(value, list) else value
    assert error.key == f"{kind}.{stream}.{key}" and error.value == wrong
    schema = "flight" if kind == "input_streams" else "delays_by_origin_hour"
    assert error.allowed == ", ".join(SchemaRepository.load().get(schema).field_names)
    assert f"names {wrong!r}, which is no field of schema" in str(error)


def test_key_fields_of_the_schema_are_accepted(raw: dict[str, Any]) -> None:
    raw["input_streams"]["flights"]["key"] = ["carrier", "flight", "time_hour"]
    raw["output_streams"]["out"]["key"] = ["origin", "hour_start"]
    config = parse_query_group(raw, env={})
    assert config.input_streams["flights"].key == ["carrier", "flight", "time_hour"]


@pytest.mark.parametrize("host", ["", "not a host", "999.1.1.1"])
def test_an_empty_or_invalid_metrics_host_is_refused(raw: dict[str, Any], host: str) -> None:
    """uvicorn binds an empty host to every interface."""
    raw["query_group"]["metrics_host"] = host
    error = refused(raw)
    assert error.key == "query_group.metrics_host"
    assert "an IPv4 address" in str(error) and "host name" in str(error)


@pytest.mark.parametrize("host", ["", "a_b"])
def test_an_empty_or_invalid_sweeper_host_is_refused(tmp_path: Path, host: str) -> None:
    path = tmp_path / "sweeper.toml"
    path.write_text("[sweeper]\nquery_groups = []\n")
    with pytest.raises(ConfigError, match=r"'sweeper\.host'") as caught:
        load_sweeper_config(path, env={"FLOODGATE__SWEEPER__HOST": host})
    assert caught.value.key == "sweeper.host"


# --------------------------------------------------------------------------- encoding


def test_an_unknown_encoding_names_the_key_and_the_allowed_values(raw: dict[str, Any]) -> None:
    raw["input_streams"]["flights"]["encoding"] = "avro"
    error = refused(raw)
    assert error.key == "input_streams.flights.encoding"
    assert error.value == "avro"
    assert "'single-object'" in str(error) and "'confluent'" in str(error)


@pytest.mark.parametrize("kind, stream", [("input_streams", "flights"), ("output_streams", "out")])
def test_confluent_encoding_needs_a_registry_url(
    raw: dict[str, Any], kind: str, stream: str
) -> None:
    raw[kind][stream]["encoding"] = "confluent"
    error = refused(raw)
    assert error.key == f"{kind}.{stream}.encoding"
    assert "schema_registry.url" in str(error)

    raw["schema_registry"] = {"url": "http://registry:8081"}
    config = parse_query_group(raw, env={})
    side = "input" if kind == "input_streams" else "output"
    assert config.stream_registry(side, stream) == ("confluent", {"url": "http://registry:8081"})


def test_an_unknown_key_encoding_names_the_key_and_the_allowed_values(
    raw: dict[str, Any],
) -> None:
    raw["input_streams"]["flights"]["key_encoding"] = "avro"
    error = refused(raw)
    assert error.key == "input_streams.flights.key_encoding"
    assert error.value == "avro"
    assert "'raw'" in str(error) and "'confluent'" in str(error)


def test_a_confluent_key_needs_key_fields_and_a_registry_url(raw: dict[str, Any]) -> None:
    stream = raw["input_streams"]["flights"]
    stream["key_encoding"] = "confluent"
    stream["key"] = []
    error = refused(raw)
    assert error.key == "input_streams.flights"
    assert "key_encoding 'confluent' needs key" in str(error)

    stream["key"] = ["carrier", "flight"]
    error = refused(raw)
    assert error.key == "input_streams.flights.key_encoding"
    assert error.value == "confluent"
    assert "schema_registry.url" in str(error) and "allowed: 'raw'" in str(error)

    raw["schema_registry"] = {"url": "http://registry:8081"}
    config = parse_query_group(raw, env={})
    assert config.input_streams["flights"].key_encoding == "confluent"
    assert config.stream_registry("input", "flights") == ("single-object", {})


def test_output_streams_have_no_key_encoding(raw: dict[str, Any]) -> None:
    raw["output_streams"]["out"]["key_encoding"] = "confluent"
    error = refused(raw)
    assert error.key == "output_streams.out.key_encoding"


def test_single_object_is_the_default_encoding_and_needs_no_registry(raw: dict[str, Any]) -> None:
    config = parse_query_group(raw, env={})
    assert config.stream_registry("input", "flights") == ("single-object", {})
    assert config.stream_registry("output", "out") == ("single-object", {})


def test_a_registry_url_that_is_no_http_url_is_refused(raw: dict[str, Any]) -> None:
    raw["schema_registry"] = {"url": "registry:8081"}
    error = refused(raw)
    assert error.key == "schema_registry.url"
    assert "http://" in str(error)


def test_registry_basic_auth_is_passed_on_and_never_shown(raw: dict[str, Any]) -> None:
    raw["input_streams"]["flights"]["encoding"] = "confluent"
    raw["schema_registry"] = {"url": "https://r:8081", "basic_auth_user_info": "u:s3cret"}
    config = parse_query_group(raw, env={})
    assert config.stream_registry("input", "flights")[1] == {
        "url": "https://r:8081",
        "basic.auth.user.info": "u:s3cret",
    }
    assert "s3cret" not in repr(config)


def test_spark_authenticate_secret_in_the_file_is_refused(raw: dict[str, Any]) -> None:
    """A secret in ``[spark] conf`` is read by whoever reads the file: Spark's RPC
    secret belongs in ``spark-defaults.conf`` or a secret file."""
    raw["spark"] = {"conf": {"spark.authenticate": True, "spark.authenticate.secret": "s3cr3t"}}
    with pytest.raises(ConfigError) as refused:
        parse_query_group(raw, env={})
    assert refused.value.key == "spark.conf"
    assert "'spark.authenticate.secret'" in str(refused.value)
    assert "spark-defaults.conf" in str(refused.value)
    assert "s3cr3t" not in str(refused.value)


def test_allow_unauthenticated_spark_is_off_unless_set(raw: dict[str, Any]) -> None:
    assert parse_query_group(raw, env={}).query_group.allow_unauthenticated_spark is False
    raw["query_group"]["allow_unauthenticated_spark"] = True
    raw["spark"] = {"conf": {"spark.authenticate.secret.file": "/run/secrets/spark"}}
    assert parse_query_group(raw, env={}).query_group.allow_unauthenticated_spark is True

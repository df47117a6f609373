"""The `floodgate` command refuses a bad query group file at start, naming the key; an
error is one line on standard error, exit status 1 for a failed operation and 2 only
for a wrong command line."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from pipeline.cli import app

runner = CliRunner()

ROOT = Path(__file__).resolve().parents[4]


def test_run_refuses_an_unknown_key_naming_it_and_what_is_allowed(tmp_path: Path) -> None:
    text = (ROOT / "conf" / "flights.toml").read_text()
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace("trigger_interval_ms = ", "trigger_intervall_ms = ", 1))

    result = runner.invoke(app, ["run", str(bad), "--bootstrap", "127.0.0.1:1"])

    assert result.exit_code == 1
    assert result.stdout == ""
    assert "query_group.trigger_intervall_ms" in result.stderr
    assert "trigger_interval_ms" in result.output.replace("trigger_intervall_ms", "")


def test_run_refuses_a_bad_value_naming_the_allowed_ones(tmp_path: Path) -> None:
    text = (ROOT / "conf" / "flights.toml").read_text()
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace('timestamp_mode = "data_source"', 'timestamp_mode = "wallclock"'))

    result = runner.invoke(app, ["run", str(bad), "--bootstrap", "127.0.0.1:1"])

    assert result.exit_code == 1
    assert "input_streams.flights.timestamp_mode" in result.stderr
    assert "'wallclock'" in result.output
    assert "'server'" in result.output and "'data_source'" in result.output


def test_run_without_any_cluster_says_how_to_name_one(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["run", str(ROOT / "conf" / "flights.toml")], env={"FLOODGATE_KAFKA_BOOTSTRAP": ""}
    )
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.startswith("error: no Kafka cluster")
    assert "FLOODGATE_KAFKA_BOOTSTRAP" in result.stderr


def test_run_refuses_an_empty_control_token_naming_the_variable_before_spark_starts() -> None:
    """An empty ``FLOODGATE_CONTROL_TOKEN`` must never mean "no token"."""
    result = runner.invoke(
        app,
        ["run", str(ROOT / "conf" / "flights.toml"), "--bootstrap", "127.0.0.1:1"],
        env={"FLOODGATE_CONTROL_TOKEN": ""},
    )

    assert result.exit_code == 1
    assert "FLOODGATE_CONTROL_TOKEN is set but empty" in result.stderr


def test_produce_refuses_an_empty_metrics_host_before_connecting() -> None:
    """An empty host would bind every interface."""
    result = runner.invoke(
        app,
        [
            "produce",
            str(ROOT / "conf" / "flights.toml"),
            "--bootstrap",
            "127.0.0.1:1",
            "--metrics-host",
            "",
        ],
    )

    assert result.exit_code == 2
    assert "--metrics-host" in result.output and "an IPv4 address" in result.output


def test_a_usage_error_exits_2_on_standard_error() -> None:
    result = runner.invoke(app, ["audit", "--no-such-option"])

    assert result.exit_code == 2
    assert result.stdout == ""
    assert "--no-such-option" in result.stderr


def test_a_refused_metrics_doc_check_exits_1_on_standard_error(tmp_path: Path) -> None:
    stale = tmp_path / "metrics.md"
    stale.write_text("stale\n")

    result = runner.invoke(app, ["metrics-doc", "--output", str(stale), "--check"])

    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.startswith(f"error: {stale} is out of date")

"""``floodgate admission`` client commands: an unreachable service is a failed
operation, told on standard error with exit status 1 (2 is a wrong command line)."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from admission.cli import app

runner = CliRunner()


def test_an_unreachable_service_exits_1_on_standard_error() -> None:
    result = runner.invoke(app, ["jobs", "--url", "http://127.0.0.1:1"])

    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.startswith("error: admission service at http://127.0.0.1:1: ")


def test_a_missing_job_id_is_a_usage_error() -> None:
    result = runner.invoke(app, ["cancel"])

    assert result.exit_code == 2
    assert result.stdout == ""
    assert "JOB_ID" in result.stderr.upper()


def test_a_token_on_the_command_line_is_refused_naming_both_other_ways() -> None:
    """``--token`` once put the admission token in argv, where ps shows it."""
    result = runner.invoke(app, ["cancel", "1", "--token", "s3cret", "--url", "http://127.0.0.1:1"])

    assert result.exit_code == 2
    assert "FLOODGATE__ADMISSION__TOKEN" in result.stderr and "--token-file" in result.stderr
    assert "s3cret" not in result.stderr + result.stdout
    assert "admission service at" not in result.stderr  # refused before any call


def test_an_empty_token_file_is_refused_before_any_call(tmp_path: Path) -> None:
    empty = tmp_path / "token"
    empty.write_text("\n")
    empty.chmod(0o600)
    result = runner.invoke(
        app, ["cancel", "1", "--token-file", str(empty), "--url", "http://127.0.0.1:1"]
    )

    assert result.exit_code == 1
    assert f"--token-file {empty} is empty" in result.stderr

"""``floodgate admission`` client commands: an unreachable service is a failed
operation, told on standard error with exit status 1 (2 is a wrong command line)."""

from __future__ import annotations

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

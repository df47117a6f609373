"""How every command reports a failure (:func:`pipeline.cli.conventions.reports_errors`):
one line on standard error, exit status 1, and no secret in it."""

from __future__ import annotations

import secrets

import typer
from typer.testing import CliRunner

from pipeline.cli.conventions import FAILED, reports_errors
from pipeline.errors import BrokerError

runner = CliRunner()


def test_a_failure_s_message_shows_no_url_password_nor_password_value() -> None:
    password, other = secrets.token_hex(16), secrets.token_hex(16)
    app = typer.Typer()

    @app.command()
    @reports_errors
    def start() -> None:
        raise BrokerError(
            "the broker did not start",
            command=["kafka-server-start.sh", "server.properties"],
            output=(
                f"registry at http://alice:{password}@127.0.0.1:8081 refused\n"
                f'PlainLoginModule required username="alice" password="{other}";'
            ),
        )

    result = runner.invoke(app, [])
    assert result.exit_code == FAILED
    assert "the broker did not start" in result.stderr
    assert "http://alice:***@127.0.0.1:8081" in result.stderr
    assert 'password="***"' in result.stderr
    assert password not in result.output + result.stderr
    assert other not in result.output + result.stderr

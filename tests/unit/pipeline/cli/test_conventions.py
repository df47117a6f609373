"""How every command reports a failure (:func:`pipeline.cli.conventions.reports_errors`):
one line on standard error, exit status 1, and no secret in it; and a service's command
line, which imports these conventions, loads when it is imported first."""

from __future__ import annotations

import secrets
import subprocess
import sys
from pathlib import Path

import typer
from typer.testing import CliRunner

from pipeline.cli.conventions import FAILED, reports_errors
from pipeline.errors import BrokerError

ROOT = Path(__file__).resolve().parents[4]

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


def test_a_service_command_line_imported_first_loads() -> None:
    """``sweeper.cli`` and ``admission.cli`` import :mod:`pipeline.cli.conventions`, and
    so the ``pipeline.cli`` package, before their own apps exist: the ``floodgate``
    command still finds them (through its entry points, when it is built)."""
    code = (
        "import sweeper.cli, admission.cli\n"
        "from typer.testing import CliRunner\n"
        "from pipeline.cli import app\n"
        "out = CliRunner().invoke(app, ['--help']).output\n"
        "assert 'admission' in out and 'sweeper' in out, out\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)

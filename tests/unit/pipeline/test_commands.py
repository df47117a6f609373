"""``pipeline.commands`` is kept for one release as a deprecated name of
:mod:`pipeline.cli.conventions`: each name still reads the same object, with a
``DeprecationWarning``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.cli import conventions

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("name", ["fail", "reports_errors", "print_table", "Verbose", "FAILED"])
def test_a_name_read_from_pipeline_commands_warns_and_is_the_conventions_one(name: str) -> None:
    import pipeline.commands as deprecated

    with pytest.warns(DeprecationWarning, match=rf"pipeline\.commands\.{name} is deprecated"):
        value = getattr(deprecated, name)
    assert value is getattr(conventions, name)


def test_an_unknown_name_is_an_attribute_error() -> None:
    import pipeline.commands as deprecated

    with pytest.raises(AttributeError):
        deprecated.no_such_name  # noqa: B018


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

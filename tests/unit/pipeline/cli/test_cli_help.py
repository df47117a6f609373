"""``floodgate ... --help`` prints every help text as it is written: nothing in it is
read as markup (``[kafka] bootstrap_servers`` stays, it is not eaten as a style tag)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from pipeline.cli import app

runner = CliRunner()


def _commands(command: Any, path: list[str]) -> Iterator[tuple[list[str], Any]]:
    """Every command below ``command`` (the click that Typer vendors: duck-typed)."""
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands(sub, [*path, name])


COMMANDS = list(_commands(typer.main.get_command(app), []))


def _words(text: str) -> str:
    return " ".join(text.split())


def test_every_service_command_is_walked() -> None:
    paths = {" ".join(p) for p, _ in COMMANDS}
    assert {"run", "audit", "broker", "query-group status", "admission serve"} <= paths
    assert "sweeper serve" in paths


@pytest.mark.parametrize(
    ("path", "command"), COMMANDS, ids=[" ".join(p) or "floodgate" for p, _ in COMMANDS]
)
def test_help_prints_each_help_text_whole(path: list[str], command: Any) -> None:
    result = runner.invoke(app, [*path, "--help"], terminal_width=1000, max_content_width=1000)

    assert result.exit_code == 0, result.output
    shown = _words(result.output)
    # A hidden option (admission's refused --token) is not listed, by design.
    texts = [getattr(p, "help", None) for p in command.params if not getattr(p, "hidden", False)]
    for text in [*(t for t in texts if t), command.help or ""]:
        first_paragraph = _words(text.split("\n\n")[0])
        assert first_paragraph in shown


def test_the_bracketed_config_section_survives_in_run_help() -> None:
    result = runner.invoke(app, ["run", "--help"], terminal_width=1000, max_content_width=1000)

    assert "then [kafka] bootstrap_servers" in _words(result.output)

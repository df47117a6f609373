"""Tables printed by the commands are never cut: in a non-terminal (a pipe, a file, a
container's log) a table is as wide as it needs; in a terminal a long cell folds."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from rich.table import Table
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.cli.conventions import print_table
from pipeline.queues.ledger import LedgerRow

HEADERS = ("query group", "stream", "partition", "written", "processed", "dead-lettered")
ROW = ("flights_with_a_long_name", "flights", "3", "336,776", "316,776", "1,234")


def _table() -> Table:
    table = Table(title="a ledger")
    for header in HEADERS:
        table.add_column(header)
    table.add_row(*ROW)
    return table


def test_a_table_in_a_non_terminal_is_printed_whole_past_its_width() -> None:
    out = io.StringIO()
    console = Console(file=out, width=40)
    assert not console.is_terminal

    print_table(console, _table())

    text = out.getvalue()
    assert "…" not in text
    for word in (*HEADERS, *ROW):
        assert word in text


def test_a_table_in_a_narrow_terminal_folds_its_cells_instead_of_cutting_them() -> None:
    out = io.StringIO()
    console = Console(file=out, width=40, force_terminal=True, color_system=None)

    print_table(console, _table())

    text = out.getvalue()
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 40


def test_audit_prints_every_column_and_value_whole_in_a_non_terminal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    row = LedgerRow(
        query_group="flights",
        stream="flights",
        topic="floodgate.flights.flights",
        partition=0,
        written=336_776,
        processed=316_776,
        dead_lettered=0,
        swept=0,
        queued=20_000,
        unaccounted=0,
        committed=316_776,
        log_start=0,
    )

    def reconcile(group: Any, *, bootstrap_servers: str) -> list[LedgerRow]:
        return [row]

    monkeypatch.setattr("pipeline.queues.ledger.reconcile", reconcile)
    monkeypatch.setenv("COLUMNS", "80")
    flights = Path(__file__).resolve().parents[4] / "conf" / "flights.toml"

    result = CliRunner().invoke(app, ["audit", str(flights), "--bootstrap", "127.0.0.1:1"])

    assert result.exit_code == 0, result.output
    assert "…" not in result.stdout
    for word in ("query group", "partition", "dead-lettered", "unaccounted", "flights"):
        assert word in result.stdout
    assert "336,776" in result.stdout and "20,000" in result.stdout

"""``floodgate produce`` ends with the input stream queue as ``floodgate audit`` counts
it (written, not yet processed), read from the broker after the replay, not the
client's reading from before it ("queue 0/300,000" with 20 000 tuples queued)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.cli.run import produced_line
from pipeline.demo.producer import ProducerStatus, producer_status

FLIGHTS = Path(__file__).resolve().parents[4] / "conf" / "flights.toml"


class _Writer:
    """A stream input whose queue length is that of its last read of the broker, as
    the client's is: 0 at the read before the replay, 20 000 in the broker now."""

    max_queue_size = 300_000

    def __init__(self) -> None:
        self.in_broker = 20_000
        self.last_read = 0

    def free_queue_size(self) -> int:
        self.last_read = self.in_broker
        return self.max_queue_size - self.last_read

    def queue_length(self) -> int:
        return self.last_read


def test_a_status_reads_the_queue_from_the_broker_now() -> None:
    status = producer_status(1, 20_000, [{}] * 20_000, None, _Writer())  # type: ignore[arg-type]

    assert (status.queue_length, status.max_queue_size) == (20_000, 300_000)


def test_a_status_counts_the_tuples_of_a_round() -> None:
    status = producer_status(1, 5, tuples=[{}] * 7, reception=None, writer=_Writer())  # type: ignore[arg-type]
    assert (status.produced, status.total) == (5, 7)


def test_the_last_line_shows_what_is_still_queued() -> None:
    status = ProducerStatus(1, 20_000, 20_000, {}, queue_length=20_000, max_queue_size=300_000)

    line = produced_line(20_000, "flights.flights", status)

    assert line == (
        "20,000 flights produced into flights.flights; queue 20,000/300,000 "
        "(written, not yet processed by the query group)"
    )
    assert produced_line(0, "flights.flights", None) == "0 flights produced into flights.flights"


def test_produce_ends_with_the_final_status_queue(monkeypatch: pytest.MonkeyPatch) -> None:
    def run_producer(*, on_progress: Any, **_kwargs: Any) -> int:
        on_progress(ProducerStatus(1, 10_000, 20_000, {}, 0, 300_000))
        on_progress(ProducerStatus(1, 20_000, 20_000, {}, 20_000, 300_000))
        return 20_000

    monkeypatch.setattr("pipeline.demo.producer.run_producer", run_producer)
    monkeypatch.setattr("pipeline.cli.run.stop_on_signals", lambda *_: None)  # pytest's own

    result = CliRunner().invoke(
        app, ["produce", str(FLIGHTS), "--bootstrap", "127.0.0.1:1", "--metrics-port", "0"]
    )

    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-1] == (
        "20,000 flights produced into flights.flights; queue 20,000/300,000 "
        "(written, not yet processed by the query group)"
    )

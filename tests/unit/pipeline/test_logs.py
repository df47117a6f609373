"""The services' log lines carry their time, level and logger; ``--log-format json``
gives one JSON object a line (``floodgate run``, ``admission serve``, ``sweeper serve``)."""

from __future__ import annotations

import io
import json
import logging
import re
import secrets
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.logs import JsonFormatter, LogFormat, configure_logging, formatter

SERVICES = (["run"], ["admission", "serve"], ["sweeper", "serve"])


@contextmanager
def bare_root() -> Iterator[logging.Logger]:
    """The root logger without the test runner's handlers (restored after), as a
    service's process starts with it."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    root.handlers.clear()
    try:
        yield root
    finally:
        for handler in root.handlers[:]:
            root.removeHandler(handler)
        root.handlers.extend(handlers)
        root.setLevel(level)


def _record(message: str, *args: object, exc: BaseException | None = None) -> logging.LogRecord:
    exc_info = (type(exc), exc, exc.__traceback__) if exc is not None else None
    return logging.LogRecord(
        "sweeper.service", logging.WARNING, __file__, 1, message, args, exc_info
    )


def test_a_json_line_has_time_level_logger_and_message() -> None:
    line = JsonFormatter().format(_record("FG-SWP-002 sweep of %s[%d] aborted", "t", 3))

    entry = json.loads(line)
    assert entry["level"] == "WARNING"
    assert entry["logger"] == "sweeper.service"
    assert entry["message"] == "FG-SWP-002 sweep of t[3] aborted"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", entry["time"])
    assert set(entry) == {"time", "level", "logger", "message"}


def test_a_json_line_with_a_traceback_is_still_one_line() -> None:
    try:
        raise RuntimeError("broker gone\nsecond line")
    except RuntimeError as exc:
        line = JsonFormatter().format(_record("cycle failed", exc=exc))

    assert "\n" not in line
    entry = json.loads(line)
    assert "RuntimeError: broker gone" in entry["exception"]


def test_json_logging_writes_one_object_a_line() -> None:
    out = io.StringIO()
    with bare_root():
        configure_logging(True, "json", stream=out)
        logging.getLogger("admission.service").info("admission service started")
        logging.getLogger("admission.service").debug("not at INFO")

    lines = out.getvalue().splitlines()
    assert [json.loads(line)["message"] for line in lines] == ["admission service started"]
    assert json.loads(lines[0])["level"] == "INFO"


def test_text_logging_names_the_level_and_the_logger() -> None:
    out = io.StringIO()
    with bare_root():
        configure_logging(False, "text", stream=out)
        logging.getLogger("pipeline.spark.guard").warning("FG-SINK-003 held")
        logging.getLogger("pipeline.spark.guard").info("not at WARNING")

    (line,) = out.getvalue().splitlines()
    assert line.endswith(" WARNING pipeline.spark.guard: FG-SINK-003 held")


@pytest.mark.parametrize("log_format", list(LogFormat))
def test_a_url_password_is_hidden_in_the_message_and_the_traceback(
    log_format: LogFormat,
) -> None:
    password, other = secrets.token_hex(16), secrets.token_hex(16)
    url = f"postgresql+psycopg://sweeper:{password}@db.example/catalog"
    try:
        raise RuntimeError(f"could not connect to {url} (password={other})")
    except RuntimeError as exc:
        line = formatter(log_format).format(_record("catalog %s unreachable", url, exc=exc))
    assert password not in line and other not in line
    assert "postgresql+psycopg://sweeper:***@db.example/catalog unreachable" in line
    assert "password=***" in line


def test_logging_set_up_already_is_left_alone() -> None:
    theirs = logging.NullHandler()
    with bare_root() as root:
        root.addHandler(theirs)
        assert configure_logging(True, "json", stream=io.StringIO()) is None
        assert root.handlers == [theirs]


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="xml"):
        configure_logging(True, "xml")


@pytest.mark.parametrize("path", SERVICES, ids=" ".join)
def test_each_service_takes_log_format_text_or_json(path: list[str]) -> None:
    shown = CliRunner().invoke(app, [*path, "--help"], terminal_width=200, max_content_width=200)
    assert "--log-format <text|json>" in shown.stdout
    assert "FLOODGATE_LOG_FORMAT" in shown.stdout

    refused = CliRunner().invoke(app, [*path, "--log-format", "xml"])
    assert refused.exit_code == 2
    assert "xml" in refused.stderr

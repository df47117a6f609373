"""How the long-running commands log (``floodgate run``, ``floodgate admission serve``,
``floodgate sweeper serve``): on standard error, each line with its time, level and
logger, as text or as JSON (``--log-format``).

* ``text``: ``2026-11-26 11:00:00,123 WARNING pipeline.spark.guard: <message>``;
* ``json``: one object a line, ``{"time", "level", "logger", "message"}`` (and
  ``"exception"``, the traceback, when the record carries one), for a log collector
  that parses fields instead of lines.

Both show a URL's password, and a ``password=``/``token=`` pair's value, as ``***``
(:func:`pipeline.redaction.redact_text`), in the message and in a traceback: a
library's exception that quotes a database URL does not put its password in a log.

Only the standard library's :mod:`logging` is used: a formatter, no dependency.
"""

from __future__ import annotations

import datetime
import enum
import json
import logging
import sys
from typing import IO, Any

from pipeline.redaction import redact_text

#: The text lines: time, level, logger, message.
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

#: The environment variable ``--log-format`` reads when the option is not given.
LOG_FORMAT_ENV = "FLOODGATE_LOG_FORMAT"


class LogFormat(enum.StrEnum):
    """What a log line looks like: ``text`` (:data:`TEXT_FORMAT`) or ``json``
    (:class:`JsonFormatter`)."""

    text = "text"
    json = "json"


class TextFormatter(logging.Formatter):
    """A record as :data:`TEXT_FORMAT`, its traceback below it, secrets in the text
    hidden (:func:`~pipeline.redaction.redact_text`)."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        return redact_text(super().format(record))


class JsonFormatter(logging.Formatter):
    """A record as one line of JSON: ``time`` (ISO 8601, UTC, milliseconds, e.g.
    ``2026-11-26T11:00:00.123Z``), ``level`` (``INFO``, ``WARNING``, ...), ``logger``
    (its name, ``pipeline.spark.control``), ``message`` (formatted with its arguments);
    ``exception`` (the formatted traceback) and ``stack`` only when the record has
    them. Never more than one line: newlines inside a value are escaped by JSON.
    Secrets in the message and the traceback are hidden
    (:func:`~pipeline.redaction.redact_text`)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": redact_text(record.getMessage()),
        }
        if record.exc_info:
            entry["exception"] = redact_text(self.formatException(record.exc_info))
        elif record.exc_text:
            entry["exception"] = redact_text(record.exc_text)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def formatter(log_format: LogFormat | str) -> logging.Formatter:
    """The formatter of ``log_format`` (``"text"`` or ``"json"``).

    Raises:
        ValueError: another format.
    """
    if LogFormat(log_format) is LogFormat.json:
        return JsonFormatter()
    return TextFormatter()


def configure_logging(
    verbose: bool, log_format: LogFormat | str = LogFormat.text, *, stream: IO[str] | None = None
) -> logging.Handler | None:
    """Log on ``stream`` (default: standard error) in ``log_format``, at INFO when
    ``verbose``, else WARNING: a handler on the root logger. Like
    ``logging.basicConfig``, nothing is changed once the root logger has a handler
    (an embedding program's, or a test runner's).

    Returns:
        The handler installed, or ``None`` when logging was set up already.

    Raises:
        ValueError: ``log_format`` is neither ``text`` nor ``json``.
    """
    chosen = formatter(log_format)
    root = logging.getLogger()
    if root.handlers:
        return None
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(chosen)
    root.addHandler(handler)
    root.setLevel(logging.INFO if verbose else logging.WARNING)
    return handler

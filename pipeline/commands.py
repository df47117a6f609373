"""Deprecated (goes in the next release): :mod:`pipeline.cli.conventions`.

What every ``floodgate`` command shares moved into the command line's own package.
Each name read from here is the one of :mod:`pipeline.cli.conventions`, with a
``DeprecationWarning``.
"""

from __future__ import annotations

import warnings
from typing import Any

from pipeline.cli import conventions

#: The names that moved, each read from :mod:`pipeline.cli.conventions`.
MOVED = frozenset(
    {
        "FAILED",
        "USAGE",
        "LogFormatOption",
        "Verbose",
        "config_file_option",
        "fail",
        "print_table",
        "reports_errors",
        "usage_error",
    }
)


def __getattr__(name: str) -> Any:
    if name not in MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"pipeline.commands.{name} is deprecated and goes in the next release: "
        f"import it from pipeline.cli.conventions",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(conventions, name)

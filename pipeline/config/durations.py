"""Spark's durations as a config file gives them: ``"<n> <unit>"``, the form of
``withWatermark``'s delay and of a trigger's interval (``"10 seconds"``)."""

from __future__ import annotations

import re

#: ``<n> <unit>``, the unit singular or plural, any case: a subset of Spark's interval
#: syntax (``IntervalUtils``) that every Spark version reads the same.
SPARK_DURATION = re.compile(
    r"^\s*(\d+)\s+(millisecond|second|minute|hour|day|week)s?\s*$", re.IGNORECASE
)

#: Milliseconds of each unit of fixed length in Spark's interval syntax.
UNITS_MS = {
    "microsecond": 0.001,
    "millisecond": 1,
    "second": 1_000,
    "minute": 60_000,
    "hour": 3_600_000,
    "day": 86_400_000,
    "week": 604_800_000,
}


def duration_ms(text: str) -> int:
    """Milliseconds of a Spark duration.

    Raises:
        ValueError: ``text`` is not ``<n> <unit>`` with a unit of millisecond, second,
            minute, hour, day or week.
    """
    match = SPARK_DURATION.match(text)
    if match is None:
        raise ValueError(
            f"{text!r} is not a duration; give '<n> <unit>' with unit millisecond, second, "
            "minute, hour, day or week (e.g. '10 seconds')"
        )
    return int(match.group(1)) * int(UNITS_MS[match.group(2).lower()])

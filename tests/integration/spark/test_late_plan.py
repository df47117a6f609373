"""Which queries drop late tuples, read from plans Spark's own SQL parser makes: only an
aggregation over an event-time window of one watermarked stream gets the source's
lateness rule, with the window's duration, slide and start."""

from __future__ import annotations

from typing import Any

import pytest

from pipeline.spark.late_plan import late_plan
from pipeline.spark.options import EventTimeWindow

pytestmark = pytest.mark.no_kafka

HOUR = 3_600_000
MINUTE = 60_000


def parsed(spark: Any, sql: str) -> str:
    """The query's parsed (unresolved) plan as Spark's JSON: no view need exist."""
    return str(spark._jsparkSession.sessionState().sqlParser().parsePlan(sql).toJSON())


@pytest.mark.parametrize(
    ("sql", "relations", "window"),
    [
        (  # conf/flights.toml's hourly query
            "SELECT origin, window.start AS hour_start, count(*) AS flights FROM flights "
            "GROUP BY origin, window(event_time, '1 hour')",
            {"flights"},
            EventTimeWindow(HOUR, HOUR),
        ),
        (  # sliding, with a start offset, grouped through a select alias
            "SELECT origin, window(event_time, '1 hour', '15 minutes', '5 minutes') AS w, "
            "count(*) AS n FROM Flights GROUP BY origin, w",
            {"flights"},
            EventTimeWindow(HOUR, 15 * MINUTE, 5 * MINUTE),
        ),
        (
            "SELECT window(event_time, INTERVAL 30 MINUTES) AS w, count(*) AS n "
            "FROM (SELECT * FROM flights WHERE origin = 'JFK') f GROUP BY w",
            {"flights"},
            EventTimeWindow(30 * MINUTE, 30 * MINUTE),
        ),
        (  # a CTE: the relation and the aggregation sit in the CTE's own plan
            "WITH f AS (SELECT * FROM flights) "
            "SELECT count(*) AS n FROM f GROUP BY window(event_time, '2 hours')",
            {"flights", "f"},
            EventTimeWindow(2 * HOUR, 2 * HOUR),
        ),
        # Nothing Spark would drop as late: stateless, or grouped by a date.
        ("SELECT producer, seq FROM flights", {"flights"}, None),
        (
            "SELECT carrier, make_date(year, month, day) AS day, count(*) AS n FROM flights "
            "GROUP BY carrier, make_date(year, month, day)",
            {"flights"},
            None,
        ),
        # A window in a projection only, or over another column: no aggregation drops.
        ("SELECT window(event_time, '1 hour') AS w FROM flights", {"flights"}, None),
        (
            "SELECT count(*) AS n FROM flights GROUP BY window(_timestamp, '1 hour')",
            {"flights"},
            None,
        ),
    ],
)
def test_the_event_time_window_of_an_aggregation_is_read_from_the_parsed_plan(
    spark: Any, sql: str, relations: set[str], window: EventTimeWindow | None
) -> None:
    plan = late_plan(parsed(spark, sql))
    assert plan.relations == relations
    assert plan.window == window
    assert plan.why_not is None


@pytest.mark.parametrize(
    ("sql", "why"),
    [
        (
            "SELECT count(*) AS n FROM flights GROUP BY window(event_time, '1 month')",
            "'1 month'",
        ),
        (
            "SELECT count(*) AS n FROM flights GROUP BY window(event_time, concat('1 ', 'hour'))",
            "window arguments",
        ),
        (
            "SELECT count(*) AS n FROM flights GROUP BY window(event_time, '1 hour') "
            "UNION ALL SELECT count(*) AS n FROM flights GROUP BY window(event_time, '1 day')",
            "2 different event-time windows",
        ),
        (
            "SELECT count(*) AS n FROM flights GROUP BY window(event_time, '1 hour', '2 hours')",
            "the slide at most the duration",
        ),
    ],
)
def test_a_window_the_source_cannot_follow_leaves_late_tuples_to_spark_and_says_why(
    spark: Any, sql: str, why: str
) -> None:
    plan = late_plan(parsed(spark, sql))
    assert plan.window is None
    assert plan.why_not is not None and why in plan.why_not

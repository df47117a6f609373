"""The event-time watermark and window of a query, found in its parsed plan.

The source needs them to dead-letter a tuple Spark would drop as late
(Spark drops late rows silently): :func:`late_plan` reads the delay of
``withWatermark`` and the window of ``window``/``session_window`` from the JSON
of the query's parsed logical plan."""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from typing import Any

from pipeline.config.durations import UNITS_MS
from pipeline.spark.options import EventTimeWindow


def interval_ms(text: str) -> int | None:
    """A Spark interval string (``"1 hour"``, ``"interval 1 hour 30 minutes"``) in ms;
    ``None`` when it is not a sum of whole ``<n> <unit>`` terms of fixed length (months
    and years are not, nor are fractions of a ms)."""
    words = text.lower().split()
    if words[:1] == ["interval"]:
        words = words[1:]
    if not words or len(words) % 2:
        return None
    total = 0.0
    for number, unit in zip(words[::2], words[1::2], strict=True):
        scale = UNITS_MS.get(unit.removesuffix("s"))
        if scale is None or not number.lstrip("-").isdigit():
            return None
        total += int(number) * scale
    return int(total) if total == int(total) else None


def _expression_trees(preorder: list[dict[str, Any]]) -> list[tuple[dict[str, Any], list[Any]]]:
    """Spark's JSON of one expression (a pre-order list of nodes, each with
    ``num-children``) as ``(node, children)`` trees."""
    nodes = iter(preorder)

    def take() -> tuple[dict[str, Any], list[Any]]:
        node = next(nodes)
        return node, [take() for _ in range(int(node.get("num-children", 0)))]

    trees = []
    with contextlib.suppress(StopIteration):
        while True:
            trees.append(take())
    return trees


def _walk_json(value: Any) -> Any:
    """Every JSON object in ``value``, however deep (plans nest plans: CTEs, subqueries)."""
    if isinstance(value, dict):
        yield value
        for item in value.values():
            yield from _walk_json(item)
    elif isinstance(value, list):
        for item in value:
            yield from _walk_json(item)


def _name_parts(node: dict[str, Any], key: str = "nameParts") -> list[str]:
    """A name Spark's JSON writes as ``"[a, b]"`` (``nameParts``, ``multipartIdentifier``),
    lower case."""
    return [p.strip().lower() for p in str(node.get(key, "")).strip("[]").split(",") if p.strip()]


def _literal_ms(argument: dict[str, Any]) -> int | None:
    """A window argument in ms: a string literal (``'1 hour'``) or a day-time interval
    literal (``INTERVAL 1 HOUR``, its value in µs); ``None`` for anything else."""
    kind, value = str(argument.get("dataType", "")), argument.get("value")
    if not str(argument.get("class", "")).endswith(".Literal") or value is None:
        return None
    if kind == "string":
        return interval_ms(str(value))
    if kind.startswith("interval") and "year" not in kind and "month" not in kind:
        micros = int(value)
        return micros // 1000 if micros % 1000 == 0 else None
    return None


@dataclass(frozen=True)
class LatePlan:
    """What a query's parsed plan says of late tuples (:func:`late_plan`)."""

    relations: frozenset[str]
    """The tables and views the query reads (lower case)."""
    window: EventTimeWindow | None
    """The event-time window of its streaming aggregation, if there is exactly one."""
    why_not: str | None = None
    """Why a ``window(event_time, ...)`` aggregation has no usable :attr:`window`."""


def late_plan(parsed_plan_json: str) -> LatePlan:
    """Read, from a query's *parsed* (unresolved) logical plan as Spark's JSON
    (``sessionState.sqlParser.parsePlan(sql).toJSON``), the relations it reads and the
    event-time window of its aggregation: the ``window(event_time, <duration>[,
    <slide>[, <start>]])`` calls among the grouping or aggregate expressions of its
    ``Aggregate`` nodes, with string or day-time interval literals.

    Spark drops a late tuple only in a stateful operator (an aggregation over the
    watermarked ``event_time``, ``window.end <= watermark``); a stateless query passes
    it on, so it gets no lateness rule. Grouping on ``event_time`` itself,
    ``dropDuplicates`` and stream-stream joins are not read: their late tuples are
    still dropped by Spark and only counted (``numRowsDroppedByWatermark``).
    """
    plan = json.loads(parsed_plan_json)
    relations: set[str] = set()
    windows: set[EventTimeWindow] = set()
    unreadable: list[str] = []
    for node in _walk_json(plan):
        cls = str(node.get("class", ""))
        if cls.endswith(".UnresolvedRelation"):
            relations.update(_name_parts(node, "multipartIdentifier")[-1:])
        if not cls.endswith(".Aggregate"):
            continue
        expressions = [*node.get("groupingExpressions", []), *node.get("aggregateExpressions", [])]
        for preorder in expressions:
            stack = _expression_trees(preorder)
            while stack:
                expression, children = stack.pop()
                stack.extend(children)
                if not (
                    str(expression.get("class", "")).endswith(".UnresolvedFunction")
                    and _name_parts(expression) == ["window"]
                    and children
                ):
                    continue
                column, *arguments = children
                if _name_parts(column[0])[-1:] != ["event_time"]:
                    continue
                spans = [_literal_ms(argument) for argument, _ in arguments]
                if not spans or None in spans or len(spans) > 3:
                    unreadable.append(f"window arguments {[a.get('value') for a, _ in arguments]}")
                    continue
                duration = spans[0] or 0
                slide = spans[1] if len(spans) > 1 else duration
                start = spans[2] if len(spans) > 2 else 0
                try:
                    windows.add(EventTimeWindow(duration, slide or 0, start or 0))
                except ValueError as exc:
                    unreadable.append(str(exc))
    frozen = frozenset(relations)
    if unreadable:
        return LatePlan(frozen, None, "; ".join(unreadable))
    if len(windows) > 1:
        return LatePlan(frozen, None, f"{len(windows)} different event-time windows")
    return LatePlan(frozen, next(iter(windows), None))

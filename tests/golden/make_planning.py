"""Write ``tests/golden/planning/plan_batch_end.json``: how the Python source plans a
micro-batch, for the JVM source's tests to check its port against.

- ``plan_batch_end``: cases of ``pipeline.offsets.plan_batch_end(start, latest,
  max_rows)`` (``io.floodgate.spark.offsets.BatchPlanner.planBatchEnd``), written by
  hand and drawn at random with a fixed seed. ``start`` and ``latest`` are
  ``[[partition, offset], ...]`` in the order given (not sorted: an implementation
  must not depend on it), ``max_rows`` a number or ``null``; ``end`` is
  ``[[partition, offset], ...]`` in partition order, or ``error`` a text the refusal's
  message contains (Python ``ValueError``, Java ``IllegalArgumentException``).
- ``group_ranges``: cases of ``pipeline.spark.source.group_ranges(ranges, max_tasks)``
  (``io.floodgate.spark.read.KafkaTask.group``): ``ranges`` ``[[partition, start,
  end], ...]`` in partition order, as the source makes them, and ``tasks`` the
  partitions of each task, in the order returned.

Run from the repository's root: ``.venv/bin/python tests/golden/make_planning.py``.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from pipeline.offsets import plan_batch_end  # noqa: E402
from pipeline.spark.partition_reader import KafkaInputPartition  # noqa: E402
from pipeline.spark.source import group_ranges  # noqa: E402

GOLDEN = ROOT / "tests" / "golden" / "planning" / "plan_batch_end.json"
SEED = 38
RANDOM_PLANS = 300
RANDOM_GROUPS = 100

Pairs = list[tuple[int, int]]


def _plans() -> list[tuple[str, Pairs, Pairs, int | None]]:
    """``(name, start, latest, max_rows)``."""
    cases: list[tuple[str, Pairs, Pairs, int | None]] = [
        ("no limit takes everything", [(0, 0), (1, 5)], [(0, 10), (1, 7)], None),
        ("everything fits", [(0, 0), (1, 5)], [(0, 10), (1, 7)], 12),
        ("exactly the limit", [(0, 0), (1, 5)], [(0, 10), (1, 7)], 11),
        ("proportional shares", [(0, 0), (1, 0), (2, 0)], [(0, 600), (1, 300), (2, 100)], 100),
        (
            "largest remainder, ties to the lower partition",
            [(0, 0), (1, 0), (2, 0)],
            [(0, 10), (1, 10), (2, 10)],
            5,
        ),
        ("one each first", [(0, 0), (1, 0), (2, 0)], [(0, 1000), (1, 1), (2, 1)], 3),
        (
            "fewer rows than waiting partitions",
            [(0, 0), (1, 0), (2, 0), (3, 0)],
            [(0, 5), (1, 5), (2, 5), (3, 5)],
            2,
        ),
        (
            "round robin moves with the start",
            [(0, 2), (1, 2), (2, 0), (3, 0)],
            [(0, 5), (1, 5), (2, 5), (3, 5)],
            2,
        ),
        (
            "round robin skips idle partitions",
            [(0, 9), (1, 3), (2, 7), (3, 1)],
            [(0, 9), (1, 5), (2, 7), (3, 5)],
            1,
        ),
        ("partitions given out of order", [(10, 3), (2, 0), (0, 7)], [(2, 50), (0, 9), (10, 4)], 5),
        (
            "round robin over partitions given out of order",
            [(10, 1), (2, 0), (0, 0), (1, 0)],
            [(2, 50), (0, 9), (10, 4), (1, 1)],
            2,
        ),
        ("partition missing from latest has no backlog", [(0, 0), (1, 4)], [(0, 10)], 3),
        ("latest behind start has no backlog", [(0, 10), (1, 0)], [(0, 4), (1, 8)], 3),
        ("nothing new", [(0, 10), (1, 4)], [(0, 10), (1, 4)], 1),
        ("no partitions", [], [], 5),
        ("limit zero with nothing new", [(0, 10)], [(0, 10)], 0),
        ("limit zero", [(0, 0)], [(0, 10)], 0),
        ("negative limit", [(0, 0)], [(0, 10)], -1),
        ("one row", [(0, 0), (1, 0)], [(0, 1), (1, 1)], 1),
        ("large offsets", [(0, 2**62), (1, 2**62)], [(0, 2**62 + 10**12), (1, 2**62 + 7)], 10**6),
        (
            "sum of starts beyond a long",
            [(p, 2**61) for p in range(8)],
            [(p, 2**61 + 3) for p in range(8)],
            5,
        ),
        (
            "budget times backlog beyond a long",
            [(0, 0), (1, 0)],
            [(0, 2**62), (1, 2**62 - 1)],
            2**62 + 1,
        ),
        (
            "many partitions",
            [(p, 100 * p) for p in range(12)],
            [(p, 100 * p + 7 * p + 1) for p in range(12)],
            40,
        ),
    ]
    rng = random.Random(SEED)
    for i in range(RANDOM_PLANS):
        n = rng.randint(1, 12)
        partitions = rng.sample(range(0, 40), n)  # some above 9, in random order
        big = rng.random() < 0.1
        start = [(p, rng.randint(0, 2**40 if big else 10_000)) for p in partitions]
        latest = []
        for p, s in start:
            roll = rng.random()
            if roll < 0.1:
                continue  # missing: no backlog
            if roll < 0.2:
                latest.append((p, max(0, s - rng.randint(0, 5))))  # behind
            elif roll < 0.4:
                latest.append((p, s))  # nothing new
            else:
                latest.append((p, s + rng.randint(1, 2_000)))
        rng.shuffle(latest)
        total = sum(max(0, dict(latest).get(p, s) - s) for p, s in start)
        roll = rng.random()
        if roll < 0.1:
            max_rows: int | None = None
        elif roll < 0.35:
            max_rows = rng.randint(1, n)  # often fewer than the waiting partitions
        else:
            max_rows = rng.randint(1, total + 10)
        cases.append((f"random {i}", start, latest, max_rows))
    return cases


def _groups() -> list[tuple[str, list[tuple[int, int, int]], int | None]]:
    """``(name, ranges, max_tasks)``."""
    cases: list[tuple[str, list[tuple[int, int, int]], int | None]] = [
        ("one range a task without maxTasks", [(0, 0, 5), (1, 0, 9), (2, 3, 4)], None),
        ("maxTasks at least the ranges", [(0, 0, 5), (1, 0, 9)], 2),
        ("maxTasks far above the ranges", [(0, 0, 5), (1, 0, 9)], 3_000_000_000),
        ("one task", [(0, 0, 5), (1, 0, 9), (2, 3, 4)], 1),
        ("largest first to the least loaded", [(0, 0, 10), (1, 0, 7), (2, 0, 5), (3, 0, 4)], 2),
        ("ties by partition", [(0, 0, 5), (1, 0, 5), (2, 0, 5), (3, 0, 5), (4, 0, 5)], 2),
        ("tasks ordered by first partition", [(2, 0, 1), (5, 0, 100), (11, 0, 50), (40, 0, 49)], 3),
        ("no ranges", [], 2),
    ]
    rng = random.Random(SEED + 1)
    for i in range(RANDOM_GROUPS):
        n = rng.randint(1, 16)
        partitions = sorted(rng.sample(range(0, 40), n))
        ranges = []
        for p in partitions:
            s = rng.randint(0, 10_000)
            ranges.append((p, s, s + rng.choice([1, 1, 2, 5, rng.randint(1, 5_000)])))
        max_tasks = None if rng.random() < 0.1 else rng.randint(1, n + 2)
        cases.append((f"random {i}", ranges, max_tasks))
    return cases


def plan_case(name: str, start: Pairs, latest: Pairs, max_rows: int | None) -> dict[str, Any]:
    case: dict[str, Any] = {
        "name": name,
        "start": [list(x) for x in start],
        "latest": [list(x) for x in latest],
        "max_rows": max_rows,
    }
    try:
        end = plan_batch_end(dict(start), dict(latest), max_rows)
    except ValueError as exc:
        case["error"] = str(exc).split(",")[0]  # "max_rows must be positive or None"
        return case
    case["end"] = [[p, end[p]] for p in sorted(end)]
    return case


def group_case(
    name: str, ranges: list[tuple[int, int, int]], max_tasks: int | None
) -> dict[str, Any]:
    parts = [KafkaInputPartition("flights", p, s, e) for p, s, e in ranges]
    tasks = group_ranges(parts, max_tasks)
    return {
        "name": name,
        "ranges": [list(r) for r in ranges],
        "max_tasks": max_tasks,
        "tasks": [[r.partition for r in t.ranges] for t in tasks],
    }


def render() -> str:
    """The golden file's text."""
    golden = {
        "plan_batch_end": [plan_case(*c) for c in _plans()],
        "group_ranges": [group_case(*c) for c in _groups()],
    }
    # One case a line: a change to the rule shows as the lines of the cases it changes.
    sections = []
    for key, cases in golden.items():
        lines = ",\n".join(f"    {json.dumps(c)}" for c in cases)
        sections.append(f'  "{key}": [\n{lines}\n  ]')
    return "{\n" + ",\n".join(sections) + "\n}\n"


if __name__ == "__main__":
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    GOLDEN.write_text(render(), encoding="utf-8")
    print(f"wrote {GOLDEN.relative_to(ROOT)}")

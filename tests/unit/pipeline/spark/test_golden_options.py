"""The Python source's option parser against ``tests/golden/options/cases.json``, the
file the JVM source's ``SourceOptionsGoldenTest`` reads too: one option map parses to
the same fields, or is refused with the same message, on both sides."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from pipeline.spark.options import SourceOptions

GOLDEN = Path(__file__).resolve().parents[4] / "tests" / "golden"
CASES: list[dict[str, Any]] = json.loads(
    (GOLDEN / "options" / "cases.json").read_text(encoding="utf-8")
)


def _maker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_options", GOLDEN / "make_options.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MAKER = _maker()


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_the_parser_gives_what_the_golden_case_says(case: dict[str, Any]) -> None:
    if "error" in case:
        with pytest.raises(ValueError) as refused:
            SourceOptions.parse(case["options"])
        assert case["error"] in str(refused.value)
        return
    parsed = MAKER.describe(SourceOptions.parse(case["options"]))
    expected = dict(case["parsed"])
    prefix = expected.pop("group_id_prefix", None)
    if prefix is not None:
        group_id = parsed.pop("group_id")
        assert group_id.startswith(prefix)
        assert len(group_id) == len(prefix) + 36  # a UUID
    assert parsed == expected


def test_the_golden_file_is_what_make_options_writes() -> None:
    assert (GOLDEN / "options" / "cases.json").read_text(encoding="utf-8") == MAKER.render()


def test_the_cases_cover_every_field_and_both_outcomes() -> None:
    fields = set(SourceOptions.__dataclass_fields__)
    parsed = [c["parsed"] for c in CASES if "parsed" in c]
    for field in fields - {"group_id"}:
        assert any(p[field] not in (None, {}, [], False) for p in parsed), field
    assert any("group_id" in p for p in parsed) and any("group_id_prefix" in p for p in parsed)
    assert sum("error" in c for c in CASES) > 50

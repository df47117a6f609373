"""``tests/golden/sink/encoded.json`` holds the keys and values the Python sink writes
for a query's output rows, which the JVM sink's encoder must write byte for byte
(``TupleEncoderGoldenTest``). The file is made by ``tests/golden/sink/make_encoded.py``
with the Python codec; here it is made again in memory, so that a change of the codec
(or of the sink's use of it) that changes a byte fails until the file is remade, and
the JVM's specification never drifts from what Python writes."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

GOLDEN = Path(__file__).resolve().parents[4] / "tests" / "golden" / "sink"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_encoded", GOLDEN / "make_encoded.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_golden_file_is_what_the_python_sink_writes() -> None:
    make = _generator()
    on_file = (GOLDEN / "encoded.json").read_text(encoding="utf-8")
    assert on_file == make.render(make.document()), (
        "tests/golden/sink/encoded.json is not what the Python sink writes: remake it with "
        "`.venv/bin/python tests/golden/sink/make_encoded.py` and review the diff"
    )


def test_the_cases_cover_both_encodings_keys_and_refusals() -> None:
    doc = _generator().document()
    cases = doc["cases"]
    assert {c["encoding"] for c in cases} == {"single-object", "confluent"}
    rows = [r for c in cases for r in c["rows"]]
    assert any("error" in r for r in rows)
    assert any(r.get("key") for r in rows)
    assert any("key" in r and r["key"] is None for r in rows)

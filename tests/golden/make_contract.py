"""Write ``tests/golden/contract/source.json``: the names and settings both Spark
sources must share, taken from the Python side's owners.

* the sources' short names (:data:`pipeline.spark.options.SOURCE_NAME`,
  :data:`~pipeline.spark.options.PYTHON_SOURCE_NAME`);
* the consumer group a source makes up when none is named (Spark's
  ``spark-kafka-source-<UUID>``), as its prefix;
* the dead letter: Floodgate's headers in order (:data:`pipeline.deadletter.DLQ_HEADERS`)
  and its key (:func:`pipeline.deadletter.dead_letter_key`) for a few records;
* the source consumer's settings the user's ``kafka.*`` options cannot change
  (``forced``) and its defaults they may (``defaults``), and the dead-letter producer's
  (:meth:`pipeline.spark.options.SourceOptions.consumer_config`,
  :class:`pipeline.deadletter.DeadLetterWriter`), the librdkafka-only ones left out.

The offsets JSON is specified by ``tests/golden/offsets/`` and the options by
``tests/golden/options/``. ``tests/unit/pipeline/test_source_contract.py`` checks this
file is what the Python side says now; the JVM source's ``SourceContractTest`` checks
the Java side against it. Run from the repository's root after changing an owner:
``.venv/bin/python tests/golden/make_contract.py``.
"""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from pipeline.deadletter import (  # noqa: E402
    DEAD_LETTER_PRODUCER,
    DLQ_HEADERS,
    dead_letter_key,
)
from pipeline.spark.options import PYTHON_SOURCE_NAME, SOURCE_NAME, SourceOptions  # noqa: E402

GOLDEN = ROOT / "tests" / "golden" / "contract" / "source.json"

#: librdkafka properties the Java client has no counterpart of.
LIBRDKAFKA_ONLY = ("enable.auto.offset.store",)


class _Record:
    """What :func:`dead_letter_key` reads of a Kafka record."""

    def __init__(self, topic: str, partition: int, offset: int) -> None:
        self._at = (topic, partition, offset)

    def topic(self) -> str:
        return self._at[0]

    def partition(self) -> int:
        return self._at[1]

    def offset(self) -> int:
        return self._at[2]


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


#: The least option map of a source.
MINIMAL = {"kafka.bootstrap.servers": "b:1", "subscribe": "t"}


def consumer_settings() -> dict[str, dict[str, str]]:
    """The source consumer's settings, split by what a ``kafka.<key>`` option does to
    each: ``forced`` (refused, or overridden by the source) and ``defaults`` (the
    user's value wins)."""
    forced: dict[str, str] = {}
    defaults: dict[str, str] = {}
    for key, value in SourceOptions.parse(MINIMAL).consumer_config().items():
        if key in ("bootstrap.servers", "group.id", *LIBRDKAFKA_ONLY):
            continue
        try:
            given = SourceOptions.parse({**MINIMAL, f"kafka.{key}": "users"}).consumer_config()
        except ValueError:  # refused: the source decides it
            forced[key] = _text(value)
            continue
        (defaults if given[key] == "users" else forced)[key] = _text(value)
    return {"forced": forced, "defaults": defaults}


def contract() -> dict[str, Any]:
    """The contract, as the JSON file holds it."""
    group_id = SourceOptions.parse(MINIMAL).group_id
    keys = [
        {"query": q, "topic": t, "partition": p, "offset": o, "key": key.decode()}
        for q, t, p, o in (("by_origin", "flights", 0, 42), (None, "a.b-c", 7, 0))
        for key in [dead_letter_key(q, _Record(t, p, o))]
    ]
    return {
        "source_name": SOURCE_NAME,
        "python_source_name": PYTHON_SOURCE_NAME,
        "group_id_prefix": group_id[: -len(str(uuid.UUID(int=0)))],
        "dead_letter": {
            "headers": list(DLQ_HEADERS),
            "keys": keys,
            "producer": {k: _text(v) for k, v in DEAD_LETTER_PRODUCER.items()},
        },
        "consumer": consumer_settings(),
    }


def main() -> None:
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    GOLDEN.write_text(json.dumps(contract(), indent=1) + "\n", encoding="utf-8")
    print(f"wrote {GOLDEN}")


if __name__ == "__main__":
    main()

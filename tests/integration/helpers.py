"""Plain helpers the integration tests share: the flights query group's config with a
test's own names, and what :func:`drain` returns. Fixtures are in ``conftest.py``;
import these by absolute name (``from tests.integration.helpers import ...``)."""

from __future__ import annotations

import socket
import time
import tomllib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import tomli_w
from prometheus_client import CollectorRegistry

from pipeline.config import QueryGroupConfig, parse_query_group
from pipeline.demo.reception import read_all
from pipeline.serde.schemas import SchemaRepository
from pipeline.spark.query_group import QueryGroup, QueryStats

ROOT = Path(__file__).resolve().parents[2]
FLIGHTS_TOML = ROOT / "conf" / "flights.toml"

#: A query that copies every flight to an output stream: an identity to count by.
PASSTHROUGH_SQL = "SELECT * FROM flights"


def flights_raw_config(
    run_id: str,
    checkpoint_dir: Path,
    *,
    max_tuples_per_trigger: int | None = None,
    passthrough: bool = False,
    only_passthrough: bool = False,
    trigger_interval_ms: int = 100,
    no_data_micro_batches: bool | None = None,
    watermark: str = "2 hours",
    aligned: bool = False,
) -> dict[str, Any]:
    """``conf/flights.toml`` with this run's names: topics, group and checkpoints.

    The watermark is 2 hours, the demo's: a short delay lets a test close an hour with
    a few thousand flights (``test_refused_tuples``). Micro-batches are planned by
    offsets only unless ``aligned`` (the demo aligns them in event time,
    ``max_event_time_drift_ms``; ``demo/test_demo.py`` runs it so), so a test decides
    alone which tuples a micro-batch holds.
    """
    raw = tomllib.loads(FLIGHTS_TOML.read_text())
    raw["input_streams"]["flights"]["watermark"] = watermark
    if not aligned:
        raw["input_streams"]["flights"].pop("max_event_time_drift_ms", None)
    group = raw["query_group"]
    group["name"] = f"t{run_id}"
    group["checkpoint_dir"] = str(checkpoint_dir)
    group["trigger_interval_ms"] = trigger_interval_ms
    if no_data_micro_batches is not None:
        group["no_data_micro_batches"] = no_data_micro_batches
    if max_tuples_per_trigger is not None:
        group["max_tuples_per_trigger"] = max_tuples_per_trigger
    for section in ("input_streams", "output_streams"):
        for stream in raw[section].values():
            stream["topic"] = f"{stream['topic']}.{run_id}"
    if only_passthrough:
        raw["queries"] = {}
        raw["output_streams"] = {}
    if passthrough or only_passthrough:
        raw["output_streams"]["flights_copy"] = {
            "topic": f"flights.copy.{run_id}",
            "schema": "flight",
            "key": ["carrier", "flight", "time_hour"],
        }
        raw["queries"]["copy"] = {
            "sql": PASSTHROUGH_SQL,
            "output": "flights_copy",
            "output_mode": "append",
        }
    return raw


def real_time(raw: dict[str, Any], *, interval: str = "2 seconds", **group: Any) -> dict[str, Any]:
    """``raw`` (:func:`flights_raw_config`) in Spark's Real-Time Mode: ``trigger =
    "real-time"``, batches of ``interval`` (Spark's least, 5 s, lowered to 1 s for the
    tests' pace), ``delivery = "at-least-once"``, 2 input partitions (a task slot each
    on ``local[2]``), no cap on a batch, every query in ``update`` mode; ``group``:
    more ``[query_group]`` settings. Changed in place and returned."""
    raw["query_group"].pop("max_tuples_per_trigger", None)
    raw["input_streams"]["flights"].pop("max_event_time_drift_ms", None)
    raw["query_group"].update(
        {
            "trigger": "real-time",
            "real_time_checkpoint_interval": interval,
            "delivery": "at-least-once",
            "partitions": 2,
            **group,
        }
    )
    for query in raw["queries"].values():
        query["output_mode"] = "update"
    conf = raw.setdefault("spark", {}).setdefault("conf", {})
    conf["spark.sql.streaming.realTimeMode.minBatchDuration"] = "1000"
    return raw


def write_query_group(raw: dict[str, Any], path: Path) -> QueryGroupConfig:
    """Write ``raw`` (:func:`flights_raw_config`) as a query group file at ``path``, for
    a command or a driver that reads the file, and return the config it holds (no
    environment overrides)."""
    path.write_text(tomli_w.dumps(raw))
    return parse_query_group(raw, env={})


def idle_query_group(raw: dict[str, Any]) -> QueryGroup:
    """A query group of ``raw`` that is never started: no broker (``127.0.0.1:9``, where
    nothing listens), no SparkSession; its control endpoint works all the same."""
    return QueryGroup(parse_query_group(raw, env={}), bootstrap_servers="127.0.0.1:9")


@dataclass
class Drained:
    """What a query group did in one :func:`drain` run; ``registry``: its metrics,
    its queues read once after the run (the counters of processed and dead-lettered
    tuples brought up to date)."""

    stats: dict[str, QueryStats]
    batches_written: dict[str, int]
    registry: CollectorRegistry


def wait_until(
    predicate: Callable[[], bool],
    timeout_s: float,
    what: str,
    *,
    tolerate: bool = True,
    every_s: float = 0.25,
) -> None:
    """Poll ``predicate`` every ``every_s`` until it holds.

    Args:
        tolerate: an exception of ``predicate`` counts as "not yet" (a broker coming
            back; the last one is named on a timeout); ``False`` raises it.

    Raises:
        AssertionError: ``timeout_s`` passed, naming ``what``.
    """
    deadline = time.monotonic() + timeout_s
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except Exception as exc:
            if not tolerate:
                raise
            last = exc
        time.sleep(every_s)
    raise AssertionError(
        f"timed out after {timeout_s:.0f} s waiting for {what}"
        + (f" (last error: {last!r})" if last else "")
    )


def offsets_read_available_now(
    session: Any, options: dict[str, str], checkpoint: str | Path
) -> list[tuple[int, int]]:
    """``(partition, offset)`` of every row a streaming query of ``floodgate_kafka`` with
    ``options`` reads on ``checkpoint`` up to what the topics hold now
    (``Trigger.AvailableNow``; ``foreachBatch`` collects in the driver), sorted.

    Raises:
        AssertionError: the query failed (its exception is named).
    """
    from pipeline.spark.options import SOURCE_NAME

    seen: list[tuple[int, int]] = []

    def collect(batch: Any, _batch_id: int) -> None:
        seen.extend((r.partition, r.offset) for r in batch.select("partition", "offset").collect())

    df = session.readStream.format(SOURCE_NAME).options(**options).load()
    query = (
        df.writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(180)
        assert query.exception() is None, query.exception()
    finally:
        query.stop()
    return sorted(seen)


def raw_request(url: str, head: str, body: bytes = b"") -> tuple[int, bytes]:
    """Send ``head`` (request line and headers) and ``body`` on a fresh connection; the
    status and everything the server sends before it closes the connection. The socket
    timeout only keeps a failing run from hanging."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=60) as sock:
        sock.sendall(head.replace("\n", "\r\n").encode() + b"\r\n" + body)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    status_line = received.split(b"\r\n", 1)[0]
    return int(status_line.split()[1]), received


def origin_hour_counts(
    bootstrap: str, config: QueryGroupConfig, schemas: SchemaRepository
) -> dict[tuple[str, int], list[int]]:
    """Per origin and hour, the ``flights`` counts of the committed output tuples of
    the per-origin hourly aggregation, in the order written."""
    out = config.output_streams["delays_by_origin_hour"].topic
    codec = config.stream_codec("output", "delays_by_origin_hour", schemas)
    counts: dict[tuple[str, int], list[int]] = {}
    for r in read_all(bootstrap, out):
        t = codec.decode(r.value())
        key = (t["origin"], int(t["hour_start"].timestamp()) // 3_600)
        counts.setdefault(key, []).append(t["flights"])
    return counts


def each_count_once(records: list[dict[str, Any]]) -> dict[tuple[str, int], list[int]]:
    """What an exactly-once real-time aggregation writes per origin and hour: in real
    time an update-mode aggregation writes its group's row for each tuple it takes, so
    counts 1 to n, each once."""
    n = Counter((f["origin"], f["time_hour"] // 3_600_000) for f in records)
    return {key: list(range(1, count + 1)) for key, count in n.items()}

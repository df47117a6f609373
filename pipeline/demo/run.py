"""The main job: replay the NYC 2013 flights through Kafka into the ``flights`` query group.

:func:`run_demo` (``floodgate demo``, ``make demo``; docs/tutorials/demo.md):

1. resolves a broker (``--bootstrap``, ``FLOODGATE_KAFKA_BOOTSTRAP``, Docker, or the
   embedded one) and creates the topics;
2. starts the ``flights`` query group (``conf/flights.toml``);
3. replays the flights in event-time order through a :class:`FlightReplayer`
   in a process of its own (:class:`ReplayProcess`; ``--rate`` tuples/s, default
   as fast as it goes), with progress bars for producing and processing;
4. reads both output streams all along through the data reception API
   (:class:`Reception`: :meth:`~pipeline.client.reception.StreamOutput.get`, latest tuple
   per key), which frees their bounded output stream queues, and reports the
   latest hour's figures as they arrive (a live table in the CLI);
5. waits until every query has processed all input and the reception has read
   every output tuple, and prints the busiest and most delayed origin-hours;
6. checks that tuples produced == tuples processed by every query (+ dead-lettered),
   and stops cleanly.

The replay writes through the back-pressure client
(:class:`~pipeline.client.input.StreamInput`, ``put(block=True)``): when the
``flights`` input stream queue (``max_queue_size`` in ``conf/flights.toml``) is
full, producing waits until the query group has processed enough. The output
stream queues are bounded too: should the reception fall behind, the query group
sleeps, then holds, and (``auto_release`` in ``conf/flights.toml``) resumes by
itself once the reception has caught up; the demo waits that out.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.brokers.local import Broker, resolve_broker
from pipeline.client import connect
from pipeline.config import QueryGroupConfig, apply_env_overrides, parse_query_group
from pipeline.demo.reception import Reception, latest_hour, read_all
from pipeline.demo.replay import ReplayProcess
from pipeline.errors import FloodgateError, QueryGroupHeld
from pipeline.metrics import stream_total
from pipeline.names import dead_letter_topic
from pipeline.resources import shipped_config
from pipeline.serde.schemas import SchemaRepository
from pipeline.spark.query_group import QueryGroup, QueryGroupState

log = logging.getLogger(__name__)


DEFAULT_CONFIG = shipped_config("flights")


#: The longest the demo waits for a held query group to be released by ``auto_release``,
#: and for the reception to read the last output tuples.
SETTLE_TIMEOUT_S = 300.0


SLEEPS = "floodgate_query_group_sleeps_total"


HOLDS = "floodgate_query_group_holds_total"


@dataclass
class DemoResult:
    """Figures of a demo run.

    Attributes:
        produced: flights handed to Kafka.
        processed: per query, tuples its source read (``numInputRows``, all batches).
        dead_lettered: per query, tuples sent to the dead-letter topic.
        dropped_by_watermark: per query, rows the watermark dropped as late.
        origin_hours / carrier_days: the output tables as the reception read them
            (latest tuple per key).
        seconds: wall time from the first tuple produced to all processed and read.
        blocked_s: seconds the replay waited for room in the input stream queue.
        max_queue_size: the flights input stream queue's bound.
        bootstrap_servers / broker_kind: where it ran.
        received: per output stream, tuples the reception read (re-emits included).
        output_max_queue_size: per output stream, its queue's bound (tuples).
        output_queue_peak: per output stream, the longest queue read from the broker
            (about once a second, and transaction markers included; tuples).
        sleeps / holds: times the query group slept on, and was held by, a full
            output stream queue.
        metrics_url: where the query group served its metrics and control endpoint.
        output_topics: per output stream, its topic in this run.
        input_topic: the flights input stream's topic in this run.
    """

    produced: int
    processed: dict[str, int]
    dead_lettered: dict[str, int]
    dropped_by_watermark: dict[str, int]
    origin_hours: list[dict[str, Any]]
    carrier_days: list[dict[str, Any]]
    seconds: float
    bootstrap_servers: str
    broker_kind: str
    blocked_s: float = 0.0
    max_queue_size: int = 0
    received: dict[str, int] = field(default_factory=dict)
    output_max_queue_size: dict[str, int] = field(default_factory=dict)
    output_queue_peak: dict[str, int] = field(default_factory=dict)
    sleeps: int = 0
    holds: int = 0
    metrics_url: str = ""
    output_topics: dict[str, str] = field(default_factory=dict)
    input_topic: str = ""

    @property
    def balanced(self) -> bool:
        """Every query read every produced tuple (processed + dead-lettered == produced)."""
        return all(
            self.processed[q] + self.dead_lettered.get(q, 0) == self.produced
            for q in self.processed
        )


@dataclass(frozen=True)
class DemoStatus:
    """Where a demo run is, as reported to ``on_progress`` about 5 times a second.

    Attributes:
        produced / total: flights handed to Kafka so far / to replay.
        processed: per query, tuples its source has read.
        state: the query group's state (``EXECUTING``, ``SLEEPING``, ``HELD`` ...).
        received: per output stream, tuples the reception has read.
        output_queues: per output stream, ``(length, max queue size)`` at the query
            group's last check (tuples).
        latest_hour: the origin-hour tuples of the latest hour received, by origin.
    """

    produced: int
    total: int
    processed: dict[str, int]
    state: str
    received: dict[str, int]
    output_queues: dict[str, tuple[int, int]]
    latest_hour: list[dict[str, Any]]


def demo_config(path: Path, *, run_id: str | None, checkpoint_dir: str) -> QueryGroupConfig:
    """The flights config for a demo run: a fresh checkpoint, and with ``run_id``
    topic names suffixed so a shared cluster's earlier runs do not count."""
    import tomllib

    raw = apply_env_overrides(tomllib.loads(path.read_text()), os.environ)
    raw["query_group"]["checkpoint_dir"] = checkpoint_dir
    if run_id:
        raw["query_group"]["dead_letter_topic"] = (
            f"{dead_letter_topic(raw['query_group']['name'])}.{run_id}"
        )
        for section in ("input_streams", "output_streams"):
            for stream in raw.get(section, {}).values():
                stream["topic"] = f"{stream['topic']}.{run_id}"
    return parse_query_group(raw, source=str(path), env={})


def count_dead_letters(
    bootstrap_servers: str, topic: str, *, client: Mapping[str, Any] | None = None
) -> dict[str, int]:
    """Distinct dead-lettered tuples per query (record keys are unique per query and offset).

    Args:
        client: extra librdkafka properties (the group's ``[kafka] client``).
    """
    keys: dict[str, set[bytes]] = {}
    for message in read_all(bootstrap_servers, topic, client=client):
        headers = dict(message.headers() or [])
        query = headers.get("floodgate.query", b"").decode()
        keys.setdefault(query, set()).add(message.key())
    return {q: len(k) for q, k in keys.items()}


def run_demo(
    *,
    bootstrap_servers: str | None = None,
    engine: str | None = None,
    rate: float | None = None,
    limit: int | None = None,
    config_path: Path = DEFAULT_CONFIG,
    spark: Any = None,
    on_progress: Callable[[DemoStatus], None] | None = None,
    on_phase: Callable[[str], None] | None = None,
    spark_log_level: str = "ERROR",
    on_received: Callable[[str, list[dict[str, Any]]], None] | None = None,
) -> DemoResult:
    """Run the main job once; see the module docstring.

    Args:
        bootstrap_servers: an external cluster; default: resolved by
            :func:`pipeline.brokers.local.resolve_broker`.
        engine: the broker to start when no cluster is named (``noida-db`` or
            ``apache-kafka``; default ``FLOODGATE_KAFKA_ENGINE``, else ``noida-db``).
        rate: replay rate in tuples/s; ``None`` as fast as it goes.
        limit: replay only the first ``limit`` flights in event-time order.
        config_path: the query group file.
        spark: a SparkSession to run in (default: a new one from the config).
        on_progress: called about 5 times a second with a :class:`DemoStatus`.
        on_phase: called with a short description when a phase starts.
        spark_log_level: Spark's log level for the run (``WARN`` shows, among others,
            every micro-batch that takes longer than the trigger interval).
        on_received: passed to the reception (:class:`Reception`): called with each
            output stream's tuples as soon as they are read.

    Raises:
        QueryGroupError: a query failed.
        QueryGroupHeld: the group was held and not released within ``SETTLE_TIMEOUT_S``
            (with ``auto_release = false`` at once: release it with
            ``floodgate query-group release``, or rerun with a larger output queue).
        DeliveryError: the broker did not acknowledge some flights.
        FloodgateError: the reception did not read every output tuple in time.
    """
    phase = on_phase or (lambda _text: None)
    phase("resolving the broker")
    # The file's [kafka] client (SASL, TLS) is needed to ask a named cluster already.
    client = demo_config(config_path, run_id=None, checkpoint_dir="unused").kafka.client
    broker: Broker = resolve_broker(bootstrap_servers, engine=engine, client=client)
    with contextlib.ExitStack() as stack:
        stack.callback(broker.stop)
        checkpoints = stack.enter_context(tempfile.TemporaryDirectory(prefix="floodgate-demo-"))
        run_id = None if broker.kind == "embedded" else uuid.uuid4().hex[:8]
        config = demo_config(config_path, run_id=run_id, checkpoint_dir=checkpoints)
        schemas = SchemaRepository.load(config.schema_dir)
        phase("starting the flights query group (SparkSession)")
        group = QueryGroup(
            config, bootstrap_servers=broker.bootstrap_servers, spark=spark, schemas=schemas
        )
        group.spark.sparkContext.setLogLevel(spark_log_level)
        group.start()
        stack.callback(group.stop)
        metrics_url = group.serve()
        phase(f"query group metrics at {metrics_url}/metrics, control at {metrics_url}/status")
        connector = stack.enter_context(
            connect(bootstrap_servers=broker.bootstrap_servers, config=config, schemas=schemas)
        )
        outputs = sorted({q.output for q in config.queries.values()})
        reception = Reception(
            {s: connector.open_stream_output(config.name, s) for s in outputs},
            {s: config.output_streams[s].key for s in outputs},
            on_received=on_received,
        ).start()
        stack.callback(reception.stop)
        phase("waiting for every query's first trigger")
        _await_first_trigger(group)
        phase("loading flights (replay process)")
        replayer = ReplayProcess(
            bootstrap_servers=broker.bootstrap_servers, config=config, limit=limit, rate=rate
        )
        total = replayer.start()
        stack.callback(replayer.stop)
        phase("replaying flights")
        started = time.monotonic()
        replayer.go()
        peaks: dict[str, int] = {}

        reports = [0]

        def report() -> DemoStatus:
            status = group.status()
            queues = {
                s: (int(q["length"]), int(q["max_queue_size"]))
                for s, q in status["output_queues"].items()
            }
            reports[0] += 1
            if reports[0] % 5 == 1:  # about once a second: the queue as the reception sees it
                for s, length in reception.queue_lengths().items():
                    peaks[s] = max(peaks.get(s, 0), length)
            tables = reception.tables()
            origin_hours = tables.get("delays_by_origin_hour")
            current = DemoStatus(
                produced=replayer.produced,
                total=total,
                processed={q: s.input_tuples for q, s in group.stats().items()},
                state=str(status["state"]),
                received={s: t.received for s, t in tables.items()},
                output_queues=queues,
                latest_hour=latest_hour(origin_hours.rows.values()) if origin_hours else [],
            )
            if on_progress:
                on_progress(current)
            return current

        while not replayer.wait(0.2):
            group.check()
            if reception.error is not None:
                raise FloodgateError(f"the demo's reception failed: {reception.error}")
            report()
        if replayer.error is not None:
            raise replayer.error
        phase("processing what is left")
        _drain(group, report)
        phase("reading what is left")
        reception.wait_until_read(SETTLE_TIMEOUT_S)
        seconds = time.monotonic() - started
        report()
        reception.stop()
        phase("counting dead letters")
        stats = group.stats()
        dead = count_dead_letters(
            broker.bootstrap_servers, config.dead_letter_topic, client=config.kafka.client
        )
        tables = reception.tables()
        registry = group.registry
        return DemoResult(
            produced=replayer.produced,
            processed={q: s.input_tuples for q, s in stats.items()},
            dead_lettered=dead,
            dropped_by_watermark={q: s.dropped_by_watermark for q, s in stats.items()},
            origin_hours=list(tables["delays_by_origin_hour"].rows.values())
            if "delays_by_origin_hour" in tables
            else [],
            carrier_days=list(tables["delays_by_carrier_day"].rows.values())
            if "delays_by_carrier_day" in tables
            else [],
            seconds=seconds,
            bootstrap_servers=broker.bootstrap_servers,
            broker_kind=broker.engine or broker.kind,
            blocked_s=replayer.blocked_s,
            max_queue_size=config.input_settings("flights").max_queue_size,
            received={s: t.received for s, t in tables.items()},
            output_max_queue_size={s: config.output_settings(s).max_queue_size for s in outputs},
            output_queue_peak=peaks,
            sleeps=int(stream_total(registry, SLEEPS, query_group=group.name, streams=outputs)),
            holds=int(stream_total(registry, HOLDS, query_group=group.name, streams=outputs)),
            metrics_url=metrics_url,
            output_topics={s: config.output_streams[s].topic for s in outputs},
            input_topic=config.input_streams["flights"].topic,
        )


def _await_first_trigger(group: QueryGroup, timeout_s: float = 120.0) -> None:
    """Wait until every query of ``group`` has run its first trigger (its source
    started, the topic's offsets read), so that the replay, and the time the
    demo measures, starts against a running pipeline as a producer would.

    Raises:
        QueryGroupError: a query failed meanwhile (:meth:`QueryGroup.check`).
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        group.check()
        if all(
            q.lastProgress is not None or q.status.get("message") == "Waiting for data to arrive"
            for q in group.queries().values()
        ):
            return
        time.sleep(0.1)
    log.warning("the queries did not finish their first trigger in %.0f s; replaying", timeout_s)


def _drain(group: QueryGroup, report: Callable[[], Any]) -> None:
    """Process everything the input holds now, waiting out holds that ``auto_release``
    ends (the reception keeps reading meanwhile).

    Raises:
        QueryGroupHeld: held, and not released within ``SETTLE_TIMEOUT_S`` (at once
            without ``auto_release``).
        QueryGroupError: a query failed.
    """
    while True:
        done = threading.Event()
        failure: list[BaseException] = []

        def process(failure: list[BaseException] = failure, done: threading.Event = done) -> None:
            try:
                group.process_all_available()
            except BaseException as exc:
                failure.append(exc)
            finally:
                done.set()

        threading.Thread(target=process, name="drain", daemon=True).start()
        while not done.wait(0.2):
            report()
        if not failure:
            return
        held = failure[0]
        if not isinstance(held, QueryGroupHeld) or not group.config.query_group.auto_release:
            raise held
        log.warning("demo: %s; waiting for auto release", held)
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while group.state in (QueryGroupState.HELD, QueryGroupState.STARTING):
            if time.monotonic() > deadline:
                raise held
            report()
            time.sleep(0.2)

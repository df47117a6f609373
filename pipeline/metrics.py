"""Prometheus metric definitions (the list: ``docs/metrics.md``, generated from them).

Names carry the ``floodgate_`` prefix and base units; counters end in
``_total``; ratios are 0..1; capacity and length are separate gauges; labels
are bounded (stream, query_group, partition, state, result, reason -- never a
tuple key or a job id). Every component is handed the ``CollectorRegistry`` it
registers on, so tests read samples from a fresh registry
(``registry.get_sample_value(...)``) and several components can share one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

NAMESPACE = "floodgate"

#: The labels of ``floodgate_build_info``, each the version of one distribution.
BUILD_INFO_LABELS = ("version", "pyspark", "confluent_kafka")
#: The distribution whose version each label of ``floodgate_build_info`` carries.
_BUILD_DISTRIBUTIONS = {
    "version": "floodgate",
    "pyspark": "pyspark",
    "confluent_kafka": "confluent-kafka",
}


def build_versions() -> dict[str, str]:
    """The values of ``floodgate_build_info``'s labels: the installed versions of
    Floodgate, PySpark and confluent-kafka (``importlib.metadata``, so a service that
    does not run Spark need not import it; ``unknown`` for one not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    versions = {}
    for label, distribution in _BUILD_DISTRIBUTIONS.items():
        try:
            versions[label] = version(distribution)
        except PackageNotFoundError:
            versions[label] = "unknown"
    return versions


def add_build_info(registry: CollectorRegistry) -> None:
    """Register ``floodgate_build_info{version, pyspark, confluent_kafka} 1`` on
    ``registry`` (Prometheus' ``_info`` convention: a gauge at 1 whose labels carry the
    information; join it with ``on (instance) group_left``). Every component's metric
    class calls it; on a registry that has it already (several components sharing
    one), nothing happens."""
    try:
        gauge = Gauge(
            "build_info",
            "1, with the versions of Floodgate, PySpark and confluent-kafka as labels.",
            BUILD_INFO_LABELS,
            namespace=NAMESPACE,
            registry=registry,
        )
    except ValueError as exc:  # prometheus_client: "Duplicated timeseries in CollectorRegistry"
        if "Duplicated" not in str(exc):
            raise
        return
    gauge.labels(**build_versions()).set(1)


@dataclass(frozen=True)
class HttpAuthMetrics:
    """Authentication at a Floodgate HTTP endpoint's gate
    (:class:`pipeline.http.gates.RequestGate`), on the registry of the service that
    serves it (Prometheus' ``job`` label tells the admission service from a query
    group); no label: never the client's address, whose values are unbounded.

    * ``floodgate_http_auth_failures_total`` (counter): calls refused 401, with no
      bearer token or a wrong one;
    * ``floodgate_http_auth_throttled_total`` (counter): calls refused 429 because
      their address failed too often, the token not checked.
    """

    failures: Counter
    throttled: Counter

    @classmethod
    def on(cls, registry: CollectorRegistry) -> HttpAuthMetrics:
        """The families on ``registry``, registered once: a second call (a service and
        its gate) gets the same ones."""
        known = registry._names_to_collectors  # no public lookup by name
        failures = known.get(f"{NAMESPACE}_http_auth_failures_total")
        throttled = known.get(f"{NAMESPACE}_http_auth_throttled_total")
        if isinstance(failures, Counter) and isinstance(throttled, Counter):
            return cls(failures, throttled)
        return cls(
            Counter(
                "http_auth_failures",
                "Calls refused 401 at an HTTP endpoint: no bearer token, or a wrong one.",
                namespace=NAMESPACE,
                registry=registry,
            ),
            Counter(
                "http_auth_throttled",
                "Calls refused 429 at an HTTP endpoint: their client address failed "
                "authentication too often; the token was not checked.",
                namespace=NAMESPACE,
                registry=registry,
            ),
        )


class ClientMetrics:
    """Metrics of the back-pressure client (data transmission API), per stream.

    Families (labels ``query_group``, ``stream``; and ``floodgate_build_info``,
    :func:`add_build_info`):

    * ``floodgate_input_stream_queue_length`` (gauge, tuples): input stream queue
      length at the client's last read of the broker (the query group exports the same
      quantity under the same name, from its own reads; so a process that runs both
      gives each a registry of its own, as ``floodgate demo`` does).
    * ``floodgate_input_stream_queue_max_size`` (gauge, tuples): the configured max.
    * ``floodgate_input_stream_queue_free_ratio`` (gauge, 0..1): free / max, as the
      client counts it (its own sends included).
    * ``floodgate_stream_put_tuples_total`` (counter, + ``result`` =
      ``accepted`` | ``rejected``): tuples handed to ``put``.
    * ``floodgate_input_stream_queue_free_threshold_ratio`` (gauge, 0..1): the
      configured ``free_input_queue_size_threshold`` (what the near-full alert compares
      with).
    * ``floodgate_input_stream_queue_threshold_crossings_total`` (counter): times the
      free space fell to or below ``free_input_queue_size_threshold``.
    * ``floodgate_stream_put_blocked_seconds_total`` (counter, seconds): time
      ``put(block=True)`` spent waiting for space.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        add_build_info(registry)
        labels = ("query_group", "stream")
        self.queue_length = Gauge(
            "input_stream_queue_length",
            "Input stream queue length (tuples) at the last read of the broker.",
            labels,
            namespace=NAMESPACE,
            registry=registry,
        )
        self.queue_max_size = Gauge(
            "input_stream_queue_max_size",
            "Max queue size of the input stream queue (tuples).",
            labels,
            namespace=NAMESPACE,
            registry=registry,
        )
        self.queue_free_ratio = Gauge(
            "input_stream_queue_free_ratio",
            "Free space of the input stream queue as a ratio of its max (0..1).",
            labels,
            namespace=NAMESPACE,
            registry=registry,
        )
        self.put_tuples = Counter(
            "stream_put_tuples",
            "Tuples handed to put, by result (accepted or rejected).",
            (*labels, "result"),
            namespace=NAMESPACE,
            registry=registry,
        )
        self.free_threshold_ratio = Gauge(
            "input_stream_queue_free_threshold_ratio",
            "free_input_queue_size_threshold as a ratio (0..1): producers are told the "
            "queue is filling at or below it.",
            labels,
            namespace=NAMESPACE,
            registry=registry,
        )
        self.threshold_crossings = Counter(
            "input_stream_queue_threshold_crossings",
            "Times the free space fell to or below free_input_queue_size_threshold.",
            labels,
            namespace=NAMESPACE,
            registry=registry,
        )
        self.blocked_seconds = Counter(
            "stream_put_blocked_seconds",
            "Seconds put(block=True) spent waiting for free space.",
            labels,
            namespace=NAMESPACE,
            registry=registry,
        )


#: Buckets of ``floodgate_query_batch_duration_seconds``: micro-batches take from tens of
#: milliseconds (small aggregations) to minutes (a large backlog on two cores).
BATCH_DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


#: Buckets of ``floodgate_output_stream_queue_check_seconds``: one read of a queue is two
#: ``ListOffsets`` and an ``OffsetFetch`` per reception group, milliseconds on a LAN.
CHECK_DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class QueryGroupMetrics:
    """Metrics of a running query group (its states and queues: docs/architecture.md,
    "The hold").

    Families (and ``floodgate_build_info``, :func:`add_build_info`):

    * ``floodgate_query_group_state`` (gauge, labels ``query_group``, ``state``): 1 for
      the group's current state, 0 for the others (one series per state).
    * ``floodgate_query_group_sleeps_total`` (counter, ``query_group``, ``stream``):
      sleeps on a full output stream queue (``sleep_on_over_store_ms`` each).
    * ``floodgate_query_group_holds_total`` (counter, ``query_group``, ``stream``):
      times the group was held because of that output stream queue.
    * ``floodgate_query_group_discarded_tuples_total`` (counter, ``query_group``,
      ``stream``): input tuples skipped on release with ``on_hold_input = "discard"``.
    * ``floodgate_output_stream_queue_length`` / ``_max_size`` (gauges, tuples,
      ``query_group``, ``stream``): the output stream queue at the last check.
    * ``floodgate_input_stream_queue_length`` / ``_max_size`` (gauges, tuples,
      ``query_group``, ``stream``): each input stream queue as the query group sees it
      (every ``queue_metrics_interval_ms``), also while no producer runs.
    * ``floodgate_input_stream_queue_lag_seconds`` /
      ``floodgate_output_stream_queue_lag_seconds`` (gauges, seconds, ``query_group``,
      ``stream``): the age of the queue's oldest unconsumed tuple, from its Kafka record
      timestamp (or its BLOB's, when swept); 0 for an empty queue
      (:class:`~pipeline.queues.age.QueueAge`).
    * ``floodgate_output_stream_unstable_seconds`` (gauge, seconds, ``query_group``,
      ``stream``): the longest time one of the output stream's partitions has kept its
      last stable offset unmoved below its high watermark; past twice the transaction
      timeout, a hanging transaction blocks every ``read_committed`` reader
      (:class:`~pipeline.queues.age.StableOffsetWatch`; alert
      ``FloodgateHangingTransaction``).
    * ``floodgate_output_stream_queue_check_seconds`` (histogram, ``query_group``,
      ``stream``): how long each micro-batch's read of its output stream queue took
      (the cost of the bound; sleeps not included).
    * ``floodgate_query_batch_duration_seconds`` (histogram, ``query_group``,
      ``query``): micro-batch durations from StreamingQueryListener progress.
    * ``floodgate_query_input_tuples_total`` (counter, ``query_group``, ``query``):
      tuples read by the query's sources (``numInputRows`` of each progress); its
      ``rate()`` is Spark's input rate, and over
      ``rate(floodgate_query_batch_duration_seconds_sum)`` Spark's processing rate.
    * ``floodgate_query_pruning_failures_total`` (counter, ``query_group``, ``query``):
      times the fields a query reads could not be found as its inputs were defined
      (``FG-QG-011``): its sources then decode every field.
    * ``floodgate_input_stream_processed_tuples_total`` (counter, ``query_group``,
      ``stream``): tuples the query group processed, as the ledger counts them: the
      advance of the slowest reading query's committed offsets, summed over the
      partitions (dead-lettered tuples included: they were read), from the group's
      start on (read every ``queue_metrics_interval_ms``;
      tuples skipped on release with ``on_hold_input = "discard"`` are included, and
      ``floodgate_query_group_discarded_tuples_total`` counts them apart).
    * ``floodgate_input_stream_dead_lettered_tuples_total`` (counter, ``query_group``,
      ``stream``, ``reason``): input tuples in the group's dead-letter topic, each
      counted once however many queries refused it, read from the topic's start when
      the group starts (a series appears with its first dead letter, at the count the
      topic holds: Prometheus sees no increase when a restarted group counts the old
      ones again).
    * ``floodgate_query_group_jvm_heap_used_bytes`` / ``_max_bytes`` (gauges, bytes,
      ``query_group``): the driver JVM's heap in use (total - free) and its maximum
      (``-Xmx``, ``spark.driver.memory``), from ``java.lang.Runtime``; what the
      admission service's emergency mode reads (docs/architecture.md, "The admission service").
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        add_build_info(registry)
        HttpAuthMetrics.on(registry)  # its control endpoint's gate
        by_stream = ("query_group", "stream")
        by_query = ("query_group", "query")
        self.state = Gauge(
            "query_group_state",
            "1 for the query group's current state, 0 for the others.",
            ("query_group", "state"),
            namespace=NAMESPACE,
            registry=registry,
        )
        self.sleeps = Counter(
            "query_group_sleeps",
            "Sleeps of the query group on a full output stream queue.",
            by_stream,
            namespace=NAMESPACE,
            registry=registry,
        )
        self.holds = Counter(
            "query_group_holds",
            "Times the query group was held because an output stream queue stayed full.",
            by_stream,
            namespace=NAMESPACE,
            registry=registry,
        )
        self.discarded = Counter(
            "query_group_discarded_tuples",
            "Input tuples skipped on release (on_hold_input = discard).",
            by_stream,
            namespace=NAMESPACE,
            registry=registry,
        )
        self.output_queue_length = Gauge(
            "output_stream_queue_length",
            "Output stream queue length (tuples) at the last check.",
            by_stream,
            namespace=NAMESPACE,
            registry=registry,
        )
        self.output_queue_max_size = Gauge(
            "output_stream_queue_max_size",
            "Max queue size of the output stream queue (tuples).",
            by_stream,
            namespace=NAMESPACE,
            registry=registry,
        )
        self.input_queue_length = Gauge(
            "input_stream_queue_length",
            "Input stream queue length (tuples) as the query group last read it.",
            by_stream,
            namespace=NAMESPACE,
            registry=registry,
        )
        self.input_queue_max_size = Gauge(
            "input_stream_queue_max_size",
            "Max queue size of the input stream queue (tuples).",
            by_stream,
            namespace=NAMESPACE,
            registry=registry,
        )
        self.input_queue_lag = Gauge(
            "input_stream_queue_lag_seconds",
            "Age of the input stream queue's oldest unprocessed tuple (0 when empty).",
            by_stream,
            namespace=NAMESPACE,
            registry=registry,
        )
        self.output_queue_lag = Gauge(
            "output_stream_queue_lag_seconds",
            "Age of the output stream queue's oldest unread tuple (0 when empty).",
            by_stream,
            namespace=NAMESPACE,
            registry=registry,
        )
        self.output_unstable = Gauge(
            "output_stream_unstable_seconds",
            "Longest time an output stream partition's last stable offset has stayed "
            "unmoved below its high watermark (a hanging transaction past 2x the "
            "transaction timeout).",
            by_stream,
            namespace=NAMESPACE,
            registry=registry,
        )
        self.output_queue_check = Histogram(
            "output_stream_queue_check_seconds",
            "Time a micro-batch took to read its output stream queue's free space.",
            by_stream,
            namespace=NAMESPACE,
            registry=registry,
            buckets=CHECK_DURATION_BUCKETS,
        )
        self.batch_duration = Histogram(
            "query_batch_duration_seconds",
            "Micro-batch duration (StreamingQueryListener progress).",
            by_query,
            namespace=NAMESPACE,
            registry=registry,
            buckets=BATCH_DURATION_BUCKETS,
        )
        self.input_tuples = Counter(
            "query_input_tuples",
            "Tuples read by the query's sources (numInputRows of each micro-batch).",
            by_query,
            namespace=NAMESPACE,
            registry=registry,
        )
        self.offset_commit_failures = Counter(
            "query_offset_commit_failures",
            "Micro-batches written whose input offsets could not be committed to the "
            "query's consumer group (it stays behind the output until a later commit).",
            by_query,
            namespace=NAMESPACE,
            registry=registry,
        )
        self.pruning_failures = Counter(
            "query_pruning_failures",
            "Times the fields a query reads could not be found (FG-QG-011): every field decoded.",
            by_query,
            namespace=NAMESPACE,
            registry=registry,
        )
        self.processed_tuples = Counter(
            "input_stream_processed_tuples",
            "Tuples of the input stream the query group processed (committed offsets' advance).",
            by_stream,
            namespace=NAMESPACE,
            registry=registry,
        )
        self.dead_lettered_tuples = Counter(
            "input_stream_dead_lettered_tuples",
            "Input tuples in the query group's dead-letter topic, by reason.",
            (*by_stream, "reason"),
            namespace=NAMESPACE,
            registry=registry,
        )

        self.jvm_heap_used = Gauge(
            "query_group_jvm_heap_used_bytes",
            "Driver JVM heap in use (total - free), bytes.",
            ("query_group",),
            namespace=NAMESPACE,
            registry=registry,
        )
        self.jvm_heap_max = Gauge(
            "query_group_jvm_heap_max_bytes",
            "Driver JVM maximum heap (-Xmx), bytes.",
            ("query_group",),
            namespace=NAMESPACE,
            registry=registry,
        )

    def set_state(self, query_group: str, state: str, states: list[str]) -> None:
        """Set the state gauges: 1 for ``state``, 0 for every other of ``states``."""
        for s in states:
            self.state.labels(query_group, s).set(1 if s == state else 0)


class Families:
    """Makes the metric families of one service: ``floodgate_<subsystem>_<name>`` on
    ``registry`` (the admission service, the sweeper)."""

    def __init__(self, registry: CollectorRegistry, subsystem: str) -> None:
        self.registry = registry
        self.subsystem = subsystem

    def gauge(self, name: str, text: str, labels: tuple[str, ...] = ()) -> Gauge:
        """A gauge family."""
        return Gauge(
            name,
            text,
            labels,
            namespace=NAMESPACE,
            subsystem=self.subsystem,
            registry=self.registry,
        )

    def counter(self, name: str, text: str, labels: tuple[str, ...] = ()) -> Counter:
        """A counter family (``_total`` is added to ``name``)."""
        return Counter(
            name,
            text,
            labels,
            namespace=NAMESPACE,
            subsystem=self.subsystem,
            registry=self.registry,
        )


def add_metrics_route(app: Any, registry: CollectorRegistry, path: str = "/metrics") -> None:
    """Serve ``registry`` in Prometheus' text format at ``path`` of a FastAPI ``app``.

    A route rather than ``app.mount(path, make_asgi_app())``: a mount answers ``path``
    with a redirect to ``path/``, which a scraper or ``curl`` must follow.
    """
    from fastapi import Response

    def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    app.add_api_route(path, metrics, methods=["GET"], include_in_schema=False)


def stream_total(
    registry: CollectorRegistry, name: str, *, query_group: str, streams: Iterable[str]
) -> float:
    """A sample of a query group's per-stream family, summed over ``streams`` (0 for a
    stream with no sample yet): e.g. ``floodgate_query_group_sleeps_total`` or a
    histogram's ``_sum`` / ``_count``."""
    return sum(
        registry.get_sample_value(name, {"query_group": query_group, "stream": s}) or 0.0
        for s in streams
    )


# -- the metrics reference (docs/metrics.md), generated so it cannot drift ---------------

#: Units read off a family's name (Prometheus naming practice: base units as suffix).
_UNITS = (
    ("_seconds", "seconds"),
    ("_bytes", "bytes"),
    ("_ratio", "ratio 0..1"),
    ("_info", "1 (the labels are the information)"),
)


@dataclass(frozen=True)
class MetricDoc:
    """One metric family as documented in ``docs/metrics.md``.

    Attributes:
        name: the exposed name (counters with ``_total``; histograms as the base
            name, whose ``_bucket`` / ``_sum`` / ``_count`` series Prometheus reads).
        type: ``counter``, ``gauge`` or ``histogram``.
        labels: label names, in order.
        unit: from the name's suffix (``seconds``, ``bytes``...); ``0/1`` for a flag;
            else ``count`` (of what, the help text says).
        help: the family's help text.
    """

    name: str
    type: str
    labels: tuple[str, ...]
    unit: str
    help: str


def describe(registry: CollectorRegistry) -> list[MetricDoc]:
    """Every metric family registered on ``registry``, sorted by name (label names
    come from the families themselves, so families with no sample yet are listed)."""
    docs = []
    # No public walk over a registry's families: its collectors are the families.
    for collector in list(registry._collector_to_names):
        name = getattr(collector, "_name", None)
        kind = getattr(collector, "_type", None)
        if name is None or kind is None:
            continue
        exposed = f"{name}_total" if kind == "counter" else name
        base = exposed.removesuffix("_total")
        text = getattr(collector, "_documentation", "")
        unit = next((u for suffix, u in _UNITS if base.endswith(suffix)), "count")
        if unit == "count" and (text.startswith("1 ") or "0/1" in text):
            unit = "0/1"
        docs.append(
            MetricDoc(
                exposed,
                kind,
                tuple(getattr(collector, "_labelnames", ())),
                unit,
                getattr(collector, "_documentation", ""),
            )
        )
    return sorted(docs, key=lambda d: d.name)


def metric_sections() -> Iterator[tuple[str, str, CollectorRegistry]]:
    """``(title, where served, registry)`` of every component: the client and the
    query group from this package, and every service registered in the
    ``floodgate.metrics`` entry point group (``name = "module:Class"``, a class
    taking a registry), so this package imports none of them."""
    from importlib.metadata import entry_points

    made: list[tuple[str, str, Callable[[CollectorRegistry], object]]] = [
        ("Back-pressure client", "the producer's process (its own registry)", ClientMetrics),
        ("Query group", "`floodgate run`: `/metrics` of the control endpoint", QueryGroupMetrics),
    ]
    for entry in sorted(entry_points(group="floodgate.metrics"), key=lambda e: e.name):
        made.append(
            (
                f"{entry.name.capitalize()} service",
                f"`floodgate {entry.name} serve`: `/metrics`",
                entry.load(),
            )
        )
    for title, where, factory in made:
        registry = CollectorRegistry()
        factory(registry)
        yield title, where, registry


def metrics_markdown() -> str:
    """``docs/metrics.md``: every metric of every component (``floodgate metrics-doc``)."""
    lines = [
        "# Metrics",
        "",
        "Every metric Floodgate exports, by the component that serves it. Generated by",
        "`floodgate metrics-doc --output docs/metrics.md` from the registries themselves;",
        "`tests/unit/pipeline/test_metrics.py` fails when this file and the code differ.",
        "Naming, as Prometheus recommends: `floodgate_` prefix, base units in the name,",
        "counters end in `_total`, ratios 0..1, bounded labels.",
    ]
    for title, where, registry in metric_sections():
        lines += ["", f"## {title}", "", f"Served by {where}.", ""]
        lines += ["| name | type | labels | unit | meaning |", "| --- | --- | --- | --- | --- |"]
        for doc in describe(registry):
            labels = ", ".join(f"`{label}`" for label in doc.labels) or "-"
            meaning = doc.help.replace("|", "\\|")
            lines.append(f"| `{doc.name}` | {doc.type} | {labels} | {doc.unit} | {meaning} |")
    return "\n".join(lines) + "\n"

"""Metrics of the admission service (docs/metrics.md), on the registry it is handed."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Histogram

from admission.algorithm import StartReason
from admission.store import JobState, StallKind
from pipeline.metrics import Families, HttpAuthMetrics, add_build_info

NAMESPACE = "floodgate"
SUBSYSTEM = "admission"

#: The ``reason`` label values of ``floodgate_admission_rejections_total``.
REJECTION_REASONS = ("queue-full", "not-allowed")

#: Buckets of ``floodgate_admission_queue_wait_seconds``: from one check (0.1 s) to hours.
WAIT_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 14400.0)


class AdmissionMetrics:
    """Families:

    * ``floodgate_admission_jobs{state}`` (gauge): jobs in each state;
    * ``floodgate_admission_emergency_mode`` (gauge, 0/1);
    * ``floodgate_admission_cpu_load_ratio`` / ``_memory_usage_ratio`` (gauges, 0..1) and
      their limits ``_cpu_limit_ratio`` / ``_memory_limit_ratio``;
    * ``floodgate_admission_load_step`` (gauge): jobs started per check under low load;
    * ``floodgate_admission_queue_wait_seconds`` (histogram): Submitted to Started of
      every started job (0 for immediate starts);
    * ``floodgate_admission_starts_total{how}`` (counter): ``immediate``, ``dequeued``,
      ``forced``, ``not-queueable``;
    * ``floodgate_admission_rejections_total{reason}`` (counter): ``queue-full``,
      ``not-allowed``;
    * ``floodgate_admission_stall_entries{kind}`` (gauge): ``hard``, ``long-running``,
      ``in-doubt``;
    * ``floodgate_admission_leader`` (gauge, 0/1): this instance starts jobs;
    * ``floodgate_admission_driver_heap_usage_ratio{query_group}`` (gauge, 0..1): each
      known Spark driver's heap in use over its max (counted in the memory usage);
    * ``floodgate_build_info`` (:func:`pipeline.metrics.add_build_info`);
    * ``floodgate_http_auth_failures_total`` and ``_throttled_total`` of its REST API
      (:class:`pipeline.metrics.HttpAuthMetrics`).
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        add_build_info(registry)
        HttpAuthMetrics.on(registry)  # the REST API's gate
        families = Families(registry, SUBSYSTEM)
        gauge, counter = families.gauge, families.counter

        self.jobs = gauge("jobs", "Jobs in each state.", ("state",))
        self.emergency = gauge("emergency_mode", "1 in emergency mode (memory above its limit).")
        self.cpu = gauge("cpu_load_ratio", "System CPU busy ratio (mean of the last second).")
        self.memory = gauge("memory_usage_ratio", "Memory usage ratio.")
        self.cpu_limit = gauge(
            "cpu_limit_ratio",
            "system_cpu_limit: low load (enqueued jobs start) is CPU at or below it.",
        )
        self.memory_limit = gauge(
            "memory_limit_ratio",
            "memory_usage_limit: the memory ratio above which emergency mode begins.",
        )
        self.load_step = gauge("load_step", "Enqueued jobs started per check under low load.")
        self.wait = Histogram(
            "queue_wait_seconds",
            "Submitted to Started of each started job.",
            namespace=NAMESPACE,
            subsystem=SUBSYSTEM,
            registry=registry,
            buckets=WAIT_BUCKETS,
        )
        self.starts = counter("starts", "Jobs started, by how.", ("how",))
        self.rejections = counter("rejections", "Submits refused, by reason.", ("reason",))
        self.stalls = gauge("stall_entries", "Stall array entries, by kind.", ("kind",))
        self.leader = gauge("leader", "1 while this instance leads (starts jobs).")
        self.driver_heap = gauge(
            "driver_heap_usage_ratio",
            "Heap in use over max heap of each known Spark driver.",
            ("query_group",),
        )
        # Every label value exists from the start, at 0 (Prometheus' advice on missing
        # series): a dashboard panel and a rate() see "none yet", not "no data".
        for how in StartReason:
            self.starts.labels(how.value)
        for reason in REJECTION_REASONS:
            self.rejections.labels(reason)
        for kind in StallKind:
            self.stalls.labels(kind.value).set(0)
        for state in JobState:
            self.jobs.labels(state.value).set(0)

"""Prometheus metric definitions (DESIGN.md section 6).

Names carry the ``floodgate_`` prefix and base units; counters end in
``_total``; ratios are 0..1; capacity and length are separate gauges; labels
are bounded (stream, query_group, partition, state, result, reason -- never a
tuple key or a job id). Every component is handed the ``CollectorRegistry`` it
registers on, so tests read samples from a fresh registry
(``registry.get_sample_value(...)``) and several components can share one.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

NAMESPACE = "floodgate"


class ClientMetrics:
    """Metrics of the back-pressure client (data transmission API), per stream.

    Families (labels ``query_group``, ``stream``):

    * ``floodgate_stream_queue_length`` (gauge, tuples): input stream queue length
      at the client's last read of the broker.
    * ``floodgate_stream_queue_max_size`` (gauge, tuples): the configured max.
    * ``floodgate_stream_queue_free_ratio`` (gauge, 0..1): free / max, as the
      client counts it (its own sends included).
    * ``floodgate_stream_put_tuples_total`` (counter, + ``result`` =
      ``accepted`` | ``rejected``): tuples handed to ``put``.
    * ``floodgate_stream_queue_threshold_crossings_total`` (counter): times the
      free space fell to or below ``free_input_queue_size_threshold``.
    * ``floodgate_stream_put_blocked_seconds_total`` (counter, seconds): time
      ``put(block=True)`` spent waiting for space.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        labels = ("query_group", "stream")
        self.queue_length = Gauge(
            "stream_queue_length",
            "Input stream queue length (tuples) at the last read of the broker.",
            labels,
            namespace=NAMESPACE,
            registry=registry,
        )
        self.queue_max_size = Gauge(
            "stream_queue_max_size",
            "Max queue size of the input stream queue (tuples).",
            labels,
            namespace=NAMESPACE,
            registry=registry,
        )
        self.queue_free_ratio = Gauge(
            "stream_queue_free_ratio",
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
        self.threshold_crossings = Counter(
            "stream_queue_threshold_crossings",
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

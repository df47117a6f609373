"""The memory figure of the admission decision: host memory or a Spark driver's heap,
whichever is higher (the admission job queue enters emergency mode when any memory it
watches is nearly full), read from the query group's own metric families."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest

from admission.algorithm import Admission, Limits, Load
from admission.load import DriverHeaps, combine, heap_ratios
from pipeline.metrics import QueryGroupMetrics


def _metrics_text(heaps: dict[str, tuple[float, float]]) -> str:
    registry = CollectorRegistry()
    metrics = QueryGroupMetrics(registry)
    for name, (used, most) in heaps.items():
        metrics.jvm_heap_used.labels(name).set(used)
        metrics.jvm_heap_max.labels(name).set(most)
    return generate_latest(registry).decode()


def test_heap_ratios_come_from_the_query_group_heap_gauges() -> None:
    text = _metrics_text({"flights": (900e6, 1e9), "carriers": (1e8, 4e8), "idle": (5.0, 0.0)})
    assert heap_ratios(text) == {"flights": 0.9, "carriers": 0.25}  # max 0: left out
    assert heap_ratios("# nothing here\n") == {}


def test_a_driver_heap_above_the_limit_enters_emergency_mode_naming_the_driver() -> None:
    admission = Admission(Limits(memory_usage_limit=0.9))
    memory, source = combine(0.40, heap_ratios(_metrics_text({"flights": (950, 1000)})))
    assert (memory, source) == (0.95, "jvm:flights")
    change = admission.observe(Load(cpu=0.1, memory=memory, memory_source=source))
    assert change is not None and change.entered
    assert "jvm:flights" in change.reason and "memory_usage_limit" in change.reason
    # The driver's heap falls back (a GC, the job ended): the host's figure rules.
    memory, source = combine(0.40, {"flights": 0.30})
    change = admission.observe(Load(cpu=0.1, memory=memory, memory_source=source))
    assert change is not None and not change.entered and source == "host"


@given(
    host=st.floats(0, 1),
    heaps=st.dictionaries(st.text(min_size=1, max_size=5), st.floats(0, 1), max_size=5),
)
def test_the_memory_figure_is_the_highest_of_host_and_heaps(
    host: float, heaps: dict[str, float]
) -> None:
    memory, source = combine(host, heaps)
    assert memory == max([host, *heaps.values()])
    if source == "host":
        assert all(r <= host for r in heaps.values())
    else:
        assert math.isclose(heaps[source.removeprefix("jvm:")], memory)


def test_a_driver_endpoint_given_with_its_metrics_path_is_the_same_endpoint() -> None:
    # The compose stack named http://query-group:8790/metrics, which was read as
    # .../metrics/metrics (404): the driver's heap never counted.
    heaps = DriverHeaps(
        control_dir=None, urls=["http://query-group:8790/metrics", "http://h:1/", "http://h:2"]
    )
    assert heaps.endpoints() == ["http://query-group:8790", "http://h:1", "http://h:2"]

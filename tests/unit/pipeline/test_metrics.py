"""docs/metrics.md is what the registries export: it fails when a metric is added,
renamed or re-described without regenerating the reference."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from pipeline.metrics import describe, metric_sections, metrics_markdown

DOC = Path(__file__).resolve().parents[3] / "docs" / "metrics.md"


def test_docs_metrics_md_is_what_the_code_exports() -> None:
    assert DOC.read_text(encoding="utf-8") == metrics_markdown(), (
        "docs/metrics.md is out of date: run .venv/bin/floodgate metrics-doc --output "
        "docs/metrics.md"
    )


def test_every_service_is_documented_and_every_name_follows_the_naming_rules() -> None:
    sections = {title: describe(registry) for title, _, registry in metric_sections()}
    assert set(sections) == {
        "Back-pressure client",
        "Query group",
        "Admission service",
        "Sweeper service",
    }
    for docs in sections.values():
        assert docs, "a component with no metrics"
        for doc in docs:
            assert doc.name.startswith("floodgate_")
            assert doc.name.endswith("_total") == (doc.type == "counter"), doc.name
            assert doc.help, f"{doc.name} has no help text"
            assert not {"key", "job_id", "id"} & set(doc.labels), f"{doc.name}: unbounded label"


def test_a_family_with_no_sample_yet_is_described_with_its_labels() -> None:
    from prometheus_client import Counter

    registry = CollectorRegistry()
    Counter("floodgate_x_seconds", "Seconds of x.", ("stream",), registry=registry)
    (doc,) = describe(registry)
    assert (doc.name, doc.type, doc.labels, doc.unit) == (
        "floodgate_x_seconds_total",
        "counter",
        ("stream",),
        "seconds",
    )


# -- one name per quantity, tuples throughout, counters behind every rate, the
# same label names everywhere, floodgate_build_info on every endpoint -----------------

#: The label names a family may carry (docs/architecture.md, "Observability"): the
#: sweeper's families once said ``topic`` where every other family says ``stream``.
LABELS = {
    "query_group",
    "stream",
    "partition",
    "query",
    "state",
    "result",
    "reason",
    "how",
    "kind",
}


def families() -> dict[str, list[tuple[str, object]]]:
    """Family name -> ``[(component, doc)]`` over every component's registry."""
    found: dict[str, list[tuple[str, object]]] = {}
    for title, _, registry in metric_sections():
        for doc in describe(registry):
            found.setdefault(doc.name, []).append((title, doc))
    return found


def test_one_name_per_quantity_the_input_stream_queue_is_named_alike_by_client_and_group() -> None:
    sections = {title: {d.name for d in describe(r)} for title, _, r in metric_sections()}
    for name in ("floodgate_input_stream_queue_length", "floodgate_input_stream_queue_max_size"):
        assert name in sections["Back-pressure client"], name
        assert name in sections["Query group"], name
    every = set().union(*sections.values())
    assert not [n for n in every if n.startswith("floodgate_stream_queue_")], (
        "the input stream queue under a second name"
    )


def test_tuples_throughout_and_no_precomputed_rates() -> None:
    names = set(families())
    assert not [n for n in names if "rows" in n], "rows where every other family says tuples"
    assert not [n for n in names if n.endswith("_per_second")], (
        "a rate gauge: export a counter and let PromQL's rate() compute it"
    )
    for counter in (
        "floodgate_query_input_tuples_total",
        "floodgate_input_stream_processed_tuples_total",
        "floodgate_input_stream_dead_lettered_tuples_total",
        "floodgate_sweeper_swept_tuples_total",
        "floodgate_sweeper_serviced_tuples_total",
    ):
        assert counter in names, counter
        ((_, doc),) = families()[counter]
        assert doc.type == "counter"  # type: ignore[attr-defined]
    ((_, dead),) = families()["floodgate_input_stream_dead_lettered_tuples_total"]
    assert dead.labels == ("query_group", "stream", "reason")  # type: ignore[attr-defined]


def test_every_family_uses_the_same_label_names() -> None:
    for name, found in families().items():
        for title, doc in found:
            labels = set(doc.labels)  # type: ignore[attr-defined]
            if name == "floodgate_build_info":
                continue
            assert labels <= LABELS, f"{title}: {name} has labels {sorted(labels - LABELS)}"
            if "partition" in labels:
                assert {"query_group", "stream"} <= labels, f"{name}: partition of what?"


def test_every_component_serves_floodgate_build_info_at_1_with_the_versions() -> None:
    from importlib.metadata import version

    for title, _, registry in metric_sections():
        labels = {
            "version": version("floodgate"),
            "pyspark": version("pyspark"),
            "confluent_kafka": version("confluent-kafka"),
        }
        assert registry.get_sample_value("floodgate_build_info", labels) == 1.0, title


def test_components_sharing_a_registry_serve_one_build_info() -> None:
    from prometheus_client import generate_latest

    from admission.metrics import AdmissionMetrics
    from pipeline.metrics import QueryGroupMetrics
    from sweeper.metrics import SweeperMetrics

    registry = CollectorRegistry()
    QueryGroupMetrics(registry)
    AdmissionMetrics(registry)
    SweeperMetrics(registry)
    assert generate_latest(registry).decode().count("floodgate_build_info{") == 1

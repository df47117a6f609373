"""docs/metrics.md is what the registries export: it fails when a metric is added,
renamed or re-described without regenerating the reference."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from pipeline.metrics import describe, metric_sections, metrics_markdown

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


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

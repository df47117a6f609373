"""The Prometheus side of monitoring (README, "Monitoring (Prometheus)"), checked by
Prometheus' own tool:
the alerting and recording rules parse, every alert fires and stays quiet in its
``promtool test rules`` cases, every alert has its runbook section, and the
exposition of every component's metrics passes ``promtool check metrics``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from prometheus_client import generate_latest

from pipeline.alert_rules import DEFAULT_RUNBOOK_URL, RuleSettings, render_rules
from pipeline.metrics import metric_sections
from tests.integration.promtool import ROOT, check_metrics, promtool

pytestmark = pytest.mark.no_kafka

RULES = ROOT / "prometheus" / "rules" / "floodgate.yml"


def alerts() -> list[dict[str, object]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def test_the_rules_parse() -> None:
    result = promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    groups = yaml.safe_load(RULES.read_text())["groups"]
    assert f"SUCCESS: {sum(len(group['rules']) for group in groups)} rules found" in result.stdout


def test_every_alert_fires_and_stays_quiet_in_its_promtool_cases() -> None:
    result = promtool("test", "rules", "prometheus/tests/floodgate_test.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    tested = set(
        re.findall(r"alertname: (\w+)", (ROOT / "prometheus/tests/floodgate_test.yml").read_text())
    )
    assert tested == {str(rule["alert"]) for rule in alerts()}, "an alert without test cases"


def test_every_alert_has_a_summary_a_description_and_a_runbook_section() -> None:
    runbook = (ROOT / "docs" / "runbook.md").read_text()
    sections = {line[3:].strip() for line in runbook.splitlines() if line.startswith("## ")}
    for rule in alerts():
        annotations = rule["annotations"]
        assert isinstance(annotations, dict)
        assert annotations["summary"] and annotations["description"], rule["alert"]
        assert rule["alert"] in sections, f"docs/runbook.md has no section {rule['alert']}"
        # Absolute: Prometheus and Alertmanager hand it on as it is.
        assert annotations["runbook_url"] == f"{DEFAULT_RUNBOOK_URL}#{str(rule['alert']).lower()}"


def test_every_component_s_metrics_pass_promtool_check_metrics() -> None:
    for title, _, registry in metric_sections():
        text = generate_latest(registry).decode()
        assert "# TYPE floodgate_" in text, title
        check_metrics(text)


def test_rules_generated_with_other_settings_pass_promtool(tmp_path: Path) -> None:
    rules = tmp_path / "floodgate.yml"
    rules.write_text(
        render_rules(
            RuleSettings(
                runbook_url="https://ops.example.org/runbook/",
                input_lag_threshold_s=42.5,
                output_lag_threshold_s=3600,
            )
        )
    )
    result = promtool("check", "rules", str(rules))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_exposition_of_a_used_component_passes_promtool_check_metrics() -> None:
    """With samples in every family (not only the empty families of a fresh registry):
    the query group's counters by reason and partition, and the sweeper's."""
    from prometheus_client import CollectorRegistry

    from pipeline.metrics import QueryGroupMetrics
    from sweeper.metrics import SweeperMetrics

    registry = CollectorRegistry()
    group = QueryGroupMetrics(registry)
    group.dead_lettered_tuples.labels("flights", "flights", "late").inc(3)
    group.processed_tuples.labels("flights", "flights").inc(100)
    group.input_tuples.labels("flights", "copy").inc(100)
    group.input_queue_lag.labels("flights", "flights").set(12.5)
    check_metrics(generate_latest(registry).decode())
    registry = CollectorRegistry()
    sweeper = SweeperMetrics(registry)
    sweeper.add_queue("flights", "flights", [0, 1])
    sweeper.serviced_tuples.labels("flights", "flights", "0").inc(10)
    check_metrics(generate_latest(registry).decode())

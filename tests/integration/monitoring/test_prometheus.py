"""The Prometheus side of monitoring (README, "Monitoring (Prometheus)"), checked by
Prometheus' own tool:
the alerting and recording rules parse, every alert fires and stays quiet in its
``promtool test rules`` cases, every alert has its runbook section, and the
exposition of every component's metrics passes ``promtool check metrics``."""

from __future__ import annotations

import re

import pytest
import yaml
from prometheus_client import generate_latest

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
        assert annotations["runbook_url"] == f"docs/runbook.md#{str(rule['alert']).lower()}"


def test_every_component_s_metrics_pass_promtool_check_metrics() -> None:
    for title, _, registry in metric_sections():
        text = generate_latest(registry).decode()
        assert "# TYPE floodgate_" in text, title
        check_metrics(text)

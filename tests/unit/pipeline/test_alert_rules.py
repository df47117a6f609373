"""The alerting rules are generated (``floodgate alert-rules``): the checked-in file is
what the generator makes with its defaults, every ``runbook_url`` is absolute, and
the options an operator sets reach the rules."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from pipeline.alert_rules import (
    DEFAULT_RUNBOOK_URL,
    DOCS_SITE_URL,
    RuleSettings,
    render_rules,
)
from pipeline.cli import app
from pipeline.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]
RULES = ROOT / "prometheus" / "rules" / "floodgate.yml"


def alerts(text: str) -> dict[str, dict[str, object]]:
    groups = yaml.safe_load(text)["groups"]
    return {r["alert"]: r for g in groups for r in g["rules"] if "alert" in r}


def test_the_checked_in_rules_are_what_the_generator_makes() -> None:
    assert RULES.read_text(encoding="utf-8") == render_rules(), (
        "prometheus/rules/floodgate.yml is out of date: edit pipeline/alert_rules.yml, then "
        "run .venv/bin/floodgate alert-rules --output prometheus/rules/floodgate.yml"
    )


def test_every_runbook_url_is_absolute_and_points_at_the_alert_s_section() -> None:
    runbook = (ROOT / "docs" / "runbook.md").read_text(encoding="utf-8")
    sections = {line[3:].strip() for line in runbook.splitlines() if line.startswith("## ")}
    for name, rule in alerts(RULES.read_text(encoding="utf-8")).items():
        annotations = rule["annotations"]
        assert isinstance(annotations, dict)
        assert annotations["runbook_url"] == f"{DEFAULT_RUNBOOK_URL}#{name.lower()}"
        assert str(annotations["runbook_url"]).startswith("http"), name
        assert name in sections, f"docs/runbook.md has no section {name}"


def test_the_default_runbook_url_is_the_docs_site_s_runbook_page() -> None:
    mkdocs = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    site_url = yaml.load(mkdocs, Loader=_MkDocsLoader)["site_url"]
    assert site_url == DOCS_SITE_URL
    assert f"{site_url}runbook/" == DEFAULT_RUNBOOK_URL  # docs/runbook.md, directory URLs


def test_the_alerts_the_readme_promises_exist() -> None:
    found = alerts(RULES.read_text(encoding="utf-8"))
    for name, metric in {
        "FloodgateInputLagHigh": "floodgate_input_stream_queue_lag_seconds",
        "FloodgateOutputLagHigh": "floodgate_output_stream_queue_lag_seconds",
        "FloodgateQueryGroupFailed": 'floodgate_query_group_state{state="FAILED"}',
        "FloodgateDeadLetters": "floodgate_input_stream_dead_lettered_tuples_total",
    }.items():
        assert name in found, name
        assert metric in str(found[name]["expr"]), name


def test_the_runbook_url_and_the_lag_thresholds_are_options() -> None:
    text = render_rules(
        RuleSettings(
            runbook_url="https://ops.example.org/floodgate/runbook.html",
            input_lag_threshold_s=90,
            output_lag_threshold_s=1800.5,
        )
    )
    found = alerts(text)
    assert found["FloodgateQueryGroupHeld"]["annotations"]["runbook_url"] == (  # type: ignore[index]
        "https://ops.example.org/floodgate/runbook.html#floodgatequerygroupheld"
    )
    assert str(found["FloodgateInputLagHigh"]["expr"]).endswith("> 90")
    assert str(found["FloodgateOutputLagHigh"]["expr"]).endswith("> 1800.5")
    assert "--input-lag-threshold-s 90" in text  # the header says how it was made


@pytest.mark.parametrize(
    ("settings", "key"),
    [
        ({"runbook_url": "docs/runbook.md"}, "runbook_url"),
        ({"runbook_url": "https://x.org/runbook/#here"}, "runbook_url"),
        ({"runbook_url": "ftp://x.org/runbook"}, "runbook_url"),
        ({"input_lag_threshold_s": 0}, "input_lag_threshold_s"),
        ({"output_lag_threshold_s": -5}, "output_lag_threshold_s"),
    ],
)
def test_a_bad_setting_is_refused_naming_its_key(settings: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as refused:
        RuleSettings(**settings)  # type: ignore[arg-type]
    assert refused.value.key == key
    assert key in str(refused.value)


def test_the_command_writes_checks_and_refuses(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "rules.yml"
    written = runner.invoke(app, ["alert-rules", "--output", str(out)])
    assert written.exit_code == 0, written.output
    assert out.read_text(encoding="utf-8") == render_rules()
    checked = runner.invoke(app, ["alert-rules", "--output", str(out), "--check"])
    assert checked.exit_code == 0, checked.output
    stale = runner.invoke(
        app, ["alert-rules", "--output", str(out), "--check", "--input-lag-threshold-s", "60"]
    )
    assert stale.exit_code == 1 and "out of date" in stale.output
    refused = runner.invoke(app, ["alert-rules", "--runbook-url", "runbook.md"])
    assert refused.exit_code == 1 and "runbook_url" in refused.output


class _MkDocsLoader(yaml.SafeLoader):
    """YAML as mkdocs reads mkdocs.yml: ``!!python/name:...`` (a Python object mkdocs
    imports, such as the mermaid fence's formatter) is read as its dotted name here."""


_MkDocsLoader.add_multi_constructor(
    "tag:yaml.org,2002:python/name:", lambda _loader, suffix, _node: suffix
)

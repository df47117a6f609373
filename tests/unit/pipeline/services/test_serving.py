"""Every Floodgate HTTP endpoint binds to loopback unless its config names another
interface, and answers only loopback names and addresses unless configured."""

from __future__ import annotations

import typer

from admission.config import AdmissionSettings
from pipeline.cli import app
from pipeline.config import QueryGroupSection
from sweeper.config import SweeperSettings


def test_every_endpoint_binds_to_loopback_and_allows_no_name_by_default() -> None:
    assert AdmissionSettings().host == "127.0.0.1"
    assert SweeperSettings().host == "127.0.0.1"
    section = QueryGroupSection.model_fields
    assert section["metrics_host"].default == "127.0.0.1"
    for settings in (AdmissionSettings(), SweeperSettings()):
        assert settings.allowed_hosts == []
    assert section["allowed_hosts"].default_factory() == []  # type: ignore[misc]
    produce = typer.main.get_command(app).commands["produce"]  # type: ignore[attr-defined]
    (option,) = [p for p in produce.params if p.name == "metrics_host"]
    assert option.default == "127.0.0.1"

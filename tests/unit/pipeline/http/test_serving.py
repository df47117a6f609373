"""Every Floodgate HTTP endpoint binds to loopback unless its config names another
interface, and answers only loopback names and addresses unless configured."""

from __future__ import annotations

import ast
from pathlib import Path

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
    assert section["allowed_hosts"].get_default(call_default_factory=True) == []
    produce = typer.main.get_command(app).commands["produce"]  # type: ignore[attr-defined]
    (option,) = [p for p in produce.params if p.name == "metrics_host"]
    assert option.default == "127.0.0.1"


def test_every_http_server_is_an_app_server() -> None:
    """The Host allow-list, the read deadlines and the connection limit live in
    :class:`~pipeline.http.serving.AppServer`: no other module imports a server
    (uvicorn, ``http.server``, ``wsgiref``) or starts prometheus_client's own."""
    root = Path(__file__).resolve().parents[4]
    servers = ("uvicorn", "http.server", "wsgiref", "socketserver")
    found = []
    for package in ("pipeline", "admission", "sweeper"):
        for path in sorted((root / package).rglob("*.py")):
            relative = path.relative_to(root).as_posix()
            if relative == "pipeline/http/serving.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = (
                    [alias.name for alias in node.names]
                    if isinstance(node, ast.Import)
                    else [node.module or ""]
                    if isinstance(node, ast.ImportFrom)
                    else []
                )
                imported = [n for n in names if n.split(".")[0] in servers or n in servers]
                called = isinstance(node, ast.Attribute | ast.Name) and (
                    getattr(node, "attr", getattr(node, "id", ""))
                    in ("start_http_server", "start_wsgi_server", "make_server")
                )
                if imported or called:
                    found.append(f"{relative}:{getattr(node, 'lineno', '?')}")
    assert found == []

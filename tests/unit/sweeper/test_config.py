"""The sweeper's config refusals never show a database password: a query group that
reads another sweep catalog than the sweeper's is refused naming both URLs, their
passwords as ``***``. No broker, no database (the URLs are only compared)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import pytest
import tomli_w

from pipeline.errors import ConfigError
from sweeper.config import load_sweeper_config

MINIMAL_GROUP = {
    "query_group": {"name": "g"},
    "input_streams": {"flights": {"topic": "flights", "schema": "flight"}},
    "output_streams": {"out": {"topic": "out", "schema": "delays_by_origin_hour"}},
    "queries": {"q": {"sql": "SELECT 1", "output": "out"}},
}


def _private_toml(path: Path, content: dict[str, object]) -> Path:
    """``content`` as TOML in ``path``, 0600 (it holds a password)."""
    path.write_text(tomli_w.dumps(content))
    os.chmod(path, 0o600)
    return path


def test_catalogs_that_differ_are_named_without_their_passwords(tmp_path: Path) -> None:
    group_password, sweeper_password = secrets.token_hex(16), secrets.token_hex(16)
    group_url = f"postgresql+psycopg://reader:{group_password}@db.example:5432/catalog"
    sweeper_url = f"postgresql+psycopg://sweeper:{sweeper_password}@db.example:5432/other"
    group = _private_toml(
        tmp_path / "group.toml",
        {**MINIMAL_GROUP, "query_group": {"name": "g", "sweep_catalog_url": group_url}},
    )
    config = _private_toml(
        tmp_path / "sweeper.toml",
        {"sweeper": {"query_groups": [str(group)], "catalog_url": sweeper_url}},
    )

    with pytest.raises(ConfigError) as refused:
        load_sweeper_config(config, env={})

    error = refused.value
    shown = f"{error} {error.key} {error.value!r} {error.allowed!r} {refused.getrepr()}"
    assert group_password not in shown and sweeper_password not in shown
    assert "postgresql+psycopg://reader:***@db.example:5432/catalog" in str(error)
    assert "postgresql+psycopg://sweeper:***@db.example:5432/other" in str(error)
    assert error.key == "query_group.sweep_catalog_url"
    assert error.value == "postgresql+psycopg://reader:***@db.example:5432/catalog"
    assert error.allowed == "postgresql+psycopg://sweeper:***@db.example:5432/other"

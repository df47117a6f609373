"""Fixtures of the deployment tests: Floodgate as users install it."""

from __future__ import annotations

import pytest

from tests.integration.deployment.installed import InstalledFloodgate, build_and_install, install

#: The lowest PySpark pyproject.toml allows, which the jar is compiled against.
OLDEST_PYSPARK = "4.2.0"


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> InstalledFloodgate:
    """This checkout's wheel installed in a virtualenv of its own (``installed.py``)."""
    return build_and_install(tmp_path_factory.mktemp("installed"))


@pytest.fixture(scope="session")
def installed_on_oldest_spark(
    installed: InstalledFloodgate, tmp_path_factory: pytest.TempPathFactory
) -> InstalledFloodgate:
    """The same wheel in a virtualenv of its own with the lowest PySpark
    ``pyproject.toml`` allows (:data:`OLDEST_PYSPARK`): the jar runs on every minor."""
    venv = tmp_path_factory.mktemp("installed-oldest-spark") / "venv"
    return install(installed.wheel, venv, f"pyspark=={OLDEST_PYSPARK}")

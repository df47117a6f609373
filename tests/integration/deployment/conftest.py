"""Fixtures of the deployment tests: Floodgate as users install it."""

from __future__ import annotations

import pytest

from tests.integration.deployment.installed import InstalledFloodgate, build_and_install


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> InstalledFloodgate:
    """This checkout's wheel installed in a virtualenv of its own (``installed.py``)."""
    return build_and_install(tmp_path_factory.mktemp("installed"))

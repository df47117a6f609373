"""Files Floodgate ships inside its package: the Avro schemas and the query group,
admission and sweeper files.

In the repository they live at the top (``schemas/``, ``conf/``); an install (a wheel,
or an editable checkout) maps them to the packages ``pipeline.schemas`` and
``pipeline.conf`` (``[tool.setuptools.package-dir]`` in ``pyproject.toml``), so an
installed Floodgate finds them from any working directory, on the driver and on
Spark's executors alike.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCHEMAS_PACKAGE = "pipeline.schemas"
CONF_PACKAGE = "pipeline.conf"


def package_dir(package: str) -> Path:
    """The directory of a data package of Floodgate's.

    Raises:
        FileNotFoundError: the package is not installed (a broken install).
    """
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"{package} is not installed with Floodgate: reinstall it (pip install floodgate)"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def schema_dir() -> Path:
    """The shipped Avro schemas (``*.avsc``)."""
    return package_dir(SCHEMAS_PACKAGE)


def shipped_configs() -> dict[str, Path]:
    """The shipped TOML files by stem: ``flights`` (the demo's query group),
    ``admission``, ``sweeper``."""
    return {path.stem: path for path in sorted(package_dir(CONF_PACKAGE).glob("*.toml"))}


def shipped_config(name: str) -> Path:
    """A shipped TOML file by stem (``flights``).

    Raises:
        FileNotFoundError: no such file; the message names the ones there are.
    """
    configs = shipped_configs()
    if name not in configs:
        raise FileNotFoundError(
            f"no shipped config {name!r}; shipped: {', '.join(configs) or 'none'}"
        )
    return configs[name]

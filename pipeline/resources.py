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


def query_group_file(value: str | Path) -> Path:
    """A query group file named as the command line and ``connect(config=...)`` take
    it: a path to a file, else the name of a shipped one (``flights``), so an installed
    Floodgate runs its demo group from any working directory.

    Raises:
        ConfigError: neither a file nor a shipped name; names both and what is shipped.
    """
    import tomllib

    from pipeline.errors import ConfigError

    path = Path(value)
    if path.is_file():
        return path
    shipped = {
        name: file
        for name, file in shipped_configs().items()
        if "query_group" in tomllib.loads(file.read_text(encoding="utf-8"))
    }
    if str(value) in shipped:
        return shipped[str(value)]
    raise ConfigError(
        f"{value}: no such file, nor a shipped query group file (shipped: {', '.join(shipped)})",
        key="config",
        value=str(value),
        allowed="a query group file's path, or " + ", ".join(shipped),
    )

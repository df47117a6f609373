"""Every runtime dependency of pyproject.toml is used: imported by pipeline, admission
or sweeper, or named below with what loads it. A dependency nothing imports is one
more package to install, audit and keep in range for nothing."""

from __future__ import annotations

import ast
import re
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("pipeline", "admission", "sweeper")

#: Dependencies loaded by another package, not by an import of ours.
LOADED_BY_OTHERS = {
    # SQLAlchemy's PostgreSQL driver, chosen by a postgresql+psycopg:// URL.
    "psycopg": "sqlalchemy",
}


def _distribution(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _imported_top_level_modules() -> set[str]:
    found: set[str] = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    found.update(alias.name.split(".")[0] for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    found.add(node.module.split(".")[0])
    return found


def test_every_runtime_dependency_is_imported_or_said_to_be_loaded_by_another() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    modules_of: dict[str, set[str]] = {}
    for module, distributions in packages_distributions().items():
        for distribution in distributions:
            modules_of.setdefault(distribution.lower().replace("_", "-"), set()).add(module)
    imported = _imported_top_level_modules()

    unused = [
        name
        for name in map(_distribution, project["dependencies"])
        if name not in LOADED_BY_OTHERS and not modules_of.get(name, set()) & imported
    ]

    assert unused == [], f"declared in pyproject.toml, imported nowhere: {unused}"

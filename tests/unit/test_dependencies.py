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


def test_every_third_party_import_is_a_declared_dependency() -> None:
    """The other way round: a module of pipeline, admission or sweeper imports only the
    standard library, the project's own packages, and distributions pyproject.toml
    declares (a runtime dependency, or an extra for the code that needs it). A package
    that arrives only as another's dependency (numpy through pandas) can leave with
    it."""
    import sys

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    declared = {_distribution(r) for r in project["dependencies"]}
    for requirements in project["optional-dependencies"].values():
        declared |= {_distribution(r) for r in requirements}
    distributions = packages_distributions()
    ours = set(PACKAGES) | {"tests"}
    undeclared = sorted(
        module
        for module in _imported_top_level_modules()
        if module not in sys.stdlib_module_names
        and module not in ours
        and not {d.lower().replace("_", "-") for d in distributions.get(module, [])} & declared
    )
    assert undeclared == [], f"imported, not declared in pyproject.toml: {undeclared}"

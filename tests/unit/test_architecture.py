"""The package layout's rules: the client, the sweeper and admission never load
PySpark; nothing imports upward; no import cycles (pyproject.toml,
[tool.importlinter]; CONTRIBUTING.md, "Layout")."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

import grimp

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("pipeline", "admission", "sweeper")


def test_the_client_the_sweeper_and_admission_run_without_pyspark() -> None:
    code = (
        "import sys, sweeper.service, admission.service, pipeline.client, pipeline.cli; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pyspark'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]", f"PySpark was loaded: {out.stdout.strip()[:300]}"


def _cycles(graph: grimp.ImportGraph, modules: set[str]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in graph.find_modules_directly_imported_by(module) & modules:
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(modules):
        if module not in index:
            visit(module)
    return found


def test_no_import_cycle_among_the_projects_modules() -> None:
    # Imports under `if TYPE_CHECKING:` count: a cycle there is a cycle of design.
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    modules = {m for m in graph.modules if m.split(".")[0] in PACKAGES}
    assert _cycles(graph, modules) == []


def test_the_import_contracts_hold() -> None:
    # `lint-imports` reads [tool.importlinter] of pyproject.toml: no PySpark outside
    # pipeline.spark's users, pipeline never imports the services, no upward import.
    lint = Path(sys.executable).with_name("lint-imports")
    out = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-1000:]


def test_every_module_of_pipeline_is_in_a_layer() -> None:
    # import-linter says nothing of a module no contract names (scripts/check-contracts,
    # also run by `make lint`).
    out = subprocess.run(
        [sys.executable, "scripts/check-contracts"], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-2000:]


def test_the_wheel_lists_every_package() -> None:
    # setuptools is given the list (the schemas and configs map into the package from
    # top-level folders); a package missing from it is missing from the wheel.
    import tomllib

    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for package in PACKAGES
        for init in (ROOT / package).rglob("__init__.py")
    }
    assert found - listed == set(), (
        f"pyproject.toml [tool.setuptools] packages lacks {found - listed}"
    )


def test_no_module_or_class_is_over_its_size_but_the_allowed() -> None:
    # scripts/check-sizes, also run by `make lint`: 600 lines a module, 400 a class,
    # but the allow-list of pyproject.toml, each entry with its reason.
    out = subprocess.run(
        [sys.executable, "scripts/check-sizes"], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-2000:]


def _check_sizes() -> Any:
    loader = importlib.machinery.SourceFileLoader("check_sizes", str(ROOT / "scripts/check-sizes"))
    spec = importlib.util.spec_from_loader("check_sizes", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_a_java_class_is_measured_to_its_closing_brace(tmp_path: Path) -> None:
    source = tmp_path / "A.java"
    source.write_text(
        "package x;\n"
        "/** A. */\n"
        "public final class A {\n"
        '  static final String OPEN = "{ not a brace";  // nor } this\n'
        "  static final class Inner {\n"
        "    char c = '}';\n"
        "  }\n"
        "}\n"
    )
    assert dict(_check_sizes().java_classes(source)) == {"A": 6, "Inner": 3}


def test_a_python_class_is_measured_with_its_decorators(tmp_path: Path) -> None:
    source = tmp_path / "a.py"
    source.write_text(
        "import dataclasses\n\n\n@dataclasses.dataclass\nclass A:\n    x: int\n\n"
        "    class B:\n        pass\n"
    )
    assert dict(_check_sizes().python_classes(source)) == {"A": 6, "A.B": 2}

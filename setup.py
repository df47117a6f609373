"""The wheel's build step: the ``floodgate_kafka`` source's jar, built with Maven.

Everything else is in ``pyproject.toml``. Building a wheel (``pip wheel .``,
``python -m build``) or installing from the source tree runs ``scripts/build-jar``
first when the jar is missing or older than a file under ``jvm/``, so the wheel carries
``pipeline/spark/jars/floodgate-spark.jar`` as package data and an installed Floodgate
needs no Maven at run time. The repository itself holds no jar.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
JAR = ROOT / "pipeline" / "spark" / "jars" / "floodgate-spark.jar"


def _jar_is_stale() -> bool:
    """Whether the jar is missing or older than the Java sources that make it."""
    if not JAR.is_file():
        return True
    sources = [ROOT / "jvm" / "pom.xml", *(ROOT / "jvm" / "src").rglob("*")]
    newest = max((p.stat().st_mtime for p in sources if p.is_file()), default=0.0)
    return newest > JAR.stat().st_mtime


class BuildPyWithJar(build_py):
    """``build_py``, after building the source's jar when it is stale."""

    def run(self) -> None:
        if _jar_is_stale():
            subprocess.run([str(ROOT / "scripts" / "build-jar"), "--skip-tests"], check=True)
        super().run()


setup(cmdclass={"build_py": BuildPyWithJar})

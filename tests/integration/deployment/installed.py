"""Floodgate as users install it: a wheel built from this checkout, installed with its
``demo`` extra into a virtualenv of its own (``pip install 'floodgate-*.whl[demo]'``),
for the tests of the installed package and of a Spark cluster whose executors run
that virtualenv's Python.

Dependencies come from the package index through pip's cache (the checkout's
``.venv`` put them there), so a warm machine installs without downloading.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class InstalledFloodgate:
    """A virtualenv in which only the built wheel (and its dependencies) is installed."""

    wheel: Path
    venv: Path
    seconds: float

    @property
    def bin(self) -> Path:
        return self.venv / "bin"

    @property
    def python(self) -> Path:
        return self.bin / "python"

    def env(self, **extra: str) -> dict[str, str]:
        """An environment that sees this virtualenv only: its ``bin`` first on ``PATH``,
        no ``PYTHONPATH``, no Spark or Floodgate settings of the test run."""
        environ = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("PYSPARK_", "SPARK_", "FLOODGATE_", "VIRTUAL_ENV", "PYTHON"))
        }
        environ["PATH"] = f"{self.bin}{os.pathsep}{environ.get('PATH', '')}"
        environ["VIRTUAL_ENV"] = str(self.venv)
        environ.update(extra)
        return environ


def build_wheel(workdir: Path) -> Path:
    """Build the wheel of this checkout into ``workdir/dist`` (its build step builds the
    floodgate_kafka jar with Maven when it is stale: setup.py).

    Raises:
        subprocess.CalledProcessError: the build failed (pip's output is in the error).
    """
    dist = workdir / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(dist), str(ROOT)],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    (wheel,) = dist.glob("floodgate-*.whl")
    return wheel


def install(wheel: Path, venv: Path, *pins: str) -> InstalledFloodgate:
    """Install ``wheel`` with its ``demo`` extra into a new virtualenv ``venv``, with
    ``pins`` (``pyspark==4.2.0``, say) given to the same pip command.

    Raises:
        subprocess.CalledProcessError: the install failed (pip's output is in the error).
    """
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", f"{wheel}[demo]", *pins],
        check=True,
        capture_output=True,
        text=True,
        timeout=900,
        cwd=venv.parent,
    )
    return InstalledFloodgate(wheel, venv, time.monotonic() - started)


def build_and_install(workdir: Path) -> InstalledFloodgate:
    """Build the wheel of this checkout and install it into ``workdir/venv``.

    Raises:
        subprocess.CalledProcessError: the build or the install failed (pip's output
            is in the error).
    """
    return install(build_wheel(workdir), workdir / "venv")

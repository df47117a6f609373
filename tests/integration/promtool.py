"""``promtool`` (Debian's ``prometheus`` package, installed by ``.ci/run``): the
Prometheus project's own checks of rules, rule tests and metric expositions."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def promtool(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``promtool ARGS`` in the project root.

    Raises:
        AssertionError: promtool is not installed (``.ci/run`` installs it; no skip).
    """
    binary = shutil.which("promtool")
    assert binary, "promtool is missing: scripts/system-deps test installs it (make test runs it)"
    return subprocess.run(
        [binary, *args], cwd=ROOT, input=stdin, capture_output=True, text=True, timeout=120
    )


def check_metrics(exposition: str) -> None:
    """``promtool check metrics`` on a ``/metrics`` text: fails with promtool's own
    findings (naming, units, counters without ``_total``, bad HELP...)."""
    result = promtool("check", "metrics", stdin=exposition)
    assert result.returncode == 0, result.stdout + result.stderr

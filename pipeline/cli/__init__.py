"""The ``floodgate`` command.

* ``floodgate demo`` -- the main job (``make demo``; :mod:`pipeline.demo`).
* ``floodgate run CONFIG`` -- run a query group until it is stopped (SIGTERM,
  Ctrl-C or ``floodgate query-group stop`` stop it cleanly: the micro-batch in
  flight is not committed and is replayed on the next start). It serves its
  metrics and control endpoint (:mod:`pipeline.spark.control`).
* ``floodgate query-group status|release|stop NAME`` -- talk to a running query
  group's endpoint (found through its control file, or ``--url``); ``release`` and
  ``stop`` send its control token (``FLOODGATE_CONTROL_TOKEN``, else the group's
  ``<control_dir>/<name>.token``).
* ``floodgate broker`` -- run a broker (embedded, or Apache Kafka) in the foreground.
* ``floodgate metrics-doc`` -- the metrics reference (``docs/metrics.md``).
* ``floodgate alert-rules`` -- the Prometheus rules (``prometheus/rules/floodgate.yml``),
  with the runbook URL and lag thresholds given (:mod:`pipeline.alert_rules`).
* ``floodgate admission ...`` (and any other service's commands) -- registered
  through the ``floodgate.commands`` entry point group when the command is built
  (:mod:`pipeline.cli.app`); this package imports none of them.

What every command shares, the services' too (exit status, the error line, common
options, tables), is :mod:`pipeline.cli.conventions`.

May import: pipeline, any package of it (the command line is its top layer); never
admission nor the sweeper, whose commands join through an entry point.
"""

from __future__ import annotations

# The command modules register their commands on the app as they are imported, in the
# order `floodgate --help` lists them.
# isort: off
from pipeline.cli import demo  # noqa: F401
from pipeline.cli import run  # noqa: F401
from pipeline.cli import audit  # noqa: F401
from pipeline.cli import query_group  # noqa: F401
from pipeline.cli import tools  # noqa: F401

# isort: on
from pipeline.cli.app import app

__all__ = ["app", "main"]


def main() -> None:
    """Entry point for ``python -m pipeline.cli``."""
    app()

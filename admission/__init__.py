"""The admission service: a load-aware, persistent job queue with a stall array.

docs/architecture.md, "The admission service", and docs/admission.md: the job queue (CPU limit,
emergency mode, load step, max queue size, start now), the stall array, and the queue
as an SQL table shared by leader-elected instances. Modules: ``algorithm`` (the
decisions, pure), ``tables`` (the SQL schema), ``store`` (jobs, stalls, lanes in SQL),
``runner`` (processes), ``load`` (samples), ``leadership`` (the leader's duties),
``controls`` (start-now, cancel, suspend, lanes, stalls rescheduled), ``service`` (the
threads that tie them), ``api`` (REST), ``cli`` (``floodgate admission ...``),
``config``, ``metrics``.

May import: pipeline.config, pipeline.errors, pipeline.failpoints, pipeline.names,
pipeline.metrics, pipeline.logs, pipeline.security, pipeline.state, pipeline.http,
pipeline.kafka, pipeline.serde and pipeline.cli.conventions (what every command line
shares); never pipeline.spark, nor the sweeper.
"""

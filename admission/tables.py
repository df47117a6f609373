"""The job queue's schema: its six tables, and the columns a database made by an
older Floodgate is given when the store opens it.

* ``floodgate_jobs``: the jobs, a row per job (:class:`~admission.store.Job`), taken in
  Submitted order through the index ``(state, submitted, id)``;
* ``floodgate_requests``: the requests made of parts (their parts are jobs with the
  request's id), with their completion step;
* ``floodgate_stalls``: the stall array (:class:`~admission.store.Stall`);
* ``floodgate_lanes``: the lanes an operator or a hard stall disabled or enabled;
* ``floodgate_flags``: service-wide state that outlives a restart (a suspension);
* ``floodgate_intake_signatures``: the Kafka intake's run-once record.

Times are epoch seconds. :class:`~admission.store.JobStore` reads and writes them.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    true,
)

metadata = MetaData()

jobs = Table(
    "floodgate_jobs",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("argv", JSON, nullable=False),
    Column("cwd", String, nullable=True),
    Column("env", JSON, nullable=False),
    Column("queueable", Boolean, nullable=False),
    Column("expected_s", Float, nullable=True),
    Column("abnormal_exit", Boolean, nullable=False),
    Column("lane", String, nullable=False),
    Column("state", String, nullable=False),
    Column("submitted", Float, nullable=False),
    Column("started", Float, nullable=True),
    Column("finished", Float, nullable=True),
    Column("exit_code", Integer, nullable=True),
    Column("pid", Integer, nullable=True),
    Column("start_reason", String, nullable=True),
    Column("log_path", String, nullable=True),
    Column("note", String, nullable=True),
    Column("request_id", Integer, nullable=True, index=True),
    Column("role", String, nullable=True),
    Column("client_key", String, nullable=True),
    # Enqueued by an instance that is not the leader but to be started at once (not
    # queueable, or start-now): the leader starts these first, whatever the load.
    Column("asap", Boolean, nullable=False, default=False),
    Column("started_by", String, nullable=True),
    # The process's identity, to tell it from a process that reused its pid after a
    # restart (admission.runner): start time (seconds since boot), command line.
    Column("pid_created", Float, nullable=True),
    Column("pid_cmdline", JSON, nullable=True),
    Index("floodgate_jobs_queue", "state", "submitted", "id"),
)
# Partial: only the few asap jobs are in it, in the order the leader takes them.
Index(
    "floodgate_jobs_asap",
    jobs.c.state,
    jobs.c.submitted,
    jobs.c.id,
    sqlite_where=jobs.c.asap == true(),
    postgresql_where=jobs.c.asap == true(),
)

requests = Table(
    "floodgate_requests",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("completion", JSON, nullable=True),
    Column("state", String, nullable=False),
    Column("reason", String, nullable=True),
    Column("created", Float, nullable=False),
)

stalls = Table(
    "floodgate_stalls",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("job_id", Integer, nullable=False, index=True),
    Column("request_id", Integer, nullable=True),
    Column("kind", String, nullable=False),
    Column("reason", String, nullable=False),
    Column("created", Float, nullable=False),
)

lanes = Table(
    "floodgate_lanes",
    metadata,
    Column("name", String, primary_key=True),
    Column("enabled", Boolean, nullable=False),
    Column("reason", String, nullable=True),
    Column("changed", Float, nullable=False),
)

flags = Table(
    "floodgate_flags",
    metadata,
    Column("name", String, primary_key=True),
    Column("value", Boolean, nullable=False),
    Column("reason", String, nullable=True),
    Column("changed", Float, nullable=False),
)

#: The Kafka intake's run-once record: each signature it took (:mod:`admission.signing`;
#: the primary key, so of two instances reading the same request one records it), where
#: it was first read (``topic/partition/offset``), the job it created or the reason it
#: was refused, kept until no clock within ``intake_max_age_s`` accepts it any more
#: (``expires``, epoch seconds).
signatures = Table(
    "floodgate_intake_signatures",
    metadata,
    Column("signature", String, primary_key=True),
    Column("taken_from", String, nullable=False),
    Column("expires", Float, nullable=False, index=True),
    Column("job_id", Integer, nullable=True),
    Column("refused", String, nullable=True),
)

#: Columns added to a table after its first release: added to a database made before
#: them when the store opens it (all nullable; :func:`~pipeline.state.database.add_columns`).
ADDED_COLUMNS: dict[Table, tuple[str, ...]] = {
    jobs: ("pid_created", "pid_cmdline"),
    signatures: ("job_id", "refused"),
}

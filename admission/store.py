"""The persistent job queue: jobs, stall entries and lanes in SQL (SQLAlchemy Core).

The job queue is a table, so a restart keeps enqueued jobs enqueued. SQLite by
default (a file), any SQLAlchemy URL otherwise. Enqueued jobs are taken in Submitted
order through the index ``(state, submitted, id)``: taking the next ``n`` costs O(n),
not O(queue).

A SQLite file holds jobs' environments and command lines: it is created with mode
0600 in a folder created 0700 (SQLite gives its ``-wal`` and ``-shm`` files the
database's mode), and an existing one is set to 0600. Service-wide state
that must outlive a restart (a suspension) is a row of ``floodgate_flags``. The
tables, and the columns a database made by an older Floodgate is given when it is
opened: :mod:`admission.tables`.
"""

from __future__ import annotations

import contextlib
import enum
import json
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, func, insert, select, true, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError

from admission.errors import IntakeSignatureTaken
from admission.tables import (
    ADDED_COLUMNS,
    flags,
    jobs,
    lanes,
    metadata,
    requests,
    signatures,
    stalls,
)
from pipeline.state.database import add_columns, create_database_engine, create_tables


class JobState(enum.StrEnum):
    """States of a job (docs/architecture.md, "The admission service")."""

    ENQUEUED = "ENQUEUED"
    RUNNING = "RUNNING"
    FINISHED_OK = "FINISHED_OK"
    ERROR = "ERROR"
    ABORTED = "ABORTED"
    UNKNOWN = "UNKNOWN"


#: States a job does not leave.
FINAL_STATES = frozenset({JobState.FINISHED_OK, JobState.ERROR, JobState.ABORTED, JobState.UNKNOWN})


class StallKind(enum.StrEnum):
    """Kinds of stall array entries: a hard stall (a job died abnormally, or a request's
    completion step could not be scheduled), a job running past its expected time, a part
    of a backed-out request that may already have been running (in doubt; cleared by the
    monitor once it ended)."""

    HARD = "hard"
    LONG_RUNNING = "long-running"
    IN_DOUBT = "in-doubt"


class RequestState(enum.StrEnum):
    """States of a request made of parts."""

    SCHEDULED = "SCHEDULED"  # every part scheduled; waiting for them to end
    BACKED_OUT = "BACKED_OUT"  # a part failed to schedule; the others were backed out
    COMPLETED = "COMPLETED"  # every part ended OK and the completion step was scheduled
    FAILED = "FAILED"  # a part did not end OK: no completion step
    STALLED = "STALLED"  # the completion step could not be scheduled (a hard stall)


@dataclass(frozen=True)
class IntakeSignature:
    """A signed request the Kafka intake is about to take.

    Attributes:
        signature: the request's signature (hex HMAC-SHA256, :func:`admission.signing.verify`).
        taken_from: where it is read, ``topic/partition/offset``.
        expires: when the record may be forgotten, epoch seconds: past the last time
            the intake's age check could accept it.
    """

    signature: str
    taken_from: str
    expires: float


@dataclass(frozen=True)
class TakenSignature:
    """What the intake recorded when it first read a signed request.

    Attributes:
        taken_from: where it was first read, ``topic/partition/offset``.
        job_id: the job it created, or ``None``.
        refused: the ``floodgate.reason`` it was dead-lettered with, or ``None``.
    """

    taken_from: str
    job_id: int | None
    refused: str | None


@dataclass(frozen=True)
class Job:
    """One job as stored. Times are epoch seconds; ``exit_code`` is negative for a
    signal (``-9``: killed)."""

    id: int
    argv: list[str]
    cwd: str | None
    env: dict[str, str]
    queueable: bool
    expected_s: float | None
    abnormal_exit: bool
    lane: str
    state: JobState
    submitted: float
    started: float | None = None
    finished: float | None = None
    exit_code: int | None = None
    pid: int | None = None
    start_reason: str | None = None
    log_path: str | None = None
    note: str | None = None
    request_id: int | None = None
    role: str | None = None
    client_key: str | None = None
    asap: bool = False
    started_by: str | None = None
    pid_created: float | None = None
    pid_cmdline: list[str] | None = None

    def as_json(self) -> dict[str, Any]:
        """The job as the API shows it (the environment's values are not shown, nor the
        process's identity)."""
        hidden = {"pid_created", "pid_cmdline"}
        out = {k: getattr(self, k) for k in self.__dataclass_fields__ if k not in hidden}
        out["env"] = sorted(self.env)
        out["state"] = self.state.value
        return out


@dataclass(frozen=True)
class Stall:
    """One stall array entry."""

    id: int
    job_id: int
    kind: StallKind
    reason: str
    created: float
    request_id: int | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "job_id": self.job_id,
            "request_id": self.request_id,
            "kind": self.kind.value,
            "reason": self.reason,
            "created": self.created,
        }


def _job(row: Any) -> Job:
    data = dict(row._mapping)
    data["state"] = JobState(data["state"])
    data["argv"] = list(data["argv"])
    data["env"] = dict(data["env"] or {})
    return Job(**data)


class JobStore:
    """Jobs, stall entries and lanes in one database.

    Args:
        url: SQLAlchemy URL; a ``sqlite:///`` file's folder is created.

    Every method is one short transaction; writes from the service's threads are
    serialised by a lock (SQLite takes one writer at a time anyway).
    """

    def __init__(self, url: str) -> None:
        self.engine: Engine = create_database_engine(url, json_serializer=json.dumps)
        create_tables(metadata, self.engine)
        add_columns(self.engine, ADDED_COLUMNS)
        self._lock = threading.Lock()

    # -- jobs ------------------------------------------------------------------

    def add(self, *, signature: IntakeSignature | None = None, **values: Any) -> Job:
        """Insert a job (``argv``, ``cwd``, ``env``, ``queueable``, ``expected_s``,
        ``abnormal_exit``, ``lane``, ``state``, ``submitted`` ...) and return it.

        Args:
            signature: the signed request of the Kafka intake the job comes from: recorded
                with the job's id in the job's transaction, so the job exists exactly
                when its signature is recorded.

        Raises:
            IntakeSignatureTaken: ``signature`` was recorded already (another instance,
                or another delivery, took it first); no job was stored.
        """
        try:
            with self._lock, self.engine.begin() as conn:
                result = conn.execute(insert(jobs).values(**values))
                key = result.inserted_primary_key
                assert key is not None
                if signature is not None:
                    conn.execute(_record(signature, job_id=int(key[0])))
                row = conn.execute(select(jobs).where(jobs.c.id == key[0])).one()
        except IntegrityError as exc:
            if signature is None:
                raise
            raise IntakeSignatureTaken(
                f"the signed request read from {signature.taken_from} was taken already"
            ) from exc
        return _job(row)

    def get(self, job_id: int) -> Job | None:
        """The job, or ``None``."""
        with self.engine.connect() as conn:
            row = conn.execute(select(jobs).where(jobs.c.id == job_id)).first()
        return None if row is None else _job(row)

    def recent(self, *, state: JobState | None = None, limit: int = 100) -> list[Job]:
        """Jobs, newest first."""
        query = select(jobs).order_by(jobs.c.id.desc()).limit(limit)
        if state is not None:
            query = query.where(jobs.c.state == state.value)
        with self.engine.connect() as conn:
            return [_job(r) for r in conn.execute(query)]

    def next_enqueued(self, n: int, *, skip_lanes: Iterable[str] = ()) -> list[Job]:
        """The ``n`` oldest enqueued jobs (Submitted order), outside ``skip_lanes``."""
        if n <= 0:
            return []
        query = (
            select(jobs)
            .where(jobs.c.state == JobState.ENQUEUED.value)
            .order_by(jobs.c.submitted, jobs.c.id)
            .limit(n)
        )
        skip = list(skip_lanes)
        if skip:
            query = query.where(jobs.c.lane.not_in(skip))
        with self.engine.connect() as conn:
            return [_job(r) for r in conn.execute(query)]

    def next_asap(self, n: int) -> list[Job]:
        """Up to ``n`` enqueued jobs marked to start at once (Submitted order): not
        queueable, or forced with start-now, on an instance that is not the leader."""
        query = (
            select(jobs)
            .where(jobs.c.asap == true(), jobs.c.state == JobState.ENQUEUED.value)
            .order_by(jobs.c.state, jobs.c.submitted, jobs.c.id)
            .limit(n)
            # SQLite (no statistics) would rather walk the whole queue's index.
            .with_hint(jobs, "INDEXED BY floodgate_jobs_asap", "sqlite")
        )
        with self.engine.connect() as conn:
            return [_job(r) for r in conn.execute(query)]

    def claim(self, job_id: int, *, now: float, how: str, instance: str) -> bool:
        """Move an enqueued job to RUNNING before its process starts: a compare-and-set,
        so of two instances that both believe they lead, one starts it, never both.

        Returns:
            Whether this caller claimed it (``False``: it had left ENQUEUED).
        """
        return self.update(
            job_id,
            expect=[JobState.ENQUEUED],
            state=JobState.RUNNING.value,
            started=now,
            start_reason=how,
            started_by=instance,
            asap=False,
        )

    def count_enqueued(self) -> int:
        """How many jobs are enqueued (an index range count)."""
        with self.engine.connect() as conn:
            query = select(func.count()).where(jobs.c.state == JobState.ENQUEUED.value)
            return int(conn.execute(query).scalar_one())

    def in_state(self, state: JobState) -> list[Job]:
        """Every job in ``state``."""
        with self.engine.connect() as conn:
            return [_job(r) for r in conn.execute(select(jobs).where(jobs.c.state == state.value))]

    def count_by_state(self) -> dict[JobState, int]:
        """How many jobs are in each state (every state listed)."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(jobs.c.state, func.count()).group_by(jobs.c.state))
            counts = {JobState(state): int(n) for state, n in rows}
        return {s: counts.get(s, 0) for s in JobState}

    def update(self, job_id: int, *, expect: Sequence[JobState] = (), **values: Any) -> bool:
        """Set ``values`` on a job, only if it is in one of ``expect`` (when given).

        Returns:
            Whether the job was updated (``False``: it had left those states).
        """
        query = update(jobs).where(jobs.c.id == job_id)
        if expect:
            query = query.where(jobs.c.state.in_([s.value for s in expect]))
        with self._lock, self.engine.begin() as conn:
            return conn.execute(query.values(**values)).rowcount == 1

    def of_request(self, request_id: int) -> list[Job]:
        """The jobs of a request, in the order they were scheduled."""
        with self.engine.connect() as conn:
            return [
                _job(r)
                for r in conn.execute(
                    select(jobs).where(jobs.c.request_id == request_id).order_by(jobs.c.id)
                )
            ]

    # -- requests --------------------------------------------------------------

    def add_request(self, completion: dict[str, Any] | None, now: float) -> int:
        """A new request (its parts are added as jobs with its id); its id."""
        with self._lock, self.engine.begin() as conn:
            key = conn.execute(
                insert(requests).values(
                    completion=completion, state=RequestState.SCHEDULED.value, created=now
                )
            ).inserted_primary_key
            assert key is not None
        return int(key[0])

    def request(self, request_id: int) -> dict[str, Any] | None:
        """A request's row (``id``, ``completion``, ``state``, ``reason``, ``created``)."""
        with self.engine.connect() as conn:
            row = conn.execute(select(requests).where(requests.c.id == request_id)).first()
        return None if row is None else dict(row._mapping)

    def set_request(
        self,
        request_id: int,
        state: RequestState,
        reason: str | None = None,
        *,
        expect: Sequence[RequestState] = (),
    ) -> bool:
        """Move a request to ``state`` (only from ``expect``, when given)."""
        query = update(requests).where(requests.c.id == request_id)
        if expect:
            query = query.where(requests.c.state.in_([s.value for s in expect]))
        with self._lock, self.engine.begin() as conn:
            return conn.execute(query.values(state=state.value, reason=reason)).rowcount == 1

    # -- stalls ----------------------------------------------------------------

    def add_stall(
        self,
        job_id: int,
        kind: StallKind,
        reason: str,
        now: float,
        *,
        request_id: int | None = None,
    ) -> Stall:
        """Record a stall array entry (``request_id``: the stalled request, for a
        completion step that could not be scheduled)."""
        with self._lock, self.engine.begin() as conn:
            key = conn.execute(
                insert(stalls).values(
                    job_id=job_id,
                    request_id=request_id,
                    kind=kind.value,
                    reason=reason,
                    created=now,
                )
            ).inserted_primary_key
            assert key is not None
        return Stall(int(key[0]), job_id, kind, reason, now, request_id)

    def stall(self, stall_id: int) -> Stall | None:
        """One entry, or ``None``."""
        with self.engine.connect() as conn:
            row = conn.execute(select(stalls).where(stalls.c.id == stall_id)).first()
        return None if row is None else _stall(row)

    def stalls(self, *, kind: StallKind | None = None) -> list[Stall]:
        """The stall array, oldest first."""
        query = select(stalls).order_by(stalls.c.id)
        if kind is not None:
            query = query.where(stalls.c.kind == kind.value)
        with self.engine.connect() as conn:
            return [_stall(r) for r in conn.execute(query)]

    def delete_stalls(self, *, job_id: int, kind: StallKind) -> int:
        """Clear a job's entries of one kind; how many were cleared."""
        with self._lock, self.engine.begin() as conn:
            return int(
                conn.execute(
                    delete(stalls).where(stalls.c.job_id == job_id, stalls.c.kind == kind.value)
                ).rowcount
            )

    def delete_stall(self, stall_id: int) -> Stall | None:
        """Remove one entry; the entry, or ``None`` if there was none."""
        with self._lock, self.engine.begin() as conn:
            row = conn.execute(select(stalls).where(stalls.c.id == stall_id)).first()
            if row is None:
                return None
            conn.execute(delete(stalls).where(stalls.c.id == stall_id))
        return _stall(row)

    # -- flags -----------------------------------------------------------------

    def set_flag(self, name: str, value: bool, *, reason: str | None, now: float) -> None:
        """Set a service-wide flag (``suspended``) that outlives a restart."""
        with self._lock, self.engine.begin() as conn:
            exists = conn.execute(select(flags.c.name).where(flags.c.name == name)).first()
            values = {"value": value, "reason": reason, "changed": now}
            if exists:
                conn.execute(update(flags).where(flags.c.name == name).values(**values))
            else:
                conn.execute(insert(flags).values(name=name, **values))

    def flag(self, name: str) -> bool:
        """A service-wide flag; ``False`` when it was never set."""
        with self.engine.connect() as conn:
            value = conn.execute(select(flags.c.value).where(flags.c.name == name)).scalar()
        return bool(value)

    # -- lanes -----------------------------------------------------------------

    def set_lane(self, name: str, *, enabled: bool, reason: str | None, now: float) -> None:
        """Enable or disable a lane."""
        with self._lock, self.engine.begin() as conn:
            exists = conn.execute(select(lanes.c.name).where(lanes.c.name == name)).first()
            values = {"enabled": enabled, "reason": reason, "changed": now}
            if exists:
                conn.execute(update(lanes).where(lanes.c.name == name).values(**values))
            else:
                conn.execute(insert(lanes).values(name=name, **values))

    def disabled_lanes(self) -> dict[str, str]:
        """``{lane: why it was disabled}``."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(lanes.c.name, lanes.c.reason).where(~lanes.c.enabled))
            return {name: reason or "" for name, reason in rows}

    # -- intake signatures -----------------------------------------------------

    def taken_signature(self, signature: str, *, now: float) -> TakenSignature | None:
        """What was recorded when the request signed ``signature`` was first read, or
        ``None``; records past their ``expires`` (epoch seconds, against ``now``) are
        forgotten first."""
        with self._lock, self.engine.begin() as conn:
            conn.execute(delete(signatures).where(signatures.c.expires < now))
            row = conn.execute(
                select(signatures.c.taken_from, signatures.c.job_id, signatures.c.refused).where(
                    signatures.c.signature == signature
                )
            ).first()
        return None if row is None else TakenSignature(row.taken_from, row.job_id, row.refused)

    def refuse_signature(self, signature: IntakeSignature, reason: str) -> None:
        """Record that the signed request was refused (``reason``: its
        ``floodgate.reason``), so it is not tried again when read again. A record
        already there is kept (whoever recorded it first decided)."""
        with contextlib.suppress(IntegrityError), self._lock, self.engine.begin() as conn:
            conn.execute(_record(signature, refused=reason))


def _record(
    signature: IntakeSignature, *, job_id: int | None = None, refused: str | None = None
) -> Any:
    return insert(signatures).values(
        signature=signature.signature,
        taken_from=signature.taken_from,
        expires=signature.expires,
        job_id=job_id,
        refused=refused,
    )


def _stall(row: Any) -> Stall:
    return Stall(row.id, row.job_id, StallKind(row.kind), row.reason, row.created, row.request_id)

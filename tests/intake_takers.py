"""The Kafka intake's request taker on a real admission service, without Kafka: what
the run-once tests of the intake share (tests/unit/admission/test_intake_once.py on
SQLite, tests/integration/admission/test_replay.py on PostgreSQL).

The service is never started: it leads nothing, so a job it takes is stored ENQUEUED
and no process runs.
"""

from __future__ import annotations

import secrets
import threading
from pathlib import Path

from admission.algorithm import Load
from admission.config import AdmissionSettings
from admission.intake import IntakeRecord, Redelivered, Refused, RequestTaker
from admission.service import AdmissionService
from admission.signing import sign
from admission.store import Job
from pipeline.serde.codec import StreamCodec
from pipeline.serde.schemas import SchemaRepository

KEY = secrets.token_hex(16)
TOKEN = secrets.token_hex(16)
TOPIC = "floodgate.admission.requests"
#: ``admission.intake_max_age_s`` of these tests, seconds.
MAX_AGE_S = 60.0


def intake_service(
    tmp_path: Path, *, database_url: str | None = None, max_queue_size: int = 100_000
) -> AdmissionService:
    """An admission service with the intake on (key :data:`KEY`, ``true`` allowed), on
    ``database_url`` (default: a SQLite file in ``tmp_path``)."""
    settings = AdmissionSettings(
        token=TOKEN,
        intake=True,
        intake_key=KEY,
        intake_max_age_s=MAX_AGE_S,
        allowlist=["true"],
        database_url=database_url or f"sqlite:///{tmp_path / 'jobs.db'}",
        log_dir=str(tmp_path / "logs"),
        max_queue_size=max_queue_size,
    )
    return AdmissionService(settings, sampler=lambda: Load(cpu=0.0, memory=0.0))


def job_request_codec() -> StreamCodec:
    schemas = SchemaRepository.load()
    return StreamCodec("job_request", schemas.get("job_request"), schemas)


def signed(codec: StreamCodec, offset: int, *, key: bytes, signed_at_ms: int) -> IntakeRecord:
    """A ``job_request`` record of ``true`` at ``offset`` of :data:`TOPIC`, signed with
    :data:`KEY` at ``signed_at_ms``."""
    value = codec.encode({"argv": ["true"]})
    headers = sign(KEY, topic=TOPIC, key=key, value=value, signed_at_ms=signed_at_ms)
    return IntakeRecord(TOPIC, 0, offset, key, value, list(headers))


def at_once(takers: list[RequestTaker], record: IntakeRecord) -> list[Job | Refused | Redelivered]:
    """What each taker, in a thread of its own, makes of ``record``, all let go at once."""
    barrier = threading.Barrier(len(takers))
    outcomes: list[Job | Refused | Redelivered] = []

    def take(taker: RequestTaker) -> None:
        barrier.wait()
        outcomes.append(taker.take(record))

    threads = [threading.Thread(target=take, args=(t,)) for t in takers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


def assert_one_job_each(takers: list[RequestTaker], offsets: list[int]) -> None:
    """Each taker (each on a service of its own, all on one database) takes the record
    at each of ``offsets`` at the same moment: one of them makes its job, every other
    one gets that job back (:class:`Redelivered`, not run), and the database holds one
    job per record."""
    codec = takers[0].codec
    now_ms = int(takers[0].clock() * 1000)
    records = [
        signed(codec, offset, key=f"both-{offset}-{now_ms}".encode(), signed_at_ms=now_ms)
        for offset in offsets
    ]
    for record in records:
        outcomes = at_once(takers, record)
        [job] = [o for o in outcomes if isinstance(o, Job)]
        others = [o for o in outcomes if not isinstance(o, Job)]
        assert others == [Redelivered(job.id)] * (len(takers) - 1), others
    ours = {r.key.decode() for r in records if r.key is not None}
    stored = [j.client_key for j in takers[0].service.store.recent(limit=100_000)]
    assert sorted(k for k in stored if k in ours) == sorted(ours)

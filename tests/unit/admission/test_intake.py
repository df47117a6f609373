"""The request intake takes each request alone and refuses what REST refuses.

A real :class:`~admission.service.AdmissionService` on SQLite (never started: it
leads nothing, so a job it takes is stored ENQUEUED and no process runs) behind the
intake's :class:`~admission.intake.RequestTaker`, and a second one behind the REST
API (FastAPI's test client): hypothesis writes job requests, malformed ones among
them, signed and unsigned, to both. Every request gets an outcome (nothing skipped,
nothing raised); the intake stores a job exactly when REST answers 201, and
refuses it with the reason that matches REST's status otherwise.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from admission.algorithm import Load
from admission.api import build_app
from admission.config import AdmissionSettings
from admission.intake import IntakeRecord, Redelivered, Refused, RequestTaker
from admission.jobs import JobRequest
from admission.service import AdmissionService
from admission.signing import sign
from admission.store import Job
from pipeline.serde.codec import StreamCodec
from pipeline.serde.schemas import SchemaRepository

KEY = "k" * 40
TOKEN = "unit-test-token"
TOPIC = "floodgate.admission.requests"
#: The REST status each intake refusal stands for.
STATUS = {"bad-request": 422, "not-allowed": 403}


def service(tmp_path: Path, name: str) -> AdmissionService:
    settings = AdmissionSettings(
        token=TOKEN,
        intake=True,
        intake_key=KEY,
        allowlist=["true", "false"],
        job_env_allowlist=["MARK", "APP_*"],
        database_url=f"sqlite:///{tmp_path / name}.db",
        log_dir=str(tmp_path / f"{name}-logs"),
    )
    return AdmissionService(settings, sampler=lambda: Load(cpu=0.0, memory=0.0))


@pytest.fixture(scope="module")
def sides(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RequestTaker, TestClient]]:
    tmp = tmp_path_factory.mktemp("intake")
    schemas = SchemaRepository.load()
    codec = StreamCodec("job_request", schemas.get("job_request"), schemas)
    taker = RequestTaker(service(tmp, "intake"), codec)
    with TestClient(build_app(service(tmp, "rest"))) as client:
        yield taker, client


_offsets = iter(range(10**9))
_last_signed_ms = 0


def record(value: bytes, *, key: bytes | None = None, secret: str | None = KEY) -> IntakeRecord:
    """A record of the request topic at a new offset, signed with ``secret`` at a
    millisecond of its own: two identical requests signed in the same millisecond have
    one signature, and the intake takes a signature once (the second is "replayed"), so
    a requester signs each request at a new time (found by the property test below)."""
    global _last_signed_ms
    headers: list[tuple[str, bytes | str | None]] = []
    if secret is not None:
        now = _last_signed_ms = max(int(time.time() * 1000), _last_signed_ms + 1)
        headers = list(sign(secret, topic=TOPIC, key=key, value=value, signed_at_ms=now))
    return IntakeRecord(TOPIC, 0, next(_offsets), key, value, headers)


text = st.text(st.characters(codec="utf-8"), max_size=12)
names = st.sampled_from(
    ["MARK", "APP_MODE", "OTHER", "", "A=B", "LD_PRELOAD", "TMPDIR", "KRB5_CONFIG", "X\0"]
)
requests = st.fixed_dictionaries(
    {
        "argv": st.lists(
            st.one_of(st.sampled_from(["true", "false", "/usr/bin/touch", "tr\0ue", ""]), text),
            max_size=3,
        ),
        "cwd": st.one_of(st.none(), st.sampled_from(["/", "/tmp\0"])),
        "env": st.dictionaries(names, st.sampled_from(["1", "x\0y", ""]), max_size=2),
        "queueable": st.booleans(),
        "expected_s": st.one_of(
            st.none(), st.floats(allow_nan=False, allow_infinity=False, width=64)
        ),
        "abnormal_exit": st.booleans(),
        "lane": st.one_of(st.just("default"), text, st.text(min_size=201, max_size=205)),
    }
)


def rest_status(client: TestClient, fields: dict[str, Any]) -> int:
    response = client.post("/jobs", json=fields, headers={"Authorization": f"Bearer {TOKEN}"})
    return response.status_code


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=st.lists(requests, min_size=1, max_size=6))
def test_property_every_request_of_a_batch_is_taken_or_refused_as_rest_answers_it(
    sides: tuple[RequestTaker, TestClient], batch: list[dict[str, Any]]
) -> None:
    taker, client = sides
    outcomes = [taker.take(record(taker.codec.encode(fields))) for fields in batch]
    assert len(outcomes) == len(batch)  # one outcome each: none skipped, none raised
    for fields, outcome in zip(batch, outcomes, strict=True):
        status = rest_status(client, fields)
        if isinstance(outcome, Job):
            assert status == 201, (fields, status)
            stored = taker.service.store.get(outcome.id)
            assert stored is not None and stored.argv == fields["argv"]
            JobRequest.model_validate(fields)  # what is stored is what REST takes
        else:
            assert isinstance(outcome, Refused)
            assert STATUS.get(outcome.reason) == status, (fields, outcome, status)


@given(
    expected_s=st.sampled_from([math.nan, math.inf, -math.inf, -1.0, 0.0]),
    lane=st.sampled_from(["", "default"]),
)
@settings(max_examples=20, deadline=None)
def test_property_what_json_cannot_carry_is_refused_as_a_bad_request(
    sides: tuple[RequestTaker, TestClient], expected_s: float, lane: str
) -> None:
    taker, _ = sides
    fields = {"argv": ["true"], "expected_s": expected_s, "lane": lane}
    outcome = taker.take(record(taker.codec.encode(fields)))
    assert isinstance(outcome, Refused) and outcome.reason == "bad-request", outcome
    assert "expected_s" in outcome.error or "lane" in outcome.error


def test_unsigned_wrongly_signed_stale_and_replayed_requests_are_refused(
    sides: tuple[RequestTaker, TestClient],
) -> None:
    taker, _ = sides
    value = taker.codec.encode({"argv": ["true"]})
    before = len(taker.service.store.recent(limit=10_000))

    unsigned = taker.take(record(value, secret=None))
    wrong_key = taker.take(record(value, secret="x" * 40))
    good = record(value, key=b"k1")
    other_key = IntakeRecord(TOPIC, 0, next(_offsets), b"k2", value, good.headers)
    stale_headers = sign(KEY, topic=TOPIC, key=None, value=value, signed_at_ms=1_000)
    stale = taker.take(IntakeRecord(TOPIC, 0, next(_offsets), None, value, list(stale_headers)))
    assert isinstance(unsigned, Refused) and unsigned.reason == "not-authenticated"
    assert "not signed" in unsigned.error
    assert isinstance(wrong_key, Refused) and wrong_key.reason == "not-authenticated"
    assert isinstance(stale, Refused) and "admission.intake_max_age_s" in stale.error
    # The signature binds the key (the job's client_key): moved to another key, refused.
    moved = taker.take(other_key)
    assert isinstance(moved, Refused) and moved.reason == "not-authenticated"

    taken = taker.take(good)
    assert isinstance(taken, Job) and taken.client_key == "k1"
    # The same record read again (a crash before the commit, a rewound group): not run.
    assert taker.take(good) == Redelivered(taken.id)
    replay = IntakeRecord(TOPIC, 0, next(_offsets), good.key, good.value, good.headers)
    replayed = taker.take(replay)
    assert isinstance(replayed, Refused) and replayed.reason == "replayed"
    assert good.where in replayed.error
    assert len(taker.service.store.recent(limit=10_000)) == before + 1

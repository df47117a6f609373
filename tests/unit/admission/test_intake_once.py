"""The intake runs a signed request at most once, at whatever offset and time it is read.

Real :class:`~admission.service.AdmissionService` instances on SQLite (never started:
a job taken is stored ENQUEUED and no process runs) behind the intake's
:class:`~admission.intake.RequestTaker`, with a clock of the test's. Hypothesis reads
a few signed requests again and again: at the offset each was written at (a crash
before the offset commit, a rewound consumer group) and as copies at new offsets (a
replay), with the clock moving on past the signatures' age limit and the run-once
record's expiry. An oracle says what each reading must give.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from admission.intake import IntakeRecord, Redelivered, Refused, RequestTaker
from admission.service import AdmissionService
from admission.store import Job
from pipeline.serde.codec import StreamCodec
from tests.intake_takers import (
    MAX_AGE_S,
    TOPIC,
    assert_one_job_each,
    intake_service,
    job_request_codec,
    signed,
)


@dataclass
class Clock:
    """The intake's clock, epoch seconds, moved by the test."""

    now: float

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def codec() -> StreamCodec:
    return job_request_codec()


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdmissionService]:
    yield intake_service(tmp_path_factory.mktemp("once"))


#: Each example starts at a time of its own, so no two share a signature.
_starts = itertools.count(1_900_000_000, 100_000)
_offsets = itertools.count(1)

#: Per reading: which of the requests, at its own offset (else a copy at a new one),
#: and how many milliseconds the clock moves on before it.
readings = st.lists(
    st.tuples(
        st.integers(0, 2),
        st.booleans(),
        st.integers(0, int(2.6 * MAX_AGE_S * 1000)),
    ),
    min_size=1,
    max_size=14,
)
#: When each of the three requests was signed, ms from the example's start.
signed_at = st.lists(
    st.integers(int(-1.3 * MAX_AGE_S * 1000), int(1.3 * MAX_AGE_S * 1000)),
    min_size=3,
    max_size=3,
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(signed_at=signed_at, readings=readings)
def test_property_a_signed_request_runs_once_at_any_offset_and_any_time(
    shared: AdmissionService,
    codec: StreamCodec,
    signed_at: list[int],
    readings: list[tuple[int, bool, int]],
) -> None:
    """Oracle: a reading the age check refuses (``signed-at`` further than
    ``intake_max_age_s`` from the clock, :func:`admission.signing.verify`) is
    ``not-authenticated``; the first one it accepts makes the job; every later one is
    that job again (:class:`Redelivered`, not run) at the request's own offset and
    ``replayed`` at another, however long the clock ran meanwhile."""
    start_ms = next(_starts) * 1000
    clock = Clock(start_ms / 1000)
    taker = RequestTaker(shared, codec, clock=clock)
    keys = [f"{start_ms}-{i}".encode() for i in range(3)]
    originals = [
        signed(codec, next(_offsets), key=key, signed_at_ms=start_ms + at)
        for key, at in zip(keys, signed_at, strict=True)
    ]
    jobs: dict[int, Job] = {}
    taken_from: dict[int, str] = {}
    elapsed_ms = 0
    for which, own_offset, wait_ms in readings:
        elapsed_ms += wait_ms
        clock.now = (start_ms + elapsed_ms) / 1000
        original = originals[which]
        record = (
            original
            if own_offset
            else IntakeRecord(
                TOPIC, 0, next(_offsets), original.key, original.value, original.headers
            )
        )
        outcome = taker.take(record)

        now_ms = int(clock.now * 1000)  # as the taker measures the signature's age
        if abs(now_ms - (start_ms + signed_at[which])) > MAX_AGE_S * 1000:
            assert isinstance(outcome, Refused) and outcome.reason == "not-authenticated"
        elif which not in jobs:
            assert isinstance(outcome, Job) and outcome.client_key == keys[which].decode()
            jobs[which], taken_from[which] = outcome, record.where
        elif record.where == taken_from[which]:
            assert outcome == Redelivered(jobs[which].id)
        else:
            assert isinstance(outcome, Refused) and outcome.reason == "replayed", outcome
            assert taken_from[which] in outcome.error

    ours = {key.decode() for key in keys}
    made = [j.id for j in shared.store.recent(limit=100_000) if j.client_key in ours]
    assert sorted(made) == sorted(j.id for j in jobs.values())


def test_past_its_expiry_the_record_is_forgotten_and_the_age_check_refuses_the_request(
    shared: AdmissionService, codec: StreamCodec
) -> None:
    """The run-once record is deleted once no clock within ``intake_max_age_s`` accepts
    the signature: a rewound consumer group that reads the request then gets
    ``not-authenticated``, not a second job."""
    start = float(next(_starts))
    clock = Clock(start)
    taker = RequestTaker(shared, codec, clock=clock)
    # Signed as far ahead of the clock as the age check allows: accepted the longest.
    record = signed(
        codec, next(_offsets), key=b"expiry", signed_at_ms=int(start + MAX_AGE_S) * 1000
    )
    job = taker.take(record)
    assert isinstance(job, Job)
    signature = dict(record.headers)["floodgate.signature"]
    assert isinstance(signature, bytes)

    clock.now = start + 2 * MAX_AGE_S  # the last time the age check accepts it
    assert taker.take(record) == Redelivered(job.id)
    clock.now = start + 2 * MAX_AGE_S + 2.0
    late = taker.take(record)
    assert isinstance(late, Refused) and late.reason == "not-authenticated", late
    assert shared.store.taken_signature(signature.decode()[3:], now=clock.now) is None
    assert [j.id for j in shared.store.recent(limit=100_000) if j.client_key == "expiry"] == [
        job.id
    ]


def test_a_refused_request_read_again_is_refused_again_and_never_run(
    tmp_path: Path, codec: StreamCodec
) -> None:
    """A request refused for a full queue, read again at its offset once the queue has
    room (a crash before the offset commit, a rewound group), is dead-lettered again
    with the same reason: its requester was told it did not run, and may have sent it
    anew. At 3d81ac5 it ran then."""
    full = intake_service(tmp_path, max_queue_size=1)
    taker = RequestTaker(full, codec)
    now_ms = int(taker.clock() * 1000)
    first = taker.take(signed(codec, next(_offsets), key=b"first", signed_at_ms=now_ms))
    assert isinstance(first, Job)
    record = signed(codec, next(_offsets), key=b"second", signed_at_ms=now_ms)
    refused = taker.take(record)
    assert isinstance(refused, Refused) and refused.reason == "queue-full"
    full.cancel(first.id)

    again = taker.take(record)

    assert isinstance(again, Refused) and again.reason == "queue-full", again
    assert record.where in again.error
    assert [j.client_key for j in full.store.recent()] == ["first"]


def test_two_instances_reading_one_request_at_once_make_one_job(
    tmp_path: Path, codec: StreamCodec
) -> None:
    """Two instances of the service on one database (leader election: both read the
    intake while a rebalance moves the partition) take the same record at the same
    moment: the signature is the run-once table's primary key, so the database lets one
    record it, with its job, and the other reads that record. At 3d81ac5 both ran it."""
    takers = [RequestTaker(intake_service(tmp_path), codec) for _ in range(2)]
    assert_one_job_each(takers, [next(_offsets) for _ in range(20)])

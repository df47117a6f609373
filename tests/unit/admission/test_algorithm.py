"""Unit and property tests of the admission service's decision logic (the admission job
queue: start now, enqueue, load step, emergency mode; README, "The admission service")."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from admission.algorithm import (
    Admission,
    Decision,
    Limits,
    Load,
    ModeChange,
    StartReason,
    SubmitOutcome,
)

LOW = Load(cpu=0.50, memory=0.50)
HIGH_CPU = Load(cpu=0.93, memory=0.50)
HIGH_MEMORY = Load(cpu=0.50, memory=0.93)
HIGH_BOTH = Load(cpu=0.93, memory=0.93)


def admission(**overrides: Any) -> Admission:
    return Admission(Limits(**overrides))


# --- Limits ------------------------------------------------------------------------------------


def test_limits_defaults_are_cpu_085_memory_090_queue_100_000() -> None:
    limits = Limits()
    assert limits.system_cpu_limit == 0.85
    assert limits.memory_usage_limit == 0.90
    assert limits.max_queue_size == 100_000
    assert limits.min_load_step <= limits.initial_load_step <= limits.max_load_step


@pytest.mark.parametrize(
    ("overrides", "field_name", "value"),
    [
        ({"system_cpu_limit": 0.0}, "system_cpu_limit", "0.0"),
        ({"system_cpu_limit": 1.5}, "system_cpu_limit", "1.5"),
        ({"system_cpu_limit": float("nan")}, "system_cpu_limit", "nan"),
        ({"memory_usage_limit": -0.1}, "memory_usage_limit", "-0.1"),
        ({"memory_usage_limit": 1.01}, "memory_usage_limit", "1.01"),
        ({"min_load_step": 0, "initial_load_step": 0}, "min_load_step", "0"),
        ({"min_load_step": 3, "initial_load_step": 2}, "initial_load_step", "2"),
        ({"initial_load_step": 5, "max_load_step": 4}, "max_load_step", "4"),
        ({"emergency_start_count": -1}, "emergency_start_count", "-1"),
        ({"max_queue_size": -1}, "max_queue_size", "-1"),
    ],
)
def test_limits_validation_error_names_field_value_and_allowed(
    overrides: dict[str, Any], field_name: str, value: str
) -> None:
    with pytest.raises(ValueError, match=rf"Limits\.{field_name} is {value}; allowed: ") as info:
        Limits(**overrides)
    assert getattr(info.value, "key", None) == field_name


def test_limits_accept_edges() -> None:
    limits = Limits(
        system_cpu_limit=1.0,
        memory_usage_limit=1.0,
        initial_load_step=1,
        min_load_step=1,
        max_load_step=1,
        emergency_start_count=0,
        max_queue_size=0,
    )
    assert Admission(limits).load_step == 1


# --- observe: emergency mode ------------------------------------------------------------------


def test_admission_starts_at_initial_load_step_out_of_emergency() -> None:
    adm = admission(initial_load_step=3)
    assert adm.load_step == 3
    assert adm.emergency is False


def test_observe_enters_emergency_when_memory_above_limit() -> None:
    adm = admission()
    change = adm.observe(Load(cpu=0.1, memory=0.93, memory_source="jvm:driver"))
    assert change == ModeChange(
        entered=True, reason="memory 0.93 (jvm:driver) > memory_usage_limit 0.90"
    )
    assert adm.emergency is True


def test_observe_enters_emergency_even_when_cpu_low() -> None:
    adm = admission()
    adm.observe(Load(cpu=0.0, memory=0.95))
    assert adm.emergency is True


def test_observe_leaves_emergency_when_memory_below_limit() -> None:
    adm = admission()
    adm.observe(HIGH_MEMORY)
    change = adm.observe(Load(cpu=0.5, memory=0.85))
    assert change == ModeChange(
        entered=False, reason="memory 0.85 (host) < memory_usage_limit 0.90"
    )
    assert adm.emergency is False


def test_observe_at_exactly_memory_limit_keeps_either_mode() -> None:
    adm = admission()
    assert adm.observe(Load(cpu=0.5, memory=0.90)) is None
    assert adm.emergency is False
    adm.observe(HIGH_MEMORY)
    assert adm.observe(Load(cpu=0.5, memory=0.90)) is None
    assert adm.emergency is True


def test_observe_returns_none_when_mode_unchanged() -> None:
    adm = admission()
    assert adm.observe(LOW) is None
    assert adm.observe(HIGH_MEMORY) is not None
    assert adm.observe(HIGH_MEMORY) is None


def test_observe_reason_tells_apart_values_close_to_the_limit() -> None:
    adm = admission()
    change = adm.observe(Load(cpu=0.5, memory=0.9004))
    assert change is not None
    assert change.reason == "memory 0.9004 (host) > memory_usage_limit 0.9000"


# --- on_submit --------------------------------------------------------------------------------


def test_submit_not_queueable_starts_under_high_load_emergency_and_full_queue() -> None:
    adm = admission(max_queue_size=1)
    outcome = adm.on_submit(queueable=False, enqueued=1, load=HIGH_BOTH)
    assert outcome == SubmitOutcome(Decision.START, "not queueable", StartReason.NOT_QUEUEABLE)


def test_submit_starts_immediately_when_load_low_and_nothing_enqueued() -> None:
    outcome = admission().on_submit(queueable=True, enqueued=0, load=LOW)
    assert outcome == SubmitOutcome(
        Decision.START, "load low, nothing enqueued", StartReason.IMMEDIATE
    )


def test_submit_at_exactly_cpu_limit_is_low_load() -> None:
    outcome = admission().on_submit(queueable=True, enqueued=0, load=Load(cpu=0.85, memory=0.5))
    assert outcome.decision is Decision.START


def test_submit_enqueues_when_cpu_above_limit() -> None:
    outcome = admission().on_submit(queueable=True, enqueued=0, load=HIGH_CPU)
    assert outcome == SubmitOutcome(Decision.ENQUEUE, "cpu 0.93 > system_cpu_limit 0.85", None)


def test_submit_enqueues_in_emergency_mode_even_when_cpu_low() -> None:
    adm = admission()
    adm.observe(HIGH_MEMORY)
    outcome = adm.on_submit(queueable=True, enqueued=0, load=Load(cpu=0.1, memory=0.90))
    assert outcome == SubmitOutcome(Decision.ENQUEUE, "emergency mode", None)


def test_submit_observes_its_load_sample_first() -> None:
    adm = admission()
    outcome = adm.on_submit(queueable=True, enqueued=0, load=HIGH_MEMORY)
    assert adm.emergency is True
    assert outcome.decision is Decision.ENQUEUE


def test_submit_enqueues_behind_already_enqueued_jobs_when_load_low() -> None:
    outcome = admission().on_submit(queueable=True, enqueued=2, load=LOW)
    assert outcome == SubmitOutcome(Decision.ENQUEUE, "2 jobs enqueued", None)


def test_submit_enqueue_reason_lists_every_cause() -> None:
    outcome = admission().on_submit(queueable=True, enqueued=1, load=HIGH_BOTH)
    assert outcome.reason == "cpu 0.93 > system_cpu_limit 0.85; emergency mode; 1 job enqueued"


def test_submit_rejects_when_queue_full() -> None:
    outcome = admission(max_queue_size=3).on_submit(queueable=True, enqueued=3, load=HIGH_CPU)
    assert outcome.decision is Decision.REJECT
    assert outcome.start_reason is None
    assert outcome.reason.startswith("queue full: 3 of max_queue_size 3 enqueued")


def test_submit_enqueues_one_below_max_queue_size() -> None:
    outcome = admission(max_queue_size=3).on_submit(queueable=True, enqueued=2, load=HIGH_CPU)
    assert outcome.decision is Decision.ENQUEUE


def test_submit_with_max_queue_size_zero_rejects_instead_of_enqueueing() -> None:
    adm = admission(max_queue_size=0)
    assert adm.on_submit(queueable=True, enqueued=0, load=HIGH_CPU).decision is Decision.REJECT
    assert adm.on_submit(queueable=True, enqueued=0, load=LOW).decision is Decision.START


def test_submit_refuses_negative_enqueued() -> None:
    with pytest.raises(ValueError, match="enqueued is -1"):
        admission().on_submit(queueable=True, enqueued=-1, load=LOW)


def test_submit_does_not_change_load_step() -> None:
    adm = admission(initial_load_step=4)
    for load in (LOW, HIGH_CPU, HIGH_MEMORY):
        adm.on_submit(queueable=True, enqueued=5, load=load)
    assert adm.load_step == 4


# --- tick -------------------------------------------------------------------------------------


def test_tick_low_load_starts_a_batch_of_load_step() -> None:
    adm = admission(initial_load_step=3)
    assert adm.tick(enqueued=10, load=LOW) == 3


def test_tick_low_load_starts_at_most_what_is_enqueued() -> None:
    adm = admission(initial_load_step=3)
    assert adm.tick(enqueued=2, load=LOW) == 2


def test_tick_at_exactly_cpu_limit_is_low_load() -> None:
    adm = admission(initial_load_step=3)
    assert adm.tick(enqueued=10, load=Load(cpu=0.85, memory=0.5)) == 3


def test_tick_raises_load_step_by_one_after_consecutive_low_load_batches() -> None:
    adm = admission(initial_load_step=2)
    assert [adm.tick(enqueued=100, load=LOW) for _ in range(4)] == [2, 3, 4, 5]
    assert adm.load_step == 5


def test_tick_caps_load_step_at_max_load_step() -> None:
    adm = admission(initial_load_step=2, max_load_step=3)
    assert [adm.tick(enqueued=100, load=LOW) for _ in range(4)] == [2, 3, 3, 3]


def test_tick_under_high_load_starts_nothing_and_halves_load_step() -> None:
    adm = admission(initial_load_step=9)
    assert adm.tick(enqueued=10, load=HIGH_CPU) == 0
    assert adm.load_step == 4


def test_tick_under_high_load_never_cuts_below_min_load_step() -> None:
    adm = admission(initial_load_step=5, min_load_step=3)
    adm.tick(enqueued=10, load=HIGH_CPU)
    adm.tick(enqueued=10, load=HIGH_CPU)
    assert adm.load_step == 3


def test_tick_in_emergency_mode_starts_emergency_start_count() -> None:
    adm = admission(emergency_start_count=2, initial_load_step=5)
    assert adm.tick(enqueued=10, load=HIGH_MEMORY) == 2
    assert adm.tick(enqueued=1, load=HIGH_MEMORY) == 1


def test_tick_in_emergency_mode_with_zero_start_count_starts_nothing() -> None:
    adm = admission(emergency_start_count=0)
    assert adm.tick(enqueued=10, load=HIGH_MEMORY) == 0


def test_tick_in_emergency_mode_keeps_load_step() -> None:
    adm = admission(initial_load_step=5)
    adm.tick(enqueued=10, load=HIGH_MEMORY)
    adm.tick(enqueued=10, load=HIGH_MEMORY)
    assert adm.load_step == 5


def test_tick_in_emergency_mode_under_high_cpu_starts_nothing_and_cuts() -> None:
    adm = admission(initial_load_step=6, emergency_start_count=3)
    assert adm.tick(enqueued=10, load=HIGH_BOTH) == 0
    assert adm.load_step == 3


def test_tick_with_nothing_enqueued_starts_nothing_and_keeps_load_step() -> None:
    adm = admission(initial_load_step=6)
    for load in (LOW, HIGH_CPU, HIGH_MEMORY):
        assert adm.tick(enqueued=0, load=load) == 0
    assert adm.load_step == 6


@pytest.mark.parametrize(
    "interruption",
    [
        pytest.param((0, LOW), id="idle tick"),
        pytest.param((10, HIGH_MEMORY), id="emergency tick"),
    ],
)
def test_tick_raise_needs_the_previous_tick_to_have_started_a_low_load_batch(
    interruption: tuple[int, Load],
) -> None:
    adm = admission(initial_load_step=2)
    adm.tick(enqueued=10, load=LOW)
    enqueued, load = interruption
    adm.tick(enqueued=enqueued, load=load)
    adm.observe(LOW)  # leave emergency mode, if entered
    assert adm.tick(enqueued=10, load=LOW) == 2


def test_tick_after_high_load_starts_at_the_cut_step_then_ramps_up() -> None:
    adm = admission(initial_load_step=8)
    adm.tick(enqueued=100, load=LOW)
    adm.tick(enqueued=100, load=HIGH_CPU)
    assert [adm.tick(enqueued=100, load=LOW) for _ in range(3)] == [4, 5, 6]


def test_tick_refuses_negative_enqueued() -> None:
    with pytest.raises(ValueError, match="enqueued is -3"):
        admission().tick(enqueued=-3, load=LOW)


# --- properties: a model of the queue driven by generated submits and ticks --------------------

Action = Literal["submit", "submit-not-queueable", "tick"]


@dataclass(frozen=True)
class Event:
    """One call on the admission, with what the model saw before and after it."""

    action: Action
    load: Load
    enqueued_before: int
    emergency_before: bool
    emergency_after: bool
    load_step_before: int
    load_step_after: int
    outcome: SubmitOutcome | None  # submits
    started: int  # ticks: how many enqueued jobs were started


@dataclass
class Model:
    """A persistent queue of job ids (ids grow with Submitted time) and the admission."""

    admission: Admission
    queue: deque[int] = field(default_factory=deque)
    started_queueable: list[int] = field(default_factory=list)  # in start order
    events: list[Event] = field(default_factory=list)
    next_id: int = 0

    def step(self, action: Action, load: Load) -> None:
        adm = self.admission
        enqueued, emergency, load_step = len(self.queue), adm.emergency, adm.load_step
        outcome, started = None, 0
        if action == "tick":
            started = adm.tick(enqueued=enqueued, load=load)
            assert 0 <= started <= enqueued
            self.started_queueable.extend(self.queue.popleft() for _ in range(started))
        else:
            job, self.next_id = self.next_id, self.next_id + 1
            queueable = action == "submit"
            outcome = adm.on_submit(queueable=queueable, enqueued=enqueued, load=load)
            assert (outcome.decision is Decision.START) == (outcome.start_reason is not None)
            if outcome.decision is Decision.ENQUEUE:
                self.queue.append(job)
            elif outcome.decision is Decision.START and queueable:
                self.started_queueable.append(job)
        self.events.append(
            Event(
                action=action,
                load=load,
                enqueued_before=enqueued,
                emergency_before=emergency,
                emergency_after=adm.emergency,
                load_step_before=load_step,
                load_step_after=adm.load_step,
                outcome=outcome,
                started=started,
            )
        )


def around(limit: float) -> st.SearchStrategy[float]:
    """Ratios at, just below and just above a limit, the extremes, and anything in 0..1."""
    return st.one_of(
        st.sampled_from([0.0, limit - 0.01, limit, limit + 0.01, 1.0]),
        st.floats(0.0, 1.0),
    )


@st.composite
def limits_strategy(draw: st.DrawFn) -> Limits:
    min_load_step = draw(st.integers(1, 3))
    initial_load_step = draw(st.integers(min_load_step, min_load_step + 4))
    return Limits(
        system_cpu_limit=draw(st.sampled_from([0.3, 0.85, 1.0]) | st.floats(0.05, 1.0)),
        memory_usage_limit=draw(st.sampled_from([0.5, 0.9, 1.0]) | st.floats(0.05, 1.0)),
        min_load_step=min_load_step,
        initial_load_step=initial_load_step,
        max_load_step=draw(st.integers(initial_load_step, initial_load_step + 6)),
        emergency_start_count=draw(st.integers(0, 3)),
        max_queue_size=draw(st.integers(0, 20)),
    )


@st.composite
def runs(draw: st.DrawFn) -> Model:
    """A model after a generated sequence of submits and ticks, loads drawn around the limits."""
    limits = draw(limits_strategy())
    loads = st.builds(
        Load,
        cpu=around(limits.system_cpu_limit),
        memory=around(limits.memory_usage_limit),
        memory_source=st.sampled_from(["host", "jvm:driver"]),
    )
    actions: tuple[Action, ...] = ("submit", "submit", "submit-not-queueable", "tick", "tick")
    steps = draw(st.lists(st.tuples(st.sampled_from(actions), loads), max_size=80))
    model = Model(Admission(limits))
    for action, load in steps:
        model.step(action, load)
    return model


def cpu_high(model: Model, load: Load) -> bool:
    return not load.cpu <= model.admission.limits.system_cpu_limit


property_settings = settings(max_examples=300, deadline=None)


@property_settings
@given(runs())
def test_property_queueable_jobs_start_in_submitted_order(model: Model) -> None:
    # Immediate starts and dequeued starts together: no job overtakes an earlier one.
    assert model.started_queueable == sorted(set(model.started_queueable))


@property_settings
@given(runs())
def test_property_nothing_queueable_starts_under_high_load(model: Model) -> None:
    for event in model.events:
        if not cpu_high(model, event.load):
            continue
        if event.action == "tick":
            assert event.started == 0
        elif event.action == "submit":
            assert event.outcome is not None
            assert event.outcome.decision is not Decision.START


@property_settings
@given(runs())
def test_property_not_queueable_always_starts(model: Model) -> None:
    for event in model.events:
        if event.action == "submit-not-queueable":
            assert event.outcome is not None
            assert event.outcome.decision is Decision.START
            assert event.outcome.start_reason is StartReason.NOT_QUEUEABLE


@property_settings
@given(runs())
def test_property_queue_never_exceeds_max_queue_size(model: Model) -> None:
    max_queue_size = model.admission.limits.max_queue_size
    for event in model.events:
        assert event.enqueued_before <= max_queue_size
        if event.outcome is not None and event.outcome.decision is Decision.REJECT:
            assert event.enqueued_before == max_queue_size
            assert f"max_queue_size {max_queue_size}" in event.outcome.reason
    assert len(model.queue) <= max_queue_size


@property_settings
@given(runs())
def test_property_emergency_tick_starts_at_most_emergency_start_count(model: Model) -> None:
    for event in model.events:
        if event.action == "tick" and event.emergency_after:
            assert event.started <= model.admission.limits.emergency_start_count


@property_settings
@given(runs())
def test_property_load_step_stays_within_min_and_max(model: Model) -> None:
    limits = model.admission.limits
    for event in model.events:
        assert limits.min_load_step <= event.load_step_after <= limits.max_load_step


@property_settings
@given(runs())
def test_property_queueable_submit_starts_iff_low_load_no_emergency_empty_queue(
    model: Model,
) -> None:
    for event in model.events:
        if event.action != "submit":
            continue
        assert event.outcome is not None
        may_start = (
            not cpu_high(model, event.load)
            and not event.emergency_after
            and event.enqueued_before == 0
        )
        assert (event.outcome.decision is Decision.START) == may_start
        if may_start:
            assert event.outcome.start_reason is StartReason.IMMEDIATE


@property_settings
@given(runs())
def test_property_emergency_mode_follows_memory_limit(model: Model) -> None:
    limit = model.admission.limits.memory_usage_limit
    for event in model.events:
        if event.load.memory > limit:
            expected = True
        elif event.load.memory < limit:
            expected = False
        else:
            expected = event.emergency_before
        assert event.emergency_after == expected


@property_settings
@given(runs())
def test_property_low_load_tick_drains_the_queue(model: Model) -> None:
    # Liveness: without it, a queue that never starts anything would pass the safety properties.
    for event in model.events:
        if event.action == "tick" and not cpu_high(model, event.load) and not event.emergency_after:
            assert event.started == min(event.load_step_after, event.enqueued_before)
            if event.enqueued_before > 0:
                assert event.started >= 1

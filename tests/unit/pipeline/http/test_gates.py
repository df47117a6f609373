"""The HTTP gates' rules on their own: which ``Host`` a server answers to, and the
per-address throttle of failed authentications (a clock of the test's own)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.http.gates import AuthThrottle, HostGate, host_name


@pytest.mark.parametrize(
    ("host", "name"),
    [
        ("127.0.0.1", "127.0.0.1"),
        ("127.0.0.1:8787", "127.0.0.1"),
        ("[::1]:8787", "::1"),
        ("[::1]", "::1"),
        ("Admission:8787", "Admission"),
        ("a:b", ""),
        ("[::1]x", ""),
        ("", ""),
    ],
)
def test_the_name_of_a_host_header(host: str, name: str) -> None:
    assert host_name(host) == name


def test_addresses_localhost_and_allowed_names_are_answered_others_not() -> None:
    gate = HostGate(None, allowed_hosts=["admission"], setting="admission.allowed_hosts")  # type: ignore[arg-type]
    for host in ("127.0.0.1:1", "10.1.2.3", "[::1]:8787", "localhost", "LOCALHOST:1", "admission"):
        assert gate.answers_to(host), host
    for host in ("rebind.attacker.example", "admission.attacker.example", "", "localhost.:1"):
        assert not gate.answers_to(host), host


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_an_address_is_throttled_after_its_failures_until_the_window_ends() -> None:
    clock = Clock()
    throttle = AuthThrottle(max_failures=3, window_s=60, clock=clock)
    for _ in range(2):
        throttle.failed("10.0.0.1")
    assert throttle.retry_after_s("10.0.0.1") == 0
    clock.now += 10
    throttle.failed("10.0.0.1")
    assert throttle.retry_after_s("10.0.0.1") == 50  # the window began at the first
    assert throttle.retry_after_s("10.0.0.2") == 0  # another address is not
    clock.now += 50
    assert throttle.retry_after_s("10.0.0.1") == 0
    throttle.failed("10.0.0.1")  # a new window
    assert throttle.retry_after_s("10.0.0.1") == 0


@given(st.lists(st.integers(0, 50), max_size=300))
def test_memory_is_bounded_by_max_addresses(addresses: list[int]) -> None:
    clock = Clock()
    throttle = AuthThrottle(max_failures=2, window_s=60, max_addresses=8, clock=clock)
    for address in addresses:
        throttle.failed(f"10.0.0.{address}")
        clock.now += 1
    assert len(throttle._windows) <= 8


@pytest.mark.parametrize(("failures", "window_s"), [(0, 60.0), (1, 0.0)])
def test_a_throttle_that_would_never_or_always_refuse_is_refused(
    failures: int, window_s: float
) -> None:
    with pytest.raises(ValueError, match="must be"):
        AuthThrottle(max_failures=failures, window_s=window_s)

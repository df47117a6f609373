"""Leader election on SQLite (a file lock): one holder at a time, handed over on stop.
The PostgreSQL advisory lock is tested against a real server in
tests/integration/test_admission.py."""

from __future__ import annotations

from pathlib import Path

from pipeline.leader import LeaderElection, lock_key


def test_one_instance_leads_a_sqlite_database_and_hands_over_when_it_stops(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'state.db'}"
    events: list[str] = []
    first = LeaderElection(
        url, "sweeper", instance="one", address="http://one", on_granted=lambda: events.append("1+")
    ).start()
    second = LeaderElection(
        url, "sweeper", instance="two", on_granted=lambda: events.append("2+"), check_interval_s=60
    ).start()
    try:
        assert first.is_leader and not second.is_leader
        holder = second.holder()
        assert holder is not None and (holder.instance, holder.address) == ("one", "http://one")
        assert not second.poll()  # still held
        first.stop()
        assert second.poll()
        holder = first.holder()
        assert holder is not None and holder.instance == "two"
        assert events == ["1+", "2+"]
    finally:
        second.stop()


def test_services_have_distinct_stable_lock_keys() -> None:
    assert lock_key("admission") == lock_key("admission")
    assert lock_key("admission") != lock_key("sweeper")
    assert -(2**63) <= lock_key("admission") < 2**63

"""Leader election on SQLite (a file lock): one holder at a time, handed over on stop.
The PostgreSQL advisory lock is tested against a real server in
tests/integration/admission/test_service.py."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from pipeline.state.leader import LeaderElection, lock_key


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


def test_the_sqlite_lock_file_is_its_owners_alone(tmp_path: Path) -> None:
    """The ``<database>.leader`` lock file is 0600 like the database."""
    previous = os.umask(0)
    try:
        election = LeaderElection(f"sqlite:///{tmp_path / 'state.db'}", "sweeper").start()
    finally:
        os.umask(previous)
    try:
        assert election.is_leader
        for path in (tmp_path / "state.db", tmp_path / "state.db.leader"):
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    finally:
        election.stop()

"""The services' database engines (:mod:`pipeline.state.database`) show no
statement parameter in their errors: a job's ``env`` value stored in a row never
reaches a log line through a failed statement. Making a SQLite file private keeps
the locks of this process's connections to it, and refuses a symbolic link."""

from __future__ import annotations

import secrets
import stat
import subprocess
import sys
import time
import traceback
from pathlib import Path

import pytest
from sqlalchemy import Column, MetaData, String, Table, insert
from sqlalchemy.exc import IntegrityError

from pipeline.errors import UntrustedFileError
from pipeline.state.database import create_database_engine


def test_a_failed_statement_s_error_does_not_show_its_parameters(tmp_path: Path) -> None:
    secret = secrets.token_hex(16)
    engine = create_database_engine(f"sqlite:///{tmp_path / 'jobs.db'}")
    metadata = MetaData()
    jobs = Table("jobs", metadata, Column("env", String, primary_key=True))
    metadata.create_all(engine)
    with engine.begin() as connection:
        connection.execute(insert(jobs).values(env=secret))
    with pytest.raises(IntegrityError) as refused, engine.begin() as connection:
        connection.execute(insert(jobs).values(env=secret))  # the same primary key again
    shown = "".join(traceback.format_exception(refused.value))
    assert "UNIQUE constraint failed" in shown and "[SQL: INSERT INTO jobs" in shown
    assert secret not in shown
    engine.dispose()


#: The database file and the WAL and shared-memory files SQLite makes beside it.
MODES = ("", "-wal", "-shm")


def _take_for_unused(database: Path) -> str:
    """What another process gets asking for the one thing SQLite refuses while any
    other connection has a WAL database open: leaving WAL mode."""
    probe = (
        "import sqlite3, sys\n"
        "db = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=0.1)\n"
        "try:\n"
        "    print(db.execute('PRAGMA journal_mode=DELETE').fetchone()[0])\n"
        "except sqlite3.OperationalError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(database)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return done.stdout.strip()


def test_a_second_engine_on_a_database_leaves_the_first_connection_s_locks(
    tmp_path: Path,
) -> None:
    # Making a file private once opened and closed the database and its -shm file: a
    # close drops every POSIX lock this process holds on the file, SQLite's included,
    # and another process then took the database for unused (it may truncate the -shm
    # file this process has mapped: SIGBUS).
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    first = create_database_engine(url)
    metadata = MetaData()
    Table("jobs", metadata, Column("id", String, primary_key=True))
    metadata.create_all(first)
    with first.connect() as connection:
        connection.exec_driver_sql("SELECT count(*) FROM jobs").scalar_one()
        assert _take_for_unused(tmp_path / "jobs.db") == "database is locked"
        second = create_database_engine(url)
        assert _take_for_unused(tmp_path / "jobs.db") == "database is locked"
    second.dispose()
    first.dispose()
    assert _take_for_unused(tmp_path / "jobs.db") == "delete"  # the probe can tell


def test_an_existing_database_and_its_wal_are_made_0600_and_a_link_is_refused(
    tmp_path: Path,
) -> None:
    database = tmp_path / "catalog.db"
    engine = create_database_engine(f"sqlite:///{database}")
    with engine.begin() as connection:
        connection.exec_driver_sql("CREATE TABLE blobs (path TEXT)")
        for suffix in MODES:
            Path(f"{database}{suffix}").chmod(0o644)
        create_database_engine(f"sqlite:///{database}").dispose()
        modes = {s: stat.S_IMODE(Path(f"{database}{s}").stat().st_mode) for s in MODES}
    engine.dispose()
    assert modes == dict.fromkeys(MODES, 0o600)

    elsewhere = tmp_path / "elsewhere.db"
    elsewhere.write_bytes(b"")
    linked = tmp_path / "linked.db"
    linked.symlink_to(elsewhere)
    with pytest.raises(UntrustedFileError, match=r"linked\.db is a symbolic link"):
        create_database_engine(f"sqlite:///{linked}")


def test_processes_creating_the_same_tables_at_once_all_find_them(tmp_path: Path) -> None:
    """Several services open one sweep catalog at their start: each creates the tables
    that do not exist yet, and losing a CREATE race, table after table, fails none.
    Processes, as the services are (threads of one process share SQLite's schema cache
    differently)."""
    script = (
        "import sys, time\n"
        "from sqlalchemy import Column, Integer, MetaData, Table\n"
        "from pipeline.state.database import create_database_engine, create_tables\n"
        "metadata = MetaData()\n"
        "for n in range(6):\n"
        "    Table(f't{n}', metadata, Column('id', Integer, primary_key=True))\n"
        "engine = create_database_engine(sys.argv[1])\n"
        "time.sleep(max(0.0, float(sys.argv[2]) - time.time()))  # all at once\n"
        "create_tables(metadata, engine)\n"
    )
    url = f"sqlite:///{tmp_path / 'catalog.db'}"
    at = str(time.time() + 4)  # time enough for six interpreters to start on 2 cores
    starts = [
        subprocess.Popen([sys.executable, "-c", script, url, at], stderr=subprocess.PIPE)
        for _ in range(6)
    ]
    for process in starts:
        _, err = process.communicate(timeout=120)
        assert process.returncode == 0, err.decode()[-2000:]

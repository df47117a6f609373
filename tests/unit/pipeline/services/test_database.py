"""The services' database engines (:mod:`pipeline.services.database`) show no
statement parameter in their errors: a job's ``env`` value stored in a row never
reaches a log line through a failed statement."""

from __future__ import annotations

import secrets
import traceback
from pathlib import Path

import pytest
from sqlalchemy import Column, MetaData, String, Table, insert
from sqlalchemy.exc import IntegrityError

from pipeline.services.database import create_database_engine


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

"""A service keeps its memory and secrets to itself: which of its
variables are secrets, and the dumpable flag, read back from the kernel in a process of
its own."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pipeline.security.privacy import is_secret_variable, take_secret_variables


@pytest.mark.parametrize(
    "name",
    [
        "FLOODGATE__ADMISSION__TOKEN",
        "FLOODGATE__ADMISSION__INTAKE_KEY",
        "FLOODGATE_CONTROL_TOKEN",
        "FLOODGATE__KAFKA__CLIENT__SASL_PASSWORD",
        "FLOODGATE__SPARK__CONF__SPARK_HADOOP_FS_S3A_SECRET_KEY",
    ],
)
def test_floodgate_s_secret_variables_are_taken_by_name(name: str) -> None:
    assert is_secret_variable(name, "value")


def test_a_url_with_a_password_is_a_secret_and_other_variables_are_kept() -> None:
    env = {
        "FLOODGATE__SWEEPER__DATABASE_URL": "postgresql://sweeper:pw@db/catalog",
        "FLOODGATE__ADMISSION__TOKEN": "t",
        "FLOODGATE__INPUT_STREAMS__FLIGHTS__KEY_FIELDS": '["carrier"]',
        "FLOODGATE_KAFKA_BOOTSTRAP": "127.0.0.1:9092",
        "FLOODGATE__ADMISSION__DATABASE_URL": "sqlite:///jobs.db",
        # Not Floodgate's: a credential the Spark JVM reads from its environment.
        "AWS_SECRET_ACCESS_KEY": "kept-for-s3a",
    }

    taken = take_secret_variables(env)

    assert taken == {
        "FLOODGATE__SWEEPER__DATABASE_URL": "postgresql://sweeper:pw@db/catalog",
        "FLOODGATE__ADMISSION__TOKEN": "t",
    }
    assert set(env) == {
        "FLOODGATE__INPUT_STREAMS__FLIGHTS__KEY_FIELDS",
        "FLOODGATE_KAFKA_BOOTSTRAP",
        "FLOODGATE__ADMISSION__DATABASE_URL",
        "AWS_SECRET_ACCESS_KEY",
    }


def test_a_process_that_keeps_to_itself_is_not_dumpable_and_its_children_are() -> None:
    script = (
        "import subprocess, sys\n"
        "from pipeline.security.privacy import is_dumpable, make_undumpable\n"
        "before = is_dumpable()\n"
        "assert make_undumpable()\n"
        "child = subprocess.run([sys.executable, '-c', 'from pipeline.security.privacy "
        "import is_dumpable; print(is_dumpable())'], capture_output=True, text=True)\n"
        "print(before, is_dumpable(), child.stdout.strip())\n"
    )
    shown = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout.split()
    # execve sets the flag back: what the service starts is dumpable as before.
    assert shown == ["True", "False", "True"]

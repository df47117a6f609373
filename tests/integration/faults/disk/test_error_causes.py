"""A full disk found below the error Spark reports (``FG-QG-010``).

A state store's failed commit reaches Python as ``CANNOT_WRITE_STATE_STORE``, the file
system's ``No space left on device`` a Java cause below it that PySpark does not print.
These build that chain in the test session's JVM, as PySpark receives it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pyspark.errors.exceptions.captured import convert_exception

from pipeline.errors import NO_SPACE, java_causes
from pipeline.spark.failures import disk_full
from tests.integration.faults.disk.faults import group_config

STATE_STORE_ERROR = (
    "[CANNOT_WRITE_STATE_STORE.CANNOT_COMMIT] Error writing state store files for provider "
    "HDFSStateStore. Cannot perform commit during state checkpoint."
)


def jvm_error(spark: Any) -> Any:
    """A Java ``IllegalStateException`` caused by an ``UncheckedIOException`` caused by
    the ``IOException`` of a full disk: the shape of a state store's failed commit
    (Hadoop's ``FSError``, the middle link there, has no public constructor)."""
    jvm = spark.sparkContext._jvm
    io_error = jvm.java.io.IOException(NO_SPACE)
    fs_error = jvm.java.io.UncheckedIOException("writing the state store's delta file", io_error)
    return jvm.java.lang.IllegalStateException(STATE_STORE_ERROR, fs_error)


def test_java_causes_read_the_full_disk_below_the_error_pyspark_prints(spark: Any) -> None:
    error = convert_exception(jvm_error(spark))
    assert NO_SPACE not in str(error)
    assert java_causes(error) == [
        "java.io.UncheckedIOException: writing the state store's delta file",
        f"java.io.IOException: {NO_SPACE}",
    ]


def test_java_causes_of_a_python_error_are_none() -> None:
    assert java_causes(OSError(28, NO_SPACE)) == []


def test_a_full_disk_below_spark_s_error_is_named_in_the_group_s_error(
    spark: Any, tmp_path: Path
) -> None:
    config = group_config("causes", tmp_path)
    error = disk_full(config, "delays_by_origin_hour", convert_exception(jvm_error(spark)))
    assert "FG-QG-010" in str(error)
    assert "CANNOT_WRITE_STATE_STORE" in str(error)
    assert f"caused by java.io.IOException: {NO_SPACE}" in str(error)
    assert error.checkpoint == f"{tmp_path}/delays_by_origin_hour"

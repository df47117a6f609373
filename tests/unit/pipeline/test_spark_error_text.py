"""The few lines a JVM error is told in (``compact_error``)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pipeline.errors import compact_error

#: The first words of a Py4J error of the JVM, as Python prints it.
PY4J_ERROR_PREFIX = "py4j.protocol.Py4JJavaError: An error occurred while calling"


class Py4JJavaError(Exception):
    """Stands in for py4j's error, whose text is a Java stack (its class is not ours)."""


JAVA_TEXT = (
    "An error occurred while calling o87.getResult.\n"
    ": org.apache.spark.SparkException: Job 3 cancelled part of cancelled job group 5f07\n"
    "\tat org.apache.spark.scheduler.DAGScheduler.failJob(DAGScheduler.scala:2)\n"
    "\tat org.apache.spark.scheduler.DAGScheduler.runJob(DAGScheduler.scala:9)\n"
    "Caused by: java.lang.InterruptedException\n"
    "\tat java.base/java.lang.Object.wait(Native Method)\n"
    "\t... 42 more\n"
)


def test_compact_error_keeps_the_java_exceptions_and_drops_the_stack() -> None:
    text = compact_error(Py4JJavaError(JAVA_TEXT))
    assert text == (
        "Py4JJavaError: An error occurred while calling o87.getResult. | "
        "org.apache.spark.SparkException: Job 3 cancelled part of cancelled job group 5f07 | "
        "Caused by: java.lang.InterruptedException"
    )


@given(st.text(max_size=5_000), st.integers(min_value=10, max_value=2_000))
def test_compact_error_is_bounded_one_line_and_names_the_py4j_error_short(
    message: str, limit: int
) -> None:
    text = compact_error(Py4JJavaError(f"{PY4J_ERROR_PREFIX} {message}"), limit=limit)
    assert len(text) <= limit
    assert PY4J_ERROR_PREFIX not in text
    assert "\n" not in text

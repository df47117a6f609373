"""A query stopped in the middle of a micro-batch stops; it does not fail.

Spark's stream thread decides whether an error that ends a query being stopped is the
stop itself by matching the error's text (for a Python ``foreachBatch`` function: the
whole Python traceback py4j sends) against ``StreamExecution.PROXY_ERROR``, a pattern
``java.util.regex`` matches by recursing once per character. A JVM error's Java stack
in that text overflows the thread's stack, and the query fails with a
``StackOverflowError`` instead of stopping. These tests run the real thing in the
session's SparkSession: Spark's own check on both texts, and a query stopped while its
batch is inside ``toArrow()``.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import pytest

from pipeline.errors import PY4J_ERROR_PREFIX, MicroBatchError
from pipeline.spark.sink import for_spark

pytestmark = [pytest.mark.integration, pytest.mark.no_kafka]


def _interrupted_jvm_call(spark: Any) -> BaseException:
    """A real ``Py4JJavaError`` of an interrupted JVM call: ``Thread.sleep`` on a
    thread that was interrupted (py4j runs a Python thread's calls on one JVM thread)."""
    thread = spark._jvm.java.lang.Thread
    thread.currentThread().interrupt()
    try:
        thread.sleep(1_000)
    except Exception as exc:
        return exc
    raise AssertionError("Thread.sleep on an interrupted thread returned")


def _spark_reads(spark: Any, text: str) -> bool:
    """Spark's own check: does the stream thread count this error text as a stop?"""
    jvm = spark._jvm
    check = jvm.org.apache.spark.sql.execution.streaming.runtime.StreamExecution
    return bool(check.isInterruptionException(jvm.py4j.Py4JException(text), spark._jsc.sc()))


def test_spark_reads_a_micro_batch_error_as_a_stop(spark: Any) -> None:
    exc = _interrupted_jvm_call(spark)
    assert "java.lang.InterruptedException" in str(exc)
    safe = for_spark(exc, query_group="g", query="q", batch_id=7)
    assert isinstance(safe, MicroBatchError)
    assert safe.interrupted
    assert "at java.base" not in str(safe)  # no Java stack
    try:
        raise safe from None
    except MicroBatchError:
        text = traceback.format_exc()
    assert _spark_reads(spark, text)


def test_a_java_stack_overflows_sparks_check(spark: Any) -> None:
    """The cause: the traceback of a deep JVM call, as py4j hands it over, is more
    than Spark's check can read (a JVM error of a job carries a stack of 100+ frames;
    here a real interruption's stack, padded to that depth)."""
    exc = _interrupted_jvm_call(spark)
    frames = "\n".join(
        f"\tat org.apache.spark.Stage{i}.run(Stage{i}.scala:{i})" for i in range(100)
    )
    text = f"Traceback (most recent call last):\n{PY4J_ERROR_PREFIX} {exc}\n{frames}"
    with pytest.raises(Exception, match="StackOverflowError"):
        _spark_reads(spark, text)


def test_other_errors_pass_through_unchanged(spark: Any) -> None:
    error = ValueError("a row does not fit")
    assert for_spark(error, query_group="g", query="q", batch_id=1) is error


class _UncaughtErrors:
    """A JVM ``Thread.UncaughtExceptionHandler`` (implemented in Python through py4j)
    recording the Java class of every error that kills a JVM thread."""

    def __init__(self) -> None:
        self.errors: list[str] = []

    def uncaughtException(self, thread: Any, error: Any) -> None:
        self.errors.append(f"{thread.getName()}: {error.getClass().getName()}")

    class Java:
        implements: ClassVar[list[str]] = ["java.lang.Thread$UncaughtExceptionHandler"]


@pytest.fixture
def uncaught(spark: Any) -> Iterator[_UncaughtErrors]:
    """The JVM threads that die of an uncaught error during the test (Spark's stream
    threads have no handler of their own: a death is otherwise only a stderr line)."""
    thread = spark._jvm.java.lang.Thread
    previous = thread.getDefaultUncaughtExceptionHandler()
    recorder = _UncaughtErrors()
    thread.setDefaultUncaughtExceptionHandler(recorder)
    yield recorder
    thread.setDefaultUncaughtExceptionHandler(previous)


@pytest.fixture
def slow_batch_query(
    spark: Any, tmp_path: Any
) -> Iterator[Callable[[Callable[[Any, int], None]], tuple[Any, threading.Event]]]:
    """Start a query whose micro-batch spends ~60 s in ``toArrow()`` (a UDF sleeps in
    the Python worker); returns the query and an event set once the batch is in it."""
    from pyspark.sql.functions import col, udf

    session = spark.newSession()
    started: list[Any] = []

    def sleep_then(value: Any) -> Any:
        time.sleep(60)
        return value

    slow = udf(sleep_then, "long")

    def start(wrap: Callable[[Any, int], None]) -> tuple[Any, threading.Event]:
        entered = threading.Event()

        def batch(df: Any, batch_id: int) -> None:
            if df.isEmpty():
                return
            entered.set()
            wrap(df.select(slow(col("value")).alias("value")), batch_id)

        query = (
            session.readStream.format("rate")
            .option("rowsPerSecond", 5)
            .load()
            .writeStream.option("checkpointLocation", str(tmp_path / f"cp{len(started)}"))
            .foreachBatch(batch)
            .start()
        )
        started.append(query)
        return query, entered

    yield start
    for query in started:
        query.stop()


def test_a_query_stopped_mid_batch_stops(slow_batch_query: Any, uncaught: _UncaughtErrors) -> None:
    """The sink's path: ``toArrow()`` interrupted by ``stop()``, the error raised to
    Spark through :func:`for_spark`: the query ends without an exception."""

    def through_for_spark(df: Any, batch_id: int) -> None:
        try:
            df.toArrow()
        except Exception as exc:
            safe = for_spark(exc, query_group="g", query="q", batch_id=batch_id)
            if safe is exc:
                raise
            raise safe from None

    query, entered = slow_batch_query(through_for_spark)
    assert entered.wait(60), "no micro-batch started within 60 s"
    time.sleep(2)  # inside toArrow(): the UDF sleeps for 60 s
    query.stop()
    assert not query.isActive
    assert query.exception() is None
    assert uncaught.errors == []


def test_without_it_the_stop_is_a_stack_overflow(
    slow_batch_query: Any, uncaught: _UncaughtErrors
) -> None:
    """The same stop with the error raised as it is: Spark's check overflows and the
    query's stream thread dies of it, unrecorded by the query (when a Spark release
    reads such errors safely, this test fails and :func:`for_spark` can go)."""

    def raw(df: Any, batch_id: int) -> None:
        df.toArrow()

    query, entered = slow_batch_query(raw)
    assert entered.wait(60), "no micro-batch started within 60 s"
    time.sleep(2)
    query.stop()
    deadline = time.monotonic() + 10
    while not uncaught.errors and time.monotonic() < deadline:
        time.sleep(0.1)
    assert any(e.endswith("java.lang.StackOverflowError") for e in uncaught.errors), uncaught.errors

"""A class-data-sharing archive of the Spark driver's JVM, for the test run's drivers.

Most of an integration test's time is Spark drivers starting: ``floodgate run``
processes, the shared SparkSession, probes. Each JVM loads and verifies some 20 000
classes of Spark's jars before its first micro-batch. A dynamic CDS archive (JDK 13+,
``-XX:ArchiveClassesAtExit``, then ``-XX:SharedArchiveFile``) maps them from one file
instead. The archive is made once per virtualenv (about half a minute), under
``~/.cache/floodgate/cds``, by a short driver that runs a streaming aggregation and a
batch job, and named after what it depends on: the ``java`` binary, PySpark's version
and the jars it ships, by path. A JVM that finds it unusable (another JDK build,
another class path) starts without it (``-Xshare:auto``), silently. Nothing of
Floodgate changes: :func:`submit_args` goes into ``PYSPARK_SUBMIT_ARGS``, which
PySpark's launch of a driver's JVM reads, as a user's
``spark.driver.defaultJavaOptions`` would.

Run as ``python -m tests.integration.jvm_classes PATH``: the driver that writes the
archive to ``PATH`` when its JVM exits.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

log = logging.getLogger(__name__)

#: Where archives are kept, one per JDK and PySpark.
ARCHIVE_DIR = Path.home() / ".cache" / "floodgate" / "cds"

#: How long making the archive may take, seconds (a loaded 2-core machine).
MAKE_TIMEOUT_S = 600

#: The JVM option that names the archive's settings key.
DEFAULT_JAVA_OPTIONS = "spark.driver.defaultJavaOptions"


def _java() -> Path | None:
    home = os.environ.get("JAVA_HOME")
    found = Path(home) / "bin" / "java" if home else None
    if found is None or not found.exists():
        which = shutil.which("java")
        found = Path(which) if which else None
    return found.resolve() if found else None


def archive_path() -> Path | None:
    """The archive for this machine's ``java`` and PySpark, made or not; ``None``
    without a ``java``."""
    import pyspark

    java = _java()
    if java is None:
        return None
    jars = (Path(pyspark.__file__).parent / "jars").resolve()
    key = hashlib.sha256()
    stat = java.stat()
    # The JVM checks the archive against the class path it was made with, by path: each
    # virtualenv (a clone's, the deployment tests' fresh one) needs its own.
    key.update(f"{java}:{stat.st_size}:{stat.st_mtime_ns}:{pyspark.__version__}:{jars}".encode())
    for jar in sorted(jars.glob("*.jar")):
        key.update(f"{jar.name}:{jar.stat().st_size}".encode())
    return ARCHIVE_DIR / f"spark-driver-{key.hexdigest()[:16]}.jsa"


def ensure_archive() -> Path | None:
    """The archive, made first if there is none.

    Returns:
        Its path; ``None`` when it could not be made (logged): drivers then start
        as they would without it.
    """
    path = archive_path()
    if path is None or path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    # make test's workers (pytest-xdist) start at once: one makes the archive, the
    # other waits on the lock and finds it made.
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return path if path.exists() else _make(path)


def _make(path: Path) -> Path | None:
    """Write the archive at ``path`` from a training driver; ``None`` when it failed."""
    partial = path.with_name(f"{path.stem}.{os.getpid()}.partial")
    environ = {k: v for k, v in os.environ.items() if k not in {"PYSPARK_SUBMIT_ARGS", "MASTER"}}
    option = f"{DEFAULT_JAVA_OPTIONS}=-XX:ArchiveClassesAtExit={partial}"
    environ["PYSPARK_SUBMIT_ARGS"] = f"--conf {shlex.quote(option)} pyspark-shell"
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", __name__, str(partial)],
        capture_output=True,
        text=True,
        timeout=MAKE_TIMEOUT_S,
        env=environ,
        check=False,
    )
    if done.returncode != 0 or not partial.exists():
        partial.unlink(missing_ok=True)
        log.warning("no class-data archive (exit %s): %s", done.returncode, done.stderr[-2000:])
        return None
    os.replace(partial, path)  # whole, or not there: a concurrent run makes its own
    log.info("class-data archive %s made in %.0f s", path, time.monotonic() - started)
    return path


def submit_args(archive: Path) -> str:
    """``PYSPARK_SUBMIT_ARGS`` that start a driver's JVM on ``archive``."""
    # A JVM of another class path (the deployment tests' virtualenv) cannot use it and
    # starts as it would without: its "unable to use shared archive" warning is silenced.
    option = (
        f"{DEFAULT_JAVA_OPTIONS}=-XX:SharedArchiveFile={archive} -Xshare:auto"
        " -Xlog:cds=off,cds+dynamic=off"
    )
    return f"--conf {shlex.quote(option)} pyspark-shell"


def _train() -> None:
    """A driver through what the tests' drivers load: the session, a streaming
    aggregation with state and a watermark, a batch job. Its JVM writes the archive
    when it exits, after Python's."""
    from pyspark.sql import functions as F

    from pipeline.spark.session import build_spark_session

    spark = build_spark_session(app_name="floodgate-class-data")
    query = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", 1_000)
        .load()
        .withWatermark("timestamp", "1 second")
        .groupBy(F.window("timestamp", "1 second"))
        .count()
        .writeStream.format("memory")
        .queryName("class_data")
        .outputMode("append")
        .trigger(processingTime="0 seconds")
        .start()
    )
    deadline = time.monotonic() + MAKE_TIMEOUT_S
    while (query.lastProgress or {}).get("batchId", -1) < 3 and time.monotonic() < deadline:
        time.sleep(0.2)
    query.stop()
    spark.range(1_000).groupBy((F.col("id") % 7).alias("k")).agg(F.sum("id")).collect()
    spark.stop()


if __name__ == "__main__":
    _train()

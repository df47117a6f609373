"""The query group's SparkSession: Floodgate's defaults, the user's settings on top."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from typing import Any

from pyspark.sql import SparkSession

from pipeline.errors import ConfigError
from pipeline.redaction import (
    SESSION_REDACTION_REGEX,
    Redactor,
    default_redactor,
    redact_any,
)
from pipeline.spark.jvm import check_spark_version, source_jar

log = logging.getLogger(__name__)


#: Spark settings Floodgate applies when neither ``spark-submit`` (``--master``,
#: ``--conf``), ``spark-defaults.conf``, ``PYSPARK_SUBMIT_ARGS`` nor a query group's
#: ``[spark]`` section set them (:func:`build_spark_session`).
SPARK_DEFAULTS: dict[str, str] = {
    # No web UI or console progress bar: the metrics endpoint and /status report progress.
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    # Aggregations of micro-batches are small (the output queue bounds them).
    "spark.sql.shuffle.partitions": "2",
    # Event-time windows (hours, days) are cut in UTC, whatever the host's zone.
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
    # Checkpoints through Hadoop's FileSystem API on the raw local file system, not the
    # FileContext manager on the checksummed one, which starts a `readlink` and a
    # `chmod` process (no native Hadoop library in pyspark) for nearly every checkpoint
    # file: 920 processes and ~130 ms of walCommit and commitOffsets per micro-batch
    # in a 20 s demo run; with these, 120 processes and ~20 ms (bench/README.md). A
    # rename stays atomic on a local or HDFS checkpoint; Spark's own checksums of the
    # state store are unchanged.
    "spark.sql.streaming.checkpointFileManagerClass": (
        "org.apache.spark.sql.execution.streaming.checkpointing."
        "FileSystemBasedCheckpointFileManager"
    ),
    "spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
}


#: The master ``spark-submit`` runs with when none is set (``SparkSubmitArguments``).
SPARK_SUBMIT_DEFAULT_MASTER = "local[*]"


#: Where a Spark setting of the session came from (:func:`spark_settings`).
SETTING_SOURCES = ("spark", "query group", "floodgate")


_applied_settings: dict[str, tuple[str, str]] = {}

#: Spark's setting of which keys and values hold secrets (``Utils.redact``); set to
#: :data:`~pipeline.redaction.SESSION_REDACTION_REGEX` (Spark's default, extended to
#: Kafka's and the object stores' secrets) where nothing else set it.
REDACTION_REGEX_KEY = "spark.redaction.regex"

#: How :func:`spark_settings` shows values: the session's ``spark.redaction.regex``.
_redactor: Redactor = default_redactor()


def _is_local_master(master: str) -> bool:
    """Executors on this host: ``local``, ``local[N]``, ``local[N,F]``, ``local-cluster[...]``."""
    return master == "local" or master.startswith(("local[", "local-cluster["))


def build_spark_session(
    *,
    app_name: str = "floodgate",
    master: str = "local[2]",
    conf: Mapping[str, Any] | None = None,
) -> SparkSession:
    """Get or create the process's SparkSession, Floodgate's settings applied where
    nothing else set a value.

    Precedence, highest first (as for any Spark application):

    1. what Spark itself was given: ``spark-submit --master``/``--conf``/``--properties-file``,
       ``spark-defaults.conf`` (in ``SPARK_CONF_DIR``), ``PYSPARK_SUBMIT_ARGS`` and the
       ``MASTER`` environment variable. They are read from the JVM's configuration
       once the Py4J gateway runs (in a ``spark-submit`` driver it is ``spark-submit``'s
       own JVM), not from a bare Python ``SparkConf()``, which sees none of them. A
       ``spark-submit`` driver runs on the master ``spark-submit`` chose, its default
       ``local[*]`` included; a plain ``python``/``floodgate`` driver takes ``local[*]``
       as "no master set" (PySpark's launch of the JVM fills it in);
    2. ``master`` and ``conf`` (a query group file's ``[spark]`` section);
    3. :data:`SPARK_DEFAULTS`, and ``spark.redaction.regex``
       (:data:`~pipeline.redaction.SESSION_REDACTION_REGEX`).

    Whatever the layers say, the ``floodgate_kafka`` source's jar
    (:func:`~pipeline.spark.jvm.source_jar`) is appended to ``spark.jars``, after the
    user's jars; a SparkContext that runs already without it gets it through ``ADD JAR``.

    ``PYSPARK_PYTHON`` and ``PYSPARK_DRIVER_PYTHON`` default to this interpreter only
    when the master runs executors on this host (``local[...]``,
    ``local-cluster[...]``); on a cluster the executors' Python is the deployment's
    (``spark.pyspark.python``, ``PYSPARK_PYTHON``; docs/spark-cluster.md).

    When a SparkContext runs already, Spark keeps its static settings and takes the
    SQL ones (``spark.sql.*``) into the session; :func:`spark_settings` tells what was
    applied and from where.

    Raises:
        ConfigError: a value of ``conf`` is not a string, number or boolean; the
            source's jar is missing (a checkout without ``make jar``); or the running
            Spark is not one the jar runs on (:func:`~pipeline.spark.jvm.check_spark_version`).
    """
    from pyspark import SparkConf, SparkContext

    # In a spark-submit driver the JVM is spark-submit's, and says where it is.
    in_spark_submit = "PYSPARK_GATEWAY_PORT" in os.environ
    SparkContext._ensure_initialized()  # the JVM, with spark-submit's settings in it
    given = SparkConf()  # the JVM's: every spark.* system property
    given_keys = {key for key, _ in given.getAll()}
    if not in_spark_submit and given.get("spark.master") == SPARK_SUBMIT_DEFAULT_MASTER:
        # PySpark's own launch of the JVM fills in spark-submit's default master when
        # nothing set one: that is not a choice of the user's.
        given_keys.discard("spark.master")
    effective_master = (
        given.get("spark.master") if "spark.master" in given_keys else None
    ) or master
    if _is_local_master(effective_master):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    layers: list[tuple[str, Mapping[str, Any]]] = [
        ("floodgate", {**SPARK_DEFAULTS, REDACTION_REGEX_KEY: SESSION_REDACTION_REGEX}),
        ("query group", {"spark.master": master, **(conf or {})}),
    ]
    chosen: dict[str, tuple[str, str]] = {}
    for source, values in layers:
        for key, value in values.items():
            if not isinstance(value, str | int | float | bool):
                raise ConfigError(
                    f"spark.conf.{key} = {redact_any(key, value)!r}: Spark settings are "
                    "strings, numbers or booleans",
                    key=f"spark.conf.{key}",
                    value=value,
                    allowed="a string, number or boolean",
                )
            chosen[key] = (str(value).lower() if isinstance(value, bool) else str(value), source)
    builder = SparkSession.builder.appName(app_name)
    for key, (value, _source) in chosen.items():
        if key in given_keys:
            chosen[key] = (str(given.get(key)), "spark")
            continue
        builder = builder.master(value) if key == "spark.master" else builder.config(key, value)
    jar = str(source_jar())
    user_jars = chosen["spark.jars"][0] if "spark.jars" in chosen else given.get("spark.jars", "")
    jars = [j for j in (user_jars or "").split(",") if j.strip()]
    if jar not in jars:
        jars.append(jar)
    builder = builder.config("spark.jars", ",".join(jars))
    spark = builder.getOrCreate()
    check_spark_version(spark.version)
    _load_source_jar(spark, jar)
    spark.sparkContext.setLogLevel("WARN")
    _applied_settings.update(chosen)
    global _redactor
    _redactor = Redactor.from_spark_regex(spark.sparkContext.getConf().get(REDACTION_REGEX_KEY))
    overridden = sorted(k for k, (_, source) in chosen.items() if source == "spark")
    log.info(
        "Spark master %s; Floodgate's settings applied: %s; set by Spark's own "
        "configuration instead: %s",
        spark.sparkContext.master,
        sorted(k for k, (_, source) in chosen.items() if source != "spark"),
        overridden or "none",
    )
    return spark


def _load_source_jar(spark: SparkSession, jar: str) -> None:
    """Make the driver and the executors load ``jar``, whenever the JVM started.

    ``spark.jars`` reaches the driver's class path only when spark-submit launches the
    JVM with it; PySpark's gateway is often up before the session's settings are known
    (:func:`build_spark_session` reads Spark's own configuration from it), and a
    ``spark-submit`` driver's JVM is spark-submit's. So the jar is added to the class
    loader every Py4J thread of the driver shares (spark-submit's
    ``MutableURLClassLoader``, the one ``--jars`` fills), and to the SparkContext's jars
    when it is not among them already (Spark ships those to every executor).
    """
    jvm: Any = spark._jvm
    url = jvm.java.io.File(jar).toURI().toURL()
    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    if loader.getClass().getName().endswith("MutableURLClassLoader") and not any(
        u.equals(url) for u in loader.getURLs()
    ):
        loader.addURL(url)
    context = spark._jsc.sc()
    listed = str(context.listJars().mkString("\n")).splitlines()
    if not any(j.endswith("/" + os.path.basename(jar)) for j in listed):
        context.addJar(jar)


def spark_settings() -> dict[str, dict[str, str]]:
    """The settings :func:`build_spark_session` chose, by key: ``value`` and
    ``source`` (one of :data:`SETTING_SOURCES`: ``spark`` when Spark's own
    configuration set it, which Floodgate then left alone).

    A secret's value (``spark.hadoop.fs.s3a.secret.key``, ``*password*``, a Kafka
    ``sasl.jaas.config``...) is :data:`~pipeline.redaction.REDACTED`, as Spark's UI
    shows it: the keys are those the session's ``spark.redaction.regex`` matches
    (Spark's default when unset) and :data:`~pipeline.redaction.FLOODGATE_REDACTION_REGEX`'s;
    a URL's password elsewhere is ``***`` (:class:`~pipeline.redaction.Redactor`).
    """
    return {
        k: {"value": _redactor.value(k, v), "source": src}
        for k, (v, src) in sorted(_applied_settings.items())
    }

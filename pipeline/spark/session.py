"""The query group's SparkSession: Floodgate's defaults, the user's settings on top."""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from pyspark.sql import SparkSession

from pipeline.config import QueryGroupConfig
from pipeline.errors import ConfigError
from pipeline.redaction import (
    SESSION_REDACTION_REGEX,
    Redactor,
    default_redactor,
    redact_any,
)
from pipeline.spark import real_time
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
    # Real-Time Mode's pipelined shuffle (Spark 4.3) sends a partly filled buffer after
    # this long (50 ms by default): a tuple of a real-time aggregation waits up to that
    # between its read and its write. 10 ms, as Databricks' published Real-Time Mode
    # benchmark sets for its stateful query; micro-batch shuffles do not read it. A
    # setting of the executors' SparkConf, so read once, when the SparkContext starts.
    "spark.shuffle.streaming.networkBufferMaxWaitTimeMs": "10",
}


#: The interface a driver with a local master listens on.
LOOPBACK = "127.0.0.1"

#: Settings Floodgate adds to :data:`SPARK_DEFAULTS` when the master is local
#: (``local[...]``, ``local-cluster[...]``) and neither of them, nor ``SPARK_LOCAL_IP``,
#: is set: the driver's RPC environment and its block manager (whose Netty server binds
#: ``spark.driver.bindAddress`` on the driver, ``SparkEnv.createDriverEnv``) listen on
#: loopback only. Spark's default is the host's own address (``Utils.localHostName``,
#: e.g. ``eth0``'s), which the network reaches.
LOCAL_DRIVER_DEFAULTS: dict[str, str] = {
    "spark.driver.bindAddress": LOOPBACK,
    "spark.driver.host": LOOPBACK,
}

#: The environment variable Spark 4.3 binds its web UI to (``WebUI.bind``: it, else
#: ``0.0.0.0``; no ``spark.ui.*`` setting names the interface), and the default of the
#: driver's host and of ``local-cluster``'s own master and workers.
SPARK_LOCAL_IP = "SPARK_LOCAL_IP"

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


#: Attempts of a task before its job fails, on a local master Floodgate chose
#: (``local[N]`` becomes ``local[N,4]``): ``spark.task.maxFailures``' default on a
#: cluster, which a local master ignores (its default is one attempt). A write task
#: whose transaction met a broker restart fails, and its retry writes its partition
#: with a new producer, as on a cluster.
LOCAL_TASK_ATTEMPTS = 4

_LOCAL_WITHOUT_ATTEMPTS = re.compile(r"local(?:\[(\d+|\*)\])?")


def with_task_retries(master: str) -> str:
    """``master`` with :data:`LOCAL_TASK_ATTEMPTS` when it is ``local``, ``local[N]`` or
    ``local[*]`` (a master that names its attempts, ``local[N,F]``, or another master is
    returned as it is)."""
    found = _LOCAL_WITHOUT_ATTEMPTS.fullmatch(master.strip())
    if found is None:
        return master
    return f"local[{found.group(1) or 1},{LOCAL_TASK_ATTEMPTS}]"


def _is_local_master(master: str) -> bool:
    """Executors on this host: ``local``, ``local[N]``, ``local[N,F]``, ``local-cluster[...]``."""
    return master == "local" or master.startswith(("local[", "local-cluster["))


def build_spark_session(
    *,
    app_name: str = "floodgate",
    master: str = "local[2]",
    conf: Mapping[str, Any] | None = None,
    allow_unauthenticated: bool = False,
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

    A local master Floodgate sets (``local``, ``local[N]``, ``local[*]``) gets
    :data:`LOCAL_TASK_ATTEMPTS` attempts per task, as a cluster has
    (:func:`with_task_retries`).

    On a local master the driver listens on loopback only: :data:`LOCAL_DRIVER_DEFAULTS`
    join the defaults, and a JVM this function launches itself runs with
    ``SPARK_LOCAL_IP=127.0.0.1`` (the web UI's interface, when it is on), unless the
    user set ``SPARK_LOCAL_IP``. On any other master, :func:`check_cluster_security`
    decides, before the SparkContext starts.

    Args:
        app_name: ``spark.app.name``.
        master: the query group's ``[spark] master``.
        conf: the query group's ``[spark] conf``.
        allow_unauthenticated: ``[query_group] allow_unauthenticated_spark``.

    Raises:
        ConfigError: a value of ``conf`` is not a string, number or boolean; a cluster
            driver without Spark's RPC authentication (:func:`check_cluster_security`);
            the source's jar is missing (a checkout without ``make jar``); or the running
            Spark is not one the jar runs on (:func:`~pipeline.spark.jvm.check_spark_version`).
    """
    from pyspark import SparkContext

    # In a spark-submit driver the JVM is spark-submit's, and says where it is.
    in_spark_submit = "PYSPARK_GATEWAY_PORT" in os.environ
    launches_jvm = SparkContext._gateway is None and not in_spark_submit
    # The JVM, with spark-submit's settings in it; on loopback when the file's master
    # is local, since a JVM's environment is fixed once it runs.
    on_loopback = _start_jvm(loopback=launches_jvm and _is_local_master(master))
    given, given_keys, effective_master = _spark_given(master, in_spark_submit=in_spark_submit)
    if on_loopback and not _is_local_master(effective_master):
        # Spark's own configuration names a cluster: its executors must reach the driver.
        _stop_jvm()
        _start_jvm(loopback=False)
        given, given_keys, effective_master = _spark_given(master, in_spark_submit=False)
    jvm: Any = SparkContext._jvm
    local_ip = jvm.java.lang.System.getenv(SPARK_LOCAL_IP)
    defaults = dict(SPARK_DEFAULTS)
    if _is_local_master(effective_master):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        user_set = given_keys | set(conf or {})
        if (on_loopback or not local_ip) and not user_set & set(LOCAL_DRIVER_DEFAULTS):
            defaults.update(LOCAL_DRIVER_DEFAULTS)
    layers: list[tuple[str, Mapping[str, Any]]] = [
        ("floodgate", {**defaults, REDACTION_REGEX_KEY: SESSION_REDACTION_REGEX}),
        ("query group", {"spark.master": with_task_retries(master), **(conf or {})}),
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
    settings = {key: value for key, (value, _source) in chosen.items()}
    settings.update((key, str(given.get(key))) for key in given_keys)
    arguments = jvm.java.lang.ProcessHandle.current().info().arguments().orElse(None)
    check_cluster_security(
        effective_master,
        settings,
        jvm_arguments=[str(a) for a in arguments or []],
        allow_unauthenticated=allow_unauthenticated,
    )
    if settings.get("spark.ui.enabled", "true").strip().lower() == "true" and not local_ip:
        log.warning(
            "spark.ui.enabled=true: Spark binds its web UI to %s, which this driver's "
            "JVM does not have, so to every interface; set %s=127.0.0.1 (or the "
            "interface to serve it on) in the driver's environment (spark-submit's)",
            SPARK_LOCAL_IP,
            SPARK_LOCAL_IP,
        )
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


def _start_jvm(*, loopback: bool) -> bool:
    """Start PySpark's JVM (the Py4J gateway) unless it runs.

    Args:
        loopback: launch it with ``SPARK_LOCAL_IP=127.0.0.1`` when the environment has
            no ``SPARK_LOCAL_IP``: Spark's web UI binds to it (``WebUI.bind``), and the
            driver's host and ``local-cluster``'s master and workers default to it.

    Returns:
        Whether the JVM was launched with Floodgate's ``SPARK_LOCAL_IP``.
    """
    from pyspark import SparkContext

    if SparkContext._gateway is not None or not loopback or SPARK_LOCAL_IP in os.environ:
        SparkContext._ensure_initialized()
        return False
    # PySpark's launch_gateway takes the JVM's environment from os.environ, nowhere else.
    os.environ[SPARK_LOCAL_IP] = LOOPBACK
    try:
        SparkContext._ensure_initialized()
    finally:
        del os.environ[SPARK_LOCAL_IP]
    return True


def _stop_jvm() -> None:
    """Stop the JVM :func:`_start_jvm` launched, before any SparkContext ran in it: it
    exits when its standard input closes (``PythonGatewayServer``)."""
    from pyspark import SparkContext

    gateway: Any = SparkContext._gateway
    gateway.shutdown()
    process = getattr(gateway, "proc", None)
    if process is not None:
        process.stdin.close()
        process.wait()
    SparkContext._gateway = None
    SparkContext._jvm = None


def _spark_given(master: str, *, in_spark_submit: bool) -> tuple[Any, set[str], str]:
    """What Spark's own configuration set, read from the running JVM: its
    ``SparkConf`` (every ``spark.*`` system property), the keys it set, and the master
    the driver runs on (``master`` when Spark's configuration names none)."""
    from pyspark import SparkConf

    given = SparkConf()
    given_keys = {key for key, _ in given.getAll()}
    if not in_spark_submit and given.get("spark.master") == SPARK_SUBMIT_DEFAULT_MASTER:
        # PySpark's own launch of the JVM fills in spark-submit's default master when
        # nothing set one: that is not a choice of the user's.
        given_keys.discard("spark.master")
    effective = (given.get("spark.master") if "spark.master" in given_keys else None) or master
    return given, given_keys, effective


def check_cluster_security(
    master: str,
    settings: Mapping[str, str],
    *,
    jvm_arguments: Sequence[str] = (),
    allow_unauthenticated: bool = False,
) -> None:
    """Refuse a cluster driver that anyone on the network could talk to as an executor.

    A driver on a local master listens on loopback only (:data:`LOCAL_DRIVER_DEFAULTS`)
    and is not checked. On any other master Spark's RPC must be authenticated
    (``spark.authenticate=true``; Spark's security guide: on a network you do not
    trust), with a secret Spark takes and no one reads from a file or a command line:

    * ``yarn``: none to give, Spark makes one per application (``SecurityManager``);
    * ``k8s://``: ``spark.authenticate.secret.file``, or both
      ``spark.authenticate.secret.driver.file`` and ``.executor.file`` (a mounted
      Secret; without one Spark puts its own in the executor pods' environment);
    * any other (standalone ``spark://``): ``spark.authenticate.secret`` from Spark's
      own configuration, ``spark-defaults.conf`` of every node (Spark requires that
      key there), never from a ``--conf`` in the JVM's arguments, where ``ps`` shows
      it to every user of the host.

    Without ``spark.network.crypto.enabled=true`` a warning says the traffic is not
    encrypted.

    Args:
        master: the master the driver runs on.
        settings: the session's Spark settings, after precedence.
        jvm_arguments: the driver JVM's command line (``--conf`` and ``-D`` land there).
        allow_unauthenticated: ``[query_group] allow_unauthenticated_spark``: an
            unauthenticated cluster driver starts, with a warning.

    Raises:
        ConfigError: naming ``spark.authenticate`` or the secret's setting, and
            ``query_group.allow_unauthenticated_spark``.
    """
    secret_key = "spark.authenticate.secret"
    if any(secret_key + "=" in argument for argument in jvm_arguments):
        raise ConfigError(
            f"{secret_key} is on the driver JVM's command line (spark-submit --conf, "
            "PYSPARK_SUBMIT_ARGS, -D), which ps shows to every user of the host; give "
            "it in spark-defaults.conf (mode 0600) instead",
            key=secret_key,
            allowed="spark-defaults.conf, or spark.authenticate.secret.file",
        )
    if _is_local_master(master):
        return

    def on(key: str) -> bool:
        return settings.get(key, "false").strip().lower() == "true"

    allow_key = "query_group.allow_unauthenticated_spark"
    if not on("spark.authenticate"):
        if allow_unauthenticated:
            log.warning(
                "Spark master %s without spark.authenticate (%s = true): whoever reaches "
                "the driver's or an executor's ports talks to them as an executor would",
                master,
                allow_key,
            )
            return
        raise ConfigError(
            f"Spark master {master} without spark.authenticate=true: whoever reaches "
            "the driver's or an executor's ports could talk to them as an executor; "
            "set spark.authenticate=true with a secret (docs/spark-cluster.md), or "
            f"{allow_key} = true to run unauthenticated",
            key="spark.authenticate",
            value=settings.get("spark.authenticate"),
            allowed=f"true, or {allow_key} = true",
        )
    if master == "yarn":
        pass
    elif master.startswith("k8s://"):
        files = ("spark.authenticate.secret.driver.file", "spark.authenticate.secret.executor.file")
        if "spark.authenticate.secret.file" not in settings and not all(
            key in settings for key in files
        ):
            raise ConfigError(
                f"Spark master {master}: spark.authenticate needs its secret from a file "
                "on Kubernetes (spark.authenticate.secret.file, a mounted Secret); without "
                "one Spark puts it in the executor pods' environment",
                key="spark.authenticate.secret.file",
                allowed="spark.authenticate.secret.file, or both "
                + " and ".join(files)
                + f", or {allow_key} = true without spark.authenticate",
            )
    elif secret_key not in settings:
        raise ConfigError(
            f"Spark master {master}: spark.authenticate needs {secret_key}, in "
            "spark-defaults.conf (mode 0600) of the driver's SPARK_CONF_DIR and of "
            "every master and worker",
            key=secret_key,
            allowed=f"{secret_key} in spark-defaults.conf, or {allow_key} = true "
            "without spark.authenticate",
        )
    if not on("spark.network.crypto.enabled"):
        log.warning(
            "Spark master %s: spark.network.crypto.enabled is off: the traffic between "
            "the driver and the executors (tasks, their results, the Kafka client "
            "settings) is authenticated but not encrypted; set it to true",
            master,
        )


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


def group_session(config: QueryGroupConfig, parent: SparkSession | None = None) -> SparkSession:
    """A query group's own SparkSession: a child session of ``parent`` (default: one
    :func:`build_spark_session` makes from the ``[spark]`` section), so the temporary
    views and listeners of two groups sharing a SparkContext never mix; with the
    group's ``no_data_micro_batches``, and a real-time group's session settings
    (:func:`~pipeline.spark.real_time.session_settings`)."""
    parent = parent or build_spark_session(
        app_name=f"floodgate-{config.name}",
        master=config.spark.master,
        conf=config.spark.conf,
        allow_unauthenticated=config.query_group.allow_unauthenticated_spark,
    )
    spark = parent.newSession()
    spark.conf.set(
        "spark.sql.streaming.noDataMicroBatches.enabled",
        str(config.query_group.no_data_micro_batches).lower(),
    )
    if config.query_group.real_time:
        for key, value in real_time.session_settings(config).items():
            spark.conf.set(key, value)
    return spark

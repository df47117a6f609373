"""Spark's own Kafka connector (``format("kafka")``) and Avro module, fetched from
Maven Central with Maven on first use, for what measures or checks Floodgate against
them: the benchmark's Spark-native peer (``bench/bench_spark_kafka.py``) and the test
that runs one query on ``format("kafka")`` and on ``format("floodgate_kafka")``
(``tests/integration/spark/test_spark_connector_compare.py``). Floodgate itself never
loads them.

``org.apache.spark:spark-sql-kafka-0-10_2.13`` and ``spark-avro_2.13`` are copied with
what they add to Spark by Maven's ``dependency:copy-dependencies`` goal, run on the
``pom.xml`` shipped beside this module, into ``<cache>/spark-kafka-<version>/jars``
(the cache of :func:`pipeline.brokers.apache_kafka.artifacts.cache_dir`, with its
Maven repository ``<cache>/m2``); a second process asking for the same version waits
on a file lock while the first one fetches, as for Apache Kafka's jars.
"""

from __future__ import annotations

import re
from pathlib import Path

from pipeline.brokers.apache_kafka.artifacts import cache_dir
from pipeline.brokers.maven import copy_dependencies

#: The newest Spark whose ``spark-sql-kafka-0-10_2.13`` and ``spark-avro_2.13`` Maven
#: Central serves (4.2.1 and 4.3.0 were not there, checked 2026-11-25 and 2026-11-26).
SPARK_CONNECTOR_VERSION = "4.2.0"

#: How long one Maven fetch of the connector may take, seconds (cold: ~20-60 s).
FETCH_TIMEOUT_S = 900.0


def connector_dir(version: str = SPARK_CONNECTOR_VERSION, *, cache: Path | None = None) -> Path:
    """``<cache>/spark-kafka-<version>/jars``: where the connector's jars are fetched to
    (``cache``: default :func:`~pipeline.brokers.apache_kafka.artifacts.cache_dir`,
    ``~/.cache/floodgate``, outside any checkout)."""
    return (cache or cache_dir()) / f"spark-kafka-{version}" / "jars"


def fetch_connector(
    version: str = SPARK_CONNECTOR_VERSION,
    *,
    cache: Path | None = None,
    timeout_s: float = FETCH_TIMEOUT_S,
) -> Path:
    """Spark's Kafka connector and Avro module of ``version`` and what they add to
    Spark, fetched with Maven into :func:`connector_dir` unless already there.

    Returns:
        The directory of the jars (pass those :func:`jars_spark_lacks` names to
        ``spark.jars``).

    Raises:
        BrokerError: no ``mvn`` on PATH (names the command that installs it), or Maven
            failed or timed out (with the tail of its output).
    """
    return copy_dependencies(
        connector_dir(version, cache=cache),
        package="pipeline.brokers.spark_connector",
        properties={"spark.version": version, "includeScope": "runtime"},
        expect=f"spark-sql-kafka-*{version}.jar",
        what=f"Spark's Kafka connector {version}",
        version=version,
        timeout_s=timeout_s,
    )


def jar_artifact(jar: str) -> str:
    """``kafka-clients`` of ``kafka-clients-3.9.2.jar``: a jar's name without its version."""
    return re.sub(r"-\d[^-]*\.jar$", "", jar)


def jars_spark_lacks(jars: Path, spark_jars: Path) -> list[str]:
    """The jars of ``jars`` whose artifact the Spark in ``spark_jars`` (a pyspark's
    ``jars`` directory) does not ship: Maven brings Scala, Hadoop's client, lz4 and
    snappy in other versions than Spark's own, and ``--packages`` users get them
    resolved against Spark's.

    Returns:
        Absolute paths, sorted: the connector, spark-avro, kafka-clients,
        commons-pool2, spark-token-provider-kafka.
    """
    shipped = {jar_artifact(p.name) for p in spark_jars.glob("*.jar")}
    return sorted(str(p) for p in jars.glob("*.jar") if jar_artifact(p.name) not in shipped)

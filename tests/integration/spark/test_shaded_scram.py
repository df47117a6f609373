"""The ``floodgate_kafka`` source of the shaded jar on a SASL/SCRAM cluster, its
``kafka.sasl.jaas.config`` written as for Spark's Kafka source: Kafka's standard
``org.apache.kafka.common.security.scram.ScramLoginModule``.

The jar relocates kafka-clients under ``io.floodgate.shaded``, so that name is a class
the jar does not hold; the source maps it to the relocated one (``ShadedClassNames``),
and without that mapping the client cannot log in. SCRAM runs on Apache Kafka's own
broker (``--add-scram`` credentials): noida-db has no SASL, so this test starts an
Apache Kafka cluster of its own, so it runs on the Apache Kafka pass only (once in CI).
"""

from __future__ import annotations

import uuid
import zipfile
from collections.abc import Iterator
from typing import Any, Final

import pytest
from confluent_kafka import Producer

from pipeline.brokers.apache_kafka import ApacheKafkaCluster
from pipeline.kafka.topics import ensure_topics
from pipeline.spark.jvm import source_jar
from pipeline.spark.options import SOURCE_NAME

USER = "scram-reader"
PASSWORD = "scram-test-password"
MECHANISM: Final = "SCRAM-SHA-256"

#: It starts its own SCRAM cluster of Apache Kafka: once per CI run is enough.
pytestmark = pytest.mark.apache_kafka

#: Spark's Kafka source's JAAS line for SCRAM, with Kafka's own class name.
JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    f'username="{USER}" password="{PASSWORD}";'
)


@pytest.fixture(scope="module")
def scram_cluster() -> Iterator[ApacheKafkaCluster]:
    cluster = ApacheKafkaCluster(sasl_users={USER: PASSWORD}, sasl_mechanism=MECHANISM)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def test_the_shaded_jar_reads_with_kafkas_standard_scram_login_module(
    spark: Any, scram_cluster: ApacheKafkaCluster
) -> None:
    with zipfile.ZipFile(source_jar()) as jar:
        names = set(jar.namelist())
    assert "io/floodgate/shaded/org/apache/kafka/clients/consumer/KafkaConsumer.class" in names
    assert "org/apache/kafka/clients/consumer/KafkaConsumer.class" not in names

    bootstrap = scram_cluster.bootstrap_servers
    client = scram_cluster.client_config(USER)
    assert client["sasl.mechanism"] == MECHANISM
    topic = f"scram.{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, {topic: (2, None)}, client=client)
    producer = Producer({"bootstrap.servers": bootstrap, **client})
    for i in range(10):
        producer.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0

    session = spark.newSession()
    df = (
        session.readStream.format(SOURCE_NAME)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("kafka.security.protocol", "SASL_PLAINTEXT")
        .option("kafka.sasl.mechanism", MECHANISM)
        .option("kafka.sasl.jaas.config", JAAS)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
    )
    name = f"scram_{uuid.uuid4().hex[:8]}"
    query = df.writeStream.format("memory").queryName(name).trigger(availableNow=True).start()
    try:
        query.awaitTermination(180)
        assert query.exception() is None, query.exception()
        rows = session.sql(f"SELECT key, value FROM {name} ORDER BY partition, offset").collect()
    finally:
        query.stop()
    assert sorted(bytes(r.value).decode() for r in rows) == sorted(f"v{i}" for i in range(10))

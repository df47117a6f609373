"""Apache Kafka's own broker for Floodgate's ``apache-kafka`` engine.

* :mod:`pipeline.brokers.apache_kafka.artifacts`: the broker's jars, fetched from Maven
  Central with Maven on first use into a cache directory;
* :mod:`pipeline.brokers.apache_kafka.config`: what the nodes start from: each node's
  ``server.properties``, the cluster's layout kept across restarts, its SASL users;
* :mod:`pipeline.brokers.apache_kafka.processes`: the nodes' JVMs: formatting, starting,
  why one exited, stopping by PID;
* :mod:`pipeline.brokers.apache_kafka.cluster`: a single KRaft node or a 3-node cluster
  (:class:`ApacheKafkaCluster`), and what its metadata says (leaders, coordinators,
  in-sync replicas).

``floodgate broker --engine apache-kafka [--nodes 3]`` runs it in the foreground;
:func:`pipeline.brokers.local.local_broker` starts it from Python (the tests' fixtures).

May import: pipeline.brokers, pipeline.errors, pipeline.kafka and pipeline.state.
"""

from pipeline.brokers.apache_kafka.artifacts import APACHE_KAFKA_VERSION, cache_dir, kafka_libs
from pipeline.brokers.apache_kafka.cluster import ApacheKafkaCluster
from pipeline.brokers.apache_kafka.config import KafkaNode, broker_properties

__all__ = [
    "APACHE_KAFKA_VERSION",
    "ApacheKafkaCluster",
    "KafkaNode",
    "broker_properties",
    "cache_dir",
    "kafka_libs",
]

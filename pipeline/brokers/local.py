"""Kafka bootstrap resolution, the brokers Floodgate starts, topic creation, and an
idle reader's rest (:func:`rest_until_records`, :func:`resume_fetching`).

Two engines can be started here (:func:`local_broker`), chosen by ``engine`` or
``FLOODGATE_KAFKA_ENGINE``:

* ``noida-db`` (the default): the embedded Kafka-protocol broker, a binary from PyPI
  (pinned in ``pyproject.toml``), started with only its Kafka service on a free
  loopback port and a temporary data directory, waited on until it answers a
  metadata request, and stopped by its PID (after asking it to save and stop its
  Kafka service when the data directory is kept: :meth:`EmbeddedBroker.stop`). It
  needs Python and Java alone.
* ``apache-kafka``: Apache Kafka's own broker (KRaft), one node or a 3-node cluster,
  from Maven Central jars fetched with Maven on first use
  (:class:`pipeline.brokers.apache_kafka.ApacheKafkaCluster`).

Resolution order, by :func:`resolve_broker`:

1. ``FLOODGATE_KAFKA_BOOTSTRAP`` (or an explicit ``bootstrap_servers``): use that
   cluster as it is;
2. an engine named by the caller or by ``FLOODGATE_KAFKA_ENGINE``: start it;
3. a Docker engine that answers: testcontainers' Kafka container (KRaft);
4. otherwise the embedded broker.

Nothing else in Floodgate may depend on which of them it got; where the embedded
broker needs a workaround that Apache Kafka does not, the workaround says so
(``docs/kafka-engines.md`` lists them).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from pipeline.brokers.embedded import EmbeddedBroker
from pipeline.brokers.engines import ENGINE_ENV, KafkaEngine, kafka_engine, wait_for_broker
from pipeline.config import BOOTSTRAP_ENV
from pipeline.errors import ConfigError

if TYPE_CHECKING:
    from pipeline.brokers.apache_kafka import ApacheKafkaCluster


#: How a cluster was found: named (``external``), a Docker container, or started here.
BrokerKind = Literal["external", "docker", "embedded"]


@dataclass
class Broker:
    """A resolved Kafka cluster.

    Attributes:
        bootstrap_servers: ``host:port[,...]`` to hand to every client.
        kind: how it was resolved: ``external``, ``docker`` or ``embedded`` (started
            here, by either engine).
        embedded: the broker started here, when ``kind == "embedded"``.
        engine: its engine, when started here.
    """

    bootstrap_servers: str
    kind: BrokerKind
    embedded: LocalBroker | None = None
    _stop: Any = field(default=None, repr=False)

    @property
    def engine(self) -> KafkaEngine | None:
        return self.embedded.engine if self.embedded is not None else None

    def stop(self) -> None:
        """Stop what was started for this resolution (nothing for ``external``)."""
        if self._stop is not None:
            stop, self._stop = self._stop, None
            stop()


def docker_available(timeout_s: float = 2.0) -> bool:
    """Whether a Docker engine answers a ping."""
    try:
        import docker

        client = docker.from_env(timeout=timeout_s)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:
        return False


#: A broker Floodgate starts and stops itself, of either engine. Both have
#: ``start()``, ``stop(remove_data=...)``, ``bootstrap_servers``, ``pid``,
#: ``data_dir``, ``output_tail()`` and ``engine``.
LocalBroker: TypeAlias = "EmbeddedBroker | ApacheKafkaCluster"


def local_broker(
    engine: str | None = None,
    *,
    nodes: int = 1,
    data_dir: str | Path | None = None,
    port: int | None = None,
    env: Mapping[str, str] | None = None,
) -> LocalBroker:
    """A broker of ``engine`` (see :func:`kafka_engine`), not started yet.

    Args:
        nodes: brokers in the cluster; ``noida-db`` runs one only.
        data_dir: kept data directory (restart on it); ``None``: a temporary one,
            removed on ``stop()``.
        port: the (first) broker's port; ``None``: a free loopback port.

    Raises:
        ConfigError: an unknown engine, or ``nodes != 1`` for ``noida-db``.
    """
    chosen = kafka_engine(engine, env=env)
    if chosen == "apache-kafka":
        from pipeline.brokers.apache_kafka import ApacheKafkaCluster

        return ApacheKafkaCluster(nodes=nodes, data_dir=data_dir, port=port)
    if nodes != 1:
        raise ConfigError(
            f"nodes={nodes}: the noida-db engine runs a single broker; "
            "use the apache-kafka engine for a cluster",
            key="nodes",
            value=nodes,
            allowed="1 for noida-db",
        )
    return EmbeddedBroker(data_dir=data_dir, port=port)


def resolve_broker(
    bootstrap_servers: str | None = None,
    *,
    engine: str | None = None,
    env: Mapping[str, str] | None = None,
    use_docker: bool = True,
    timeout_s: float = 15.0,
    client: Mapping[str, Any] | None = None,
) -> Broker:
    """Find or start a Kafka cluster, in the order of the module docstring.

    Args:
        bootstrap_servers: an explicit cluster (e.g. ``--bootstrap``); wins over
            the environment.
        engine: the engine to start when no cluster is named (``noida-db`` or
            ``apache-kafka``); default ``FLOODGATE_KAFKA_ENGINE``, else Docker if an
            engine answers, else ``noida-db``.
        env: environment (default ``os.environ``), read for ``FLOODGATE_KAFKA_BOOTSTRAP``
            and ``FLOODGATE_KAFKA_ENGINE``.
        use_docker: try a Docker engine before the embedded broker.
        timeout_s: how long a named cluster may take to answer, seconds.
        client: extra librdkafka properties (``[kafka] client``: ``security.protocol``,
            ``sasl.*``, ``ssl.*``) for asking a named cluster whether it answers.

    Returns:
        The resolved :class:`Broker`; call :meth:`Broker.stop` when done.

    Raises:
        BrokerError: the named cluster does not answer, or nothing could be started.
        ConfigError: an unknown engine.
    """
    env = os.environ if env is None else env
    explicit = bootstrap_servers or env.get(BOOTSTRAP_ENV)
    if explicit:
        wait_for_broker(explicit, timeout_s=timeout_s, client=client or {})
        return Broker(explicit, "external")
    if engine or env.get(ENGINE_ENV):
        started = local_broker(engine, env=env).start()
        return Broker(started.bootstrap_servers, "embedded", embedded=started, _stop=started.stop)
    if use_docker and docker_available() and importlib.util.find_spec("testcontainers"):
        # testcontainers comes with the `docker` extra (pip install 'floodgate[docker]').
        from testcontainers.kafka import KafkaContainer

        container = KafkaContainer().with_kraft()
        container.start()
        return Broker(container.get_bootstrap_server(), "docker", _stop=container.stop)
    embedded = EmbeddedBroker().start()
    return Broker(embedded.bootstrap_servers, "embedded", embedded=embedded, _stop=embedded.stop)


@contextlib.contextmanager
def broker_session(bootstrap_servers: str | None = None, **kwargs: Any) -> Iterator[Broker]:
    """Context manager around :func:`resolve_broker` that stops what it started."""
    broker = resolve_broker(bootstrap_servers, **kwargs)
    try:
        yield broker
    finally:
        broker.stop()

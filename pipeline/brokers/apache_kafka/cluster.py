"""Apache Kafka's own broker, run by Floodgate: one KRaft node, or a 3-node cluster.

Each node is one JVM running ``kafka.Kafka`` with ``process.roles=broker,controller``
(KRaft combined mode) on loopback (or, with ``node_hosts``, each on an address of its
own, e.g. in a network namespace of its own), its controller quorum fixed by
``controller.quorum.voters``. A node's log directory is formatted with Kafka's
``StorageTool`` on its first start and kept across restarts. Clients reach the
cluster at :attr:`ApacheKafkaCluster.bootstrap_servers`; every node is stopped by its
PID.

Layout of the data directory::

    <data_dir>/cluster.json          cluster id and ports, reused by a restart
    <data_dir>/node-<id>/server.properties
    <data_dir>/node-<id>/broker.log  what the JVM printed
    <data_dir>/node-<id>/logs/       the node's log directory (log.dirs)

Every file and folder in it is ours alone (the log directories hold every
tuple): the folders 0700, the files Floodgate writes 0600
(:func:`pipeline.state.files.private_file`), and the JVMs (``StorageTool``, each
node) run with umask 077, so what Kafka writes is 0600 too. An existing data folder
that others can enter is set to 0700; one others can write to, or another user owns,
is refused (:func:`pipeline.brokers.engines.private_data_dir`).

Broker settings (:func:`broker_properties`) are Kafka's defaults but for what a test
machine of 2 cores needs, each said where it is set. With ``sasl_users`` the client
listener is ``SASL_PLAINTEXT`` with mechanism ``PLAIN`` (KIP-43; Kafka's
``PlainLoginModule``), so a client must authenticate as one of those users
(:meth:`ApacheKafkaCluster.client_config`); with ``sasl_mechanism`` SCRAM the
clients authenticate with SCRAM (KIP-84), the users' credentials written by
``StorageTool format --add-scram`` (KIP-900), while the brokers keep PLAIN among
themselves. The KRaft controller listener stays PLAINTEXT on loopback. A 3-node
cluster creates topics with replication factor 3 and ``min.insync.replicas=2`` by
default, so a producer with ``acks=all`` keeps writing while any one node is down.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any, Literal

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from pipeline.brokers.apache_kafka.artifacts import APACHE_KAFKA_VERSION, java_command, kafka_libs
from pipeline.brokers.engines import private_data_dir, spawn_broker
from pipeline.errors import BrokerError, ConfigError
from pipeline.kafka.clients import kafka_settings
from pipeline.state.files import PRIVATE_UMASK, write_private_text

log = logging.getLogger(__name__)

#: A node's log line naming the active controller: ``[time] ... (id: N ...``.
_CONTROLLER_LINE = re.compile(r"^\[([^\]]+)\].*Recorded new KRaft controller.*\(id: (\d+)")

#: How long a cluster may take to format and start, seconds, after its jars are cached.
#: A single node answers in 5-10 s here; three JVMs on 2 cores take 20-40 s.
START_TIMEOUT_S = 90.0

#: The JVM's heap per node, MiB. Kafka's own scripts default to 1 GiB; half is plenty
#: for a test cluster and keeps three nodes beside Spark on one machine.
HEAP_MB = 512


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _cluster_id() -> str:
    """A KRaft cluster id: a UUID, URL-safe base64 without padding (as
    ``kafka-storage.sh random-uuid`` prints)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode()`` of ``text``: ``s[0]*31^(n-1) + ... + s[n-1]`` over
    its UTF-16 code units, as a signed 32-bit int."""
    h = 0
    units = text.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def coordinator_partition(key: str, partitions: int) -> int:
    """The partition of an internal topic that holds consumer group or transactional id
    ``key``: ``Utils.abs(key.hashCode()) % partitions``, as Kafka's
    ``GroupCoordinator.partitionFor`` (``__consumer_offsets``) and
    ``TransactionStateManager.partitionFor`` (``__transaction_state``) compute it
    (``Utils.abs`` maps ``Integer.MIN_VALUE`` to 0). Its leader is the key's coordinator.
    """
    h = java_string_hash(key)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


@dataclass
class KafkaNode:
    """One JVM of the cluster: a combined KRaft controller and broker.

    Attributes:
        node_id: ``node.id`` (1-based).
        port: the broker's listener (what clients connect to).
        controller_port: the controller's listener (KRaft quorum traffic only).
        directory: ``<data_dir>/node-<node_id>``.
        process: the running JVM, while it runs.
        host: the node's own address (``None``: the cluster's ``host``).
        command_prefix: words run before the JVM's command, e.g.
            ``("ip", "netns", "exec", "<namespace>")`` for a node in a network
            namespace of its own (empty: the JVM runs as it is).
    """

    node_id: int
    port: int
    controller_port: int
    directory: Path
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    host: str | None = None
    command_prefix: tuple[str, ...] = ()

    @property
    def pid(self) -> int | None:
        """The JVM's PID while it runs."""
        process = self.process
        return process.pid if process is not None and process.poll() is None else None

    @property
    def log_path(self) -> Path:
        return self.directory / "broker.log"

    @property
    def properties_path(self) -> Path:
        return self.directory / "server.properties"


#: The SASL mechanisms a cluster's clients may be asked to use (``sasl_mechanism``).
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
SASL_MECHANISMS: tuple[SaslMechanism, ...] = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

#: The user the brokers authenticate as to each other on a SASL listener.
INTER_BROKER_USER = "floodgate-broker"

_SASL_USER = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


def check_sasl_users(users: Mapping[str, str]) -> None:
    """Refuse SASL/PLAIN users that Kafka's JAAS config could not carry.

    Raises:
        ConfigError: no user; a name that is not 1-64 of ``A-Z a-z 0-9 . _ -``, or
            the brokers' own :data:`INTER_BROKER_USER`; an empty password, or one
            with a quote, a backslash or a character that is not printable ASCII
            (a JAAS option value is a quoted string). Names the user, never the
            password.
    """
    if not users:
        raise ConfigError(
            "sasl_users: at least one user is needed for a SASL listener",
            key="sasl_users",
            allowed="one or more name:password pairs",
        )
    for name, password in users.items():
        if not _SASL_USER.match(name) or name == INTER_BROKER_USER:
            raise ConfigError(
                f"SASL user {name!r}: a name is 1-64 of A-Z a-z 0-9 . _ - "
                f"(and not {INTER_BROKER_USER!r}, the brokers' own)",
                key="sasl_users",
                value=name,
                allowed="1-64 of A-Z a-z 0-9 . _ -",
            )
        if (
            not password
            or not password.isascii()
            or not password.isprintable()
            or any(c in password for c in '"\\')
        ):
            raise ConfigError(
                f"SASL user {name!r}: the password must be non-empty printable ASCII "
                "without a quote or a backslash (Kafka's JAAS config quotes it)",
                key="sasl_users",
                allowed='non-empty printable ASCII without " or \\',
            )


def broker_properties(
    node: KafkaNode,
    nodes: list[KafkaNode],
    *,
    host: str,
    overrides: Mapping[str, str] = {},
    sasl_users: Mapping[str, str] | None = None,
    sasl_mechanism: SaslMechanism = "PLAIN",
) -> dict[str, str]:
    """The ``server.properties`` of one node of an ``n``-node cluster.

    ``sasl_users`` (``{name: password}``, :data:`INTER_BROKER_USER` among them): the
    client listener is ``SASL_PLAINTEXT`` with the ``PLAIN`` mechanism only, these
    users in its JAAS config (Kafka's ``PlainLoginModule``: ``user_<name>="<password>"``),
    and the brokers talk to each other on it as :data:`INTER_BROKER_USER`. With
    ``sasl_mechanism`` ``SCRAM-SHA-256`` or ``-512`` that mechanism is enabled too,
    with Kafka's ``ScramLoginModule`` (the credentials are in the cluster's metadata,
    :meth:`ApacheKafkaCluster.start` writes them); the brokers still use PLAIN.

    Kafka's defaults, except:

    * listeners on ``host`` only (loopback by default), PLAINTEXT (or SASL_PLAINTEXT
      with ``sasl_users``; the controller listener stays PLAINTEXT);
    * ``group.initial.rebalance.delay.ms=0``: a consumer group's first member gets its
      partitions at once instead of after 3 s (Kafka's own quickstart config does
      the same);
    * ``offsets.topic.num.partitions`` and ``transaction.state.log.num.partitions`` 10
      instead of 50: the internal topics are created on first use, and 50 partitions
      (x3 replicas) cost seconds of a 2-core machine;
    * the internal topics' replication and ``min.insync.replicas``: 1 on a single
      node (the only possible value), Kafka's production values (3 and 2) on three;
    * ``default.replication.factor`` = the number of nodes, at most 3, and
      ``min.insync.replicas=2`` when there are three: what topics Floodgate creates
      with the broker's default replication get.
    """
    n = len(nodes)
    replicas = min(n, 3)
    min_isr = 2 if replicas >= 3 else 1
    voters = ",".join(f"{x.node_id}@{x.host or host}:{x.controller_port}" for x in nodes)
    host = node.host or host
    properties = {
        "process.roles": "broker,controller",
        "node.id": str(node.node_id),
        "controller.quorum.voters": voters,
        "listeners": f"PLAINTEXT://{host}:{node.port},CONTROLLER://{host}:{node.controller_port}",
        "advertised.listeners": f"PLAINTEXT://{host}:{node.port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(node.directory / "logs"),
        "group.initial.rebalance.delay.ms": "0",
        "offsets.topic.num.partitions": "10",
        "transaction.state.log.num.partitions": "10",
        "offsets.topic.replication.factor": str(replicas),
        "transaction.state.log.replication.factor": str(replicas),
        "transaction.state.log.min.isr": str(min_isr),
        "share.coordinator.state.topic.replication.factor": str(replicas),
        "share.coordinator.state.topic.min.isr": str(min_isr),
        "default.replication.factor": str(replicas),
        "min.insync.replicas": str(min_isr),
    }
    if sasl_users is not None:
        own = sasl_users[INTER_BROKER_USER]
        jaas = " ".join(
            [
                "org.apache.kafka.common.security.plain.PlainLoginModule required",
                f'username="{INTER_BROKER_USER}" password="{own}"',
                *(f'user_{name}="{password}"' for name, password in sasl_users.items()),
            ]
        )
        properties.update(
            {
                "listeners": f"SASL_PLAINTEXT://{host}:{node.port},"
                f"CONTROLLER://{host}:{node.controller_port}",
                "advertised.listeners": f"SASL_PLAINTEXT://{host}:{node.port}",
                "inter.broker.listener.name": "SASL_PLAINTEXT",
                "listener.security.protocol.map": (
                    "CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT"
                ),
                "sasl.enabled.mechanisms": "PLAIN",
                "sasl.mechanism.inter.broker.protocol": "PLAIN",
                "listener.name.sasl_plaintext.plain.sasl.jaas.config": f"{jaas};",
            }
        )
        if sasl_mechanism != "PLAIN":
            scram = sasl_mechanism.lower()
            properties["sasl.enabled.mechanisms"] = f"PLAIN,{sasl_mechanism}"
            properties[f"listener.name.sasl_plaintext.{scram}.sasl.jaas.config"] = (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            )
    properties.update(overrides)
    return properties


class ApacheKafkaCluster:
    """An Apache Kafka cluster of ``nodes`` KRaft nodes, run as child processes.

    Args:
        nodes: 1 (a single broker) or more (3 for a replicated cluster).
        data_dir: where the nodes keep their logs; ``None``: a new temporary
            directory, removed on :meth:`stop`. A directory an earlier cluster used
            restarts that cluster (same cluster id, node ids and ports).
        port: the first node's broker port; ``None``: a free loopback port (or the
            one an earlier run on ``data_dir`` used).
        host: the address to bind and advertise (loopback by default).
        version: the Apache Kafka release (fetched by :func:`kafka_libs`).
        heap_mb: each JVM's heap, MiB.
        overrides: ``server.properties`` entries over :func:`broker_properties`.
        sasl_users: ``{name: password}``: clients must authenticate with SASL/PLAIN
            as one of them (:meth:`client_config`); ``None``: a PLAINTEXT listener.
        sasl_mechanism: the clients' SASL mechanism with ``sasl_users``: ``PLAIN``
            (default), ``SCRAM-SHA-256`` or ``SCRAM-SHA-512`` (the users' SCRAM
            credentials are written when a node is formatted).
        node_hosts: each node's own address, one per node (e.g. each in a network
            namespace of its own, where ``host`` is not local); every node then
            listens on ``port`` (default 9092) and its controller on 9093. ``None``:
            every node on ``host``, on ports of its own.
        node_command_prefixes: words run before each node's JVM command, one tuple
            per node (:attr:`KafkaNode.command_prefix`), e.g. ``ip netns exec <ns>``.

    Raises:
        ValueError: ``nodes`` < 1, or ``node_hosts`` / ``node_command_prefixes`` not
            one per node.
        ConfigError: a SASL user or password Kafka cannot take
            (:func:`check_sasl_users`), or a mechanism not in :data:`SASL_MECHANISMS`.
    """

    engine: Literal["apache-kafka"] = "apache-kafka"

    def __init__(
        self,
        *,
        nodes: int = 1,
        data_dir: str | Path | None = None,
        port: int | None = None,
        host: str = "127.0.0.1",
        version: str = APACHE_KAFKA_VERSION,
        heap_mb: int = HEAP_MB,
        overrides: Mapping[str, str] | None = None,
        sasl_users: Mapping[str, str] | None = None,
        sasl_mechanism: SaslMechanism = "PLAIN",
        node_hosts: Sequence[str] | None = None,
        node_command_prefixes: Sequence[Sequence[str]] | None = None,
    ) -> None:
        if nodes < 1:
            raise ValueError(f"nodes must be 1 or more, got {nodes}")
        if node_hosts is not None and len(node_hosts) != nodes:
            raise ValueError(f"node_hosts: one per node ({nodes}), got {len(node_hosts)}")
        if node_command_prefixes is not None and len(node_command_prefixes) != nodes:
            raise ValueError(
                f"node_command_prefixes: one per node ({nodes}), got {len(node_command_prefixes)}"
            )
        if sasl_users is not None:
            check_sasl_users(sasl_users)
        if sasl_mechanism not in SASL_MECHANISMS:
            raise ConfigError(
                f"sasl_mechanism {sasl_mechanism!r} is not one Floodgate's broker runs",
                key="sasl_mechanism",
                value=sasl_mechanism,
                allowed=", ".join(SASL_MECHANISMS),
            )
        #: The clients' SASL mechanism (with :attr:`sasl_users`).
        self.sasl_mechanism: SaslMechanism = sasl_mechanism
        #: ``{name: password}`` of the SASL/PLAIN listener, the brokers' own user
        #: included (a random password, new at each start of this object); ``None``:
        #: a PLAINTEXT listener.
        self.sasl_users: dict[str, str] | None = (
            {**sasl_users, INTER_BROKER_USER: secrets.token_urlsafe(24)}
            if sasl_users is not None
            else None
        )
        self._own_dir = data_dir is None
        self.data_dir = (
            Path(data_dir) if data_dir else Path(tempfile.mkdtemp(prefix="floodgate-kafka-"))
        )
        self.host = host
        self.version = version
        self.heap_mb = heap_mb
        self.overrides = dict(overrides or {})
        saved = self._saved_layout()
        if saved and len(saved["nodes"]) != nodes:
            raise BrokerError(
                f"{self.data_dir} holds a {len(saved['nodes'])}-node cluster; "
                f"asked for {nodes} nodes"
            )
        self.cluster_id: str = saved["cluster_id"] if saved else _cluster_id()
        self.nodes: list[KafkaNode] = []
        for i in range(nodes):
            ports = saved["nodes"][i] if saved else {}
            if node_hosts is not None:  # alone on its address: the same ports everywhere
                ports = {"port": port or 9092, "controller_port": 9093}
            broker_port = port if (i == 0 and port) else ports.get("port") or _free_port(host)
            self.nodes.append(
                KafkaNode(
                    node_id=i + 1,
                    port=int(broker_port),
                    controller_port=int(ports.get("controller_port") or _free_port(host)),
                    directory=self.data_dir / f"node-{i + 1}",
                    host=node_hosts[i] if node_hosts is not None else None,
                    command_prefix=tuple(node_command_prefixes[i])
                    if node_command_prefixes is not None
                    else (),
                )
            )

    # -- addresses and processes ------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        """``host:port,...`` of every node's broker listener."""
        return ",".join(self.address(node) for node in self.nodes)

    def address(self, node: KafkaNode) -> str:
        """``host:port`` of ``node``'s broker listener."""
        return f"{node.host or self.host}:{node.port}"

    def client_config(self, user: str | None = None) -> dict[str, str]:
        """The librdkafka properties a client needs besides ``bootstrap.servers``:
        none for a PLAINTEXT listener; ``security.protocol``, ``sasl.mechanism``,
        ``sasl.username`` and ``sasl.password`` of ``user`` (default: the first one
        given) for a SASL one.

        Raises:
            KeyError: ``user`` is not one of the cluster's SASL users.
        """
        if self.sasl_users is None:
            return {}
        name = user or next(iter(self.sasl_users))
        return {
            "security.protocol": "SASL_PLAINTEXT",
            # The brokers' own user has no SCRAM credential: it logs in with PLAIN.
            "sasl.mechanism": "PLAIN" if name == INTER_BROKER_USER else self.sasl_mechanism,
            "sasl.username": name,
            "sasl.password": self.sasl_users[name],
        }

    @property
    def pid(self) -> int | None:
        """The first running node's PID (``None`` when no node runs)."""
        return next((node.pid for node in self.nodes if node.pid is not None), None)

    @property
    def pids(self) -> list[int | None]:
        """Each node's PID, ``None`` for a node that is not running."""
        return [node.pid for node in self.nodes]

    def node_of_broker(self, broker_id: int) -> KafkaNode:
        """The node whose ``node.id`` is ``broker_id`` (a partition leader's id).

        Raises:
            KeyError: no such node.
        """
        for node in self.nodes:
            if node.node_id == broker_id:
                return node
        raise KeyError(broker_id)

    def active_controller(self) -> int | None:
        """The ``node.id`` of the KRaft quorum's active controller, as the running
        nodes last logged it ("Recorded new KRaft controller"), or ``None`` if none did.

        (No client of the Python side asks the quorum: confluent-kafka has no
        DescribeQuorum, and a broker answers DescribeCluster with a random broker as
        the "controller", KIP-919.)
        """
        latest: tuple[str, int] | None = None
        for node in self.nodes:
            if node.pid is None:
                continue
            try:
                lines = node.log_path.read_text(errors="replace").splitlines()
            except FileNotFoundError:
                continue
            for line in reversed(lines):
                match = _CONTROLLER_LINE.search(line)
                if match:
                    if latest is None or match.group(1) > latest[0]:
                        latest = (match.group(1), int(match.group(2)))
                    break
        return latest[1] if latest else None

    # -- coordinators and replicas -------------------------------------------

    def _admin(self) -> AdminClient:
        return AdminClient(
            kafka_settings(
                self.bootstrap_servers,
                {
                    "socket.timeout.ms": 2000,
                    **self.client_config(INTER_BROKER_USER if self.sasl_users else None),
                },
            )
        )

    def partition_leaders(self, topic: str, *, timeout_s: float = 10.0) -> dict[int, int]:
        """``{partition: leader's node.id}`` of ``topic`` in the metadata a client sees
        (``-1``: no leader now).

        Raises:
            KafkaException: the metadata request failed.
            KeyError: the cluster has no such topic.
        """
        metadata = self._admin().list_topics(topic, timeout=timeout_s)
        described = metadata.topics.get(topic)
        if described is None or described.error is not None:
            raise KeyError(topic)
        return {p.id: p.leader for p in described.partitions.values()}

    def _coordinator(self, internal_topic: str, key: str) -> int:
        leaders = self.partition_leaders(internal_topic)
        return leaders[coordinator_partition(key, len(leaders))]

    def transaction_coordinator(self, transactional_id: str) -> int:
        """The ``node.id`` of the transaction coordinator of ``transactional_id``: the
        leader of its partition of ``__transaction_state`` (Kafka's
        ``TransactionStateManager.partitionFor``, :func:`coordinator_partition`).

        Raises:
            KeyError: ``__transaction_state`` does not exist yet (no transactional
                producer has started on this cluster).
            KafkaException: the metadata request failed.
        """
        return self._coordinator("__transaction_state", transactional_id)

    def group_coordinator(self, group_id: str) -> int:
        """The ``node.id`` of the group coordinator of consumer group ``group_id``: the
        leader of its partition of ``__consumer_offsets`` (Kafka's
        ``GroupCoordinator.partitionFor``, :func:`coordinator_partition`).

        Raises:
            KeyError: ``__consumer_offsets`` does not exist yet (no group has
                committed on this cluster).
            KafkaException: the metadata request failed.
        """
        return self._coordinator("__consumer_offsets", group_id)

    def out_of_sync(self, node: KafkaNode, *, timeout_s: float = 10.0) -> list[str]:
        """The partitions (``topic/partition``, internal topics included) that have
        ``node`` among their replicas but not in their in-sync replica set (ISR), in
        the metadata a client sees; empty when ``node`` is in sync everywhere.

        Raises:
            KafkaException: the metadata request failed.
        """
        metadata = self._admin().list_topics(timeout=timeout_s)
        return sorted(
            f"{topic.topic}/{p.id}"
            for topic in metadata.topics.values()
            for p in topic.partitions.values()
            if node.node_id in p.replicas and node.node_id not in p.isrs
        )

    def wait_in_sync(self, node: KafkaNode, *, timeout_s: float = START_TIMEOUT_S) -> None:
        """Block until ``node`` is back in the ISR of every partition it replicates
        (:meth:`out_of_sync` empty): a restarted broker is registered at once
        (:meth:`start_node`), but rejoins a partition's ISR only once its follower has
        fetched up to the leader's high watermark (Kafka's ``replica.lag.time.max.ms``
        rule); until then one more node lost leaves a partition below
        ``min.insync.replicas``.

        Raises:
            BrokerError: the node exited, or it was not in sync within ``timeout_s``
                (names the partitions still out of sync).
        """
        deadline = time.monotonic() + timeout_s
        behind: list[str] = ["(no metadata yet)"]
        while True:
            self._check_alive(node)
            with contextlib.suppress(KafkaException):  # a node coming back
                behind = self.out_of_sync(node, timeout_s=2.0)
            if not behind:
                return
            if time.monotonic() > deadline:
                raise BrokerError(
                    f"Apache Kafka node {node.node_id} was not back in the ISR within "
                    f"{timeout_s:.0f} s; out of sync: {', '.join(behind[:10])}",
                    output=self.output_tail(node),
                )
            time.sleep(0.2)

    # -- start ----------------------------------------------------------------

    def _layout_path(self) -> Path:
        return self.data_dir / "cluster.json"

    def _saved_layout(self) -> dict[str, Any] | None:
        try:
            saved: dict[str, Any] = json.loads(self._layout_path().read_text())
        except (FileNotFoundError, ValueError):
            return None
        return saved

    def _save_layout(self) -> None:
        layout = {
            "cluster_id": self.cluster_id,
            "version": self.version,
            "nodes": [
                {"node_id": n.node_id, "port": n.port, "controller_port": n.controller_port}
                for n in self.nodes
            ],
        }
        write_private_text(self._layout_path(), json.dumps(layout, indent=2) + "\n")

    def _classpath(self) -> str:
        return str(kafka_libs(self.version) / "*")

    def _jvm(self, java: list[str]) -> list[str]:
        log_config = files("pipeline.brokers.apache_kafka").joinpath("log4j2.properties")
        return [
            *java,
            f"-Xms{min(self.heap_mb, 256)}m",
            f"-Xmx{self.heap_mb}m",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={log_config}",
            "-cp",
            self._classpath(),
        ]

    def _format(self, node: KafkaNode, java: list[str]) -> None:
        if (node.directory / "logs" / "meta.properties").exists():
            return
        command = [
            *self._jvm(java),
            "kafka.tools.StorageTool",
            "format",
            f"--cluster-id={self.cluster_id}",  # one argument: an id may start with "-"
            "--config",
            str(node.properties_path),
            "--ignore-formatted",
            *self._scram_arguments(),
        ]
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=120, check=False,
            stdin=subprocess.DEVNULL, umask=PRIVATE_UMASK,
        )  # fmt: skip
        if done.returncode != 0:
            shown = [re.sub(r"password=.*\]$", "password=***]", word) for word in command]
            raise BrokerError(
                f"Apache Kafka's StorageTool could not format node {node.node_id}",
                command=shown,  # without the SCRAM users' passwords
                output="\n".join((done.stdout + done.stderr).splitlines()[-20:]),
            )

    def _scram_arguments(self) -> list[str]:
        """``--add-scram`` of each client user when the clients use SCRAM (KIP-900:
        the credentials go into the formatted metadata log, before any listener can
        authenticate a client)."""
        if self.sasl_users is None or self.sasl_mechanism == "PLAIN":
            return []
        arguments: list[str] = []
        for name, password in self.sasl_users.items():
            if name != INTER_BROKER_USER:
                arguments += [
                    "--add-scram",
                    f'{self.sasl_mechanism}=[name={name},password="{password}"]',
                ]
        return arguments

    def _write_properties(self, node: KafkaNode) -> None:
        private_data_dir(node.directory)
        properties = broker_properties(
            node,
            self.nodes,
            host=self.host,
            overrides=self.overrides,
            sasl_users=self.sasl_users,
            sasl_mechanism=self.sasl_mechanism,
        )
        text = (
            "# Written by Floodgate (pipeline.brokers.apache_kafka.cluster); rewritten at every "
            "start.\n" + "".join(f"{key}={value}\n" for key, value in properties.items())
        )
        write_private_text(node.properties_path, text)  # with SASL users: their passwords

    def start(self, *, timeout_s: float = START_TIMEOUT_S) -> ApacheKafkaCluster:
        """Format what is new, start every node that is not running, and wait until
        every broker is registered in the cluster's metadata.

        The jars are fetched first if they are not cached (:func:`kafka_libs`); that
        time does not count against ``timeout_s``.

        Raises:
            BrokerError: Java or Maven is missing, the fetch failed, a node exited,
                or the cluster did not answer in time (names the command and the tail
                of each node's output). Nodes this call started are stopped again.
            ConfigError: the data folder (or a node's) is another user's, or others
                can write to it (:func:`~pipeline.brokers.engines.private_data_dir`);
                nothing started.
        """
        private_data_dir(self.data_dir)  # refused before anything is fetched or started
        java = java_command()
        self._classpath()  # fetch before the clock starts
        self._save_layout()
        for node in self.nodes:
            self._write_properties(node)
        for node in self.nodes:
            self._format(node, java)
        started = [node for node in self.nodes if node.pid is None]
        for node in started:
            self._spawn(node, java)
        try:
            self.wait_ready(timeout_s=timeout_s)
        except BrokerError:
            for node in started:
                self._signal_and_wait(node, signal.SIGKILL, 10.0)
            raise
        log.info(
            "Apache Kafka %s up at %s (pids %s)",
            self.version,
            self.bootstrap_servers,
            ", ".join(str(p) for p in self.pids),
        )
        return self

    def _spawn(self, node: KafkaNode, java: list[str]) -> None:
        command = [*node.command_prefix, *self._jvm(java), "kafka.Kafka", str(node.properties_path)]
        node.process = spawn_broker(command, node.log_path)

    def start_node(self, node: KafkaNode, *, timeout_s: float = START_TIMEOUT_S) -> None:
        """Start one stopped node again on its data (after :meth:`kill_node`), and wait
        until the cluster's metadata lists it.

        Raises:
            BrokerError: it exited or did not register in time.
        """
        if node.pid is None:
            self._spawn(node, java_command())
        self.wait_ready(timeout_s=timeout_s)

    def wait_ready(self, *, timeout_s: float = START_TIMEOUT_S) -> None:
        """Block until every running node's broker is in the metadata a client sees.

        Raises:
            BrokerError: a node exited, or the brokers did not register in time.
        """
        deadline = time.monotonic() + timeout_s
        running = [node for node in self.nodes if node.process is not None]
        for node in running:  # the port first: librdkafka logs every refused connection
            while True:
                self._check_alive(node)
                try:
                    socket.create_connection((node.host or self.host, node.port), 0.5).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise self._not_ready(timeout_s) from None
                    time.sleep(0.1)
        wanted = {node.node_id for node in running}
        admin = AdminClient(
            kafka_settings(
                ",".join(self.address(n) for n in running),
                {
                    "socket.timeout.ms": 2000,
                    **self.client_config(INTER_BROKER_USER if self.sasl_users else None),
                },
            )
        )
        while True:
            for node in running:
                self._check_alive(node)
            try:
                brokers = set(admin.list_topics(timeout=2.0).brokers)
                if wanted <= brokers:
                    return
            except KafkaException:
                pass
            if time.monotonic() > deadline:
                raise self._not_ready(timeout_s)
            time.sleep(0.2)

    def _check_alive(self, node: KafkaNode) -> None:
        process = node.process
        if process is not None and process.poll() is not None:
            raise BrokerError(
                f"Apache Kafka node {node.node_id} exited with status {process.returncode}",
                command=[str(a) for a in process.args] if isinstance(process.args, list) else None,
                output=self.output_tail(node),
            )

    def _not_ready(self, timeout_s: float) -> BrokerError:
        return BrokerError(
            f"Apache Kafka at {self.bootstrap_servers} did not register every broker "
            f"within {timeout_s:.0f} s",
            output="\n".join(self.output_tail(node) for node in self.nodes),
        )

    def output_tail(self, node: KafkaNode | None = None, lines: int = 20) -> str:
        """What a node printed that tells why it failed (default: every node's): its
        first ERROR and FATAL lines, each with the exception line after it, then its
        last ``lines`` lines. (A JVM that exits prints a page of shutdown lines after
        the cause; the tail alone would hide it.)"""
        chosen = [node] if node is not None else self.nodes
        parts = []
        for one in chosen:
            try:
                text = one.log_path.read_text(errors="replace").splitlines()
            except FileNotFoundError:
                continue
            causes: list[str] = []
            for i, line in enumerate(text):
                if (" ERROR " in line or " FATAL " in line) and len(causes) < 8:
                    causes.extend(text[i : i + 2])
            body = causes + (["..."] if causes else []) + text[-lines:]
            parts.append("\n".join([f"[node {one.node_id}]", *body]) if len(self.nodes) > 1
                         else "\n".join(body))  # fmt: skip
        return "\n".join(parts)

    # -- stop -----------------------------------------------------------------

    def kill_node(self, node: KafkaNode, *, sig: int = signal.SIGKILL) -> None:
        """Signal one node (``SIGKILL`` by default: a crash) and wait for it to exit."""
        self._signal_and_wait(node, sig, 60.0)

    def stop(self, *, timeout_s: float = 30.0, remove_data: bool | None = None) -> None:
        """Stop every node by its PID: SIGTERM to all (Kafka's controlled shutdown,
        which flushes the logs), then SIGKILL after ``timeout_s`` to what is left.

        Args:
            remove_data: remove the data directory; default: only if it was a
                temporary one made by this object.
        """
        remove = remove_data if remove_data is not None else self._own_dir
        for node in self.nodes:
            if node.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(node.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for node in self.nodes:
            self._signal_and_wait(node, None, max(0.1, deadline - time.monotonic()))
        if remove:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def _signal_and_wait(self, node: KafkaNode, sig: int | None, timeout_s: float) -> None:
        process, node.process = node.process, None
        if process is None:
            return
        if sig is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, sig)
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            log.warning(
                "Apache Kafka node %d did not stop within %.0f s; killing it",
                node.node_id,
                timeout_s,
            )
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=30)

    def __enter__(self) -> ApacheKafkaCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

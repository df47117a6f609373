"""The files an Apache Kafka cluster's nodes start from: each node's
``server.properties`` (:func:`broker_properties`), the cluster's layout kept across
restarts (``<data_dir>/cluster.json``: its id and each node's ports), and the SASL
users a listener may carry. Nothing here runs a process
(:mod:`pipeline.brokers.apache_kafka.processes` does).
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pipeline.brokers.engines import free_ports
from pipeline.errors import ConfigError
from pipeline.state.files import write_private_text


def new_cluster_id() -> str:
    """A KRaft cluster id: a UUID, URL-safe base64 without padding (as
    ``kafka-storage.sh random-uuid`` prints)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


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


def plan_nodes(
    count: int,
    data_dir: Path,
    *,
    saved: Mapping[str, Any] | None,
    host: str,
    port: int | None,
    node_hosts: Sequence[str] | None,
    node_command_prefixes: Sequence[Sequence[str]] | None,
) -> list[KafkaNode]:
    """The ``count`` nodes of a cluster on ``data_dir``: the ports of its ``saved``
    layout (a restart), else ``port`` for the first node and free loopback ports for
    the rest; with ``node_hosts`` (each node alone on its address) every node on
    ``port`` (default 9092) and its controller on 9093."""
    fresh: Iterator[int] = iter(())
    if saved is None and node_hosts is None:  # distinct ports, none of them ``port``
        fresh = iter(free_ports(2 * count, host, taken={port} if port else ()))
    planned = []
    for i in range(count):
        ports = saved["nodes"][i] if saved else {}
        if node_hosts is not None:  # alone on its address: the same ports everywhere
            ports = {"port": port or 9092, "controller_port": 9093}
        broker_port = port if (i == 0 and port) else ports.get("port") or next(fresh)
        planned.append(
            KafkaNode(
                node_id=i + 1,
                port=int(broker_port),
                controller_port=int(ports.get("controller_port") or next(fresh)),
                directory=data_dir / f"node-{i + 1}",
                host=node_hosts[i] if node_hosts is not None else None,
                command_prefix=tuple(node_command_prefixes[i])
                if node_command_prefixes is not None
                else (),
            )
        )
    return planned


def sasl_client_config(
    users: Mapping[str, str] | None, mechanism: SaslMechanism, user: str | None = None
) -> dict[str, str]:
    """The librdkafka properties a client of the cluster needs besides
    ``bootstrap.servers``: none for a PLAINTEXT listener (``users`` ``None``);
    ``security.protocol``, ``sasl.mechanism``, ``sasl.username`` and ``sasl.password``
    of ``user`` (default: the first of ``users``) for a SASL one.

    Raises:
        KeyError: ``user`` is not one of ``users``.
    """
    if users is None:
        return {}
    name = user or next(iter(users))
    return {
        "security.protocol": "SASL_PLAINTEXT",
        # The brokers' own user has no SCRAM credential: it logs in with PLAIN.
        "sasl.mechanism": "PLAIN" if name == INTER_BROKER_USER else mechanism,
        "sasl.username": name,
        "sasl.password": users[name],
    }


def properties_text(properties: Mapping[str, str]) -> str:
    """A ``server.properties`` file's text: a header saying who wrote it, then one
    ``key=value`` line per property, in order."""
    return (
        "# Written by Floodgate (pipeline.brokers.apache_kafka); rewritten at every start.\n"
        + "".join(f"{key}={value}\n" for key, value in properties.items())
    )


def scram_arguments(users: Mapping[str, str] | None, mechanism: SaslMechanism) -> list[str]:
    """``--add-scram`` of each client user for ``StorageTool format`` when the clients
    use SCRAM (KIP-900: the credentials go into the formatted metadata log, before any
    listener can authenticate a client); none for PLAIN or no SASL. The brokers' own
    user (:data:`INTER_BROKER_USER`) logs in with PLAIN and gets none."""
    if users is None or mechanism == "PLAIN":
        return []
    arguments: list[str] = []
    for name, password in users.items():
        if name != INTER_BROKER_USER:
            arguments += ["--add-scram", f'{mechanism}=[name={name},password="{password}"]']
    return arguments


def layout_path(data_dir: Path) -> Path:
    """Where a cluster's layout is kept: ``<data_dir>/cluster.json``."""
    return data_dir / "cluster.json"


def saved_layout(data_dir: Path) -> dict[str, Any] | None:
    """The layout an earlier cluster on ``data_dir`` saved (``cluster_id``,
    ``version``, ``nodes``: each ``node_id``, ``port``, ``controller_port``), or
    ``None`` (none, or unreadable)."""
    try:
        saved: dict[str, Any] = json.loads(layout_path(data_dir).read_text())
    except (FileNotFoundError, ValueError):
        return None
    return saved


def save_layout(data_dir: Path, cluster_id: str, version: str, nodes: Sequence[KafkaNode]) -> None:
    """Keep a cluster's id, version and ports for its restart (a private file)."""
    layout = {
        "cluster_id": cluster_id,
        "version": version,
        "nodes": [
            {"node_id": n.node_id, "port": n.port, "controller_port": n.controller_port}
            for n in nodes
        ],
    }
    write_private_text(layout_path(data_dir), json.dumps(layout, indent=2) + "\n")

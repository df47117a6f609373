"""The JVMs of an Apache Kafka cluster: the command line a node runs, formatting its
log directory with Kafka's ``StorageTool``, starting it, telling why it exited, and
stopping it by its PID. What the nodes start from is
:mod:`pipeline.brokers.apache_kafka.config`'s.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import subprocess
from collections.abc import Sequence
from importlib.resources import files

from pipeline.brokers.apache_kafka.artifacts import kafka_libs
from pipeline.brokers.apache_kafka.config import KafkaNode
from pipeline.brokers.engines import spawn_broker
from pipeline.errors import BrokerError
from pipeline.state.files import PRIVATE_UMASK

log = logging.getLogger(__name__)

#: A node's log line naming the active controller: ``[time] ... (id: N ...``.
_CONTROLLER_LINE = re.compile(r"^\[([^\]]+)\].*Recorded new KRaft controller.*\(id: (\d+)")


class KafkaJvm:
    """How a node's JVM is run: Apache Kafka ``version``'s jars on the class path (fetched
    once, :func:`~pipeline.brokers.apache_kafka.artifacts.kafka_libs`), a heap of
    ``heap_mb`` MiB, G1, Floodgate's Log4j config.

    Args:
        java: the ``java`` command (:func:`~pipeline.brokers.apache_kafka.artifacts.java_command`).
        version: the Apache Kafka release.
        heap_mb: the heap, MiB.
    """

    def __init__(self, java: list[str], version: str, heap_mb: int) -> None:
        self.java = java
        self.version = version
        self.heap_mb = heap_mb

    def classpath(self) -> str:
        """The release's jars (fetched on first use)."""
        return str(kafka_libs(self.version) / "*")

    def command(self) -> list[str]:
        """The JVM's command line up to its main class."""
        log_config = files("pipeline.brokers.apache_kafka").joinpath("log4j2.properties")
        return [
            *self.java,
            f"-Xms{min(self.heap_mb, 256)}m",
            f"-Xmx{self.heap_mb}m",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={log_config}",
            "-cp",
            self.classpath(),
        ]

    def format(self, node: KafkaNode, cluster_id: str, scram: Sequence[str] = ()) -> None:
        """Format ``node``'s log directory for cluster ``cluster_id`` (``StorageTool
        format``, with ``scram``'s ``--add-scram`` arguments), unless it is formatted.

        Raises:
            BrokerError: the tool failed (its command shown without the passwords).
        """
        if (node.directory / "logs" / "meta.properties").exists():
            return
        command = [
            *self.command(),
            "kafka.tools.StorageTool",
            "format",
            f"--cluster-id={cluster_id}",  # one argument: an id may start with "-"
            "--config",
            str(node.properties_path),
            "--ignore-formatted",
            *scram,
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

    def spawn(self, node: KafkaNode) -> None:
        """Start ``node``'s broker (behind its command prefix), its output to its log."""
        command = [*node.command_prefix, *self.command(), "kafka.Kafka", str(node.properties_path)]
        node.process = spawn_broker(command, node.log_path)


def check_alive(node: KafkaNode, nodes: Sequence[KafkaNode]) -> None:
    """Raise if ``node``'s JVM has exited.

    Raises:
        BrokerError: naming its status, its command and why it failed (:func:`output_tail`).
    """
    process = node.process
    if process is not None and process.poll() is not None:
        raise BrokerError(
            f"Apache Kafka node {node.node_id} exited with status {process.returncode}",
            command=[str(a) for a in process.args] if isinstance(process.args, list) else None,
            output=output_tail(nodes, node),
        )


def output_tail(nodes: Sequence[KafkaNode], node: KafkaNode | None = None, lines: int = 20) -> str:
    """What a node printed that tells why it failed (default: every node's): its
    first ERROR and FATAL lines, each with the exception line after it, then its
    last ``lines`` lines. (A JVM that exits prints a page of shutdown lines after
    the cause; the tail alone would hide it.)"""
    chosen = [node] if node is not None else list(nodes)
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
        one_of_several = len(nodes) > 1
        parts.append("\n".join([f"[node {one.node_id}]", *body] if one_of_several else body))
    return "\n".join(parts)


def signal_and_wait(node: KafkaNode, sig: int | None, timeout_s: float) -> None:
    """Send ``sig`` to ``node``'s JVM (``None``: none, it was signalled already) and wait
    up to ``timeout_s`` for it to exit, then SIGKILL it. The node is stopped after."""
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


def active_controller(nodes: Sequence[KafkaNode]) -> int | None:
    """The ``node.id`` of the KRaft quorum's active controller, as the running
    nodes last logged it ("Recorded new KRaft controller"), or ``None`` if none did.

    (No client of the Python side asks the quorum: confluent-kafka has no
    DescribeQuorum, and a broker answers DescribeCluster with a random broker as
    the "controller", KIP-919.)
    """
    latest: tuple[str, int] | None = None
    for node in nodes:
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

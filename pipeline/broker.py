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
  (:class:`pipeline.apache_kafka.ApacheKafkaCluster`).

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
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from pipeline.config import BOOTSTRAP_ENV
from pipeline.errors import BrokerError, ConfigError

if TYPE_CHECKING:
    from pipeline.apache_kafka import ApacheKafkaCluster

log = logging.getLogger(__name__)

#: How a cluster was found: named (``external``), a Docker container, or started here.
BrokerKind = Literal["external", "docker", "embedded"]

#: The brokers Floodgate can start itself.
KafkaEngine = Literal["noida-db", "apache-kafka"]
ENGINES: tuple[KafkaEngine, ...] = ("noida-db", "apache-kafka")

#: Environment variable choosing the engine :func:`resolve_broker` starts.
ENGINE_ENV = "FLOODGATE_KAFKA_ENGINE"

#: How long an embedded broker may take to answer its first metadata request.
EMBEDDED_START_TIMEOUT_S = 30.0


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` right now (asked of the kernel, never guessed)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def wait_for_broker(
    bootstrap_servers: str, *, timeout_s: float, client: Mapping[str, Any] = {}
) -> None:
    """Block until ``bootstrap_servers`` answers a metadata request.

    Raises:
        BrokerError: no answer within ``timeout_s`` seconds.
    """
    deadline = time.monotonic() + timeout_s
    admin = AdminClient({"bootstrap.servers": bootstrap_servers, **client})
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            admin.list_topics(timeout=min(2.0, max(0.1, deadline - time.monotonic())))
            return
        except KafkaException as exc:
            last = exc
            time.sleep(0.1)
    raise BrokerError(
        f"Kafka broker at {bootstrap_servers} did not answer within {timeout_s:.0f} s: {last}"
    )


class EmbeddedBroker:
    """The ``noida-db`` Kafka-protocol broker, run as a child process.

    Args:
        data_dir: where the broker keeps its data; ``None``: a new temporary
            directory, removed on :meth:`stop`. Pass a directory to restart a
            broker with the data of an earlier one.
        port: the Kafka port; ``None``: a free loopback port.
        host: the address to bind (loopback by default).

    The broker is single-node and keeps topics in memory, saving them to
    ``data_dir`` as they change.
    """

    engine: KafkaEngine = "noida-db"

    def __init__(
        self,
        *,
        data_dir: str | Path | None = None,
        port: int | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self._own_dir = data_dir is None
        self.data_dir = (
            Path(data_dir) if data_dir else Path(tempfile.mkdtemp(prefix="floodgate-broker-"))
        )
        self.host = host
        self.port = port or free_port(host)
        self.process: subprocess.Popen[bytes] | None = None
        self._log_path = self.data_dir / "floodgate-broker.log"

    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` of the broker."""
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The broker's PID while it runs (safe to read from another thread while it
        stops or starts)."""
        process = self.process
        return process.pid if process is not None and process.poll() is None else None

    @staticmethod
    def binary() -> Path:
        """Path of the ``noida-db`` binary shipped in the wheel.

        Raises:
            BrokerError: the package is not installed.
        """
        try:
            path = Path(str(files("noida_db").joinpath("noida-db")))
        except ModuleNotFoundError as exc:
            raise BrokerError(
                "the noida-db package is not installed: pip install 'floodgate[demo]'"
            ) from exc
        if not path.is_file():
            raise BrokerError(f"noida-db binary not found at {path}")
        if not os.access(path, os.X_OK):
            path.chmod(0o755)
        return path

    def command(self) -> list[str]:
        """The command line that starts the broker."""
        return [
            str(self.binary()),
            "start",
            "--data-dir",
            str(self.data_dir),
            "--host",
            self.host,
            "--only",
            "kafka",
            "--kafka-port",
            str(self.port),
        ]

    def start(self, *, timeout_s: float = EMBEDDED_START_TIMEOUT_S) -> EmbeddedBroker:
        """Start the broker and wait until it answers.

        Raises:
            BrokerError: it exited or did not answer in time; names the command and
                the tail of its output.
        """
        if self.pid is not None:
            return self
        self.data_dir.mkdir(parents=True, exist_ok=True)
        command = self.command()
        with open(self._log_path, "ab") as out:
            self.process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout_s
        # Wait for the port first: librdkafka logs every refused connection as an error.
        while self.process.poll() is None and time.monotonic() < deadline:
            try:
                socket.create_connection((self.host, self.port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.05)
        admin = AdminClient(
            {"bootstrap.servers": self.bootstrap_servers, "socket.timeout.ms": 1000}
        )
        while True:
            if self.process.poll() is not None:
                raise BrokerError(
                    f"embedded broker exited with status {self.process.returncode}",
                    command=command,
                    output=self.output_tail(),
                )
            try:
                admin.list_topics(timeout=1.0)
                log.info(
                    "embedded broker up at %s (pid %d)", self.bootstrap_servers, self.process.pid
                )
                return self
            except KafkaException:
                if time.monotonic() > deadline:
                    self.stop()
                    raise BrokerError(
                        f"embedded broker did not answer at {self.bootstrap_servers} "
                        f"within {timeout_s:.0f} s",
                        command=command,
                        output=self.output_tail(),
                    ) from None
                time.sleep(0.1)

    def output_tail(self, lines: int = 20) -> str:
        """The last lines the broker printed."""
        try:
            text = self._log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, *, timeout_s: float = 10.0, remove_data: bool | None = None) -> None:
        """Stop the broker by its PID (SIGTERM, then SIGKILL after ``timeout_s``).

        When the data directory is kept, the broker is first asked to stop its Kafka
        service (``noida-db stop kafka``), which saves the log and closes the
        listener, and only then signalled: noida-db 0.2.3 answers a SIGTERM by saving
        its topics while it goes on acknowledging writes, so a restart on the same
        directory would lose the last acknowledged records (measured: 300-500 of a
        producer's acknowledged records at about 18 000 records/s) and fail the
        producers' idempotent sequences (``OUT_OF_ORDER_SEQUENCE_NUMBER``). This is
        the embedded broker's controlled shutdown; a Kafka broker does the same on
        SIGTERM by itself.

        Args:
            remove_data: remove the data directory; default: only if it was a
                temporary one made by this object.
        """
        remove = remove_data if remove_data is not None else self._own_dir
        process, self.process = self.process, None
        if process is not None and process.poll() is None and not remove:
            self._stop_service(timeout_s)
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGKILL)
                process.wait(timeout=timeout_s)
        if remove:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def _stop_service(self, timeout_s: float) -> None:
        """Ask the running broker to save and stop its Kafka service; log, do not
        raise, if it cannot (the SIGTERM that follows still stops it)."""
        command = [str(self.binary()), "stop", "kafka", "--data-dir", str(self.data_dir)]
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=timeout_s, check=False
            )
        except subprocess.TimeoutExpired:
            log.warning("embedded broker: %s did not return in %.0f s", command, timeout_s)
            return
        if done.returncode != 0:
            log.warning(
                "embedded broker: %s exited with %d: %s",
                command,
                done.returncode,
                (done.stderr or done.stdout).strip()[-300:],
            )

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


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


def kafka_engine(engine: str | None = None, *, env: Mapping[str, str] | None = None) -> KafkaEngine:
    """The engine to start: ``engine`` if given, else ``FLOODGATE_KAFKA_ENGINE``, else
    ``noida-db``.

    Raises:
        ConfigError: not one of :data:`ENGINES` (names the variable and the allowed
            values).
    """
    env = os.environ if env is None else env
    chosen = engine or env.get(ENGINE_ENV) or "noida-db"
    if chosen not in ENGINES:
        source = "engine" if engine else ENGINE_ENV
        allowed = ", ".join(ENGINES)
        raise ConfigError(
            f"{source}={chosen!r}: allowed values are {allowed}",
            key=source,
            value=chosen,
            allowed=allowed,
        )
    return chosen


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
        from pipeline.apache_kafka import ApacheKafkaCluster

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


def ensure_topics(
    bootstrap_servers: str,
    topics: Mapping[str, tuple[int, int | None]],
    *,
    client: Mapping[str, Any] | None = None,
    timeout_s: float = 30.0,
) -> None:
    """Create topics that do not exist yet.

    Args:
        bootstrap_servers: the cluster.
        topics: ``{topic: (partitions, replication_factor)}``; a replication factor
            of ``None`` is the broker's ``default.replication.factor`` (KIP-464).
        client: extra librdkafka properties.
        timeout_s: how long to wait for the topics to appear in metadata.

    An existing topic is never changed (Kafka cannot shrink a topic, and growing one
    re-maps keys to partitions, so the tuples of a key written before and after would
    lose their order). One with *more* partitions than configured is kept, with the
    warning ``FG-BROKER-001``; one with *fewer* is refused (issue 26: a topic a broker
    auto-created with its default of 1 partition must not pass for the configured 4).

    Raises:
        ConfigError: a topic exists with fewer partitions than configured; names the
            topic and both counts (``key`` ``partitions``). Nothing is created.
        BrokerError: a topic could not be created, or did not appear in time.
    """
    admin = AdminClient({"bootstrap.servers": bootstrap_servers, **(client or {})})
    existing = admin.list_topics(timeout=timeout_s).topics
    new = [
        NewTopic(name, num_partitions=parts, replication_factor=-1 if repl is None else repl)
        for name, (parts, repl) in topics.items()
        if name not in existing
    ]
    for name, (parts, _) in topics.items():
        found = len(existing[name].partitions) if name in existing else parts
        if found < parts:
            raise ConfigError(
                f"topic {name!r} exists with {found} partition{'s' if found != 1 else ''}; the "
                f"config asks for {parts}. Floodgate does not add partitions (that re-maps "
                "keys to partitions, so a key's tuples would lose their order): set the "
                f"stream's partitions = {found}, or delete the topic (or grow it by hand, "
                "kafka-topics --alter --partitions, accepting the re-mapping)",
                key="partitions",
                value=parts,
                allowed=f"at most {found}, the topic's partitions",
            )
        if found > parts:
            log.warning(
                "FG-BROKER-001 topic %s exists with %d partitions; config asks for %d; kept as is",
                name,
                found,
                parts,
            )
    if new:
        for name, future in admin.create_topics(new, operation_timeout=timeout_s).items():
            try:
                future.result()
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise BrokerError(f"cannot create topic {name!r}: {exc}") from exc
    deadline = time.monotonic() + timeout_s
    while True:
        metadata = admin.list_topics(timeout=timeout_s).topics
        missing = [
            name
            for name, (parts, _) in topics.items()
            if name not in metadata or len(metadata[name].partitions) < min(parts, 1)
        ]
        if not missing:
            return
        if time.monotonic() > deadline:
            raise BrokerError(f"topics {missing} did not appear within {timeout_s:.0f} s")
        time.sleep(0.05)


#: How long :func:`resume_fetching` waits for each wake-up request's answer. Short:
#: the request wakes the broker thread when it is sent; the answer does not matter,
#: and a broker that is down must not hold a resting reader up (the soak restarts it).
RESUME_WAKE_TIMEOUT_S = 0.5
#: How long a resting reader waits for each of its looks at the broker
#: (:func:`rest_until_records`); no answer counts as "records": the reader reads on.
REST_LOOK_TIMEOUT_S = 1.0


def resume_fetching(
    consumer: Consumer,
    partitions: Sequence[TopicPartition],
    *,
    timeout_s: float = RESUME_WAKE_TIMEOUT_S,
) -> None:
    """Resume fetching ``partitions`` (Kafka's ``Consumer.resume``) and have librdkafka
    fetch them now, not at some later wake-up of its broker thread.

    Why: librdkafka's resume only clears the partitions' pause flag. Whether a partition
    is fetchable is decided by the thread of its leader's broker connection, when that
    thread next wakes up: on I/O, or on a request for that broker. A consumer whose
    partitions were all paused has no fetch in flight, so that thread may sleep for
    seconds (confluent-kafka-go issue 630 shows the same gap between ``RESUME`` and the
    next fetch decision). Measured with librdkafka 2.16.0 on the embedded broker
    (``bench/bench_resume.py``), a ``read_committed`` reader that paused 0.25 s after
    each empty read (the demo's reception) received a transaction committed every 0.7 s
    **2.3 s** after its commit at the median and **4.5 s** at p90. A ListOffsets
    request for each resumed partition, which librdkafka sends to the partition's
    leader and so wakes that broker's thread, ends the wait: **0.18 s** and **0.31 s**
    (the pause itself). In the flights demo the reception saw the output of a micro-batch
    2.7-4.9 s after the batch ended; the latency benchmark's figures before this fix
    were mostly that wait (``bench/README.md``, issue 9).

    The wake-up is best effort: a broker that does not answer is logged at debug level
    and fetching resumes at the thread's next wake-up, as without it.

    Args:
        consumer: the consumer whose ``partitions`` were paused.
        partitions: assigned partitions to resume (offsets are ignored).
        timeout_s: the longest wait for each ListOffsets answer.
    """
    if not partitions:
        return
    consumer.resume(list(partitions))
    for tp in partitions:
        try:
            consumer.get_watermark_offsets(
                TopicPartition(tp.topic, tp.partition), timeout=timeout_s, cached=False
            )
        except KafkaException as exc:
            log.debug("wake-up after resume of %s[%d]: %s", tp.topic, tp.partition, exc)


def _has_records_past_position(consumer: Consumer, partitions: Sequence[TopicPartition]) -> bool:
    """Whether a partition's high watermark (ListOffsets, to its leader) is past where
    the consumer reads next: its position, or before it has read anything, its
    committed offset, else the log start (``auto.offset.reset = earliest``; with
    ``latest`` this may say yes once too often, which costs a read). Broker errors
    count as yes: the caller's next read finds out what is wrong."""
    try:
        positions = consumer.position(list(partitions))
        unknown = [tp for tp in positions if tp.offset < 0]
        committed = {
            (tp.topic, tp.partition): tp.offset
            for tp in (consumer.committed(unknown, timeout=REST_LOOK_TIMEOUT_S) if unknown else [])
        }
        for tp in positions:
            low, high = consumer.get_watermark_offsets(
                TopicPartition(tp.topic, tp.partition), timeout=REST_LOOK_TIMEOUT_S, cached=False
            )
            at = tp.offset if tp.offset >= 0 else committed.get((tp.topic, tp.partition), -1)
            if high > (at if at >= 0 else low):
                return True
    except KafkaException as exc:
        log.debug("high watermarks while resting: %s", exc)
        return True
    return False


def rest_until_records(
    consumers: Sequence[Consumer],
    *,
    stop: threading.Event,
    poll_s: float = 0.25,
    max_s: float = 5.0,
) -> None:
    """An idle reader's rest: pause every assigned partition of ``consumers`` until one
    has records past its consumer's position, then resume them all at once
    (:func:`resume_fetching`).

    Why: librdkafka fetches an assigned partition all the time, and a broker that
    answers a fetch at the log end at once instead of holding it for
    ``fetch.wait.max.ms`` (the embedded broker, docs/kafka-engines.md) turns an idle
    reader into a busy loop (measured: 0.62 CPU s a second of the reader's process
    alone). Paused, the reader asks each partition's high watermark every ``poll_s``
    instead: one ListOffsets request a partition, no fetch. Measured by
    ``bench/bench_resume.py`` (a transaction committed every 0.7 s, ``poll_s`` 0.25 s):
    commit to read 0.11 s at the median and 0.17 s at p90, with the reader's process
    at 0.18 CPU s a second; 0.09 s, 0.10 s and 0.61 for a reader that never pauses;
    0.18 s, 0.31 s and 0.23 for one that pauses 0.25 s after each empty read and then
    resumes (with :func:`resume_fetching`; 2.3 s, 4.5 s and 0.03 with librdkafka's
    resume alone).

    A high watermark past the position may be an open transaction's records or a
    transaction marker (``read_committed``): the reader then fetches, finds nothing
    it may return, and its position steps over the marker; it rests again after its
    next empty read.

    Args:
        consumers: readers whose last read returned nothing.
        stop: set to end the rest early (the reader is stopping).
        poll_s: how often the high watermarks are read, seconds.
        max_s: the longest rest, seconds (a rebalance may meanwhile have changed the
            assignment: rest again after a read).
    """
    assigned = [(consumer, consumer.assignment()) for consumer in consumers]
    for consumer, partitions in assigned:
        if partitions:
            consumer.pause(partitions)
    deadline = time.monotonic() + max_s
    try:
        if not all(partitions for _, partitions in assigned):
            # A reader still waiting for its assignment: rest once, as it has
            # nothing to watch yet.
            stop.wait(poll_s)
            return
        while not stop.wait(poll_s) and time.monotonic() < deadline:
            if any(_has_records_past_position(c, p) for c, p in assigned):
                break
    finally:
        for consumer, _ in assigned:
            try:
                # The assignment now: a rebalance may have moved it meanwhile.
                resume_fetching(consumer, consumer.assignment())
            except KafkaException as exc:  # not assigned any more: nothing to resume
                log.warning("resuming a reader after its rest: %s", exc)

"""Bootstrap resolution and the brokers Floodgate starts (the run's engine:
``noida-db`` or Apache Kafka), against real processes."""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from pipeline.brokers.embedded import EmbeddedBroker
from pipeline.brokers.engines import free_port
from pipeline.brokers.local import LocalBroker, resolve_broker
from pipeline.config import BOOTSTRAP_ENV
from pipeline.errors import BrokerError, ConfigError
from pipeline.kafka.fetching import rest_until_records
from pipeline.kafka.topics import ensure_topics


def test_a_started_broker_answers_then_stops_by_pid_and_removes_its_data(
    new_broker: Callable[..., LocalBroker],
) -> None:
    broker = new_broker().start()
    pid, data_dir = broker.pid, broker.data_dir
    assert pid is not None and data_dir.is_dir()
    AdminClient({"bootstrap.servers": broker.bootstrap_servers}).list_topics(timeout=10)

    broker.stop()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not data_dir.exists()


def test_a_restart_on_the_same_data_directory_keeps_every_acknowledged_record(
    tmp_path: Path, new_broker: Callable[..., LocalBroker]
) -> None:
    """An idempotent producer writes without pause across a stop and a restart:
    every record the broker acknowledged is read back once, and the producer never
    meets a fatal error (noida-db's plain SIGTERM lost the last acknowledged records
    and broke the producer's sequence numbers; Apache Kafka's controlled shutdown on
    SIGTERM never did)."""
    broker = new_broker(data_dir=tmp_path / "broker").start()
    try:
        ensure_topics(broker.bootstrap_servers, {"durable": (1, 1)})
        producer = Producer(
            {
                "bootstrap.servers": broker.bootstrap_servers,
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 120_000,
            }
        )
        acknowledged: list[int] = []
        errors: list[KafkaError] = []

        def on_delivery(err: KafkaError | None, msg: object) -> None:
            if err is None:
                acknowledged.append(int(msg.value()))  # type: ignore[attr-defined]
            else:
                errors.append(err)

        stop = threading.Event()

        def produce() -> None:
            sequence = 0
            while not stop.is_set():
                try:
                    producer.produce("durable", str(sequence).encode(), on_delivery=on_delivery)
                    sequence += 1
                except BufferError:
                    producer.poll(0.05)
                if sequence % 200 == 0:
                    producer.poll(0)
                    time.sleep(0.005)
            producer.flush(60)

        writer = threading.Thread(target=produce)
        writer.start()
        time.sleep(2.0)
        broker.stop(remove_data=False)
        acknowledged_at_stop = len(acknowledged)
        broker.start()
        time.sleep(2.0)
        stop.set()
        writer.join(timeout=90)

        assert not errors, errors[:3]
        # The producer was writing on both sides of the restart.
        assert 0 < acknowledged_at_stop < len(acknowledged)
        consumer = Consumer(
            {
                "bootstrap.servers": broker.bootstrap_servers,
                "group.id": "durable-check",
                "enable.auto.commit": False,
            }
        )
        _, high = consumer.get_watermark_offsets(TopicPartition("durable", 0), timeout=10)
        consumer.assign([TopicPartition("durable", 0, 0)])
        read: list[int] = []
        while len(read) < high:
            msg = consumer.poll(5.0)
            assert msg is not None, f"read {len(read)} of {high} records"
            if msg.error() is None:
                read.append(int(msg.value()))  # type: ignore[arg-type]
        consumer.close()
        assert len(read) == len(set(read)) == high
        assert sorted(acknowledged) == sorted(read)
    finally:
        broker.stop()


def test_a_broker_that_cannot_start_names_the_command_and_its_output(
    new_broker: Callable[..., LocalBroker],
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        broker = new_broker(port=port)
        with pytest.raises(BrokerError) as info:
            broker.start(timeout_s=60)
    error = info.value
    assert error.command is not None
    if isinstance(broker, EmbeddedBroker):
        assert "--kafka-port" in error.command and str(port) in error.command
    else:  # Apache Kafka: the node's server.properties names the port
        assert any(arg.endswith("server.properties") for arg in error.command)
    assert "already in use" in error.output
    assert "command:" in str(error) and "already in use" in str(error)


def test_the_environment_variable_wins_and_is_used_as_it_is(bootstrap: str) -> None:
    broker = resolve_broker(env={BOOTSTRAP_ENV: bootstrap})
    assert (broker.kind, broker.bootstrap_servers, broker.embedded) == ("external", bootstrap, None)
    broker.stop()  # stops nothing: the cluster is not ours
    AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)


def test_an_unreachable_named_cluster_is_a_clear_error() -> None:
    port = free_port()  # nobody listens there once the probe socket is closed
    with pytest.raises(BrokerError, match=f"127.0.0.1:{port} did not answer"):
        resolve_broker(f"127.0.0.1:{port}", env={}, timeout_s=2.0)


def test_topics_are_created_with_the_configured_partition_count(bootstrap: str) -> None:
    three, one = (f"t-{uuid.uuid4().hex[:8]}" for _ in range(2))
    names = {three: (3, 1), one: (1, 1)}
    ensure_topics(bootstrap, names)
    ensure_topics(bootstrap, names)  # idempotent
    topics = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
    assert {name: len(topics[name].partitions) for name in names} == {
        n: p for n, (p, _) in names.items()
    }


def test_topics_are_ensured_through_a_broker_restart(
    tmp_path: Path, new_broker: Callable[..., LocalBroker]
) -> None:
    """A query group's start (``ensure_topics`` with ``wait_s``) waits for a broker that
    is restarting instead of failing on its ``_TRANSPORT`` (FG-BROKER-002): the soak's
    driver, started while Apache Kafka restarted after a SIGKILL, exited with
    "Failed to get metadata: Local: Broker transport failure". Without ``wait_s`` it
    still fails at once."""
    from confluent_kafka import KafkaException

    broker = new_broker(data_dir=tmp_path / "broker").start()
    try:
        broker.stop(remove_data=False)
        with pytest.raises(KafkaException):
            ensure_topics(broker.bootstrap_servers, {"later": (2, 1)}, timeout_s=2.0)
        starter = threading.Timer(3.0, broker.start)
        starter.start()
        try:
            ensure_topics(broker.bootstrap_servers, {"later": (2, 1)}, timeout_s=2.0, wait_s=120)
        finally:
            starter.join()
        topics = AdminClient({"bootstrap.servers": broker.bootstrap_servers}).list_topics(
            timeout=10
        )
        assert len(topics.topics["later"].partitions) == 2
    finally:
        broker.stop()


def test_a_resting_reader_stays_paused_until_a_transaction_is_committed_then_reads_it(
    bootstrap: str,
) -> None:
    """``rest_until_records``: an idle ``read_committed`` reader rests (paused, asking
    for high watermarks) while nothing is written, and by itself ends its rest once a
    transaction is; its next reads return that transaction. (How soon: measured by
    ``bench/bench_resume.py``, not here.)"""
    topic = f"rest-{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, {topic: (2, 1)})
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-tx", "linger.ms": 1}
    )
    producer.init_transactions(30)
    reader = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}-reader",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    reader.assign([TopicPartition(topic, p, 0) for p in range(2)])
    try:
        for round_ in range(2):
            assert reader.consume(num_messages=10, timeout=0.5) == []  # idle at the log end
            stop = threading.Event()
            resting = threading.Thread(
                target=rest_until_records,
                args=([reader],),
                kwargs={"stop": stop, "poll_s": 0.1, "max_s": 120.0},
            )
            resting.start()
            resting.join(1.0)
            assert resting.is_alive(), "the rest ended with nothing written"
            assert {tp.partition for tp in reader.assignment()} == {0, 1}
            producer.begin_transaction()
            for i in range(10):
                producer.produce(topic, key=str(i).encode(), value=f"{round_}-{i}".encode())
            producer.commit_transaction(30)
            resting.join(60)  # well before max_s: it ended because of the transaction
            alive = resting.is_alive()
            stop.set()
            resting.join()
            assert not alive, "the rest did not end when a transaction was committed"
            got: list[str] = []
            deadline = time.monotonic() + 30
            while len(got) < 10 and time.monotonic() < deadline:
                for message in reader.consume(num_messages=10, timeout=0.5):
                    if message.error() is None:
                        got.append(message.value().decode())
            assert sorted(got) == sorted(f"{round_}-{i}" for i in range(10)), f"round {round_}"
    finally:
        reader.close()


def test_ensure_topics_refuses_a_topic_with_fewer_partitions_than_configured(
    bootstrap: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A topic auto-created with 1 partition was once kept where the config asks for
    4. Fewer partitions are refused (growing them would re-map keys), naming the
    topic and both counts, and nothing of the call is created; more are kept, with a
    warning."""
    run = uuid.uuid4().hex[:8]
    fewer, more, new = f"fewer.{run}", f"more.{run}", f"new.{run}"
    ensure_topics(bootstrap, {fewer: (1, 1), more: (3, 1)})
    with pytest.raises(ConfigError) as info:
        ensure_topics(bootstrap, {new: (2, 1), fewer: (4, 1)})
    assert (info.value.key, info.value.value) == ("partitions", 4)
    assert f"topic {fewer!r} exists with 1 partition; the config asks for 4" in str(info.value)
    caplog.set_level("WARNING", logger="pipeline.kafka.topics")
    ensure_topics(bootstrap, {more: (2, 1)})
    assert any("FG-BROKER-001" in r.getMessage() and more in r.getMessage() for r in caplog.records)
    topics = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
    assert new not in topics
    assert (len(topics[fewer].partitions), len(topics[more].partitions)) == (1, 3)

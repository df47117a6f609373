"""Bootstrap resolution and the embedded broker, against real processes."""

from __future__ import annotations

import os
import socket
import uuid

import pytest
from confluent_kafka.admin import AdminClient

from pipeline.broker import EmbeddedBroker, ensure_topics, resolve_broker
from pipeline.config import BOOTSTRAP_ENV
from pipeline.errors import BrokerError


def test_embedded_broker_answers_then_stops_by_pid_and_removes_its_data() -> None:
    broker = EmbeddedBroker().start()
    pid, data_dir = broker.pid, broker.data_dir
    assert pid is not None and data_dir.is_dir()
    AdminClient({"bootstrap.servers": broker.bootstrap_servers}).list_topics(timeout=10)

    broker.stop()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not data_dir.exists()


def test_a_broker_that_cannot_start_names_the_command_and_its_output() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(BrokerError) as info:
            EmbeddedBroker(port=port).start(timeout_s=20)
    error = info.value
    assert (
        error.command is not None and "--kafka-port" in error.command and str(port) in error.command
    )
    assert "already in use" in error.output
    assert "command:" in str(error) and "already in use" in str(error)


def test_the_environment_variable_wins_and_is_used_as_it_is(bootstrap: str) -> None:
    broker = resolve_broker(env={BOOTSTRAP_ENV: bootstrap})
    assert (broker.kind, broker.bootstrap_servers, broker.embedded) == ("external", bootstrap, None)
    broker.stop()  # stops nothing: the cluster is not ours
    AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)


def test_an_unreachable_named_cluster_is_a_clear_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(BrokerError, match=f"127.0.0.1:{port} did not answer"):
        resolve_broker(f"127.0.0.1:{port}", env={})


def test_topics_are_created_with_the_configured_partition_count(bootstrap: str) -> None:
    three, one = (f"t-{uuid.uuid4().hex[:8]}" for _ in range(2))
    names = {three: (3, 1), one: (1, 1)}
    ensure_topics(bootstrap, names)
    ensure_topics(bootstrap, names)  # idempotent
    topics = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
    assert {name: len(topics[name].partitions) for name in names} == {
        n: p for n, (p, _) in names.items()
    }

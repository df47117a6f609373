"""The apache-kafka engine's pure parts: broker settings, engine choice, the cache
directory, and the errors when Java or Maven is missing (no broker is started)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.brokers.apache_kafka import (
    ApacheKafkaCluster,
    KafkaNode,
    broker_properties,
    kafka_libs,
)
from pipeline.brokers.apache_kafka.artifacts import cache_dir, java_command
from pipeline.brokers.apache_kafka.config import INTER_BROKER_USER, save_layout, scram_arguments
from pipeline.brokers.embedded import EmbeddedBroker
from pipeline.brokers.engines import ENGINE_ENV, free_port, free_ports, kafka_engine
from pipeline.brokers.local import local_broker
from pipeline.errors import BrokerError, ConfigError


def nodes(n: int) -> list[KafkaNode]:
    return [
        KafkaNode(i + 1, 9092 + 10 * i, 9093 + 10 * i, Path(f"/d/node-{i + 1}")) for i in range(n)
    ]


def test_a_single_node_is_a_combined_kraft_node_with_replication_one() -> None:
    (node,) = nodes(1)
    props = broker_properties(node, [node], host="127.0.0.1")
    assert props["process.roles"] == "broker,controller"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:9093"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9092"
    for key in (
        "default.replication.factor",
        "offsets.topic.replication.factor",
        "transaction.state.log.replication.factor",
        "min.insync.replicas",
        "transaction.state.log.min.isr",
    ):
        assert props[key] == "1", key
    assert props["log.dirs"] == "/d/node-1/logs"


def test_three_nodes_replicate_three_times_and_need_two_in_sync() -> None:
    three = nodes(3)
    props = [broker_properties(node, three, host="127.0.0.1") for node in three]
    assert {p["controller.quorum.voters"] for p in props} == {
        "1@127.0.0.1:9093,2@127.0.0.1:9103,3@127.0.0.1:9113"
    }
    assert [p["node.id"] for p in props] == ["1", "2", "3"]
    for p in props:
        assert p["default.replication.factor"] == "3"
        assert p["min.insync.replicas"] == "2"
        assert p["offsets.topic.replication.factor"] == "3"
        assert p["transaction.state.log.min.isr"] == "2"


def test_overrides_win_over_floodgate_s_settings() -> None:
    (node,) = nodes(1)
    props = broker_properties(
        node, [node], host="127.0.0.1", overrides={"group.initial.rebalance.delay.ms": "3000"}
    )
    assert props["group.initial.rebalance.delay.ms"] == "3000"


def test_the_engine_comes_from_the_argument_then_the_environment_then_the_default() -> None:
    assert kafka_engine(env={}) == "noida-db"
    assert kafka_engine(env={ENGINE_ENV: "apache-kafka"}) == "apache-kafka"
    assert kafka_engine("noida-db", env={ENGINE_ENV: "apache-kafka"}) == "noida-db"
    assert isinstance(local_broker(env={}), EmbeddedBroker)
    assert isinstance(local_broker("apache-kafka", env={}), ApacheKafkaCluster)


def test_an_unknown_engine_is_refused_naming_the_variable_and_the_allowed_values() -> None:
    with pytest.raises(ConfigError) as info:
        kafka_engine(env={ENGINE_ENV: "kafka"})
    assert info.value.key == ENGINE_ENV and info.value.value == "kafka"
    assert "noida-db" in str(info.value) and "apache-kafka" in str(info.value)


def test_the_embedded_engine_refuses_a_cluster() -> None:
    with pytest.raises(ConfigError, match="apache-kafka"):
        local_broker("noida-db", nodes=3, env={})


def test_a_data_directory_keeps_the_cluster_id_and_ports_for_a_restart(tmp_path: Path) -> None:
    first = ApacheKafkaCluster(nodes=3, data_dir=tmp_path)
    save_layout(tmp_path, first.cluster_id, first.version, first.nodes)
    again = ApacheKafkaCluster(nodes=3, data_dir=tmp_path)
    assert again.cluster_id == first.cluster_id
    assert again.bootstrap_servers == first.bootstrap_servers
    assert [n.controller_port for n in again.nodes] == [n.controller_port for n in first.nodes]
    with pytest.raises(BrokerError, match="3-node cluster"):
        ApacheKafkaCluster(nodes=1, data_dir=tmp_path)


def test_a_new_cluster_s_listeners_are_all_on_different_ports(tmp_path: Path) -> None:
    """Kafka refuses two IPv4 listeners on one port, so no node's broker and controller
    listeners may share one, nor two nodes, nor a node and the named first port."""
    for attempt in range(20):  # a collision is rare: ask twenty times
        cluster = ApacheKafkaCluster(nodes=3, data_dir=tmp_path / str(attempt), port=free_port())
        ports = [p for n in cluster.nodes for p in (n.port, n.controller_port)]
        assert len(set(ports)) == 6, ports


def test_free_ports_are_distinct_and_avoid_the_taken_ones() -> None:
    taken = set(free_ports(10))
    ports = free_ports(200, taken=taken)
    assert len(set(ports)) == 200 and not taken & set(ports)


def test_the_cache_directory_follows_floodgate_then_xdg_then_home() -> None:
    assert cache_dir({"FLOODGATE_CACHE_DIR": "/c", "XDG_CACHE_HOME": "/x"}) == Path("/c")
    assert cache_dir({"XDG_CACHE_HOME": "/x"}) == Path("/x/floodgate")
    assert cache_dir({}) == Path.home() / ".cache" / "floodgate"


def test_without_java_the_error_names_the_install_command(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BrokerError, match="apt-get install -y openjdk-17-jre-headless"):
        java_command()


def test_without_maven_the_error_names_the_install_command_and_nothing_is_cached(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    with pytest.raises(BrokerError, match="apt-get install -y maven"):
        kafka_libs("4.4.0", cache=tmp_path / "cache")
    assert not (tmp_path / "cache" / "apache-kafka-4.4.0" / ".complete").exists()


def test_sasl_users_make_the_client_listener_sasl_plain_and_leave_the_controller_plaintext(
    tmp_path: Path,
) -> None:
    cluster = ApacheKafkaCluster(data_dir=tmp_path, sasl_users={"alice": "al1ce-pw"})
    (node,) = cluster.nodes
    assert cluster.sasl_users is not None
    props = broker_properties(node, cluster.nodes, host="127.0.0.1", sasl_users=cluster.sasl_users)
    assert props["listeners"] == (
        f"SASL_PLAINTEXT://127.0.0.1:{node.port},CONTROLLER://127.0.0.1:{node.controller_port}"
    )
    assert props["advertised.listeners"] == f"SASL_PLAINTEXT://127.0.0.1:{node.port}"
    assert props["listener.security.protocol.map"] == (
        "CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT"
    )
    assert props["sasl.enabled.mechanisms"] == "PLAIN"
    jaas = props["listener.name.sasl_plaintext.plain.sasl.jaas.config"]
    assert 'user_alice="al1ce-pw"' in jaas and jaas.endswith(";")
    assert cluster.client_config("alice") == {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "alice",
        "sasl.password": "al1ce-pw",
    }
    assert ApacheKafkaCluster(data_dir=tmp_path / "plain").client_config() == {}


def test_a_scram_cluster_adds_the_mechanism_and_each_users_credential_at_format(
    tmp_path: Path,
) -> None:
    cluster = ApacheKafkaCluster(
        data_dir=tmp_path, sasl_users={"alice": "al1ce,pw]"}, sasl_mechanism="SCRAM-SHA-512"
    )
    (node,) = cluster.nodes
    assert cluster.sasl_users is not None
    props = broker_properties(
        node,
        cluster.nodes,
        host="127.0.0.1",
        sasl_users=cluster.sasl_users,
        sasl_mechanism="SCRAM-SHA-512",
    )
    assert props["sasl.enabled.mechanisms"] == "PLAIN,SCRAM-SHA-512"
    assert props["sasl.mechanism.inter.broker.protocol"] == "PLAIN"
    assert props["listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config"] == (
        "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    )
    assert cluster.client_config("alice")["sasl.mechanism"] == "SCRAM-SHA-512"
    assert cluster.client_config(INTER_BROKER_USER)["sasl.mechanism"] == "PLAIN"
    # The brokers' own user logs in with PLAIN: only the clients' users get SCRAM.
    assert scram_arguments(cluster.sasl_users, cluster.sasl_mechanism) == [
        "--add-scram",
        'SCRAM-SHA-512=[name=alice,password="al1ce,pw]"]',
    ]
    plain = ApacheKafkaCluster(data_dir=tmp_path / "p", sasl_users={"a": "b"})
    assert scram_arguments(plain.sasl_users, plain.sasl_mechanism) == []


def test_an_unknown_sasl_mechanism_is_refused_naming_the_allowed_ones(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as refused:
        ApacheKafkaCluster(
            data_dir=tmp_path,
            sasl_users={"alice": "pw"},
            sasl_mechanism="GSSAPI",  # type: ignore[arg-type]
        )
    assert refused.value.key == "sasl_mechanism"
    assert refused.value.allowed == "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"


@pytest.mark.parametrize(
    "users",
    [
        {},
        {"al ice": "s3cret-pw"},
        {"floodgate-broker": "s3cret-pw"},
        {"alice": ""},
        {"alice": 's3cret"pw'},
    ],
    ids=["none", "space-in-name", "the-brokers-own", "empty-password", "quote-in-password"],
)
def test_sasl_users_kafka_cannot_take_are_refused_without_showing_the_password(
    tmp_path: Path, users: dict[str, str]
) -> None:
    with pytest.raises(ConfigError, match=r"SASL|sasl_users") as refused:
        ApacheKafkaCluster(data_dir=tmp_path, sasl_users=users)
    assert refused.value.key == "sasl_users"
    for password in users.values():
        if password:
            assert password not in str(refused.value)


def test_the_broker_command_refuses_sasl_on_the_embedded_engine() -> None:
    from typer.testing import CliRunner

    from pipeline.cli import app

    result = CliRunner().invoke(
        app,
        ["broker", "--engine", "noida-db", "--sasl-user", "alice"],
        env={"FLOODGATE_SASL_PASSWORD": "Pa55-w0rd-of-alice"},
    )
    assert result.exit_code == 2  # a usage error: options that do not go together
    assert result.stdout == ""
    assert "--sasl-user needs --engine apache-kafka" in result.stderr

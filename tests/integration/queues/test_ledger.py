"""The tuple ledger on a real broker: ``floodgate audit`` balances a
drained query group with a dead letter and a backlog, names the tuples that retention
deleted before any query read them, and the sweeper exports them as
``floodgate_ledger_unaccounted_tuples``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.config import QueryGroupConfig
from pipeline.queues.ledger import reconcile
from sweeper.config import SweeperSettings
from sweeper.service import Sweeper
from tests.integration.helpers import Drained, flights_raw_config, write_query_group


def audit(config_path: Path, bootstrap: str) -> tuple[int, list[dict[str, Any]]]:
    result = CliRunner().invoke(
        app, ["audit", str(config_path), "--bootstrap", bootstrap, "--json"]
    )
    return result.exit_code, json.loads(result.output)["ledger"]


def test_the_ledger_balances_then_names_what_retention_deleted_unread(
    bootstrap: str,
    drain: Callable[[QueryGroupConfig], Drained],
    flights: list[dict[str, Any]],
    produce: Callable[..., None],
    run_id: str,
    tmp_path: Path,
) -> None:
    raw = flights_raw_config(run_id, tmp_path / "checkpoints", only_passthrough=True)
    config_path = tmp_path / "group.toml"
    config = write_query_group(raw, config_path)
    topic = config.input_streams["flights"].topic

    produce(config, flights[:1_000])
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, key=b"bad", value=b"this is not avro", partition=0)
    assert producer.flush(30) == 0
    drain(config)
    produce(config, flights[1_000:1_500])  # queued: nobody runs the group now

    rows = reconcile(config, bootstrap_servers=bootstrap)
    assert [r.partition for r in rows] == list(range(config.input_settings("flights").partitions))
    assert sum(r.written for r in rows) == 1_501
    assert sum(r.processed for r in rows) == 1_000
    assert sum(r.dead_lettered for r in rows) == 1
    assert sum(r.queued for r in rows) == 500
    assert sum(r.swept for r in rows) == 0
    assert all(r.balanced for r in rows)
    code, shown = audit(config_path, bootstrap)
    assert code == 0, shown
    assert sum(r["queued"] for r in shown) == 500

    # Retention deletes partition 0's backlog before the group ran again.
    p0 = next(r for r in rows if r.partition == 0)
    assert p0.queued > 0
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, p0.written)]).values():
        future.result(timeout=30)

    code, shown = audit(config_path, bootstrap)
    assert code == 1
    lost = {r["partition"]: r["unaccounted"] for r in shown if not r["balanced"]}
    assert lost == {0: p0.queued}
    result = CliRunner().invoke(app, ["audit", str(config_path), "--bootstrap", bootstrap])
    assert result.exit_code == 1
    assert f"{p0.queued:,} tuples of {topic}[0]" in result.output

    # The sweeper's cycle reconciles the same ledger and exports it.
    sweeper = Sweeper(
        SweeperSettings(
            catalog_url=f"sqlite:///{tmp_path / 'catalog.db'}", blob_dir=str(tmp_path / "blobs")
        ),
        [config],
        bootstrap_servers=bootstrap,
    )
    try:
        sweeper.reconcile()
        for row in rows:
            value = sweeper.registry.get_sample_value(
                "floodgate_ledger_unaccounted_tuples",
                {"query_group": config.name, "stream": "flights", "partition": str(row.partition)},
            )
            assert value == (p0.queued if row.partition == 0 else 0), row.partition
    finally:
        sweeper.stop()

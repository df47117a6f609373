"""The swept passthrough query group and its sequenced input (the sweeper and Spark
cluster tests), and a topic's head swept by hand into a BLOB (the source's tests)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from pipeline.config import QueryGroupConfig, parse_query_group
from pipeline.swept.blob import blob_name, write_sealed_blob
from pipeline.swept.catalog import SweepCatalog
from pipeline.swept.reading import RANGE_CONSUMER, read_partition
from sweeper.service import Sweeper
from tests.integration.helpers import flights_raw_config, wait_until


def sequenced(flights: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """``n`` flight tuples whose ``flight`` field is the sequence number 0..n-1."""
    return [{**flights[i % len(flights)], "flight": i} for i in range(n)]


def swept_group(
    run_id: str,
    tmp_path: Path,
    *,
    max_queue_size: int = 1_000_000,
    output: dict[str, Any] | None = None,
    **group: Any,
) -> QueryGroupConfig:
    """The passthrough query group on one input and one output partition (so output
    order is input order), its input swept through a catalog in ``tmp_path``;
    ``output`` updates the output stream's section."""
    raw = flights_raw_config(run_id, tmp_path / "checkpoints", only_passthrough=True)
    raw["query_group"].update(
        {
            "sweep_catalog_url": f"sqlite:///{tmp_path / 'catalog.db'}",
            "output_queue_check": False,
            **group,
        }
    )
    raw["input_streams"]["flights"].update(partitions=1, max_queue_size=max_queue_size)
    raw["output_streams"]["flights_copy"].update({"partitions": 1, **(output or {})})
    return parse_query_group(raw, env={})


def sample(sweeper: Sweeper) -> tuple[int, int]:
    """``(backlog, broker-resident backlog)`` of the swept queue's partition 0: tuples
    not consumed yet, and those of them the broker still holds."""
    part = sweeper.queues[0].probe.snapshot().partitions[0]
    committed = part.committed if part.committed is not None else 0
    return part.high - committed, part.high - part.position


def sweep_head(bootstrap: str, topic: str, end: int, tmp_path: Path) -> str:
    """Sweep offsets ``[0, end)`` of partition 0 of ``topic`` into a sealed BLOB under
    ``tmp_path``, register it in a SQLite sweep catalog there, and delete them from the
    broker, as the sweeper does; the catalog's URL."""
    reader = Consumer(
        {**RANGE_CONSUMER, "bootstrap.servers": bootstrap, "group.id": f"{topic}.sweep"}
    )
    path = tmp_path / blob_name(topic, 0, 0, end)
    seal = write_sealed_blob(path, read_partition(reader, topic, 0, 0, end))
    reader.close()
    url = f"sqlite:///{tmp_path / 'catalog.db'}"
    catalog = SweepCatalog(url)
    catalog.register(
        topic, 0, 0, end, path=str(path), size=seal.bytes, tuples=end, now=0.0, seal=seal
    )
    catalog.close()
    wait_until(
        lambda: deleted_before(bootstrap, TopicPartition(topic, 0, end)), 30, "records deleted"
    )
    return url


def deleted_before(bootstrap: str, before: TopicPartition) -> bool:
    """Delete the records before ``before``; False while its leader is not known."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        for future in admin.delete_records([before]).values():
            future.result(30)
    except KafkaException:
        return False
    return True

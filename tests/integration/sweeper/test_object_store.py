"""Swept BLOBs on object storage (``sweeper.blob_store = "s3://bucket/prefix"``), against
a real S3-compatible server (S3Proxy, :mod:`tests.integration.s3proxy`) and a real
broker: the sweeper writes BLOBs as objects, the reception reads them back in order,
a flipped byte in an object is caught, and the sweeper's recovery and claim work as
they do on a folder."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from pipeline.client import connect
from pipeline.config import QueryGroupConfig
from pipeline.errors import BlobIntegrityError, ConfigError
from pipeline.kafka.topics import ensure_topics
from pipeline.serde.codec import StreamCodec
from pipeline.serde.schemas import SchemaRepository
from pipeline.swept.blob import blob_name
from pipeline.swept.catalog import SweepCatalog
from pipeline.swept.reading import RANGE_CONSUMER, read_partition
from pipeline.swept.store import ObjectBlobStore, object_key
from sweeper.config import SweeperSettings
from sweeper.lock import LOCK_NAME
from sweeper.service import Sweeper
from tests.integration.s3proxy import S3Server
from tests.integration.sweeper.sweeping import sequenced, swept_group

DEADLINE_S = 240.0
BUCKET = "floodgate-blobs"


@pytest.fixture(scope="module")
def bucket(s3: S3Server) -> str:
    s3.create_bucket(BUCKET)
    return BUCKET


def objects(url: str) -> list[str]:
    """The names of the objects under ``url`` (``s3://bucket/prefix``)."""
    filesystem, prefix = object_key(url)
    found = filesystem.get_file_info(pafs.FileSelector(prefix, allow_not_found=True))
    return sorted(info.base_name for info in found)


@pytest.fixture
def swept_output(
    bootstrap: str, schemas: SchemaRepository, run_id: str, tmp_path: Path, flights: list[Any]
) -> Iterator[tuple[QueryGroupConfig, str]]:
    """A swept output stream queue of one partition holding 3 000 sequenced tuples; its
    reception group (``run_id``) has read none."""
    config = swept_group(run_id, tmp_path, output={"swept": True, "reception_groups": [run_id]})
    topic = config.output_streams["flights_copy"].topic
    ensure_topics(bootstrap, {topic: (1, 1), config.input_streams["flights"].topic: (1, 1)})
    codec = StreamCodec("flights_copy", schemas.get("flight"), schemas)
    producer = Producer({"bootstrap.servers": bootstrap})
    for record in sequenced(flights, 3_000):
        producer.produce(topic, codec.encode(record), partition=0)
    assert producer.flush(30) == 0
    yield config, topic


def test_a_backlog_swept_into_objects_is_read_back_in_order_and_its_objects_removed(
    bootstrap: str,
    schemas: SchemaRepository,
    bucket: str,
    run_id: str,
    swept_output: tuple[QueryGroupConfig, str],
) -> None:
    config, topic = swept_output
    store = f"s3://{bucket}/{run_id}"
    clock = [0.0]
    sweeper = Sweeper(
        SweeperSettings(catalog_url=config.query_group.sweep_catalog_url or "", blob_store=store),
        [config],
        bootstrap_servers=bootstrap,
        clock=lambda: clock[0],
    )
    received: list[int] = []
    swept: list[str] = []
    truncated = False
    try:
        with connect(bootstrap_servers=bootstrap, config=config, schemas=schemas) as conn:
            reception = conn.open_stream_output(config.name, "flights_copy")
            deadline = time.monotonic() + DEADLINE_S
            while len(received) < 3_000:
                assert time.monotonic() < deadline, f"received {len(received)} of 3000"
                goal = len(received) + 100
                while len(received) < goal:  # the reception's service rate: 100 a cycle
                    got = reception.get(max_tuples=goal - len(received), timeout_s=0.5)
                    received.extend(t["flight"] for t in got)
                clock[0] += sweeper.settings.sweep_interval_s
                for outcome in sweeper.cycle():
                    if outcome.blob is not None:
                        swept.append(outcome.blob.path)
                        # Published under its name, the temporary object gone.
                        assert outcome.blob.path.startswith(f"{store}/")
                        assert outcome.blob.path.rsplit("/", 1)[1] in objects(store)
                    if outcome.truncated_to is not None and not truncated:
                        truncated = True
                        # What it reads next is only in the objects now.
                        reception.close()
                        reception = conn.open_stream_output(config.name, "flights_copy")
            reception.close()
        assert swept and truncated
        assert received == list(range(3_000)), "not every tuple once, in order"
        clock[0] += sweeper.settings.sweep_interval_s
        sweeper.cycle()  # the reception is past every BLOB: each is removed
        assert sweeper.catalog.chain(topic, 0) == []
        assert objects(store) == [LOCK_NAME]
    finally:
        sweeper.close()


def test_a_flipped_byte_in_an_object_fails_the_reception_and_commits_nothing_past_it(
    bootstrap: str,
    schemas: SchemaRepository,
    bucket: str,
    run_id: str,
    swept_output: tuple[QueryGroupConfig, str],
) -> None:
    config, topic = swept_output
    store = ObjectBlobStore(f"s3://{bucket}/{run_id}")
    name = blob_name(topic, 0, 0, 100)
    reader = Consumer(  # not the reception's group: this one commits nothing
        {
            **RANGE_CONSUMER,
            "bootstrap.servers": bootstrap,
            "group.id": f"{run_id}.sweep",
            "enable.auto.commit": False,
        }
    )
    seal = store.write(store.temporary(name), read_partition(reader, topic, 0, 0, 100))
    reader.close()
    reception_group = Consumer({"bootstrap.servers": bootstrap, "group.id": run_id})
    reception_group.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    reception_group.close()
    store.publish(store.temporary(name), store.path(name))
    catalog = SweepCatalog(config.query_group.sweep_catalog_url or "")
    catalog.record_blob_dir(store.location, key="sweeper.blob_store")
    blob = catalog.register(
        topic, 0, 0, 100, path=store.path(name), size=seal.bytes, tuples=100, now=0.0, seal=seal
    )
    catalog.close()
    filesystem, key = object_key(blob.path)
    with filesystem.open_input_file(key) as src:
        data = bytearray(src.read())
    data[len(data) // 2] ^= 0x01
    with filesystem.open_output_stream(key) as out:
        out.write(bytes(data))
    # The broker's copy is gone: the object is the only one.
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, 100)]).values():
        future.result()
    with connect(bootstrap_servers=bootstrap, config=config, schemas=schemas) as conn:
        reception = conn.open_stream_output(config.name, "flights_copy")
        with pytest.raises(BlobIntegrityError) as caught:
            deadline = time.monotonic() + DEADLINE_S
            while time.monotonic() < deadline:
                assert reception.get(max_tuples=10, timeout_s=0.5) == []
        reception.close()
    error = caught.value
    assert (error.blob_id, error.path, error.reason) == (blob.id, blob.path, "sha256")
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": run_id})
    (committed,) = consumer.committed([TopicPartition(topic, 0)], timeout=30)
    consumer.close()
    assert committed.offset == 0  # no tuple of the BLOB was handed out


def test_recovery_removes_a_killed_sweeps_objects_and_another_catalog_is_refused(
    bootstrap: str, bucket: str, run_id: str, tmp_path: Path
) -> None:
    config = swept_group(run_id, tmp_path)
    ensure_topics(bootstrap, {config.input_streams["flights"].topic: (1, 1)})
    url = f"s3://{bucket}/{run_id}"
    settings = SweeperSettings(
        catalog_url=config.query_group.sweep_catalog_url or "", blob_store=url
    )
    sweeper = Sweeper(settings, [config], bootstrap_servers=bootstrap)
    store = sweeper.store
    topic = config.input_streams["flights"].topic
    name = blob_name(topic, 0, 0, 10)
    filesystem, _ = object_key(url)
    for made in (store.temporary(name), store.path("operator-notes.txt")):
        with filesystem.open_output_stream(object_key(made)[1]) as out:
            out.write(b"a killed sweep's, or an operator's")
    sweeper.catalog.begin_write(store.path(name), topic, 0, 0, 10, now=0.0)
    try:
        assert sweeper.recover() == [store.temporary(name)]
        assert objects(url) == [LOCK_NAME, "operator-notes.txt"]
    finally:
        sweeper.close()
    other = SweeperSettings(catalog_url=f"sqlite:///{tmp_path / 'other.db'}", blob_store=url)
    with pytest.raises(ConfigError, match="claimed by the sweepers of another catalog") as refused:
        Sweeper(other, [], bootstrap_servers=bootstrap)
    assert refused.value.key == "sweeper.blob_store"
    with pytest.raises(ConfigError, match="no bucket 'floodgate-nowhere'"):
        ObjectBlobStore("s3://floodgate-nowhere/blobs")

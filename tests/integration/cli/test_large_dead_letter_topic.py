"""``floodgate audit`` reads a dead-letter topic larger than librdkafka's default
largest response (100 MB).

A long-running stack dead-lettered 282 359 tuples of one replay round; the embedded
broker answered the audit reader's fetch with all of them at once (118 MB), which
librdkafka refused ("Invalid response size"), then asked again, for 30 s, and nothing
was printed. Readers of whole topics now take fetches bounded on Apache Kafka and
answers of up to 1 GiB from the embedded broker, which ignores the bounds
(:func:`pipeline.kafka.fetching.bounded_fetch`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import tomli_w
from confluent_kafka import Producer
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.config import load_query_group
from pipeline.deadletter import DLQ_OFFSET, DLQ_PARTITION, DLQ_REASON, DLQ_TOPIC
from pipeline.kafka.topics import ensure_topics
from pipeline.queues.ledger import DeadLetters
from tests.integration.helpers import flights_raw_config

#: Dead letters written: ~460 bytes each with their headers, as the late ones of the
#: flights demo (118 MB for 282 359): about 140 MB in all, over librdkafka's default 100 MB.
DEAD_LETTERS = 300_000


def test_the_audit_reads_a_dead_letter_topic_of_140_mb(
    bootstrap: str, run_id: str, tmp_path: Path
) -> None:
    raw = flights_raw_config(run_id, tmp_path / "checkpoints", only_passthrough=True)
    raw["query_group"]["partitions"] = 2
    config_path = tmp_path / "group.toml"
    config_path.write_text(tomli_w.dumps(raw))
    config = load_query_group(config_path)
    topic = config.input_streams["flights"].topic
    ensure_topics(bootstrap, config.topics())
    started = time.monotonic()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    value = b"v" * 100
    error = ("late: event time 2013-01-01T10:00:00.000Z, its latest window ended " * 3).encode()
    for i in range(DEAD_LETTERS):
        while True:
            try:
                producer.produce(
                    config.dead_letter_topic,
                    key=f"q@{topic}/0/{i}".encode(),
                    value=value,
                    partition=i % 2,
                    headers=[
                        (DLQ_REASON, b"late"),
                        ("floodgate.error", error),
                        (DLQ_TOPIC, topic.encode()),
                        (DLQ_PARTITION, b"0"),
                        (DLQ_OFFSET, str(i).encode()),
                    ],
                )
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(120) == 0
    written_s = time.monotonic() - started

    started = time.monotonic()
    dead = DeadLetters(bootstrap, config.dead_letter_topic, config.kafka.client)
    try:
        dead.refresh(timeout_s=60)
        assert len(dead.offsets(topic, 0)) == DEAD_LETTERS
    finally:
        dead.close()
    read_s = time.monotonic() - started
    # floodgate audit, with the same client properties, reads it too.
    result = CliRunner().invoke(
        app, ["audit", str(config_path), "--bootstrap", bootstrap, "--json"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["ledger"]
    print(f"{DEAD_LETTERS:,} dead letters written in {written_s:.1f} s, read in {read_s:.1f} s")

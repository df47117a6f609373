"""A producer process killed with SIGKILL while its ``put(block=True)`` waits for room:
nothing of the blocked batch reaches the queue (a put is all or nothing),
the ledger balances, and the queue's room comes back for the next producer.

The room a producer counts is its own (the client's budget lives in the process; the
broker holds only the high watermarks and the group's committed offsets), so a killed
producer holds no room: a second producer's blocked put goes on once the query group
consumes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipeline.client import connect
from pipeline.demo.reception import read_all
from pipeline.kafka.topics import ensure_topics
from pipeline.queues.ledger import reconcile
from pipeline.serde.codec import StreamCodec
from pipeline.serde.schemas import SchemaRepository
from pipeline.spark.query_group import QueryGroup
from tests.integration.client.test_client import topic_total
from tests.integration.helpers import ROOT, flights_raw_config, write_query_group

#: The input stream queue's bound, the tuples the first producer gets in, and the batch
#: its blocked put waits to send (more than the 100 left).
MAX_QUEUE_SIZE, FIRST, BLOCKED = 600, 500, 200

#: How long a step may take (a process's start, a put, a drain), seconds: generous, as
#: other Spark and Kafka processes share the machine's cores.
DEADLINE_S = 600.0


def test_a_producer_killed_in_a_blocked_put_loses_nothing_and_the_room_comes_back(
    bootstrap: str,
    schemas: SchemaRepository,
    flights: list[dict[str, Any]],
    run_id: str,
    tmp_path: Path,
    start_query_group: Callable[..., QueryGroup],
) -> None:
    raw = flights_raw_config(
        run_id, tmp_path / "checkpoints", only_passthrough=True, max_tuples_per_trigger=200
    )
    raw["input_streams"]["flights"]["max_queue_size"] = MAX_QUEUE_SIZE
    raw["query_group"].update(resume_free_queue_size_threshold=50, queue_refresh_interval_ms=100)
    config_path = tmp_path / "group.toml"
    config = write_query_group(raw, config_path)
    topic = config.input_streams["flights"].topic
    ensure_topics(bootstrap, {topic: (4, 1)})

    out_path = tmp_path / "producer.log"
    with open(out_path, "wb") as out:
        producer = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.integration.client.blocked_producer",
                str(config_path),
                bootstrap,
                str(FIRST),
                str(BLOCKED),
            ],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        deadline = time.monotonic() + DEADLINE_S
        while "BLOCKED" not in out_path.read_text():
            assert producer.poll() is None, out_path.read_text()
            assert time.monotonic() < deadline, f"no blocked put: {out_path.read_text()}"
            time.sleep(0.1)
        os.kill(producer.pid, signal.SIGKILL)
        assert producer.wait(timeout=30) == -signal.SIGKILL
    finally:
        with contextlib.suppress(ProcessLookupError):
            producer.kill()
        producer.wait(timeout=30)
    assert "PUT" not in out_path.read_text().replace("BLOCKED", "")

    assert topic_total(bootstrap, topic) == FIRST  # nothing of the blocked batch was sent
    rows = reconcile(config, bootstrap_servers=bootstrap)
    assert all(row.balanced for row in rows), rows
    assert sum(row.queued for row in rows) == sum(row.written for row in rows) == FIRST

    # The room comes back: a second producer's put, as large, waits, then goes in once
    # the query group consumes.
    outcome: list[Any] = []
    with connect(bootstrap_servers=bootstrap, config=config, schemas=schemas) as connector:
        stream_input = connector.open_stream_input(config.name, "flights")
        second = threading.Thread(
            target=lambda: outcome.append(
                stream_input.put(flights[FIRST : FIRST + BLOCKED], block=True, timeout_s=DEADLINE_S)
            ),
            daemon=True,
        )
        second.start()
        with start_query_group(config) as group:
            second.join(timeout=DEADLINE_S)
            assert outcome and outcome[0].accepted == BLOCKED, outcome
            stream_input.put_end()
            group.process_all_available()

    codec = StreamCodec("flights", schemas.get("flight"), schemas)
    written = Counter(
        tuple(sorted(codec.decode(m.value(), logical=False).items()))
        for m in read_all(bootstrap, config.output_streams["flights_copy"].topic)
    )
    assert written == Counter(tuple(sorted(r.items())) for r in flights[: FIRST + BLOCKED])
    rows = reconcile(config, bootstrap_servers=bootstrap)
    assert all(row.balanced for row in rows), rows
    assert sum(row.processed for row in rows) == sum(row.written for row in rows)
    assert sum(row.written for row in rows) == FIRST + BLOCKED

"""A zombie driver: stopped in the middle of a transaction while a second driver takes
over its checkpoint, then resumed. It must be fenced, and every output tuple written once.

Driver A stops itself (SIGSTOP of its process group: the Python driver and its JVM) at
the JVM sink's ``records-sent:<batch>:stop`` failpoint, with batch 2's records
acknowledged in its write tasks' open transactions. Driver B starts on the same
checkpoint and query group: its write tasks' producers, with the same
``transactional.id`` per task, fence A's (Kafka's ``InitProducerId`` bumps the producer
epoch and aborts A's open transactions) and B writes batch 2 again, then the rest. A is
then sent SIGCONT: its commits carry the old epoch and are fenced; a retry of its task
finds the partition committed by B and skips it, and A's query then fails on Spark's
commit log, which B wrote first. B goes on (a task of B whose producer A's retry
fenced in turn is retried with a new one).
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

from pipeline.failpoints import FAILPOINT_ENV
from pipeline.queues.ledger import reconcile
from pipeline.serde.schemas import SchemaRepository
from tests.integration.spark.drivers import (
    committed_and_end,
    copies,
    kill_group,
    sent,
    setup_group,
    start_driver,
    stopped,
    wait_until,
)

#: How long a driver may take to start, crash or drain, seconds: generous, as other Spark
#: and Kafka processes share the machine's cores (a driver took 160 s to start under a
#: load average of 100 on 2 cores).
DEADLINE_S = 600.0


def test_a_zombie_driver_resumed_after_a_second_took_over_is_fenced_and_writes_nothing(
    bootstrap: str,
    schemas: SchemaRepository,
    flights: list[dict[str, Any]],
    run_id: str,
    tmp_path: Path,
    produce: Any,
) -> None:
    first, later = flights[:2_000], flights[2_000:2_500]
    config, config_path = setup_group(run_id, tmp_path, produce, first)
    topic = config.input_streams["flights"].topic
    output = config.output_streams["flights_copy"].topic
    group = config.consumer_group("copy")
    log_a, log_b = tmp_path / "driver-a.log", tmp_path / "driver-b.log"

    zombie = start_driver(config_path, bootstrap, log_a, **{FAILPOINT_ENV: "records-sent:2:stop"})
    successor: subprocess.Popen[bytes] | None = None
    try:
        wait_until(
            lambda: stopped(zombie) or zombie.poll() is not None,
            DEADLINE_S,
            "driver A to stop itself in batch 2's transaction",
            log_a,
        )
        assert stopped(zombie), log_a.read_text()[-4000:]
        assert committed_and_end(bootstrap, group, topic)[0] == 2 * 250
        # Batch 2's records, some or all (a task at the failpoint stopped the other): in
        # A's open transactions.
        assert 2 * 250 < sent(bootstrap, output) <= 3 * 250

        successor = start_driver(config_path, bootstrap, log_b)
        wait_until(
            lambda: (lambda c, e: c == e)(*committed_and_end(bootstrap, group, topic)),
            DEADLINE_S,
            "driver B to process every tuple while A is stopped",
            log_b,
        )

        os.killpg(zombie.pid, signal.SIGCONT)
        code = zombie.wait(timeout=DEADLINE_S)
        text = log_a.read_text()
        assert code != 0, text[-4000:]
        # The fence, named by Kafka's client in the failed task's error.
        assert "fenced" in text.lower(), text[-4000:]

        assert successor.poll() is None, log_b.read_text()[-4000:]  # B goes on
        produce(config, later)
        wait_until(
            lambda: (lambda c, e: c == e)(*committed_and_end(bootstrap, group, topic)),
            DEADLINE_S,
            "driver B to process the tuples produced after A ended",
            log_b,
        )
        assert successor.poll() is None, log_b.read_text()[-4000:]
    finally:
        kill_group(zombie)
        if successor is not None:
            successor.send_signal(signal.SIGTERM)
            try:
                successor.wait(timeout=60)
            except subprocess.TimeoutExpired:
                kill_group(successor)

    want = Counter(tuple(sorted(r.items())) for r in first + later)
    assert copies(bootstrap, output, schemas) == want
    rows = reconcile(config, bootstrap_servers=bootstrap)
    assert all(row.balanced for row in rows), rows
    assert sum(row.processed for row in rows) == sum(row.written for row in rows) == len(want)

"""Benchmark: how soon a reader that pauses when idle sees a committed transaction.

Why: the demo's reception (and the admission intake, and the soak's reader)
pause their partitions after an empty read, so as not to poll the embedded broker's
log end all along (it answers a fetch at the log end at once, so an idle reader
spins: docs/kafka-engines.md), and resume them a moment later. The latency
benchmark showed the reception receiving a micro-batch's output 2.7-4.9 s after the
batch ended. This script isolates that, without Spark.

What is measured, per way of reading, on one fresh embedded broker each: a
transactional producer commits 200 records (over 2 partitions) every 0.7 s for
``--seconds``; one ``read_committed`` reader (``consume`` of up to 5 000 records with
a 0.1 s wait, as ``StreamOutput.get``) takes them. The latency of a transaction is
its commit's return to the read that first returned one of its records. Ways:

* ``spin``: never pauses (the baseline: what the broker can do);
* ``resume``: after an empty read, pauses 0.25 s, then librdkafka's ``resume``;
* ``resume_fetching``: the same pause, then :func:`pipeline.kafka.fetching.resume_fetching`
  (``resume`` plus a ListOffsets request per partition, which wakes the broker
  connection's thread);
* ``rest_until_records``: after an empty read, :func:`pipeline.kafka.fetching.rest_until_records`
  (paused until a high watermark, read every 0.25 s, is past the position; then
  ``resume_fetching``): what the demo's reception, the soak's and the admission
  intake do.

Also reported: the reader process's CPU seconds a second of reading (librdkafka's
threads included), which is what the pause is for.

Run: ``.venv/bin/python bench/bench_resume.py [--repeat 3] [--seconds 20]``.
Results: a table, and JSON in ``bench/out/resume.json``.
"""

from __future__ import annotations

import statistics
import threading
import time
import uuid
from typing import Any

import common
from common import console
from confluent_kafka import Consumer, Producer, TopicPartition
from rich.table import Table

from pipeline.kafka.fetching import rest_until_records, resume_fetching
from pipeline.kafka.topics import ensure_topics

WAYS = ("spin", "resume", "resume_fetching", "rest_until_records")
PARTITIONS = 2
RECORDS_A_TRANSACTION = 200
COMMIT_EVERY_S = 0.7
IDLE_S = 0.25


def one_run(way: str, seconds: float) -> dict[str, Any]:
    """One reader of one way over ``seconds`` of transactions; latencies in seconds."""
    topic = f"resume-{uuid.uuid4().hex[:8]}"
    with common.fresh_broker() as bootstrap:
        ensure_topics(bootstrap, {topic: (PARTITIONS, 1)})
        producer = Producer(
            {"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-tx", "linger.ms": 5}
        )
        producer.init_transactions(30)
        committed: dict[int, float] = {}
        stop = threading.Event()

        def produce() -> None:
            n = 0
            while not stop.is_set():
                producer.begin_transaction()
                for k in range(RECORDS_A_TRANSACTION):
                    producer.produce(topic, key=str(k).encode(), value=str(n).encode())
                producer.commit_transaction(30)
                committed[n] = time.time()
                n += 1
                stop.wait(COMMIT_EVERY_S)

        reader = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"{topic}-reader",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            }
        )
        partitions = [TopicPartition(topic, p, 0) for p in range(PARTITIONS)]
        reader.assign(partitions)
        writer = threading.Thread(target=produce, name="transactions")
        latencies: dict[int, float] = {}
        cpu0, start = time.process_time(), time.monotonic()
        writer.start()
        try:
            while time.monotonic() - start < seconds:
                messages = reader.consume(num_messages=5_000, timeout=0.1)
                now = time.time()
                for message in messages:
                    if message.error() is None:
                        n = int(message.value())
                        if n not in latencies and n in committed:
                            latencies[n] = now - committed[n]
                if messages or way == "spin":
                    continue
                if way == "rest_until_records":
                    rest_until_records([reader], stop=stop, poll_s=IDLE_S)
                    continue
                reader.pause(partitions)
                time.sleep(IDLE_S)
                if way == "resume":
                    reader.resume(partitions)
                else:
                    resume_fetching(reader, partitions)
            cpu_s = time.process_time() - cpu0
            elapsed = time.monotonic() - start
        finally:
            stop.set()
            writer.join()
            reader.close()
    values = sorted(latencies.values())
    return {
        "way": way,
        "transactions": len(committed),
        "read": len(values),
        "p50_s": values[len(values) // 2],
        "p90_s": values[int(len(values) * 0.9)],
        "max_s": values[-1],
        "cpu_s_per_s": cpu_s / elapsed,
    }


def main() -> None:
    parser = common.argument_parser(__doc__, "resume.json")
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    runs: list[dict[str, Any]] = []
    for r in range(args.repeat):
        for way in WAYS:
            runs.append(one_run(way, args.seconds))
            run = runs[-1]
            console.log(
                f"run {r + 1} {way}: p50 {run['p50_s']:.3f} s, p90 {run['p90_s']:.3f} s, "
                f"max {run['max_s']:.3f} s; {run['read']} of {run['transactions']} "
                f"transactions read; reader {run['cpu_s_per_s']:.2f} CPU s/s"
            )
    table = Table(title=f"commit -> read, {args.repeat} runs of {args.seconds:.0f} s a way")
    for column in ("way", "p50 median", "p90 median", "max median", "reader CPU s/s"):
        table.add_column(column, justify="right")
    for way in WAYS:
        mine = [r for r in runs if r["way"] == way]

        def median(key: str, mine: list[dict[str, Any]] = mine) -> float:
            return statistics.median(r[key] for r in mine)

        table.add_row(
            way,
            f"{median('p50_s'):.3f} s",
            f"{median('p90_s'):.3f} s",
            f"{median('max_s'):.3f} s",
            f"{median('cpu_s_per_s'):.2f}",
        )
    console.print(table)
    common.write_results(args.json, "commit -> read of a reader that pauses when idle", runs=runs)


if __name__ == "__main__":
    main()

"""A query group's driver as ``floodgate run`` in a process group of its own, as the
crash-recovery, zombie-driver, query-group CLI and Spark cluster tests start, kill,
stop and watch it; and the pass-through group they run, with its output read back as a
multiset (a tuple written twice counts twice)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
from confluent_kafka import Consumer, TopicPartition

from pipeline.demo.reception import read_all
from pipeline.serde.schemas import SchemaRepository
from tests.integration.faults import checks
from tests.integration.helpers import flights_raw_config, write_query_group

DRIVER_TIMEOUT_S = 240.0


def start_driver(
    config_path: Path, bootstrap: str, log_path: Path, **env: str
) -> subprocess.Popen[bytes]:
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pipeline.cli",
                "run",
                str(config_path),
                "--bootstrap",
                bootstrap,
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, **env},
        )


def kill_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


def committed_and_end(bootstrap: str, group: str, topic: str) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        committed = sum(max(tp.offset, 0) for tp in consumer.committed(tps, timeout=10))
        end = sum(consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in tps)
        return committed, end
    finally:
        consumer.close()


def wait_until(
    predicate: Callable[[], bool],
    timeout_s: float,
    what: str,
    log_path: Path,
    *,
    tolerate: bool = False,
) -> None:
    """:func:`tests.integration.helpers.wait_until` (an exception of ``predicate``
    is raised unless ``tolerate``), with the driver's log in the timeout's message."""
    try:
        checks.wait_until(predicate, timeout_s, what, tolerate=tolerate)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; driver log:\n{log_path.read_text()[-4000:]}") from None


def stopped(process: subprocess.Popen[bytes]) -> bool:
    """Whether ``process`` is stopped (SIGSTOP: state ``T`` in ``/proc``)."""
    try:
        return bool(psutil.Process(process.pid).status() == psutil.STATUS_STOPPED)
    except psutil.NoSuchProcess:
        return False


def copies(bootstrap: str, topic: str, schemas: SchemaRepository) -> Counter[tuple[Any, ...]]:
    """The output tuples a ``read_committed`` reader sees, as a multiset
    (:func:`tests.integration.faults.checks.flights_in`): a duplicate counts twice. Read
    to each partition's high watermark, so a transaction left open (the last stable
    offset short of it) fails the read with ``TimeoutError``."""
    return checks.flights_in(bootstrap, topic, schemas)


def sent(bootstrap: str, topic: str) -> int:
    """Tuples in ``topic``'s log, committed, aborted or in an open transaction alike
    (a ``read_uncommitted`` reader's count; transaction markers are not tuples)."""
    return len(read_all(bootstrap, topic, committed_only=False))


def setup_group(
    run_id: str,
    tmp_path: Path,
    produce: Callable[..., None],
    records: list[dict[str, Any]],
    delivery: str = "exactly-once",
) -> tuple[Any, Path]:
    """The flights group with the pass-through query alone (``copy`` to
    ``flights_copy``: one output tuple per input tuple), 250 tuples a micro-batch and no
    trigger interval, ``delivery`` as given, written to ``<tmp_path>/group.toml``;
    ``records`` produced into its input stream. Returns ``(config, config path)``."""
    raw = flights_raw_config(
        run_id,
        tmp_path / "checkpoints",
        max_tuples_per_trigger=250,
        only_passthrough=True,
        trigger_interval_ms=0,
    )
    raw["query_group"]["delivery"] = delivery
    config_path = tmp_path / "group.toml"
    config = write_query_group(raw, config_path)
    produce(config, records)
    return config, config_path

"""``floodgate broker --data-dir`` under umask 022 once left the data
folder 0755 and its files 0644: every tuple, and every admission request with its
job env values, readable by any user of the host. The broker of the run's engine
(``noida-db`` on the normal pass, Apache Kafka on the Apache Kafka pass) now keeps
its folders 0700 and its files 0600 (0400 where Kafka makes a file read-only)."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from pipeline.brokers.apache_kafka import ApacheKafkaCluster
from pipeline.brokers.embedded import EmbeddedBroker
from pipeline.brokers.engines import KafkaEngine, private_data_dir
from pipeline.errors import ConfigError
from pipeline.kafka.topics import ensure_topics


def _modes(root: Path) -> tuple[dict[str, int], dict[str, int]]:
    """``({folder: mode}, {file: mode})`` of everything under ``root``, itself included
    (paths relative to ``root``)."""
    folders = {".": stat.S_IMODE(root.stat().st_mode)}
    found: dict[str, int] = {}
    for parent, dirs, names in os.walk(root):
        for name in dirs:
            path = Path(parent, name)
            folders[str(path.relative_to(root))] = stat.S_IMODE(path.lstat().st_mode)
        for name in names:
            path = Path(parent, name)
            found[str(path.relative_to(root))] = stat.S_IMODE(path.lstat().st_mode)
    return folders, found


def _bootstrap(output: Path, process: subprocess.Popen[bytes], timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while True:
        text = output.read_text(errors="replace")
        for line in text.splitlines():
            if line.startswith("FLOODGATE_KAFKA_BOOTSTRAP="):
                return line.split("=", 1)[1]
        assert process.poll() is None, text
        assert time.monotonic() < deadline, text
        time.sleep(0.1)


def test_floodgate_broker_keeps_its_data_0700_and_0600_under_umask_022(
    tmp_path: Path, kafka_engine_name: KafkaEngine
) -> None:
    data = tmp_path / "broker-data"
    output = tmp_path / "broker.out"
    env = {k: v for k, v in os.environ.items() if k != "FLOODGATE_KAFKA_BOOTSTRAP"}
    command = [sys.executable, "-m", "pipeline.cli", "broker", "--engine", kafka_engine_name]
    with open(output, "wb") as out:
        process = subprocess.Popen(
            [*command, "--data-dir", str(data)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            umask=0o022,  # the usual one: what the broker made was world-readable
        )
    try:
        bootstrap = _bootstrap(output, process, timeout_s=180)
        ensure_topics(bootstrap, {"private-tuples": (1, 1)})
        producer = Producer({"bootstrap.servers": bootstrap})
        for i in range(10):
            producer.produce("private-tuples", f"job env value {i}".encode())
        assert producer.flush(30) == 0
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=120)
    assert process.returncode == 0, output.read_text(errors="replace")

    folders, files = _modes(data)
    saved = [name for name in files if b"private-tuples" in (data / name).read_bytes()]
    assert saved, files  # the topic is on disk: its files are among those checked
    assert {name: m for name, m in folders.items() if m != 0o700} == {}
    # 0600; Kafka makes its metadata snapshots read-only itself (0400): ours alone too.
    assert {name: m for name, m in files.items() if m not in (0o600, 0o400)} == {}


@pytest.mark.no_kafka  # refused before a broker starts: the noida-db pass covers both
@pytest.mark.parametrize("broker", [EmbeddedBroker, ApacheKafkaCluster], ids=["noida-db", "apache"])
@pytest.mark.parametrize("folder_mode", [0o777, 0o1777, 0o775], ids=["0777", "1777", "0775"])
def test_a_data_folder_others_can_write_is_refused_before_the_broker_starts(
    tmp_path: Path, broker: type[EmbeddedBroker | ApacheKafkaCluster], folder_mode: int
) -> None:
    data = tmp_path / "shared"
    data.mkdir()
    data.chmod(folder_mode)

    with pytest.raises(ConfigError) as refused:
        broker(data_dir=data).start()

    assert refused.value.key == "data_dir"
    assert f"{data} is writable by others" in str(refused.value)
    assert f"mode {folder_mode:04o}" in str(refused.value)
    assert list(data.iterdir()) == []


@pytest.mark.no_kafka
def test_a_data_folder_others_can_enter_is_set_to_0700(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "from-an-earlier-version"
    data.mkdir()
    data.chmod(0o755)

    assert private_data_dir(data) == data

    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    assert f"data_dir {data} was mode 0755: set to 0700" in caplog.text

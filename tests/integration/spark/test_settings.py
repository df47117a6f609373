"""Spark settings precedence: what ``spark-submit`` and Spark's own configuration set
wins over a query group's ``[spark]`` section, which wins over Floodgate's defaults.

Each test runs a real driver in a process of its own (``spark-submit`` or plain
Python) that builds its session with :func:`pipeline.spark.session.build_spark_session`
and prints what the running session has.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import psutil
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.no_kafka]

BIN = Path(sys.executable).parent

PROBE = textwrap.dedent(
    """
    import json, sys
    from pipeline.spark.session import build_spark_session, spark_settings

    spark = build_spark_session(
        app_name="settings-probe", conf={"spark.sql.shuffle.partitions": 5, "spark.app.x": "file"}
    )
    sc = spark.sparkContext
    def jvm_pid(_):
        # The JVM this task's Python worker serves: its nearest java ancestor.
        pid = __import__("os").getpid()
        while pid > 1:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            pid = int(fields[1])
            with open(f"/proc/{pid}/cmdline", "rb") as cmd:
                if b"java" in cmd.read().split(bytes(1))[0]:
                    return [pid]
        return [0]

    def jvm_argv(pid):
        with open(f"/proc/{pid}/cmdline", "rb") as cmd:
            return cmd.read().replace(bytes(1), b" ").decode()

    driver = spark._jvm.java.lang.ProcessHandle.current().pid()
    # A job that needs executors: on local-cluster its tasks run in executor JVMs.
    pids = set(spark.range(0, 40, 1, 4).rdd.mapPartitions(jvm_pid).collect())
    hosts = sorted("driver" if pid == driver else "executor" for pid in pids)
    print("PROBE " + json.dumps({
        "master": sc.master,
        "authenticate": sc.getConf().get("spark.authenticate", "false"),
        "crypto": sc.getConf().get("spark.network.crypto.enabled", "false"),
        "argv": [jvm_argv(pid) for pid in sorted(pids | {driver})],
        "shuffle_partitions": spark.conf.get("spark.sql.shuffle.partitions"),
        "time_zone": spark.conf.get("spark.sql.session.timeZone"),
        "x": spark.conf.get("spark.app.x"),
        "task_jvms": hosts,
        "settings": spark_settings(),
    }))
    spark.stop()
    """
)


def _probe(tmp_path: Path, command: list[str], **env: str) -> dict[str, Any]:
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    environ = {k: v for k, v in os.environ.items() if k not in {"PYSPARK_SUBMIT_ARGS", "MASTER"}}
    environ["PATH"] = f"{BIN}{os.pathsep}{environ.get('PATH', '')}"  # this venv's python3
    environ.update(env)
    done = subprocess.run(
        [*command, str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        env=environ,
        cwd=tmp_path,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("PROBE ")]
    assert done.returncode == 0 and lines, done.stderr[-4_000:]
    return json.loads(lines[-1].removeprefix("PROBE "))


def test_spark_submit_master_and_conf_reach_the_session(tmp_path: Path) -> None:
    """``local-cluster``: a master and two workers in the driver's JVM, executors in
    JVMs of their own, which speak to the driver over RPC. The cluster runs as a
    deployment should, with ``spark.authenticate`` and ``spark.network.crypto.enabled``
    on and the secret in a 0600 ``spark-defaults.conf``: the executors that ran the
    job's tasks are the ones that passed the driver's authentication, and the secret
    is in no JVM's argv nor in the settings Floodgate shows."""
    secret = secrets.token_hex(16)
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    defaults = conf_dir / "spark-defaults.conf"
    defaults.touch(mode=0o600)
    defaults.write_text(
        "spark.authenticate  true\n"
        f"spark.authenticate.secret  {secret}\n"
        "spark.network.crypto.enabled  true\n"
    )
    seen = _probe(
        tmp_path,
        [
            str(BIN / "spark-submit"),
            "--master",
            "local-cluster[2,1,1024]",
            "--conf",
            "spark.sql.shuffle.partitions=3",
            "--conf",
            f"spark.pyspark.python={sys.executable}",
        ],
        SPARK_CONF_DIR=str(conf_dir),
    )
    assert (seen["authenticate"], seen["crypto"]) == ("true", "true")
    assert len(seen["argv"]) == 3 and all(secret not in argv for argv in seen["argv"])
    assert secret not in json.dumps(seen["settings"])
    assert seen["master"] == "local-cluster[2,1,1024]"
    assert seen["shuffle_partitions"] == "3"  # spark-submit's, not the file's 5
    assert seen["settings"]["spark.sql.shuffle.partitions"]["source"] == "spark"
    assert seen["settings"]["spark.master"] == {
        "value": "local-cluster[2,1,1024]",
        "source": "spark",
    }
    assert seen["x"] == "file"
    assert seen["time_zone"] == "UTC"  # Floodgate's default where nothing else set one
    assert seen["task_jvms"] == ["executor", "executor"]  # tasks in two executor JVMs


def test_spark_defaults_conf_wins_over_floodgate_defaults(tmp_path: Path) -> None:
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text(
        "spark.sql.session.timeZone  Europe/Paris\nspark.master  local[1]\n"
    )
    seen = _probe(tmp_path, [sys.executable], SPARK_CONF_DIR=str(conf_dir))
    assert seen["master"] == "local[1]"
    assert seen["time_zone"] == "Europe/Paris"
    assert seen["settings"]["spark.sql.session.timeZone"]["source"] == "spark"


def test_without_spark_settings_the_file_then_floodgate_decide(tmp_path: Path) -> None:
    seen = _probe(tmp_path, [sys.executable])
    # The file's local[2], with a cluster's four attempts per task (LOCAL_TASK_ATTEMPTS).
    assert seen["master"] == "local[2,4]"
    assert seen["shuffle_partitions"] == "5"
    assert seen["settings"]["spark.sql.shuffle.partitions"]["source"] == "query group"
    assert seen["settings"]["spark.sql.session.timeZone"] == {"value": "UTC", "source": "floodgate"}
    assert seen["task_jvms"] == ["driver"]


#: A driver whose query group file says ``local[2]``; exit status 3 when Floodgate
#: refuses it, with the error's key and text.
CLUSTER_PROBE = textwrap.dedent(
    """
    import sys
    from pipeline.errors import ConfigError
    from pipeline.spark.session import build_spark_session

    allow = {"allow_unauthenticated": True} if sys.argv[1] == "allow" else {}
    try:
        build_spark_session(app_name="cluster-probe", master="local[2]", **allow)
    except ConfigError as exc:
        print(f"REFUSED {exc.key}: {exc}", flush=True)
        sys.exit(3)
    """
)


@pytest.mark.parametrize("allowed", [False, True], ids=["refused", "allowed"])
def test_a_cluster_master_from_spark_defaults_needs_authentication(
    tmp_path: Path, allowed: bool
) -> None:
    """``spark-defaults.conf`` names a standalone master (a socket of the test's) over
    the file's ``local[2]``, with no ``spark.authenticate``: the driver is refused
    before it contacts the master, unless ``allow_unauthenticated_spark``; then it
    registers with the master, from a JVM without Floodgate's loopback-only
    ``SPARK_LOCAL_IP`` (a cluster's executors must reach it)."""
    script = tmp_path / "probe.py"
    script.write_text(CLUSTER_PROBE)
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    environ = {k: v for k, v in os.environ.items() if k not in {"PYSPARK_SUBMIT_ARGS", "MASTER"}}
    environ.pop("SPARK_LOCAL_IP", None)
    environ["SPARK_CONF_DIR"] = str(conf_dir)
    log_path = tmp_path / "probe.log"
    with socket.create_server(("127.0.0.1", 0)) as master, log_path.open("w") as log:
        port = master.getsockname()[1]
        (conf_dir / "spark-defaults.conf").write_text(f"spark.master spark://127.0.0.1:{port}\n")
        probe = subprocess.Popen(
            [sys.executable, str(script), "allow" if allowed else "refuse"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env=environ,
            cwd=tmp_path,
        )
        try:
            if not allowed:
                out, _ = probe.communicate(timeout=300)
                assert probe.returncode == 3, log_path.read_text()[-4000:]
                assert out.startswith("REFUSED spark.authenticate: "), out
                assert "allow_unauthenticated_spark" in out
                master.setblocking(False)
                with pytest.raises(BlockingIOError):  # nobody knocked
                    master.accept()
                return
            master.settimeout(300)
            connection, _ = master.accept()  # the standalone client registering
            connection.close()
            jvms = [
                p for p in psutil.Process(probe.pid).children(recursive=True) if p.name() == "java"
            ]
            assert len(jvms) == 1, jvms  # the first JVM, on loopback, is gone
            assert "SPARK_LOCAL_IP" not in jvms[0].environ()
        finally:
            with contextlib.suppress(psutil.NoSuchProcess):
                for process in psutil.Process(probe.pid).children(recursive=True):
                    process.kill()
            probe.kill()
            probe.wait(timeout=30)
    assert "allow_unauthenticated_spark" in log_path.read_text()

"""A driver on a local master is not open to the network: every TCP port its JVM
listens on (the RPC environment, the block manager, the web UI when it is on) is on
loopback, and a connection from another host to any of the machine's addresses on
those ports is refused.

"Another host" is a network namespace of the test's own, joined to the root
namespace through a veth pair and a hub (:mod:`tests.integration.faults.network.netns`);
it connects to the root namespace's address on that link, the only non-loopback
address the test sends to (test traffic stays on loopback and on the namespaces a test
made). A listener of the test's own on ``0.0.0.0`` proves the path: it is reached
from the namespace, so a refusal on a driver's port means nothing listens there for
that address. Which address each port is bound to is read from the kernel as well
(every one must be loopback): a driver bound to the host's own interface address, as
Spark binds it by default, fails that check without a byte sent to that address.

Three drivers: the suite's shared SparkSession (built by
:func:`pipeline.spark.session.build_spark_session`, as ``floodgate run`` builds its
own), a plain Python driver with the web UI turned on, and a ``spark-submit`` driver,
whose JVM's environment is not Floodgate's to choose.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.integration.faults.network.netns import Host, PrivateNetwork

pytestmark = [pytest.mark.integration, pytest.mark.no_kafka]

BIN = Path(sys.executable).parent

#: A driver that prints its JVM's pid once a job ran (the block manager serves by
#: then), and stops once the file its second argument names exists (spark-submit
#: gives its Python no standard input of the caller's).
DRIVER = textwrap.dedent(
    """
    import json, os, sys, time
    from pipeline.spark.session import build_spark_session

    spark = build_spark_session(
        app_name="driver-network-probe", master="local[1]", conf=json.loads(sys.argv[1])
    )
    assert spark.range(0, 10, 1, 2).count() == 10
    pid = spark._jvm.java.lang.ProcessHandle.current().pid()
    print("DRIVER " + json.dumps({"pid": pid, "ui": spark.sparkContext.uiWebUrl}), flush=True)
    while not os.path.exists(sys.argv[2]):
        time.sleep(0.1)
    spark.stop()
    """
)

#: Run inside the namespace: connect to each ``[address, port]``, say what happened.
CONNECT = textwrap.dedent(
    """
    import json, socket, sys

    seen = {}
    for address, port in json.loads(sys.argv[1]):
        try:
            socket.create_connection((address, port), timeout=10).close()
            seen[f"{address}:{port}"] = "connected"
        except ConnectionRefusedError:
            seen[f"{address}:{port}"] = "refused"
        except OSError as exc:
            seen[f"{address}:{port}"] = repr(exc)
    print(json.dumps(seen))
    """
)


@dataclass
class Outside:
    """A host outside the machine: its namespace, and the machine's address it reaches."""

    host: Host
    addresses: list[str]

    def connect(self, ports: list[int]) -> dict[str, str]:
        """``connected``, ``refused`` or the error, by ``address:port``."""
        targets = [[address, port] for address in self.addresses for port in ports]
        done = subprocess.run(
            self.host.command([sys.executable, "-c", CONNECT, json.dumps(targets)]),
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        return dict(json.loads(done.stdout))


@pytest.fixture(scope="module")
def outside() -> Iterator[Outside]:
    network = PrivateNetwork()
    try:
        machine = network.add("machine", root=True)
        host = network.add("outside")
        yield Outside(host, [machine.address])
    finally:
        network.close()


def listening(pid: int) -> dict[int, str]:
    """The TCP ports process ``pid`` listens on, with their address (an IPv4-mapped
    IPv6 address as its IPv4 one)."""
    found = {}
    for connection in psutil.Process(pid).net_connections(kind="tcp"):
        if connection.status == psutil.CONN_LISTEN:
            address = ipaddress.ip_address(connection.laddr.ip)
            if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
                address = address.ipv4_mapped
            found[connection.laddr.port] = str(address)
    return found


def assert_closed_to_the_network(pid: int, outside: Outside, *, at_least: int) -> None:
    ports = listening(pid)
    assert len(ports) >= at_least, ports
    with socket.create_server(("0.0.0.0", 0)) as control:  # the path works
        open_port = control.getsockname()[1]
        seen = outside.connect([open_port, *ports])
    assert all(seen[f"{a}:{open_port}"] == "connected" for a in outside.addresses), seen
    refused = {k: v for k, v in seen.items() if not k.endswith(f":{open_port}")}
    assert set(refused.values()) == {"refused"}, refused
    assert all(ipaddress.ip_address(a).is_loopback for a in ports.values()), ports


@contextlib.contextmanager
def driver(tmp_path: Path, command: list[str], conf: dict[str, Any]) -> Iterator[dict[str, Any]]:
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    environ = {k: v for k, v in os.environ.items() if k not in {"PYSPARK_SUBMIT_ARGS", "MASTER"}}
    environ.pop("SPARK_LOCAL_IP", None)
    environ["PATH"] = f"{BIN}{os.pathsep}{environ.get('PATH', '')}"  # this venv's python3
    log = (tmp_path / "driver.log").open("w+")
    stop = tmp_path / "stop"
    process = subprocess.Popen(
        [*command, str(script), json.dumps(conf), str(stop)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        env=environ,
        cwd=tmp_path,
    )
    try:
        assert process.stdout is not None
        lines = (line for line in process.stdout if line.startswith("DRIVER "))
        first = next(lines, None)
        assert first is not None, (tmp_path / "driver.log").read_text()[-4000:]
        yield json.loads(first.removeprefix("DRIVER "))
        stop.touch()
        assert process.wait(timeout=120) == 0, (tmp_path / "driver.log").read_text()[-4000:]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
        log.close()


def test_the_suites_session_listens_on_loopback_only(spark: Any, outside: Outside) -> None:
    spark.range(0, 10, 1, 2).count()
    pid = int(spark._jvm.java.lang.ProcessHandle.current().pid())
    # Py4J's gateway, the RPC environment, the block manager.
    assert_closed_to_the_network(pid, outside, at_least=3)


def test_a_python_driver_with_the_web_ui_on_listens_on_loopback_only(
    tmp_path: Path, outside: Outside
) -> None:
    with driver(tmp_path, [sys.executable], {"spark.ui.enabled": True}) as seen:
        assert seen["ui"].startswith("http://127.0.0.1:"), seen
        ui_port = int(seen["ui"].rsplit(":", 1)[1])
        assert ui_port in listening(seen["pid"])
        assert_closed_to_the_network(seen["pid"], outside, at_least=4)


def test_a_spark_submit_driver_listens_on_loopback_only(tmp_path: Path, outside: Outside) -> None:
    """The settings alone (``spark.driver.bindAddress``, ``spark.driver.host``): the
    JVM is spark-submit's, launched before Floodgate runs."""
    command = [str(BIN / "spark-submit"), "--master", "local[1]"]
    with driver(tmp_path, command, {}) as seen:
        assert_closed_to_the_network(seen["pid"], outside, at_least=2)

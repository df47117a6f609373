"""The embedded Kafka-protocol broker (noida-db, pinned from PyPI), the default."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from importlib.resources import files
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from pipeline.brokers.engines import KafkaEngine, free_port, private_data_dir, spawn_broker
from pipeline.errors import BrokerError
from pipeline.kafka.clients import kafka_settings
from pipeline.state.files import PRIVATE_UMASK

log = logging.getLogger(__name__)


#: How long an embedded broker may take to answer its first metadata request.
EMBEDDED_START_TIMEOUT_S = 30.0


class EmbeddedBroker:
    """The ``noida-db`` Kafka-protocol broker, run as a child process.

    Args:
        data_dir: where the broker keeps its data; ``None``: a new temporary
            directory, removed on :meth:`stop`. Pass a directory to restart a
            broker with the data of an earlier one.
        port: the Kafka port; ``None``: a free loopback port.
        host: the address to bind (loopback by default).

    The broker is single-node and keeps topics in memory, saving them to
    ``data_dir`` as they change. The data is ours alone (it holds every tuple, and
    admission's requests with their job env values): the folder
    is 0700 and the broker runs with umask 077, so its files are 0600. An existing
    ``data_dir`` that others can enter is set to 0700 (with a warning); one that
    others can write to, or another user owns, is refused (:meth:`start`).
    """

    engine: KafkaEngine = "noida-db"

    def __init__(
        self,
        *,
        data_dir: str | Path | None = None,
        port: int | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self._own_dir = data_dir is None
        self.data_dir = (
            Path(data_dir) if data_dir else Path(tempfile.mkdtemp(prefix="floodgate-broker-"))
        )
        self.host = host
        self.port = port or free_port(host)
        self.process: subprocess.Popen[bytes] | None = None
        self._log_path = self.data_dir / "floodgate-broker.log"

    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` of the broker."""
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The broker's PID while it runs (safe to read from another thread while it
        stops or starts)."""
        process = self.process
        return process.pid if process is not None and process.poll() is None else None

    @staticmethod
    def binary() -> Path:
        """Path of the ``noida-db`` binary shipped in the wheel.

        Raises:
            BrokerError: the package is not installed.
        """
        try:
            path = Path(str(files("noida_db").joinpath("noida-db")))
        except ModuleNotFoundError as exc:
            raise BrokerError(
                "the noida-db package is not installed: pip install 'floodgate[demo]'"
            ) from exc
        if not path.is_file():
            raise BrokerError(f"noida-db binary not found at {path}")
        if not os.access(path, os.X_OK):
            path.chmod(0o755)
        return path

    def command(self) -> list[str]:
        """The command line that starts the broker."""
        return [
            str(self.binary()),
            "start",
            "--data-dir",
            str(self.data_dir),
            "--host",
            self.host,
            "--only",
            "kafka",
            "--kafka-port",
            str(self.port),
        ]

    def start(self, *, timeout_s: float = EMBEDDED_START_TIMEOUT_S) -> EmbeddedBroker:
        """Start the broker and wait until it answers.

        Raises:
            BrokerError: it exited or did not answer in time; names the command and
                the tail of its output.
            ConfigError: ``data_dir`` is another user's, or others can write to it
                (:func:`~pipeline.brokers.engines.private_data_dir`; nothing started).
        """
        if self.pid is not None:
            return self
        private_data_dir(self.data_dir)
        command = self.command()
        self.process = spawn_broker(command, self._log_path)
        deadline = time.monotonic() + timeout_s
        # Wait for the port first: librdkafka logs every refused connection as an error.
        while self.process.poll() is None and time.monotonic() < deadline:
            try:
                socket.create_connection((self.host, self.port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.05)
        admin = AdminClient(kafka_settings(self.bootstrap_servers, {"socket.timeout.ms": 1000}))
        while True:
            if self.process.poll() is not None:
                raise BrokerError(
                    f"embedded broker exited with status {self.process.returncode}",
                    command=command,
                    output=self.output_tail(),
                )
            try:
                admin.list_topics(timeout=1.0)
                log.info(
                    "embedded broker up at %s (pid %d)", self.bootstrap_servers, self.process.pid
                )
                return self
            except KafkaException:
                if time.monotonic() > deadline:
                    self.stop()
                    raise BrokerError(
                        f"embedded broker did not answer at {self.bootstrap_servers} "
                        f"within {timeout_s:.0f} s",
                        command=command,
                        output=self.output_tail(),
                    ) from None
                time.sleep(0.1)

    def output_tail(self, lines: int = 20) -> str:
        """The last lines the broker printed."""
        try:
            text = self._log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, *, timeout_s: float = 10.0, remove_data: bool | None = None) -> None:
        """Stop the broker by its PID (SIGTERM, then SIGKILL after ``timeout_s``).

        When the data directory is kept, the broker is first asked to stop its Kafka
        service (``noida-db stop kafka``), which saves the log and closes the
        listener, and only then signalled: noida-db 0.2.3 answers a SIGTERM by saving
        its topics while it goes on acknowledging writes, so a restart on the same
        directory would lose the last acknowledged records (measured: 300-500 of a
        producer's acknowledged records at about 18 000 records/s) and fail the
        producers' idempotent sequences (``OUT_OF_ORDER_SEQUENCE_NUMBER``). This is
        the embedded broker's controlled shutdown; a Kafka broker does the same on
        SIGTERM by itself.

        Args:
            remove_data: remove the data directory; default: only if it was a
                temporary one made by this object.
        """
        remove = remove_data if remove_data is not None else self._own_dir
        process, self.process = self.process, None
        if process is not None and process.poll() is None and not remove:
            self._stop_service(timeout_s)
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGKILL)
                process.wait(timeout=timeout_s)
        if remove:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def _stop_service(self, timeout_s: float) -> None:
        """Ask the running broker to save and stop its Kafka service; log, do not
        raise, if it cannot (the SIGTERM that follows still stops it)."""
        command = [str(self.binary()), "stop", "kafka", "--data-dir", str(self.data_dir)]
        try:
            done = subprocess.run(
                command,
                capture_output=True,
                text=True,
                timeout=timeout_s,
                check=False,
                umask=PRIVATE_UMASK,  # it may write into the data folder too
            )
        except subprocess.TimeoutExpired:
            log.warning("embedded broker: %s did not return in %.0f s", command, timeout_s)
            return
        if done.returncode != 0:
            log.warning(
                "embedded broker: %s exited with %d: %s",
                command,
                done.returncode,
                (done.stderr or done.stdout).strip()[-300:],
            )

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

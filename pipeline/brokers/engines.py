"""The Kafka engines Floodgate runs locally, and a local broker's port and readiness."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, Literal

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from pipeline.errors import BrokerError, ConfigError
from pipeline.kafka.clients import kafka_settings
from pipeline.state.files import PRIVATE_UMASK, private_dir, private_file

#: The brokers Floodgate can start itself.
KafkaEngine = Literal["noida-db", "apache-kafka"]


ENGINES: tuple[KafkaEngine, ...] = ("noida-db", "apache-kafka")


#: Environment variable choosing the engine :func:`resolve_broker` starts.
ENGINE_ENV = "FLOODGATE_KAFKA_ENGINE"


def private_data_dir(data_dir: Path) -> Path:
    """Make a broker's data folder 0700, or check the one that exists (it holds
    every tuple, and admission's requests with their job env values). One that others
    can enter or read is set to 0700 with a warning (files an earlier run wrote may be
    0644); one that others can write to, or another user
    owns, is refused: files planted in it could be there already. The broker itself
    runs with umask 077 (:data:`pipeline.state.files.PRIVATE_UMASK`), so what it
    writes is 0600.

    Returns:
        ``data_dir``.

    Raises:
        ConfigError: refused (key ``data_dir``: ``floodgate broker --data-dir``;
            names the path, its owner and mode).
        OSError: it cannot be created.
    """
    return private_dir(data_dir, key="data_dir", tighten=True)


def spawn_broker(command: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    """Start a broker's process in a session of its own (stopped by its pid), its
    output appended to ``log_path`` (0600, :func:`~pipeline.state.files.private_file`),
    with umask 077 (:data:`~pipeline.state.files.PRIVATE_UMASK`): what it writes in
    its data folder is 0600.

    Raises:
        OSError: the log cannot be opened or the command cannot be started.
    """
    with os.fdopen(private_file(log_path, os.O_WRONLY | os.O_APPEND), "ab") as out:
        return subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            umask=PRIVATE_UMASK,
        )


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` right now (asked of the kernel, never guessed).

    Two calls may give the same port: the first probe's socket is closed before the
    second binds. Ports that must differ come from one :func:`free_ports` call.
    """
    return free_ports(1, host)[0]


def free_ports(count: int, host: str = "127.0.0.1", *, taken: Collection[int] = ()) -> list[int]:
    """``count`` distinct TCP ports free on ``host`` right now, none of them in ``taken``.

    Every probe socket stays bound until all ``count`` are chosen, so the kernel
    cannot hand the same ephemeral port out twice, as it may when each probe is
    closed before the next binds (:func:`free_port` called in a loop). Kafka, for
    one, refuses a node whose broker and controller listeners share an IPv4 port.
    """
    ports: list[int] = []
    with contextlib.ExitStack() as probes:
        while len(ports) < count:
            sock = probes.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((host, 0))
            port = int(sock.getsockname()[1])
            if port not in taken:
                ports.append(port)
    return ports


def wait_for_broker(
    bootstrap_servers: str, *, timeout_s: float, client: Mapping[str, Any] = {}
) -> None:
    """Block until ``bootstrap_servers`` answers a metadata request.

    Raises:
        BrokerError: no answer within ``timeout_s`` seconds.
    """
    deadline = time.monotonic() + timeout_s
    admin = AdminClient(kafka_settings(bootstrap_servers, client))
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            admin.list_topics(timeout=min(2.0, max(0.1, deadline - time.monotonic())))
            return
        except KafkaException as exc:
            last = exc
            time.sleep(0.1)
    raise BrokerError(
        f"Kafka broker at {bootstrap_servers} did not answer within {timeout_s:.0f} s: {last}"
    )


def kafka_engine(engine: str | None = None, *, env: Mapping[str, str] | None = None) -> KafkaEngine:
    """The engine to start: ``engine`` if given, else ``FLOODGATE_KAFKA_ENGINE``, else
    ``noida-db``.

    Raises:
        ConfigError: not one of :data:`ENGINES` (names the variable and the allowed
            values).
    """
    env = os.environ if env is None else env
    chosen = engine or env.get(ENGINE_ENV) or "noida-db"
    if chosen not in ENGINES:
        source = "engine" if engine else ENGINE_ENV
        allowed = ", ".join(ENGINES)
        raise ConfigError(
            f"{source}={chosen!r}: allowed values are {allowed}",
            key=source,
            value=chosen,
            allowed=allowed,
        )
    return chosen

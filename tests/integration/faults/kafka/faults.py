"""What the broker fault tests share beyond :mod:`tests.integration.faults.checks`: the
query group they run, a failpoint that pauses a micro-batch right before its commit, and
a way to ask a broker which node coordinates a transaction or a consumer group.

Plain helpers; the fixtures are in ``conftest.py`` beside this module.
"""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass
from pathlib import Path

from pipeline.config import QueryGroupConfig, parse_query_group
from tests.integration.helpers import flights_raw_config

#: Tuples each test produces; the first FIRST of them at once, the rest (once the test
#: calls :meth:`~tests.integration.faults.checks.Producing.go`) one put every ``pace_s``.
TUPLES = 3_000
FIRST = 600


def group_config(
    run_id: str, tmp_path: Path, *, only_passthrough: bool = False
) -> QueryGroupConfig:
    """The flights group (both aggregations, unless ``only_passthrough``) plus a
    pass-through copy to count by key, small micro-batches so that faults land
    mid-stream. Micro-batches aligned in event time, as the demo's: a fault that
    stalls one input partition while the others go on would otherwise move the
    watermark past its flights, and the aggregations would dead-letter them as late
    (found by the 3-node test: the ledger balanced, with fewer tuples processed)."""
    raw = flights_raw_config(
        run_id,
        tmp_path / "checkpoints",
        passthrough=True,
        only_passthrough=only_passthrough,
        max_tuples_per_trigger=200,
        aligned=True,
    )
    return parse_query_group(raw, env={})


@dataclass
class PausedCommit:
    """The sink's ``before-commit:<batch>:wait=<release>`` failpoint
    (:data:`pipeline.failpoints.FAILPOINT_ENV`): the batch stands right before its
    ``commit_transaction``, its records delivered and its offsets sent, until
    :meth:`release`."""

    batch_id: int
    release_path: Path

    def wait_reached(self, timeout_s: float) -> None:
        """Block until a sink has reached the failpoint.

        Raises:
            AssertionError: none did within ``timeout_s``.
        """
        reached = Path(f"{self.release_path}.reached")
        deadline = time.monotonic() + timeout_s
        while not reached.exists():
            assert time.monotonic() < deadline, (
                f"no sink reached before-commit of batch {self.batch_id} in {timeout_s:.0f} s"
            )
            time.sleep(0.1)

    def release(self) -> None:
        """Let the paused batch commit (and any later one pass the failpoint)."""
        self.release_path.touch()


#: FindCoordinator's ``key_type``: a consumer group's, a transactional id's.
GROUP, TRANSACTION = 0, 1


def find_coordinator(address: str, key: str, key_type: int) -> int:
    """The ``node.id`` of the coordinator of ``key`` as the broker at ``address``
    (``host:port``, PLAINTEXT) names it: a FindCoordinator request, version 1 (Kafka's
    protocol guide; confluent-kafka has no call that returns a transaction's
    coordinator). What tells that a test kills the coordinator it means to.

    Raises:
        AssertionError: the broker answered an error (e.g. 15, COORDINATOR_NOT_AVAILABLE).
        OSError: the broker did not answer.
    """

    def text(value: str) -> bytes:
        raw = value.encode()
        return struct.pack(">h", len(raw)) + raw

    body = struct.pack(">hhi", 10, 1, 1) + text("floodgate-test") + text(key)
    body += struct.pack(">b", key_type)
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(struct.pack(">i", len(body)) + body)
        reply = b""
        while len(reply) < 4 or len(reply) < 4 + struct.unpack(">i", reply[:4])[0]:
            chunk = sock.recv(65536)
            if not chunk:
                raise OSError(f"{address} closed the connection")
            reply += chunk
    # size, correlation id, throttle_time_ms, error_code, error_message, node_id, ...
    error = struct.unpack(">h", reply[12:14])[0]
    message_length = struct.unpack(">h", reply[14:16])[0]
    at = 16 + max(message_length, 0)
    assert error == 0, f"FindCoordinator({key!r}) answered error {error}"
    return int(struct.unpack(">i", reply[at : at + 4])[0])

"""Replaying the flights into the input stream queue, in a process of its own."""

from __future__ import annotations

import contextlib
import os
import pickle
import queue
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pipeline.client import StreamInput, connect
from pipeline.config import QueryGroupConfig
from pipeline.demo.flights import FlightTuples, load_flights
from pipeline.errors import FloodgateError
from pipeline.serde.schemas import SchemaRepository

#: Tuples per ``put`` of the replay.
REPLAY_BATCH = 1_000


@dataclass
class FlightReplayer:
    """Replays flights in event-time order through the back-pressure client.

    Each batch is ``put(block=True)``: when the input stream queue is full the
    replay waits until the query group has made room (docs/tutorials/producer.md).

    Args:
        writer: the flights input stream of the query group.
        tuples: the flight tuples, in event-time order. :class:`FlightTuples` are
            put as Arrow table slices (encoded a column at a time), anything else as
            lists of dicts.
        rate: tuples per second; ``None`` for as fast as it goes.
        batch: tuples per ``put``.
        put_timeout_s: the longest one ``put`` may wait for room.
        stop: when set, the replay ends after the ``put`` in progress (then ``put_end``).
    """

    writer: StreamInput
    tuples: Sequence[dict[str, Any]]
    rate: float | None = None
    batch: int = REPLAY_BATCH
    put_timeout_s: float = 600.0
    produced: int = 0
    blocked_s: float = 0.0
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        """Replay everything, then ``put_end``; errors are kept in :attr:`error`."""
        start = time.monotonic()
        try:
            for i in range(0, len(self.tuples), self.batch):
                if self.stop.is_set():
                    break
                chunk: Any = (
                    self.tuples.table(i, i + self.batch)
                    if isinstance(self.tuples, FlightTuples)
                    else self.tuples[i : i + self.batch]
                )
                if self.rate:
                    due = start + (i + len(chunk)) / self.rate
                    delay = due - time.monotonic()
                    if delay > 0 and self.stop.wait(delay):
                        break
                result = self.writer.put(chunk, block=True, timeout_s=self.put_timeout_s)
                self.produced += result.accepted
                self.blocked_s += result.blocked_s
            self.writer.put_end()
        except BaseException as exc:
            self.error = exc
        finally:
            self.done.set()


#: The longest the replay process may take to load the flights and connect.
REPLAY_START_TIMEOUT_S = 120.0


class ReplayProcess:
    """The replay of a :class:`FlightReplayer` in a process of its own.

    A producer is a process of its own in any real deployment, and it must be here
    too: in the query group driver's process, the replay's Avro encoding (~10 µs a
    flight, all of it under the GIL) stalled every py4j round trip of the micro-batches
    (measured on the 2-core machine with the Python sink of the time, whose
    ``foreachBatch`` call and Arrow collect waited for the GIL while Spark's executors
    idled for most of each 1.3 s micro-batch; ``bench/README.md``).

    The process (``python -c``, so a caller's script is not imported again as
    ``multiprocessing``'s spawn would) loads the flights and connects to the
    cluster, then waits for :meth:`go`, so neither is timed. It reports on its
    standard output, one line at a time: ``ready <n>``, ``progress <produced>
    <blocked s>`` about 10 times a second, then ``done`` or ``error <text>``.

    Args:
        bootstrap_servers: the cluster.
        config: the query group (the process opens its ``flights`` input stream).
        limit: replay only the first ``limit`` flights.
        rate: tuples per second; ``None`` as fast as back-pressure lets it.
        batch: tuples per ``put`` (:class:`FlightReplayer`); at a ``rate`` the puts
            come ``batch / rate`` seconds apart.
    """

    def __init__(
        self,
        *,
        bootstrap_servers: str,
        config: QueryGroupConfig,
        limit: int | None,
        rate: float | None,
        batch: int = REPLAY_BATCH,
    ) -> None:
        self._arguments = (bootstrap_servers, config, limit, rate, batch)
        self._process: subprocess.Popen[bytes] | None = None
        self._lines: queue.Queue[str] = queue.Queue()
        self.total = 0
        self.produced = 0
        self.blocked_s = 0.0
        self.error: BaseException | None = None
        self._finished = False

    def start(self) -> int:
        """Start the process and wait until it is ready to replay.

        Returns:
            The number of flights it will replay.

        Raises:
            FloodgateError: it failed or was not ready within ``REPLAY_START_TIMEOUT_S``.
        """
        with tempfile.NamedTemporaryFile(prefix="floodgate-replay-", delete=False) as f:
            pickle.dump(self._arguments, f)
        self._process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                f"from pipeline.demo.replay import _replay_main; _replay_main({f.name!r})",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        threading.Thread(target=self._read, name="replay-reader", daemon=True).start()
        line = self._next_line(REPLAY_START_TIMEOUT_S)
        if not line.startswith("ready "):
            self.stop()
            raise FloodgateError(f"the replay process did not start: {line}")
        self.total = int(line.split()[1])
        return self.total

    def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        for raw in self._process.stdout:
            self._lines.put(raw.decode(errors="replace").rstrip("\n"))
        self._lines.put(f"error the replay process ended (exit code {self._process.wait()})")

    def _next_line(self, timeout_s: float) -> str:
        try:
            return self._lines.get(timeout=timeout_s)
        except queue.Empty:
            return f"error no word from the replay process in {timeout_s:.0f} s"

    def _send(self, command: str) -> None:
        assert self._process is not None and self._process.stdin is not None
        with contextlib.suppress(BrokenPipeError, ValueError):
            self._process.stdin.write(command.encode() + b"\n")
            self._process.stdin.flush()

    def go(self) -> None:
        """Start replaying."""
        self._send("go")

    def wait(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the replay to end (``put_end`` included);
        ``True`` once it has. A failure is then in :attr:`error`; :attr:`produced`
        and :attr:`blocked_s` follow the replay meanwhile."""
        deadline = time.monotonic() + timeout_s
        while not self._finished:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return False
            kind, _, rest = line.partition(" ")
            if kind == "progress":
                produced, blocked = rest.split()
                self.produced, self.blocked_s = int(produced), float(blocked)
            elif kind == "done":
                self._finished = True
            elif kind == "error":
                self.error = FloodgateError(f"the replay process failed: {rest}")
                self._finished = True
        return True

    def stop(self) -> None:
        """End the replay after the ``put`` in progress and wait for the process."""
        if self._process is None:
            return
        self._send("stop")
        try:
            self._process.wait(30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(10)


def _replay_main(arguments_path: str) -> None:
    """The body of a :class:`ReplayProcess` (its standard output is the protocol)."""
    out = sys.stdout

    def say(line: str) -> None:
        out.write(line + "\n")
        out.flush()

    try:
        with open(arguments_path, "rb") as f:
            bootstrap_servers, config, limit, rate, batch = pickle.load(f)
        os.unlink(arguments_path)
        tuples = FlightTuples(load_flights(limit))
        schemas = SchemaRepository.load(config.schema_dir)
        with connect(
            bootstrap_servers=bootstrap_servers, config=config, schemas=schemas
        ) as connector:
            writer = connector.open_stream_input(config.name, "flights")
            say(f"ready {len(tuples)}")
            replayer = FlightReplayer(writer, tuples, rate=rate, batch=batch)

            def listen() -> None:
                for raw in sys.stdin:
                    if raw.strip() == "go":
                        go.set()
                    elif raw.strip() == "stop":
                        break
                replayer.stop.set()  # "stop", or the parent went away
                go.set()

            go = threading.Event()
            threading.Thread(target=listen, name="replay-commands", daemon=True).start()
            go.wait()
            thread = threading.Thread(target=replayer.run, name="flight-replay", daemon=True)
            thread.start()
            while not replayer.done.wait(0.1):
                say(f"progress {replayer.produced} {replayer.blocked_s:.3f}")
            say(f"progress {replayer.produced} {replayer.blocked_s:.3f}")
            if replayer.error is not None:
                raise replayer.error
        say("done")
    except BaseException as exc:  # reported to the parent, which raises it
        say(f"error {type(exc).__name__}: {exc}")

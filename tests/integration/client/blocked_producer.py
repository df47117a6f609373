"""A data transmission application in a process of its own, for a test to kill while its
``put(block=True)`` waits for room (``test_blocked_put_crash.py``).

``python -m tests.integration.client.blocked_producer <group.toml> <bootstrap> <first>
<then>`` puts the first ``first`` flights into the group's ``flights`` input stream and
waits for their delivery, then puts the next ``then`` with ``block=True``. It prints
``BLOCKED`` once that put waits for room (the main thread is inside the client's wait
for free space, seen from a thread of its own), and ``PUT`` if the put returns.
"""

from __future__ import annotations

import sys
import threading
import time

from pipeline.client import connect
from pipeline.config import load_query_group
from pipeline.demo.flights import flight_tuples, load_flights
from pipeline.serde.schemas import SchemaRepository

#: The client's method a blocked put waits in (``StreamInput._wait_for_space``).
WAITING_IN = "_wait_for_space"


def announce_when_blocked(thread: threading.Thread) -> None:
    """Print ``BLOCKED`` once ``thread`` runs :data:`WAITING_IN`."""
    while True:
        frame = sys._current_frames().get(thread.ident or -1)
        while frame is not None:
            if frame.f_code.co_name == WAITING_IN:
                print("BLOCKED", flush=True)
                return
            frame = frame.f_back
        time.sleep(0.05)


def main(config_path: str, bootstrap: str, first: int, then: int) -> None:
    config = load_query_group(config_path, env={})
    flights = list(flight_tuples(load_flights(first + then)))
    with connect(
        bootstrap_servers=bootstrap, config=config, schemas=SchemaRepository.load()
    ) as connector:
        stream_input = connector.open_stream_input(config.name, "flights")
        stream_input.put(flights[:first])
        stream_input.put_end()
        watcher = threading.Thread(
            target=announce_when_blocked, args=(threading.current_thread(),), daemon=True
        )
        watcher.start()
        stream_input.put(flights[first:], block=True)
        print("PUT", flush=True)
        stream_input.put_end()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))

"""A data transmission application in a process of its own, for the partition tests:
run in a network namespace of its own (``ip netns exec``), so that a partition of the
driver leaves it writing.

``python -m tests.integration.faults.network.producer CONFIG BOOTSTRAP STATE TUPLES``
puts the first ``TUPLES`` flights (:func:`pipeline.demo.flights.load_flights`) into
the ``flights`` input stream of the query group in ``CONFIG`` (a TOML file), with
``put(block=True)``: :data:`FIRST` of them at once, then, once the file ``STATE.go``
exists, one put of :data:`PUT_SIZE` every ``--pace-s``; then ``put_end``
(:func:`tests.integration.faults.checks.put_all`). A put the client refused because
the broker could not be reached (``BrokerError``), or tuples the broker did not
acknowledge (``DeliveryError``), are put again, each time recorded.
After every put it writes ``STATE`` (JSON, replaced whole): ``{"put": tuples put so
far, "retries": [what failed], "done": bool}``. Exit status 0 once every tuple is
acknowledged.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import tomllib
from pathlib import Path
from typing import Any

from pipeline.client import connect
from pipeline.config import parse_query_group
from pipeline.demo.flights import flight_tuples, load_flights
from pipeline.serde.schemas import SchemaRepository
from tests.integration.faults.checks import PUT_SIZE, put_all

#: Tuples put at once, before the paced rest.
FIRST = 600


def write_state(path: Path, state: dict[str, Any]) -> None:
    """Replace ``path`` with ``state`` as JSON (renamed into place: never half-read)."""
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(state))
    os.replace(partial, path)


def read_state(path: Path) -> dict[str, Any]:
    """What :func:`write_state` wrote last (``{"put": 0, ...}`` before the first)."""
    try:
        state: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError:
        return {"put": 0, "retries": [], "done": False}
    return state


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("config", type=Path)
    parser.add_argument("bootstrap")
    parser.add_argument("state", type=Path)
    parser.add_argument("tuples", type=int)
    parser.add_argument("--pace-s", type=float, default=0.5)
    args = parser.parse_args(argv)
    config = parse_query_group(tomllib.loads(args.config.read_text()), env={})
    schemas = SchemaRepository.load()
    records = list(flight_tuples(load_flights(args.tuples)))
    go = args.state.with_suffix(".go")
    state: dict[str, Any] = {"put": 0, "retries": [], "done": False}
    reput: list[dict[str, Any]] = []

    def after_put(put: int) -> None:
        state["put"] = put
        write_state(args.state, state)
        if put >= FIRST:
            while not go.exists():
                time.sleep(0.1)
            time.sleep(args.pace_s)

    with connect(bootstrap_servers=args.bootstrap, config=config, schemas=schemas) as connector:
        put_all(
            connector.open_stream_input(config.name, "flights"),
            records,
            after_put=after_put,
            retries=state["retries"],
            reput=reput,
            put_size=PUT_SIZE,
        )
    state["done"] = True
    write_state(args.state, state)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

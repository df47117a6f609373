"""The dead-letter topic's record shape: header names and keys.

A tuple Floodgate cannot process (it does not decode, it is late, its producer
was refused) is written to the dead-letter topic with the reason and where it
came from in headers, never dropped. The source writes them, the ledger and
``floodgate audit`` read them."""

from __future__ import annotations

from typing import Any

#: Dead-letter headers (all values UTF-8). The record keeps the original key and value.
DLQ_REASON = "floodgate.reason"


DLQ_ERROR = "floodgate.error"


DLQ_STREAM = "floodgate.stream"


DLQ_QUERY = "floodgate.query"


DLQ_TOPIC = "floodgate.topic"


DLQ_PARTITION = "floodgate.partition"


DLQ_OFFSET = "floodgate.offset"


def dead_letter_key(query: str | None, message: Any) -> bytes:
    """Key of a dead-letter record: ``<query>@<topic>/<partition>/<offset>``, unique per
    reading query and tuple, so a reader can drop the repeats of a retried task."""
    return f"{query or ''}@{message.topic()}/{message.partition()}/{message.offset()}".encode()

"""The dead-letter topic's record shape: the headers Floodgate adds.

A tuple Floodgate cannot process (it does not decode, it is late, its key is
missing, its producer was refused) is written to the dead-letter topic with the
original key, value and headers, plus headers giving the reason and where it came
from; never dropped. The ``floodgate_kafka`` source writes them on the JVM
(``io.floodgate.spark.deadletter``, ``tests/golden/contract/source.json``); the
ledger and ``floodgate audit`` read them by these names.
"""

from __future__ import annotations

#: Dead-letter headers (all values UTF-8). The record keeps the original key and value.
DLQ_REASON = "floodgate.reason"
DLQ_ERROR = "floodgate.error"
DLQ_STREAM = "floodgate.stream"
DLQ_QUERY = "floodgate.query"
DLQ_TOPIC = "floodgate.topic"
DLQ_PARTITION = "floodgate.partition"
DLQ_OFFSET = "floodgate.offset"

#: Floodgate's dead-letter headers, in the order a dead letter carries them (after the
#: tuple's own), as ``tests/golden/contract/source.json`` specifies them for the source.
DLQ_HEADERS = (DLQ_REASON, DLQ_ERROR, DLQ_STREAM, DLQ_QUERY, DLQ_TOPIC, DLQ_PARTITION, DLQ_OFFSET)

"""Every Kafka name Floodgate derives, in one place: the consumer groups, transactional
ids and internal topics of a query group, its queries and streams, and the fixed ones of
its readers and services. Nothing else spells a name pattern; ask here.

A query group ``flights`` with ``consumer_group_prefix = "floodgate"`` (the default) and
a query ``by_origin`` writing output stream ``origin_hourly`` uses:

* ``floodgate.flights.by_origin``: the query's consumer group; its committed input
  offsets are where the input stream queue's length is counted from
  (:func:`query_group_id`);
* ``floodgate.flights.by_origin.sink``: the transactional id of its sink
  (:func:`sink_transactional_id`);
* ``floodgate.flights.by_origin.verify``: the sink's read-back of its own output
  (:func:`verify_group_id`);
* ``floodgate.flights.origin_hourly.reception``: the default reader of the output
  stream (:func:`reception_group_id`);
* ``flights.dead-letter``: the dead-letter topic (:func:`dead_letter_topic`).

The readers that never commit (they assign partitions and read) still need a
``group.id`` for librdkafka: :func:`ledger_group_id`, :func:`queue_age_group_id`,
:data:`SWEEPER_GROUP_ID` and :func:`ad_hoc_group_id`. Following the idea of
quix-streams' ``TopicManager``, which derives an application's internal topic names in
one class.
"""

from __future__ import annotations

import uuid

#: ``[query_group] consumer_group_prefix`` when unset.
DEFAULT_CONSUMER_GROUP_PREFIX = "floodgate"

#: The admission service's dead-letter topic when ``[admission] dead_letter_topic`` is unset.
ADMISSION_DEAD_LETTER_TOPIC = "floodgate.admission.dead-letter"

#: The sweeper's range readers (they never commit).
SWEEPER_GROUP_ID = "floodgate.sweeper"


def query_group_id(prefix: str, query_group: str, query: str) -> str:
    """The consumer group a query commits its input offsets to: ``<prefix>.<group>.<query>``."""
    return f"{prefix}.{query_group}.{query}"


def reception_group_id(prefix: str, query_group: str, stream: str) -> str:
    """The default consumer group of an output stream's reader:
    ``<prefix>.<group>.<stream>.reception``."""
    return f"{prefix}.{query_group}.{stream}.reception"


def sink_transactional_id(query_group_id_: str) -> str:
    """The ``transactional.id`` of a query's sink: its consumer group's name and
    ``.sink``. Stable across restarts, so that a restarted driver fences its old
    producer (Kafka's zombie fencing)."""
    return f"{query_group_id_}.sink"


def verify_group_id(query_group_id_: str) -> str:
    """The ``group.id`` of a sink's read-back of its own output (it never commits):
    the query's consumer group's name and ``.verify``."""
    return f"{query_group_id_}.verify"


def dead_letter_topic(query_group: str) -> str:
    """A query group's dead-letter topic when ``dead_letter_topic`` is unset:
    ``<group>.dead-letter``."""
    return f"{query_group}.dead-letter"


def ledger_group_id(topic: str) -> str:
    """The ``group.id`` of the tuple ledger's reader of a dead-letter ``topic`` (never
    commits)."""
    return f"floodgate.ledger.{topic}"


def queue_age_group_id(topic: str) -> str:
    """The ``group.id`` of the reader that measures the age of ``topic``'s oldest queued
    tuple (never commits)."""
    return f"floodgate.queue-age.{topic}"


def ad_hoc_group_id() -> str:
    """A ``group.id`` of its own for a one-off reader (the demo's reception of whole
    topics at the end, the demo producer's look at its input topic):
    ``floodgate-reader-<8 hex digits>``, never committed."""
    return f"floodgate-reader-{uuid.uuid4().hex[:8]}"

"""Every Kafka name Floodgate derives, in one place: the consumer groups, transactional
ids and internal topics of a query group, its queries and streams, and the fixed ones of
its readers and services. Nothing else spells a name pattern; ask here.

A query group ``flights`` with ``consumer_group_prefix = "floodgate"`` (the default) and
a query ``by_origin`` writing output stream ``origin_hourly`` uses:

* ``floodgate.flights.by_origin``: the query's consumer group; its committed input
  offsets are where the input stream queue's length is counted from
  (:func:`query_group_id`);
* ``floodgate.flights.by_origin.sink``: the transactional id prefix of its sink
  (:func:`sink_transactional_id`); write task 3's producer is
  ``floodgate.flights.by_origin.sink.3`` (:func:`task_transactional_id`), and the
  offsets its exactly-once batches cover are committed to the group
  ``floodgate.flights.by_origin.sink.input`` (:func:`input_marker_group_id`); in
  real time, where each task stopped reading input stream ``flights`` goes to
  ``floodgate.flights.by_origin.sink.ends.flights`` (:func:`real_time_ends_group_id`);
* ``floodgate.flights.origin_hourly.reception``: the default reader of the output
  stream (:func:`reception_group_id`);
* ``flights.dead-letter``: the dead-letter topic (:func:`dead_letter_topic`).

The readers that never commit (they assign partitions and read) still need a
``group.id`` for librdkafka: :func:`ledger_group_id`, :func:`queue_age_group_id`,
:data:`SWEEPER_GROUP_ID` and :func:`ad_hoc_group_id`. Following the idea of
quix-streams' ``TopicManager``, which derives an application's internal topic names in
one class.

The JVM derives the names its executors use (a write task's transactional id, the input
markers' group, the consumer group Spark's Kafka source makes up) in its twin
``io.floodgate.spark.kafka.Names``; ``tests/golden/contract/names.json`` holds both to the
same examples.
"""

from __future__ import annotations

import uuid

#: ``[query_group] consumer_group_prefix`` when unset.
DEFAULT_CONSUMER_GROUP_PREFIX = "floodgate"

#: The admission intake's topics and consumer group when ``[admission]`` does not name
#: them: job commands in, every job's changes of state out, the requests it could not
#: take, and the consumer group that reads the requests (it commits).
ADMISSION_REQUEST_TOPIC = "floodgate.admission.requests"
ADMISSION_EVENTS_TOPIC = "floodgate.admission.events"
ADMISSION_DEAD_LETTER_TOPIC = "floodgate.admission.dead-letter"
ADMISSION_GROUP_ID = "floodgate.admission"

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


def task_transactional_id(prefix: str, task: int) -> str:
    """The ``transactional.id`` of write task ``task``'s producer (its output partition):
    the sink's prefix (:func:`sink_transactional_id`), a dot and the task. Derived on
    the executors by ``io.floodgate.spark.kafka.Names.taskTransactionalId``."""
    return f"{prefix}.{task}"


def input_marker_group_id(prefix: str) -> str:
    """The consumer group an exactly-once sink commits, in each batch's transactions,
    the input offsets its committed output covers (no reader: it says where the output
    stands): the sink's prefix and ``.input``. Derived on the executors by
    ``io.floodgate.spark.kafka.Names.inputMarkerGroupId``."""
    return f"{prefix}.input"


def real_time_ends_group_id(prefix: str, stream: str) -> str:
    """The consumer group where the source of an exactly-once real-time query logs
    where each task of a batch stopped reading input stream ``stream`` (no reader: a
    batch run again after a crash reads to those ends): the sink's prefix, ``.ends.``
    and the stream. The source is given the whole name (option
    ``realTimeEndsGroup``)."""
    return f"{prefix}.ends.{stream}"


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

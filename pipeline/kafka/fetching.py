"""Consumer helpers around librdkafka's fetcher: bounded fetches for readers of whole
topics, resume after a pause, rest until records."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

log = logging.getLogger(__name__)


#: The largest response a reader of a whole topic accepts (1 GiB; librdkafka's default
#: is 100 MB): what the embedded broker answers one fetch with (see :func:`bounded_fetch`).
RECEIVE_MESSAGE_MAX_BYTES = 2**30

#: What a reader of a whole topic asks of one fetch, all partitions together.
FETCH_MAX_BYTES = 8 * 2**20

#: ... and of one partition in a fetch (librdkafka's default).
PARTITION_FETCH_MAX_BYTES = 2**20


def bounded_fetch(client: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``fetch.max.bytes``, ``max.partition.fetch.bytes`` and ``receive.message.max.bytes``
    for a consumer that reads a whole topic (the dead-letter topic, an output topic),
    to put after a user's ``[kafka.client]`` properties.

    Why: a fetch response larger than ``receive.message.max.bytes`` is refused by
    librdkafka ("Invalid response size ... increase receive.message.max.bytes"), the
    connection dropped and the same fetch sent again, forever: ``floodgate audit``
    printed nothing for a dead-letter topic of 282 359 records, whose fetch answer was
    118 MB. The two engines need different things:

    * Apache Kafka answers at most ``fetch.max.bytes`` a fetch and
      ``max.partition.fetch.bytes`` a partition: :data:`FETCH_MAX_BYTES` (8 MiB) and
      :data:`PARTITION_FETCH_MAX_BYTES` (1 MiB), under the receive limit with
      librdkafka's 512 bytes of protocol overhead.
    * The embedded broker (``noida-db`` 0.2.3) ignores both and answers a fetch with
      everything from the position to the end of each partition (measured: 13 MB in
      one answer to a fetch of at most 2 MB, 30 000 records of 430 bytes). No fetch
      setting bounds that; :data:`RECEIVE_MESSAGE_MAX_BYTES` (1 GiB) lets a reader take
      such an answer of up to some 2.5 million dead letters at once.

    A user's smaller values are kept.

    Args:
        client: the user's librdkafka properties (``[kafka.client]``), if any.

    Returns:
        The three properties, each an int: ``fetch.max.bytes <= receive.message.max.bytes
        - 512`` and ``max.partition.fetch.bytes <= fetch.max.bytes``.
    """
    client = client or {}
    receive = int(client.get("receive.message.max.bytes", RECEIVE_MESSAGE_MAX_BYTES))
    fetch = min(int(client.get("fetch.max.bytes", FETCH_MAX_BYTES)), receive - 512)
    partition = min(int(client.get("max.partition.fetch.bytes", PARTITION_FETCH_MAX_BYTES)), fetch)
    return {
        "fetch.max.bytes": fetch,
        "max.partition.fetch.bytes": partition,
        "receive.message.max.bytes": receive,
    }


#: How long :func:`resume_fetching` waits for each wake-up request's answer. Short:
#: the request wakes the broker thread when it is sent; the answer does not matter,
#: and a broker that is down must not hold a resting reader up (the soak restarts it).
RESUME_WAKE_TIMEOUT_S = 0.5


#: How long a resting reader waits for each of its looks at the broker
#: (:func:`rest_until_records`); no answer counts as "records": the reader reads on.
REST_LOOK_TIMEOUT_S = 1.0


def resume_fetching(
    consumer: Consumer,
    partitions: Sequence[TopicPartition],
    *,
    timeout_s: float = RESUME_WAKE_TIMEOUT_S,
) -> None:
    """Resume fetching ``partitions`` (Kafka's ``Consumer.resume``) and have librdkafka
    fetch them now, not at some later wake-up of its broker thread.

    Why: librdkafka's resume only clears the partitions' pause flag. Whether a partition
    is fetchable is decided by the thread of its leader's broker connection, when that
    thread next wakes up: on I/O, or on a request for that broker. A consumer whose
    partitions were all paused has no fetch in flight, so that thread may sleep for
    seconds (confluent-kafka-go#630 on GitHub shows the same gap between ``RESUME`` and the
    next fetch decision). Measured with librdkafka 2.16.0 on the embedded broker
    (``bench/bench_resume.py``), a ``read_committed`` reader that paused 0.25 s after
    each empty read (the demo's reception) received a transaction committed every 0.7 s
    **2.3 s** after its commit at the median and **4.5 s** at p90. A ListOffsets
    request for each resumed partition, which librdkafka sends to the partition's
    leader and so wakes that broker's thread, ends the wait: **0.18 s** and **0.31 s**
    (the pause itself). In the flights demo the reception saw the output of a micro-batch
    2.7-4.9 s after the batch ended; the latency benchmark's figures before this fix
    were mostly that wait (``bench/README.md``).

    The wake-up is best effort: a broker that does not answer is logged at debug level
    and fetching resumes at the thread's next wake-up, as without it.

    Args:
        consumer: the consumer whose ``partitions`` were paused.
        partitions: assigned partitions to resume (offsets are ignored).
        timeout_s: the longest wait for each ListOffsets answer.
    """
    if not partitions:
        return
    consumer.resume(list(partitions))
    for tp in partitions:
        try:
            consumer.get_watermark_offsets(
                TopicPartition(tp.topic, tp.partition), timeout=timeout_s, cached=False
            )
        except KafkaException as exc:
            log.debug("wake-up after resume of %s[%d]: %s", tp.topic, tp.partition, exc)


def _has_records_past_position(consumer: Consumer, partitions: Sequence[TopicPartition]) -> bool:
    """Whether a partition's high watermark (ListOffsets, to its leader) is past where
    the consumer reads next: its position, or before it has read anything, its
    committed offset, else the log start (``auto.offset.reset = earliest``; with
    ``latest`` this may say yes once too often, which costs a read). Broker errors
    count as yes: the caller's next read finds out what is wrong."""
    try:
        positions = consumer.position(list(partitions))
        unknown = [tp for tp in positions if tp.offset < 0]
        committed = {
            (tp.topic, tp.partition): tp.offset
            for tp in (consumer.committed(unknown, timeout=REST_LOOK_TIMEOUT_S) if unknown else [])
        }
        for tp in positions:
            low, high = consumer.get_watermark_offsets(
                TopicPartition(tp.topic, tp.partition), timeout=REST_LOOK_TIMEOUT_S, cached=False
            )
            at = tp.offset if tp.offset >= 0 else committed.get((tp.topic, tp.partition), -1)
            if high > (at if at >= 0 else low):
                return True
    except KafkaException as exc:
        log.debug("high watermarks while resting: %s", exc)
        return True
    return False


def rest_until_records(
    consumers: Sequence[Consumer],
    *,
    stop: threading.Event,
    poll_s: float = 0.25,
    max_s: float = 5.0,
) -> None:
    """An idle reader's rest: pause every assigned partition of ``consumers`` until one
    has records past its consumer's position, then resume them all at once
    (:func:`resume_fetching`).

    Why: librdkafka fetches an assigned partition all the time, and a broker that
    answers a fetch at the log end at once instead of holding it for
    ``fetch.wait.max.ms`` (the embedded broker, docs/kafka-engines.md) turns an idle
    reader into a busy loop (measured: 0.62 CPU s a second of the reader's process
    alone). Paused, the reader asks each partition's high watermark every ``poll_s``
    instead: one ListOffsets request a partition, no fetch. Measured by
    ``bench/bench_resume.py`` (a transaction committed every 0.7 s, ``poll_s`` 0.25 s):
    commit to read 0.11 s at the median and 0.17 s at p90, with the reader's process
    at 0.18 CPU s a second; 0.09 s, 0.10 s and 0.61 for a reader that never pauses;
    0.18 s, 0.31 s and 0.23 for one that pauses 0.25 s after each empty read and then
    resumes (with :func:`resume_fetching`; 2.3 s, 4.5 s and 0.03 with librdkafka's
    resume alone).

    A high watermark past the position may be an open transaction's records or a
    transaction marker (``read_committed``): the reader then fetches, finds nothing
    it may return, and its position steps over the marker; it rests again after its
    next empty read.

    Args:
        consumers: readers whose last read returned nothing.
        stop: set to end the rest early (the reader is stopping).
        poll_s: how often the high watermarks are read, seconds.
        max_s: the longest rest, seconds (a rebalance may meanwhile have changed the
            assignment: rest again after a read).
    """
    assigned = [(consumer, consumer.assignment()) for consumer in consumers]
    for consumer, partitions in assigned:
        if partitions:
            consumer.pause(partitions)
    deadline = time.monotonic() + max_s
    try:
        if not all(partitions for _, partitions in assigned):
            # A reader still waiting for its assignment: rest once, as it has
            # nothing to watch yet.
            stop.wait(poll_s)
            return
        while not stop.wait(poll_s) and time.monotonic() < deadline:
            if any(_has_records_past_position(c, p) for c, p in assigned):
                break
    finally:
        for consumer, _ in assigned:
            try:
                # The assignment now: a rebalance may have moved it meanwhile.
                resume_fetching(consumer, consumer.assignment())
            except KafkaException as exc:  # not assigned any more: nothing to resume
                log.warning("resuming a reader after its rest: %s", exc)

"""Event-time-aligned micro-batches: no partition is read far ahead of the others.

Spark's watermark is the latest event time a query has read, over every partition,
less the delay (``withWatermark``). A micro-batch that reads one partition far into
the future moves the watermark past the tuples another partition has yet to
deliver, and those arrive late (the source dead-letters them, reason ``late``;
Spark would drop them). Spark's own Kafka source plans by offsets only, so a
stream's watermark delay must cover the whole skew of its partitions' heads.

Partitions here are whatever the source keys offsets by: a topic-partition
``(topic, partition)`` (:data:`~pipeline.offsets.TopicPartitionKey`) in the source,
which aligns every partition of every topic it reads together; a partition number in
the unit tests.

With ``maxEventTimeDriftMs`` the source plans a micro-batch by offsets first
(:func:`~pipeline.offsets.plan_batch_end`), then caps it by event time, as Flink's
watermark alignment does across splits:

* each partition's *planned event time* is the event time at its planned end (the
  last tuple it would read), or at its head when it has nothing more to read;
* the bound is the least planned event time over the partitions, plus the drift;
* no partition is read past the bound: its end moves back to the first tuple whose
  event time is beyond it (found by interpolation search, the partitions' searches
  in step so that each step is one round of reads for all, tuples of a partition
  being in event-time order as producers write them; the search stops when the cut is
  known within :data:`CUT_TOLERANCE` of the planned range and cuts at its low end, so
  a partition may leave that many tuples within the bound to the next micro-batch);
* a partition whose head has not moved for ``idlePartitionTimeoutMs`` and that has
  nothing more to read is idle, and holds nobody back (Flink's ``withIdleness``).

The partition that sets the bound keeps its planned end, so every micro-batch reads
something whenever there is something to read. Event times are read at planning
from the broker (:class:`EventTimeProbe`, cached per offset); a tuple the broker no
longer holds (swept, or deleted) has no known event time and caps nothing. A read the
broker does not answer is asked again for up to 60 s, then the planning fails
(``FG-SOURCE-005``): a partition taken as having no event time would hold nobody back,
and its tuples would come late.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

from pipeline.errors import BrokerError
from pipeline.kafka.retries import BROKER_WAIT_S
from pipeline.offsets import PartitionT, TopicPartitionKey

log = logging.getLogger(__name__)

#: Tuples a probe asks the broker for at once (they fill the cache around the offset).
PROBE_BATCH = 64

#: Bytes a probe's fetch asks for of its partition: PROBE_BATCH flights are
#: about 4 KiB of Avro.
PROBE_FETCH_BYTES = 64 * 1024

#: Consumers a probe reads with at most: partitions beyond share them, one at a time.
PROBE_CONSUMERS = 8

#: A capped partition's search stops once the cut is known within this share of its
#: planned range (and cuts at the low end: it reads a little less, never past the bound).
CUT_TOLERANCE = 1 / 64

#: Event times cached per partition, most recent offsets kept.
CACHE_PER_PARTITION = 4096

#: Errors a probe's read takes as the broker's answer that there is no tuple to tell:
#: the partition's end, or offsets it no longer holds (swept, deleted). Any other error,
#: or no message in time, is no answer, and the read is asked again.
_ANSWERS = frozenset(
    {KafkaError._PARTITION_EOF, KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET}
)


def align_batch_end(
    begin: Mapping[PartitionT, int],
    end: Mapping[PartitionT, int],
    latest: Mapping[PartitionT, int],
    event_times_at: Callable[[Mapping[PartitionT, int]], Mapping[PartitionT, int | None]],
    drift_ms: int,
    idle: frozenset[PartitionT] = frozenset(),
    known: Callable[[Mapping[PartitionT, int]], Mapping[PartitionT, int | None]] | None = None,
) -> dict[PartitionT, int]:
    """Cap a planned micro-batch so no partition is read past the least planned event
    time plus ``drift_ms``.

    Args:
        begin: next offset to read per partition (a topic-partition in the source).
        end: the end planned by offsets per partition (``begin[p] <= end[p]``).
        latest: the high watermark per partition.
        event_times_at: ``{partition: offset} -> {partition: event time}`` (epoch ms)
            of the tuple at each offset, ``None`` where it is unknown (not held, not a
            tuple). It is asked for every partition that needs one at once, so that a
            reader of the broker answers all of them with one fetch (:meth:`EventTimeProbe.many`).
        drift_ms: how far (ms) any partition may be read ahead of the least one.
        idle: partitions that have stopped receiving tuples; with nothing more to read
            they hold nobody back.
        known: like ``event_times_at``, but answers only what it knows without reading
            the broker (:meth:`EventTimeProbe.known`): a search takes those steps first,
            so that the rounds of reads are shared by as many partitions as can be.

    Returns:
        The aligned end per partition: ``begin[p] <= aligned[p] <= end[p]``; the
        partition with the least planned event time keeps ``end[p]``. While a partition
        that is not idle has never held a tuple (``latest[p] == 0``), ``begin``: its
        first tuples may be the earliest of all (a producer's first batch to it still
        on its way), so nobody is read until it has one or is idle, as an empty split
        holds Flink's watermark back until it is marked idle.
    """
    if any(latest.get(p, 0) == 0 and p not in idle for p in begin):
        return dict(begin)
    wanted: dict[PartitionT, int] = {}
    for p, start in begin.items():
        stop = end.get(p, start)
        if stop > start:
            wanted[p] = stop - 1
        elif p not in idle and latest.get(p, 0) > 0:
            wanted[p] = latest[p] - 1  # caught up: its head is where it is
    planned = {p: at for p, at in event_times_at(wanted).items() if at is not None}
    if not planned:
        return dict(end)
    bound = min(planned.values()) + drift_ms
    aligned = dict(end)
    cuts = {
        p: _Cut(begin[p], end[p], bound, at)
        for p, at in planned.items()
        if end.get(p, begin[p]) > begin[p] and at > bound
    }
    # The partitions' searches go in step: each step is one read of the broker for all.
    while cuts:
        if known is not None:
            for p, cut in list(cuts.items()):
                while cut.result is None:
                    free = known({p: cut.asking})
                    if p not in free:
                        break
                    cut.observe(free[p])
                if cut.result is not None:
                    aligned[p] = cut.result
                    del cuts[p]
            if not cuts:
                break
        answers = event_times_at({p: cut.asking for p, cut in cuts.items()})
        for p, cut in list(cuts.items()):
            cut.observe(answers.get(p))
            if cut.result is not None:
                aligned[p] = cut.result
                del cuts[p]
    return aligned


class _Cut:
    """One partition's search for the least offset in ``[start, stop)`` whose tuple's
    event time is past ``bound`` (``stop - 1``'s, ``stop_time``, is known to be past it).

    First the tuple at ``start``; then an interpolation search, every other step a
    bisection: replayed or live, a partition's event times grow about evenly with its
    offsets, so interpolation finds the cut in a few reads of the broker, and the
    bisections bound the reads by twice ``log2(stop - start)`` whatever the times. It
    stops once the cut lies within :data:`CUT_TOLERANCE` of the range and cuts at the
    low end of what is left: the partition reads up to that many tuples fewer this
    micro-batch (the next one reads them), and the last reads, the costliest share of
    the planning, are saved. Unknown event times count as within the bound, so an
    unreadable tuple never stops a partition for good. Ask :attr:`asking`, tell
    :meth:`observe` its event time, until :attr:`result` is set.
    """

    def __init__(self, start: int, stop: int, bound: int, stop_time: int) -> None:
        self.bound = bound
        self.tolerance = int((stop - start) * CUT_TOLERANCE)
        # The answer lies in [low, high]; (known, known_time) is within the bound.
        self.low, self.high = start + 1, stop - 1
        self.known = start
        self.known_time: int | None = None
        self.high_time: int | None = stop_time
        self.asking = start
        self.result: int | None = None
        self._first = True
        self._interpolate = True

    def observe(self, at: int | None) -> None:
        """Take the event time of the tuple at :attr:`asking`; set the next offset to
        ask, or :attr:`result`."""
        if self._first:  # the tuple at ``start``
            self._first = False
            if at is not None and at > self.bound:
                self.result = self.known
                return
            self.known_time = at
        elif at is not None and at > self.bound:
            self.high, self.high_time = self.asking, at
        else:
            self.low = self.asking + 1
            if at is not None:
                self.known, self.known_time = self.asking, at
        if self.high - self.low <= self.tolerance:
            self.result = self.low
            return
        middle = (self.low + self.high) // 2
        if self._interpolate and self.known_time is not None and self.high_time is not None:
            span = self.high_time - self.known_time
            if span > 0:
                guess = (
                    self.known + (self.bound - self.known_time) * (self.high - self.known) // span
                )
                middle = min(max(guess, self.low), self.high - 1)
        self._interpolate = not self._interpolate
        self.asking = middle


class EventTimeProbe:
    """Reads the event time of the tuple at an offset, for planning; caches them.

    Partitions are topic-partitions, ``(topic, partition)``: one probe serves every
    topic a source reads.

    Args:
        consumer_config: librdkafka properties of a consumer of the topics
            (``read_committed``, never subscribing, never committing).
        event_time: ``(message) -> event time`` (epoch ms) or ``None``: the Kafka
            timestamp, or the decoded ``timestampField``.
        timeout_s: how long one read may wait for the broker.
        patience_s: how long :meth:`many` asks again for what the broker did not
            answer (a broker restarting, a leader moving), logging ``FG-SOURCE-003``,
            before it raises: the 60 s the source's offset reads wait.
    """

    def __init__(
        self,
        consumer_config: Mapping[str, Any],
        event_time: Callable[[Any], int | None],
        *,
        timeout_s: float = 10.0,
        patience_s: float = BROKER_WAIT_S,
    ) -> None:
        self._event_time = event_time
        self._timeout_s = timeout_s
        self._patience_s = patience_s
        self._config = {
            **consumer_config,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            # A probe wants PROBE_BATCH tuples; a fetch returns at least one whole
            # record batch whatever this says (KIP-74). (fetch.max.bytes may not go
            # under message.max.bytes.)
            "max.partition.fetch.bytes": PROBE_FETCH_BYTES,
            # A probe reads what is there, never waits for more: no long poll at the
            # log end (Apache Kafka holds such a fetch for fetch.wait.max.ms, 500 ms by
            # default, and the slot's next probe queues behind it), and no prefetch past
            # the first fetch (kept until the next planning, it would be stale; with a
            # low threshold, a short fetch.queue.backoff.ms: pipeline.swept.reading).
            "fetch.wait.max.ms": 10,
            "queued.min.messages": PROBE_BATCH,
            "fetch.queue.backoff.ms": 10,
        }
        #: Consumers by slot, made on first use; a partition's slot is its order of
        #: first use modulo :data:`PROBE_CONSUMERS` (:meth:`_slot`).
        self._consumers: dict[int, Consumer] = {}
        self._slots: dict[TopicPartitionKey, int] = {}
        self._cache: dict[TopicPartitionKey, dict[int, int | None]] = {}
        #: Reads of the broker made, for tests and the planning cost.
        self.reads = 0

    def __call__(self, partition: TopicPartitionKey, offset: int) -> int | None:
        """The event time (epoch ms) of the tuple at ``offset`` of ``partition``, a
        ``(topic, partition)`` (:meth:`many` for one partition)."""
        return self.many({partition: offset})[partition]

    def many(self, wanted: Mapping[TopicPartitionKey, int]) -> dict[TopicPartitionKey, int | None]:
        """The event time (epoch ms) of the tuple at each ``{(topic, partition): offset}``; for
        an offset that holds no tuple (a transaction marker, an aborted write), the next
        tuple's; ``None`` when there is none before the high watermark or the broker no
        longer holds it (swept, deleted).

        What is not cached is read at once for all partitions: each partition has a
        consumer of its own (up to :data:`PROBE_CONSUMERS`), all are assigned before
        any is polled, so their fetches travel together and a planning step costs one
        round trip to the broker, not one per partition. (One consumer assigned several
        partitions would fetch them in one request too, but the embedded noida-db
        answers such a fetch at offsets inside its partitions with OFFSET_OUT_OF_RANGE.)
        A partition the broker did not answer for is asked again until ``patience_s``
        has passed.

        Raises:
            BrokerError: ``FG-SOURCE-005``, naming the partitions and offsets the broker
                did not answer for within ``patience_s``. Never "no event time" for
                them: such a partition would hold nobody back, and the others be read
                past its tuples (89 of 3 000 tuples late after a broker's kill -9).
        """
        found: dict[TopicPartitionKey, int | None] = {}
        missing: dict[TopicPartitionKey, int] = {}
        for partition, offset in wanted.items():
            cached = self._cache.get(partition, {})
            if offset in cached:
                found[partition] = cached[offset]
            else:
                missing[partition] = offset
        started = time.monotonic()
        unanswered: dict[TopicPartitionKey, int] = {}
        attempt = 1
        while missing or unanswered:
            if not missing:
                waited = time.monotonic() - started
                if waited >= self._patience_s:
                    offsets = {f"{t}[{p}]": o for (t, p), o in sorted(unanswered.items())}
                    raise BrokerError(
                        "FG-SOURCE-005 source: the broker did not answer the event-time "
                        f"reads of partitions {offsets} ({{topic[partition]: offset}}) for "
                        f"{waited:.0f} s; the micro-batch is not planned, since reading the "
                        "other partitions without them could make their tuples late. Restart "
                        "the query group once the broker answers: it resumes from its "
                        "checkpoint"
                    )
                log.warning(
                    "FG-SOURCE-003 source: broker not answering, reading the event times "
                    "at %s again (attempt %d, %.0f s so far)",
                    {f"{t}[{p}]": o for (t, p), o in sorted(unanswered.items())},
                    attempt,
                    waited,
                )
                attempt += 1
                missing, unanswered = unanswered, {}
            # One partition per consumer at a time.
            step: dict[int, tuple[TopicPartitionKey, int]] = {}
            for partition, offset in list(missing.items()):
                slot = self._slot(partition)
                if slot not in step:
                    step[slot] = (partition, offset)
                    del missing[partition]
            self.reads += 1
            answered = self._fetch(step)
            found |= answered
            unanswered |= {p: o for p, o in step.values() if p not in answered}
        return found

    def known(self, wanted: Mapping[TopicPartitionKey, int]) -> dict[TopicPartitionKey, int | None]:
        """The cached event times of ``{(topic, partition): offset}``; offsets not cached
        are left out (nothing is read from the broker)."""
        found: dict[TopicPartitionKey, int | None] = {}
        for partition, offset in wanted.items():
            cached = self._cache.get(partition, {})
            if offset in cached:
                found[partition] = cached[offset]
        return found

    def _slot(self, partition: TopicPartitionKey) -> int:
        """The consumer slot of ``partition``: partitions first used one after the
        other get slots one after the other, so up to :data:`PROBE_CONSUMERS` are read
        at once whatever their topics and numbers."""
        return self._slots.setdefault(partition, len(self._slots)) % PROBE_CONSUMERS

    def _consumer(self, slot: int) -> Consumer:
        consumer = self._consumers.get(slot)
        if consumer is None:
            consumer = self._consumers[slot] = Consumer(self._config)
        return consumer

    def _fetch(
        self, step: Mapping[int, tuple[TopicPartitionKey, int]]
    ) -> dict[TopicPartitionKey, int | None]:
        """Read the first tuples at ``{slot: ((topic, partition), offset)}`` from the
        broker, a consumer per slot; cache what the fetches brought; the event time at
        each the broker answered for within ``timeout_s`` (a record, or the partition's
        end)."""
        for slot, ((topic, number), offset) in step.items():
            self._consumer(slot).assign([TopicPartition(topic, number, offset)])
        deadline = time.monotonic() + self._timeout_s
        found: dict[TopicPartitionKey, int | None] = {}
        try:
            for slot, (partition, offset) in step.items():
                consumer = self._consumers[slot]
                # The first record (or the end of the partition) as soon as it comes,
                # then what the same fetch brought, without waiting: consume(n) alone
                # would wait for n records, and near the partition's end there are fewer.
                first = consumer.poll(max(0.0, deadline - time.monotonic()))
                if first is None:
                    continue  # not answered: asked again (many)
                error = first.error()
                if error is not None and error.code() not in _ANSWERS:
                    continue
                messages = [first]
                if error is None:
                    messages += consumer.consume(PROBE_BATCH - 1, timeout=0)
                found[partition] = self._remember(partition, offset, messages)
        finally:
            # An assigned partition is fetched in the background until unassigned:
            # between plannings that is a reader spinning on the broker for nothing
            # (librdkafka prefetches up to queued.max.messages.kbytes; an embedded
            # broker answers an empty fetch at once). On the demo that reader cost
            # half of the alignment's throughput cost (31-37 % before, 17 % after).
            for slot in step:
                self._consumers[slot].unassign()
        return found

    def _remember(
        self, partition: TopicPartitionKey, offset: int, messages: list[Any]
    ) -> int | None:
        """Cache the event times of ``messages`` read at ``offset``; the one at it."""
        cached = self._cache.setdefault(partition, {})
        at: int | None = None
        seen = False
        for message in messages:
            if message.error() is not None:
                break  # the end of the partition, or an error: no tuple to tell
            time_at, position = self._event_time(message), int(message.offset() or 0)
            cached[position] = time_at
            if not seen and position >= offset:
                at, seen = time_at, True
        # Offsets without a tuple (markers) take the event time of the next tuple.
        cached[offset] = at
        if len(cached) > CACHE_PER_PARTITION:
            for old in sorted(cached)[: len(cached) - CACHE_PER_PARTITION]:
                del cached[old]
        return at

    def forget_before(self, begin: Mapping[TopicPartitionKey, int]) -> None:
        """Drop cached offsets that are read already (``< begin[p]``)."""
        for p, cached in self._cache.items():
            start = begin.get(p, 0)
            for old in [o for o in cached if o < start]:
                del cached[old]

    def close(self) -> None:
        """Close the consumers."""
        for consumer in self._consumers.values():
            consumer.close()
        self._consumers.clear()


class IdleTracker:
    """Which partitions have stopped receiving tuples: their high watermark has not moved
    for ``timeout_s`` (Flink's idleness).

    Only time the source watched counts: an observation more than half the timeout after
    the one before, and more than twice the gap before that (the source did not plan
    meanwhile as it had: a long micro-batch, or a broker its reads waited for), starts
    every head's clock again; steady gaps, as a long trigger interval makes, count. Else
    a broker away for longer than the timeout makes every partition idle at once when it
    comes back, and the partitions whose producers have yet to deliver again hold nobody
    back: the watermark can pass tuples still on their way, and the aggregations
    dead-letter them as late. A partition that is really idle still becomes so: once it
    holds the others back, the micro-batches are empty and plannings come at the
    trigger's pace. The JVM source's ``IdleTracker`` is the same rule.

    Args:
        timeout_s: how long a head may stand still before its partition is idle.
        clock: monotonic seconds (tests inject one).
    """

    def __init__(self, timeout_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.timeout_s = timeout_s
        self._clock = clock
        self._heads: dict[Any, tuple[int, float]] = {}
        self._last_observation: float | None = None
        self._last_gap: float | None = None

    def observe(self, latest: Mapping[PartitionT, int]) -> frozenset[PartitionT]:
        """Record the high watermarks read now (per partition, a topic-partition in the
        source); the partitions idle as of now."""
        now = self._clock()
        if self._last_observation is not None:
            gap = now - self._last_observation
            if gap > self.timeout_s / 2 and (self._last_gap is None or gap > 2 * self._last_gap):
                self._heads = {p: (high, now) for p, (high, _) in self._heads.items()}
            self._last_gap = gap
        self._last_observation = now
        idle: set[PartitionT] = set()
        for p, high in latest.items():
            seen = self._heads.get(p)
            if seen is None or seen[0] != high:
                self._heads[p] = (high, now)
            elif now - seen[1] >= self.timeout_s:
                idle.add(p)
        return frozenset(idle)

"""The sweeper's decisions, as pure functions of one partition's state (the slow-queue
sweeper's rule: sweep only a serviced queue whose backlog grows; docs/architecture.md, "The
sweeper"). Property-tested in ``tests/unit/sweeper/test_policy.py``.

Per partition, each cycle:

* ``x`` = service rate: tuples the consumer group committed in the last interval;
  ``y`` = queue length not yet swept (from the end of the BLOB chain, or the
  committed offset, to the high watermark).
* Skip a queue not being serviced (``x = 0``: back-pressure's business) and one not
  growing past twice its service rate (``y <= 2x``: a queue is swept only once its
  length is more than twice its service rate).
* Sweep ``[a, b)``: ``a`` after the front buffer of ``x + 5`` tuples that stays in the
  broker (so the consumer's next reads do not unsweep at once), and never before the
  end of the chain, of the latest planned micro-batch, or of the broker's log start;
  ``b`` = the high watermark when the sweep starts.
* After writing, :func:`verify`: abort when the consumer reached ``a``, a planned
  micro-batch reaches past ``a``, or the broker no longer holds ``a`` (the slow-queue
  sweeper's verify-then-abort: a tuple planned into a batch, consumed, or removed while
  the BLOB was written).
* :func:`truncate_to`: once the slowest consumer's committed offset reaches a BLOB's
  ``a``, the broker may be truncated up to its ``b``, and on to the end of the
  contiguous run of BLOBs chained after it -- never past the position of a protected
  consumer group (one that does not read BLOBs).
* :func:`consumed`: a BLOB whose last tuple the slowest consumer has consumed.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

#: The front buffer's "+ 5" (x + 5): tuples kept in the broker beyond one interval's service.
FRONT_EXTRA = 5


class Skip(enum.StrEnum):
    """Why a partition is not swept this cycle."""

    NOT_SERVICED = "not-serviced"
    """``x = 0``: nobody consumes it; back-pressure holds the producers."""
    NOT_GROWING = "not-growing"
    """``y <= 2x``: the consumer keeps up."""
    NOTHING_TO_SWEEP = "nothing-to-sweep"
    """The backlog beyond the front buffer and any planned micro-batch is empty."""


class Abort(enum.StrEnum):
    """Why a written BLOB was deleted instead of registered (a metric label)."""

    CONSUMER_REACHED = "consumer-reached"
    BATCH_PLANNED = "batch-planned"
    BROKER_TRUNCATED = "broker-truncated"
    WRITE_FAILED = "write-failed"
    NOT_LEADER = "not-leader"
    """The sweeper lost the lead while it wrote (another sweeper sweeps now)."""
    OVERLAP = "overlap"
    """Another sweeper registered a BLOB overlapping the range first (the moment two
    sweepers both believe they lead, before the deposed one sees its lock gone)."""


@dataclass(frozen=True)
class PartitionView:
    """One partition of a registered queue as the sweeper sees it at a cycle.

    Attributes:
        committed: the slowest consumer group's committed offset (the log start
            when it has none).
        high_watermark: the next offset the broker will write.
        log_start: the first offset the broker holds.
        service_rate: ``x``, tuples committed during the last interval (>= 0).
        chain_end: the end of the partition's last registered BLOB (``None``: none).
        planned_end: the end offset of the latest micro-batch Spark planned for it
            (``None``: nothing planned beyond the commit).
    """

    committed: int
    high_watermark: int
    log_start: int
    service_rate: int
    chain_end: int | None = None
    planned_end: int | None = None

    @property
    def unswept(self) -> int:
        """``y``: tuples after the chain (or the commit) up to the high watermark."""
        return max(0, self.high_watermark - max(self.committed, self.chain_end or 0))


@dataclass(frozen=True)
class SweepRange:
    """``[start, end)`` of one partition to write as one BLOB."""

    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def plan(view: PartitionView, *, front_extra: int = FRONT_EXTRA) -> SweepRange | Skip:
    """The range to sweep this cycle, or why not.

    Returns:
        A non-empty :class:`SweepRange` within ``[log_start, high_watermark)`` that
        starts at or after ``committed + x + front_extra``, the chain's end and the
        planned micro-batch's end; or the :class:`Skip` reason.
    """
    x = view.service_rate
    if x <= 0:
        return Skip.NOT_SERVICED
    if view.unswept <= 2 * x:
        return Skip.NOT_GROWING
    start = max(
        view.committed + x + front_extra,
        view.chain_end or 0,
        view.planned_end or 0,
        view.log_start,
    )
    if start >= view.high_watermark:
        return Skip.NOTHING_TO_SWEEP
    return SweepRange(start, view.high_watermark)


def verify(
    sweep: SweepRange, *, committed: int, planned_end: int | None, log_start: int
) -> Abort | None:
    """Whether a written BLOB may be registered (``None``) or must be deleted.

    Args:
        sweep: the range written.
        committed: the slowest consumer's committed offset now.
        planned_end: the latest planned micro-batch's end now.
        log_start: the broker's log start now.
    """
    if committed >= sweep.start:
        return Abort.CONSUMER_REACHED
    if planned_end is not None and planned_end > sweep.start:
        return Abort.BATCH_PLANNED
    if log_start > sweep.start:
        return Abort.BROKER_TRUNCATED
    return None


def truncate_to(
    chain: Sequence[tuple[int, int]],
    *,
    committed: int,
    log_start: int,
    protected: Iterable[int] = (),
) -> int | None:
    """The offset to truncate the broker to (``delete_records``), or ``None``.

    Args:
        chain: the partition's BLOBs as ``(start, end)``, in offset order.
        committed: the slowest consumer's committed offset.
        log_start: the broker's log start now.
        protected: positions of consumer groups that must keep reading from the broker.

    Once the consumer has reached a BLOB's start, everything from there to the end of
    the contiguous run of BLOBs it begins is swept, and everything below it consumed:
    the broker may drop all of it (Kafka truncates a prefix only, so the run's later
    BLOBs are freed along with the first, not left resident until the consumer reaches
    each of them).
    """
    reached = [i for i, (start, _end) in enumerate(chain) if start <= committed]
    if not reached:
        return None
    last = reached[-1]
    while last + 1 < len(chain) and chain[last + 1][0] == chain[last][1]:
        last += 1
    target = chain[last][1]
    for position in protected:
        target = min(target, position)
    return target if target > log_start else None


def consumed(chain: Sequence[tuple[int, int]], *, committed: int) -> list[int]:
    """Indexes into ``chain`` of the BLOBs whose every tuple the consumer has consumed."""
    return [i for i, (_start, end) in enumerate(chain) if end <= committed]

"""What a read of a stream queue finds: per partition, and in all."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PartitionQueue:
    """One partition's share of a queue.

    Attributes:
        high: the high watermark (next offset to be written).
        log_start: the first offset the broker still holds.
        committed: the slowest reader's committed offset; ``None`` before any commit.
        swept: tuples of ``[position, high)`` held in BLOBs instead of the broker.
    """

    high: int
    log_start: int = 0
    committed: int | None = None
    swept: int = 0

    @property
    def position(self) -> int:
        """Where the slowest reader is: its commit, or the log start before it has one."""
        return self.log_start if self.committed is None else max(self.committed, self.log_start)

    @property
    def length(self) -> int:
        """Tuples of this partition still queued in the broker."""
        return max(0, self.high - self.position - self.swept)


@dataclass(frozen=True)
class QueueSnapshot:
    """A queue's state as read from the broker at one moment.

    Attributes:
        stream: the stream's name.
        max_queue_size: the configured bound, in tuples.
        partitions: per partition :class:`PartitionQueue`.
        taken_at: ``time.monotonic()`` when it was read.
    """

    stream: str
    max_queue_size: int
    partitions: Mapping[int, PartitionQueue]
    taken_at: float = field(default_factory=time.monotonic)

    @property
    def length(self) -> int:
        """Queue length in tuples (sum over partitions)."""
        return sum(p.length for p in self.partitions.values())

    @property
    def free_queue_size(self) -> int:
        """``max_queue_size - length``, never below 0 (tuples)."""
        return max(0, self.max_queue_size - self.length)

    @property
    def free_ratio(self) -> float:
        """Free space as a ratio of the max, 0..1."""
        return self.free_queue_size / self.max_queue_size if self.max_queue_size else 0.0


def slowest_commits(
    commits: Iterable[Mapping[int, int | None]], partitions: Iterable[int]
) -> dict[int, int | None]:
    """Per partition, the slowest of several readers' committed offsets.

    A reader with no commit on a partition is at the log start there, which is
    behind any commit: the result is then ``None`` for that partition.
    """
    result: dict[int, int | None] = {}
    readers = list(commits)
    for p in partitions:
        values = [c.get(p) for c in readers]
        result[p] = (
            None
            if not values or any(v is None for v in values)
            else min(v for v in values if v is not None)
        )
    return result

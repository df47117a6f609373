"""The client's side of an input stream queue's bound: :class:`QueueBudget`.

Between two reads of the broker, a producer counts what it sends itself, so one
producer can never make the queue exceed its max, whatever the broker's state lags
behind (property-tested in ``tests/unit/pipeline/queues/test_budget.py``)."""

from __future__ import annotations


class QueueBudget:
    """How many tuples one producer may still send, between reads of the broker.

    After a read (:meth:`refresh`), the free space is the snapshot's, less the
    tuples this producer had in flight *before* the read began (they were not in
    the high watermark yet, or were: counting them again only errs on the safe
    side). Every send is then counted against it until the next read. Since
    consumption only ever frees space, the estimate never exceeds the truth, and
    one producer can never make ``length + in flight`` exceed the max.

    Several producers each count only their own sends, and see the others' tuples
    only once the broker has acknowledged them. Each may fill the free space ``F``
    it saw, and no more (a later read only ever shows less free space while
    nothing is consumed), so ``P`` producers together overshoot the max by at most
    ``(P - 1) * F``. The bound is tight when producers start together: a new
    producer sends its first batches before its connection is even up, so none
    sees the others' (measured: three fresh producers, ``F`` = 800, overshoot
    1 600). Producers already running, reading before every put
    (``queue_refresh_interval_ms = 0``), overshoot by what the others have in
    flight: measured 300 for the same three. Where several producers must not
    overshoot at all, give each its own share of ``max_queue_size``.

    Args:
        max_queue_size: the bound, tuples.
    """

    def __init__(self, max_queue_size: int) -> None:
        self.max_queue_size = max_queue_size
        self._free_at_refresh = 0
        self._sent_since_refresh = 0
        self.refreshed = False

    def refresh(self, length: int, in_flight_before: int) -> None:
        """Take a fresh queue length read from the broker.

        Args:
            length: the queue length read (tuples in the broker, not yet processed).
            in_flight_before: tuples this producer had sent but not seen acknowledged
                when the read began.
        """
        self._free_at_refresh = self.max_queue_size - length - in_flight_before
        self._sent_since_refresh = 0
        self.refreshed = True

    @property
    def available(self) -> int:
        """Tuples this producer may still send before the next read."""
        return max(0, self._free_at_refresh - self._sent_since_refresh)

    def try_reserve(self, count: int) -> bool:
        """Count ``count`` tuples as sent if they fit; all or nothing."""
        if count <= self.available:
            self._sent_since_refresh += count
            return True
        return False

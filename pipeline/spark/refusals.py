"""The tuples the source refuses although they decode: ``null-key``,
``future-event-time`` and ``late``.

Each goes to the dead-letter topic with its reason instead of into the micro-batch:

* ``null-key``: the stream is keyed (``keyRequired``) and the record has no key;
* ``future-event-time``: the event time (``timestampMode = data_source``) is more than
  ``maxEventTimeAheadMs`` after the record's Kafka timestamp, which would move the
  watermark past every other tuple;
* ``late``: the query aggregates the stream over an event-time window, and the
  tuple's latest window ended at or before the micro-batch's watermark, so Spark
  would drop it from the aggregation without a trace.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pipeline.errors import RefusedTupleError
from pipeline.spark.options import SourceOptions


def _iso(epoch_ms: int) -> str:
    """Epoch milliseconds as ISO 8601 UTC, for messages."""
    return datetime.fromtimestamp(epoch_ms / 1000, tz=UTC).isoformat(timespec="milliseconds")


class RefusalRules:
    """The refusal rules of one source's options.

    Args:
        options: the source's options (``keyRequired``, ``timestampMode``,
            ``maxEventTimeAheadMs``, ``lateWindow``).
    """

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def suspects(
        self, keys: Any, timestamps: Any, event_times: Any, watermark_ms: int | None
    ) -> Any:
        """The rows a rule may refuse, found by column (Arrow), to be judged one by one
        with :meth:`refusal`; ``None`` when no rule applies.

        Args:
            keys: the records' keys (Arrow binary array).
            timestamps / event_times: epoch ms (Arrow int64 arrays, nulls allowed).
            watermark_ms: the micro-batch's watermark, ``None`` before the first.

        Returns:
            An Arrow boolean array (nulls: not suspect), or ``None``.
        """
        import pyarrow.compute as pc

        options = self.options
        suspects = None
        if options.key_required:
            suspects = pc.is_null(keys)
        ahead = options.max_event_time_ahead_ms
        if ahead is not None and options.timestamp_mode == "data_source":
            future = pc.greater(event_times, pc.add(timestamps, ahead))
            suspects = future if suspects is None else pc.or_kleene(suspects, future)
        if options.late_window is not None and watermark_ms is not None:
            early = pc.less(event_times, watermark_ms)
            suspects = early if suspects is None else pc.or_kleene(suspects, early)
        return suspects

    def refusal(
        self,
        message: Any,
        key: bytes | None,
        timestamp: int | None,
        event_time: int | None,
        *,
        watermark_ms: int | None,
        batch_id: int | None,
    ) -> RefusedTupleError | None:
        """Why the source refuses a decoded tuple, or ``None`` to keep it.

        Args:
            message: the Kafka message (topic, partition and offset for the error).
            key: its key; ``timestamp``: its Kafka timestamp; ``event_time``: the
                tuple's event time (epoch ms, ``None`` when it has none).
            watermark_ms / batch_id: the micro-batch's watermark and id.
        """
        options = self.options
        refusal = None
        if key is None and options.key_required:
            refusal = ("null-key", "the record has no key; the stream is keyed")
        elif event_time is not None:
            ahead = options.max_event_time_ahead_ms
            window = options.late_window
            if (
                ahead is not None
                and timestamp is not None
                and options.timestamp_mode == "data_source"
                and event_time > timestamp + ahead
            ):
                refusal = (
                    "future-event-time",
                    f"event time {_iso(event_time)} is {(event_time - timestamp) / 1000:,.0f} s "
                    f"after the record's timestamp {_iso(timestamp)}; at most "
                    f"{ahead / 1000:,.0f} s is accepted (max_event_time_ahead_ms)",
                )
            elif (
                window is not None
                and watermark_ms is not None
                and window.is_late(event_time, watermark_ms)
            ):
                refusal = (
                    "late",
                    f"event time {_iso(event_time)}: its latest window ended "
                    f"{_iso(window.last_end(event_time))}, at or before the watermark "
                    f"{_iso(watermark_ms)} for micro-batch {batch_id}; Spark "
                    "would drop it from the aggregation",
                )
        if refusal is None:
            return None
        reason, text = refusal
        return RefusedTupleError(
            text,
            reason=reason,
            stream=options.stream,
            topic=message.topic(),
            partition=message.partition(),
            offset=message.offset(),
        )

"""Which real-time plans have a shuffle (:func:`pipeline.spark.real_time.shuffle_of`):
with exactly-once delivery a real-time group refuses them, as its write tasks would not
read their own input."""

from __future__ import annotations

from pipeline.spark.real_time import shuffle_of

#: The physical plan pyspark 4.3.0 prints for the per-origin hourly aggregation in
#: real time (abridged to its operators).
AGGREGATION = """WriteToDataSourceV2 MicroBatchWrite[epoch: 0, writer: ...]
+- *(2) HashAggregate(keys=[origin#47, window#71-T7200000ms], functions=[count(1)])
   +- StateStoreSave [origin#47, window#71-T7200000ms], state info [ checkpoint = ...]
      +- *(2) HashAggregate(keys=[origin#47, window#71-T7200000ms], functions=[merge_count(1)])
         +- StateStoreRestore [origin#47, window#71-T7200000ms], state info [ ... ]
            +- Exchange hashpartitioning(origin#47, window#71-T7200000ms, 1), \
REQUIRED_BY_STATEFUL_OPERATOR, isPipelined=true, [plan_id=42]
               +- *(1) Project [origin#47, window#71-T7200000ms]
                  +- MicroBatchScan[carrier#1, origin#47] class io.floodgate.spark.Scan
"""

#: A stream-static join whose static side is broadcast: the stream's tasks stay whole.
BROADCAST = """WriteToDataSourceV2 MicroBatchWrite[epoch: 3, writer: ...]
+- *(1) Project [carrier#1, name#9]
   +- *(1) BroadcastHashJoin [carrier#1], [code#8], Inner, BuildRight, false
      :- MicroBatchScan[carrier#1] class io.floodgate.spark.Scan
      +- BroadcastExchange HashedRelationBroadcastMode(List(input[0, string, true]),false), \
[plan_id=7]
         +- LocalTableScan [code#8, name#9]
"""

PASS_THROUGH = """WriteToDataSourceV2 MicroBatchWrite[epoch: 1, writer: ...]
+- *(1) Project [carrier#1, flight#2, origin#3]
   +- MicroBatchScan[carrier#1, flight#2, origin#3] class io.floodgate.spark.Scan
"""


def test_a_shuffle_is_named_without_its_plan_id() -> None:
    assert shuffle_of(AGGREGATION) == (
        "Exchange hashpartitioning(origin#47, window#71-T7200000ms, 1), "
        "REQUIRED_BY_STATEFUL_OPERATOR, isPipelined=true"
    )


def test_a_broadcast_or_no_exchange_is_no_shuffle() -> None:
    assert shuffle_of(BROADCAST) is None
    assert shuffle_of(PASS_THROUGH) is None


def test_a_reused_exchange_is_no_new_shuffle() -> None:
    assert shuffle_of("+- ReusedExchange [carrier#1], Exchange hashpartitioning(c#1, 2)") is None

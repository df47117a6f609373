package io.floodgate.spark;

import io.floodgate.spark.alignment.EventTimeAligner;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.SortedMap;
import org.apache.kafka.common.TopicPartition;

/**
 * The metrics {@link KafkaMicroBatchStream} reports to Spark ({@code
 * ReportsSourceMetrics.metrics}), every value a decimal string.
 */
final class SourceMetrics {
  private SourceMetrics() {}

  /**
   * The source's metrics in every {@code StreamingQueryProgress}, as Spark's Kafka source reports
   * its own. Over the topic-partitions both in {@code latestConsumedOffset} and in the last stable
   * offsets the last planning read (as Spark's {@code KafkaMicroBatchStream.metrics}: a partition
   * added since, or gone, is in one only), the offsets each is behind, never below 0: {@code lag}
   * (their sum), and Spark's {@code minOffsetsBehindLatest}, {@code maxOffsetsBehindLatest} and
   * {@code avgOffsetsBehindLatest} (those three only when a partition is in both). Then {@code
   * alignmentCaps}, {@code alignmentReads} (rounds of event-time reads of the broker the planning
   * made), and {@code offsetOutOfRange} and {@code dataLoss}: the offsets, and times, the planning
   * found lost and skipped with {@code failOnDataLoss = false}, since the query started. What the
   * tasks count is in the scan's SQL metrics instead ({@link io.floodgate.spark.read.TaskMetrics}).
   *
   * @param consumed {@code latestConsumedOffset}'s offsets, if Spark gave it
   * @param lastLatest the last stable offsets the last planning read
   * @param aligner the event-time alignment, for its counts
   * @param starts the planning's starts, for the data loss it skipped
   */
  static Map<String, String> of(
      Optional<SortedMap<TopicPartition, Long>> consumed,
      SortedMap<TopicPartition, Long> lastLatest,
      EventTimeAligner aligner,
      BatchStarts starts) {
    Map<String, String> out = new HashMap<>();
    if (consumed.isPresent()) {
      List<Long> behind = new ArrayList<>();
      lastLatest.forEach(
          (tp, latest) -> {
            Long at = consumed.get().get(tp);
            if (at != null) {
              behind.add(Math.max(0, latest - at));
            }
          });
      long lag = behind.stream().mapToLong(Long::longValue).sum();
      out.put("lag", Long.toString(lag));
      if (!behind.isEmpty()) {
        out.put("minOffsetsBehindLatest", Long.toString(Collections.min(behind)));
        out.put("maxOffsetsBehindLatest", Long.toString(Collections.max(behind)));
        out.put("avgOffsetsBehindLatest", Double.toString((double) lag / behind.size()));
      }
    }
    out.put("alignmentCaps", Long.toString(aligner.capped()));
    out.put("alignmentReads", Long.toString(aligner.eventTimeReads()));
    out.put("offsetOutOfRange", Long.toString(starts.offsetOutOfRange()));
    out.put("dataLoss", Long.toString(starts.dataLoss()));
    return out;
  }
}

package io.floodgate.spark.alignment;

import io.floodgate.spark.offsets.TopicPartitions;
import java.util.Map;
import java.util.Set;
import java.util.SortedMap;
import org.apache.kafka.common.TopicPartition;

/**
 * Caps a micro-batch's end so that no topic-partition is read more than {@code maxEventTimeDriftMs}
 * past the least planned event time over every topic-partition read (option {@code
 * maxEventTimeDriftMs}); {@link AlignmentPlan} states the rule (docs/architecture.md,
 * "Micro-batches aligned in event time").
 */
public interface EventTimeAligner extends AutoCloseable {
  /**
   * {@code end} capped in event time.
   *
   * @param begin the batch's start per topic-partition
   * @param end the batch's end before alignment
   * @param latest the high watermarks
   * @param idle topic-partitions that hold nobody back
   * @return the aligned end, {@code begin <= aligned <= end}
   */
  SortedMap<TopicPartition, Long> align(
      Map<TopicPartition, Long> begin,
      Map<TopicPartition, Long> end,
      Map<TopicPartition, Long> latest,
      Set<TopicPartition> idle);

  /** How many topic-partition ends alignment capped so far. */
  long capped();

  /**
   * Rounds of reads of the broker alignment made so far to learn event times (each one fetch
   * request to each broker for the partitions it needed): the cost of planning.
   */
  default long eventTimeReads() {
    return 0;
  }

  @Override
  void close();

  /** No alignment: the end as planned. */
  EventTimeAligner NONE =
      new EventTimeAligner() {
        @Override
        public SortedMap<TopicPartition, Long> align(
            Map<TopicPartition, Long> begin,
            Map<TopicPartition, Long> end,
            Map<TopicPartition, Long> latest,
            Set<TopicPartition> idle) {
          return TopicPartitions.sorted(end);
        }

        @Override
        public long capped() {
          return 0;
        }

        @Override
        public void close() {}
      };
}

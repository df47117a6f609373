package io.floodgate.spark.alignment;

import java.util.Map;
import java.util.Set;

/**
 * A partition's first offset past an event-time bound, answered by an index instead of a search:
 * Kafka's time index, ListOffsets by timestamp ({@code KafkaConsumer.offsetsForTimes}), when a
 * record's timestamp is its event time ({@link KafkaTimeIndex}).
 */
@FunctionalInterface
public interface CutIndex {
  /**
   * For each partition, the first offset of its log (not of a range) whose record's event time is
   * past {@code boundMs}, in one request for all partitions.
   *
   * @param partitions the partitions to look up
   * @param boundMs the bound (epoch ms)
   * @return the offset per partition; {@code null} where the log holds no such record; partitions
   *     the index could not answer are left out. A map that allows {@code null} values.
   */
  Map<Integer, Long> firstPast(Set<Integer> partitions, long boundMs);
}

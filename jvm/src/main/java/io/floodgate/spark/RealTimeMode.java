package io.floodgate.spark;

import io.floodgate.spark.offsets.KafkaPartitionOffset;
import io.floodgate.spark.offsets.SourceOffset;
import io.floodgate.spark.options.SourceOptions;
import io.floodgate.spark.read.KafkaRange;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.SortedMap;
import org.apache.kafka.common.TopicPartition;
import org.apache.spark.sql.connector.read.streaming.PartitionOffset;

/**
 * The source in Spark's Real-Time Mode ({@code trigger(realTime=...)}, Spark 4.1+): one
 * long-running task per topic-partition, reading from the batch's start with no end until the
 * batch's deadline, as Spark's Kafka source plans it ({@code KafkaMicroBatchStream} with {@code
 * SupportsRealTimeMode}).
 *
 * <p>What a real-time batch cannot do is refused when the query starts ({@link #refuse}), naming
 * the option: a real-time batch has no end offset to cap, split or align.
 */
final class RealTimeMode {
  private RealTimeMode() {}

  /**
   * Refuse the options a real-time batch cannot honour, as Spark's Kafka source refuses {@code
   * maxOffsetsPerTrigger}, {@code minOffsetsPerTrigger}, {@code minPartitions} and {@code
   * maxTriggerDelay} ("is not compatible with real time mode").
   *
   * @throws UnsupportedOperationException naming the first such option set, and why
   */
  static void refuse(SourceOptions options) {
    Map<String, Object> set = new LinkedHashMap<>();
    set.put("maxOffsetsPerTrigger (maxRowsPerTrigger)", options.maxRowsPerTrigger);
    set.put("minOffsetsPerTrigger", options.minRowsPerTrigger);
    set.put("minPartitions", options.minPartitions);
    set.put("maxRecordsPerPartition", options.maxRecordsPerPartition);
    set.put("maxTasks", options.maxTasks);
    set.put("maxEventTimeDriftMs (event-time alignment)", options.maxEventTimeDriftMs);
    set.put("watermarkCheckpoint (late tuples dead-lettered)", options.watermarkCheckpoint);
    for (Map.Entry<String, Object> e : set.entrySet()) {
      if (e.getValue() != null) {
        throw new UnsupportedOperationException(
            "source "
                + options.stream
                + ": "
                + e.getKey()
                + " is not compatible with real-time mode: a real-time batch reads each"
                + " topic-partition in one task, from where the last batch ended until the batch's"
                + " deadline, with no end offset to cap, split or align; remove the option or use"
                + " a micro-batch trigger");
      }
    }
  }

  /**
   * The real-time batch's ranges: one per topic-partition read now ({@code latest}'s keys, which
   * the planning read just before), from {@code begin} (0 for a topic-partition it does not name),
   * with no end, or to the end its first run logged ({@code logged}: a batch run again, {@link
   * io.floodgate.spark.read.RealTimeEndLog}), never below its start.
   */
  static List<KafkaRange> ranges(
      SortedMap<TopicPartition, Long> begin,
      SortedMap<TopicPartition, Long> latest,
      Map<TopicPartition, Long> logged) {
    List<KafkaRange> ranges = new ArrayList<>();
    for (TopicPartition tp : latest.keySet()) {
      long from = begin.getOrDefault(tp, 0L);
      Long end = logged.get(tp);
      ranges.add(
          new KafkaRange(
              tp.topic(),
              tp.partition(),
              from,
              end == null ? Long.MAX_VALUE : Math.max(from, end),
              null,
              null));
    }
    return ranges;
  }

  /**
   * The batch's end offset: every task's next offset to read ({@link KafkaPartitionOffset}).
   *
   * @throws IllegalArgumentException an offset of another source, or two for one topic-partition
   */
  static SourceOffset merge(PartitionOffset[] offsets) {
    Map<TopicPartition, Long> merged = new HashMap<>();
    for (PartitionOffset offset : offsets) {
      if (!(offset instanceof KafkaPartitionOffset kafka)) {
        throw new IllegalArgumentException("not a Floodgate partition offset: " + offset);
      }
      if (merged.put(kafka.topicPartition(), kafka.offset()) != null) {
        throw new IllegalArgumentException(
            "two real-time tasks read " + kafka.topicPartition() + ": " + List.of(offsets));
      }
    }
    return new SourceOffset(merged);
  }
}

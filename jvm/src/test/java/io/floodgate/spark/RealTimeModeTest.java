package io.floodgate.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.floodgate.spark.offsets.KafkaPartitionOffset;
import io.floodgate.spark.offsets.TopicPartitions;
import io.floodgate.spark.options.SourceOptions;
import io.floodgate.spark.read.KafkaRange;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.SortedMap;
import org.apache.kafka.common.TopicPartition;
import org.apache.spark.sql.connector.read.streaming.PartitionOffset;
import org.junit.jupiter.api.Test;

/**
 * The source's planning in Spark's Real-Time Mode: the options a real-time batch cannot honour are
 * refused naming them (as Spark's Kafka source refuses {@code maxOffsetsPerTrigger}), each
 * topic-partition gets one range with no end, and the tasks' stopping offsets make the batch's end.
 */
class RealTimeModeTest {
  private static SourceOptions options(String... extra) {
    Map<String, String> raw = new HashMap<>();
    raw.put("kafka.bootstrap.servers", "b:1");
    raw.put("subscribe", "t");
    for (int i = 0; i < extra.length; i += 2) {
      raw.put(extra[i], extra[i + 1]);
    }
    return SourceOptions.parse(raw);
  }

  @Test
  void optionsThatCapOrSplitABatchAreRefusedNamingTheOption() {
    for (String[] option :
        List.of(
            new String[] {"maxOffsetsPerTrigger", "10"},
            new String[] {"minOffsetsPerTrigger", "10"},
            new String[] {"minPartitions", "4"})) {
      UnsupportedOperationException refused =
          assertThrows(
              UnsupportedOperationException.class,
              () -> RealTimeMode.refuse(options(option[0], option[1])));
      assertTrue(refused.getMessage().contains(option[0]), refused.getMessage());
      assertTrue(
          refused.getMessage().contains("not compatible with real-time mode"),
          refused.getMessage());
    }
  }

  @Test
  void plainOptionsAreAccepted() {
    RealTimeMode.refuse(options("startingOffsets", "earliest", "failOnDataLoss", "false"));
  }

  @Test
  void eachTopicPartitionGetsOneRangeWithNoEndFromWhereTheLastBatchEnded() {
    TopicPartition t0 = new TopicPartition("t", 0);
    TopicPartition t1 = new TopicPartition("t", 1);
    SortedMap<TopicPartition, Long> begin = TopicPartitions.sorted(Map.of(t0, 5L));
    SortedMap<TopicPartition, Long> latest = TopicPartitions.sorted(Map.of(t0, 9L, t1, 3L));

    List<KafkaRange> ranges = RealTimeMode.ranges(begin, latest, Map.of());

    assertEquals(
        List.of(
            new KafkaRange("t", 0, 5, Long.MAX_VALUE, null, null),
            new KafkaRange("t", 1, 0, Long.MAX_VALUE, null, null)),
        ranges);
  }

  @Test
  void aBatchRunAgainReadsToWhereItsFirstRunStoppedNeverBelowItsStart() {
    TopicPartition t0 = new TopicPartition("t", 0);
    TopicPartition t1 = new TopicPartition("t", 1);
    TopicPartition t2 = new TopicPartition("t", 2);
    SortedMap<TopicPartition, Long> begin = TopicPartitions.sorted(Map.of(t0, 5L, t1, 2L, t2, 7L));
    SortedMap<TopicPartition, Long> latest = TopicPartitions.sorted(Map.of(t0, 9L, t1, 3L, t2, 9L));

    List<KafkaRange> ranges = RealTimeMode.ranges(begin, latest, Map.of(t0, 8L, t2, 6L));

    assertEquals(
        List.of(
            new KafkaRange("t", 0, 5, 8, null, null),
            new KafkaRange("t", 1, 2, Long.MAX_VALUE, null, null), // its first run logged none
            new KafkaRange("t", 2, 7, 7, null, null)),
        ranges);
  }

  @Test
  void theTasksStoppingOffsetsMakeTheBatchsEnd() {
    PartitionOffset[] stopped = {
      new KafkaPartitionOffset("t", 0, 12), new KafkaPartitionOffset("t", 1, 4)
    };
    assertEquals("{\"t\":{\"0\":12,\"1\":4}}", RealTimeMode.merge(stopped).json().replace(" ", ""));
    PartitionOffset[] twice = {
      new KafkaPartitionOffset("t", 0, 12), new KafkaPartitionOffset("t", 0, 13)
    };
    assertThrows(IllegalArgumentException.class, () -> RealTimeMode.merge(twice));
  }
}

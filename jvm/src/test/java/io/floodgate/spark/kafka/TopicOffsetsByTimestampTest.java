package io.floodgate.spark.kafka;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.floodgate.spark.offsets.TopicPartitions;
import java.util.Map;
import java.util.SortedMap;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Test;

/**
 * A start by timestamp ({@code startingTimestamp}, {@code startingOffsetsByTimestamp}) resolved to
 * offsets as Spark's {@code KafkaOffsetReaderAdmin} resolves it, by {@code
 * startingOffsetsByTimestampStrategy}. No broker.
 */
class TopicOffsetsByTimestampTest {
  private static final TopicPartition T0 = new TopicPartition("t", 0);
  private static final TopicPartition T1 = new TopicPartition("t", 1);
  private static final SortedMap<TopicPartition, Long> LATEST =
      TopicPartitions.flatten(Map.of("t", Map.of(0, 40L, 1, 30L)));

  @Test
  void aStartByTimestampTakesTheFirstOffsetAtOrAfterIt() {
    Map<TopicPartition, Long> timestamps = Map.of(T0, 100L, T1, 100L);
    assertEquals(
        TopicPartitions.flatten(Map.of("t", Map.of(0, 12L, 1, 7L))),
        TopicOffsets.startsByTimestamp(timestamps, Map.of(T0, 12L, T1, 7L), LATEST, "error"));
  }

  @Test
  void aStartByTimestampWithNoOffsetFailsOrStartsAtLatestByTheStrategy() {
    Map<TopicPartition, Long> timestamps = Map.of(T0, 100L, T1, 200L);
    IllegalArgumentException e =
        assertThrows(
            IllegalArgumentException.class,
            () -> TopicOffsets.startsByTimestamp(timestamps, Map.of(T0, 12L), LATEST, "error"));
    assertTrue(
        e.getMessage()
            .contains("No offset matched from request of topic-partition t-1 and timestamp 200."),
        e.getMessage());
    assertEquals(
        TopicPartitions.flatten(Map.of("t", Map.of(0, 12L, 1, 30L))),
        TopicOffsets.startsByTimestamp(timestamps, Map.of(T0, 12L), LATEST, "latest"));
  }
}

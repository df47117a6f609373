package io.floodgate.spark.options;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.floodgate.spark.offsets.TopicPartitions;
import java.util.HashMap;
import java.util.Map;
import java.util.SortedMap;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Test;

/**
 * The options of Spark's Kafka source that choose offsets by timestamp ({@code startingTimestamp},
 * {@code startingOffsetsByTimestamp}, {@code startingOffsetsByTimestampStrategy}, {@code
 * endingTimestamp}, {@code endingOffsetsByTimestamp}) and split ranges ({@code minPartitions},
 * {@code maxRecordsPerPartition}), read as Spark's {@code KafkaSourceProvider} reads them. No
 * broker.
 */
class SparkReadOptionsTest {
  private static final TopicPartition T0 = new TopicPartition("t", 0);
  private static final TopicPartition T1 = new TopicPartition("t", 1);
  private static final SortedMap<TopicPartition, Long> LATEST =
      TopicPartitions.flatten(Map.of("t", Map.of(0, 40L, 1, 30L)));

  private static SourceOptions parse(String... keysAndValues) {
    Map<String, String> options = new HashMap<>();
    options.put("kafka.bootstrap.servers", "b:1");
    options.put("subscribe", "t");
    for (int i = 0; i < keysAndValues.length; i += 2) {
      options.put(keysAndValues[i], keysAndValues[i + 1]);
    }
    return SourceOptions.parse(options);
  }

  private static String refusal(String... keysAndValues) {
    return assertThrows(IllegalArgumentException.class, () -> parse(keysAndValues)).getMessage();
  }

  @Test
  void startingTimestampWinsOverByTimestampWhichWinsOverStartingOffsets() {
    SourceOptions global =
        parse(
            "startingTimestamp",
            " 1000 ",
            "startingOffsetsByTimestamp",
            "{\"t\": {\"0\": 5}}",
            "startingOffsets",
            "earliest");
    assertEquals("timestamp", global.startingOffsets);
    assertEquals(1000L, global.startingTimestamp);
    assertTrue(global.startingPartitionTimestamps.isEmpty());

    SourceOptions byPartition =
        parse(
            "startingOffsetsByTimestamp",
            "{\"t\": {\"0\": 5, \"1\": 6}}",
            "startingOffsets",
            "not even JSON");
    assertEquals("timestamp", byPartition.startingOffsets);
    assertNull(byPartition.startingTimestamp);
    assertEquals(Map.of("t", Map.of(0, 5L, 1, 6L)), byPartition.startingPartitionTimestamps);

    assertEquals("earliest", parse("startingOffsets", "earliest").startingOffsets);
  }

  @Test
  void theStrategyIsErrorByDefaultAndTakesLatestInAnyCase() {
    assertEquals("error", parse().startingTimestampStrategy);
    assertEquals(
        "latest", parse("startingOffsetsByTimestampStrategy", "LATEST").startingTimestampStrategy);
    assertEquals(
        "floodgate_kafka: startingOffsetsByTimestampStrategy = 'first'; allowed: error, latest",
        refusal("startingOffsetsByTimestampStrategy", "first"));
  }

  @Test
  void aTimestampThatIsNoWholeNumberIsRefusedWithSparksMessage() {
    String message = refusal("startingTimestamp", "yesterday");
    assertTrue(message.contains("Expected a single long value, got yesterday"), message);
    assertTrue(message.contains("startingTimestamp = 'yesterday'"), message);
    assertTrue(refusal("startingTimestamp", "-5").contains("Expected a single long value, got -5"));
  }

  @Test
  void timestampsByPartitionNameTopicsReadAndTimestampsOfZeroOrMore() {
    String other = refusal("startingOffsetsByTimestamp", "{\"u\": {\"0\": 5}}");
    assertTrue(other.contains("names topic 'u', which subscribe does not"), other);
    String negative = refusal("startingOffsetsByTimestamp", "{\"t\": {\"0\": -1}}");
    assertTrue(negative.contains("timestamps >= 0"), negative);
  }

  @Test
  void minPartitionsAndMaxRecordsPerPartitionAreWholeNumbersOfOneOrMore() {
    SourceOptions split = parse("minPartitions", "8", "maxRecordsPerPartition", "1000");
    assertEquals(8, split.minPartitions);
    assertEquals(1000L, split.maxRecordsPerPartition);
    assertNull(parse().minPartitions);
    assertNull(parse().maxRecordsPerPartition);
    assertEquals(
        "floodgate_kafka: minPartitions = '0'; allowed: a whole number >= 1",
        refusal("minPartitions", "0"));
    assertEquals(
        "floodgate_kafka: maxRecordsPerPartition = '-3'; allowed: a whole number >= 1",
        refusal("maxRecordsPerPartition", "-3"));
  }

  @Test
  void splittingAndMaxTasksGoNotTogether() {
    String message = refusal("minPartitions", "4", "maxTasks", "2");
    assertTrue(message.contains("options 'minPartitions' and 'maxTasks' go not together"), message);
    assertTrue(
        refusal("maxRecordsPerPartition", "4", "maxTasks", "2")
            .contains("options 'maxRecordsPerPartition' and 'maxTasks' go not together"));
  }

  private static BatchBounds bounds(String... keysAndValues) {
    Map<String, String> options = new HashMap<>();
    for (int i = 0; i < keysAndValues.length; i += 2) {
      options.put(keysAndValues[i], keysAndValues[i + 1]);
    }
    return BatchBounds.take(options);
  }

  @Test
  void endingTimestampWinsAndAPartitionWithNoOffsetEndsAtLatest() {
    BatchBounds global =
        bounds("endingTimestamp", "500", "endingOffsetsByTimestamp", "{}", "endingOffsets", "x");
    Map<TopicPartition, Long> asked = new HashMap<>();
    SortedMap<TopicPartition, Long> ends =
        global.ends(
            LATEST,
            t -> {
              asked.putAll(t);
              return Map.of(T0, 9L);
            });
    assertEquals(Map.of(T0, 500L, T1, 500L), asked);
    assertEquals(TopicPartitions.flatten(Map.of("t", Map.of(0, 9L, 1, 30L))), ends);
    assertFalse(global.endsAtLatest(T1));
  }

  @Test
  void endingOffsetsByTimestampNamesEveryTopicPartitionRead() {
    BatchBounds json = bounds("endingOffsetsByTimestamp", "{\"t\": {\"0\": 5, \"1\": 6}}");
    assertEquals(
        TopicPartitions.flatten(Map.of("t", Map.of(0, 1L, 1, 2L))),
        json.ends(LATEST, t -> t.get(T0) == 5L && t.get(T1) == 6L ? Map.of(T0, 1L, T1, 2L) : null));
    BatchBounds partial = bounds("endingOffsetsByTimestamp", "{\"t\": {\"0\": 5}}");
    IllegalArgumentException e =
        assertThrows(IllegalArgumentException.class, () -> partial.ends(LATEST, t -> Map.of()));
    assertTrue(e.getMessage().contains("name every one"), e.getMessage());
  }

  @Test
  void aStartingTimestampCountsAsAStartGivenInABatchQuery() {
    assertTrue(bounds("startingTimestamp", "1").startingGiven);
    assertTrue(bounds("startingOffsetsByTimestamp", "{}").startingGiven);
    assertFalse(bounds().startingGiven);
  }

  @Test
  void endingOptionsAreRefusedInAStreamingQueryWithSparksMessages() {
    assertNull(bounds().streamingRefusal());
    assertTrue(
        bounds("endingOffsets", "latest")
            .streamingRefusal()
            .contains("ending offset not valid in streaming queries"));
    for (String key : new String[] {"endingTimestamp", "endingOffsetsByTimestamp"}) {
      String refusal = bounds(key, "1").streamingRefusal();
      assertTrue(refusal.contains("'" + key + "'"), refusal);
      assertTrue(refusal.contains("ending timestamp not valid in streaming queries"), refusal);
    }
  }
}

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

/** A batch query's bounds, read as Spark's Kafka source reads them. */
class BatchBoundsTest {
  private static final SortedMap<TopicPartition, Long> LATEST =
      TopicPartitions.flatten(Map.of("t", Map.of(0, 40L, 1, 30L)));

  /** Two topics read: {@code t} (partitions 0, 1) and {@code u} (partition 0). */
  private static final SortedMap<TopicPartition, Long> TWO_TOPICS =
      TopicPartitions.flatten(Map.of("t", Map.of(0, 40L, 1, 30L), "u", Map.of(0, 7L)));

  private static BatchBounds ending(String json) {
    return BatchBounds.take(new HashMap<>(Map.of("endingOffsets", json)));
  }

  @Test
  void theBatchOptionsAreTakenOutWhateverTheirCase() {
    Map<String, String> options = new HashMap<>(Map.of("ENDINGoffsets", "latest", "topic", "t"));
    BatchBounds bounds = BatchBounds.take(options);
    assertEquals("latest", bounds.endingOffsets);
    assertFalse(bounds.startingGiven);
    assertEquals(Map.of("topic", "t"), options);
    BatchBounds none = BatchBounds.take(new HashMap<>(Map.of("startingOffsets", "earliest")));
    assertNull(none.endingOffsets);
    assertTrue(none.startingGiven);
  }

  @Test
  void endsAreTheLatestOffsetsOrSparksJsonWithMinusOneForLatest() {
    assertEquals(LATEST, BatchBounds.take(new HashMap<>()).ends(LATEST));
    BatchBounds json = ending("{\"t\": {\"0\": 12, \"1\": -1}}");
    assertEquals(TopicPartitions.flatten(Map.of("t", Map.of(0, 12L, 1, 30L))), json.ends(LATEST));
  }

  @Test
  void endsOverTwoTopicsNameEveryTopicPartitionRead() {
    assertEquals(TWO_TOPICS, BatchBounds.take(new HashMap<>()).ends(TWO_TOPICS));
    BatchBounds json = ending("{\"u\": {\"0\": 5}, \"t\": {\"0\": -1, \"1\": 3}}");
    assertEquals(
        TopicPartitions.flatten(Map.of("t", Map.of(0, 40L, 1, 3L), "u", Map.of(0, 5L))),
        json.ends(TWO_TOPICS));
    BatchBounds oneTopic = ending("{\"t\": {\"0\": 1, \"1\": 3}}");
    IllegalArgumentException e =
        assertThrows(IllegalArgumentException.class, () -> oneTopic.ends(TWO_TOPICS));
    assertTrue(e.getMessage().contains("[t-0, t-1, u-0]"), e.getMessage());
    assertTrue(e.getMessage().contains("name every one"), e.getMessage());
  }

  @Test
  void anEndAtEarliestOrMissingAPartitionIsRefusedByName() {
    BatchBounds earliest = ending("{\"t\": {\"0\": -2, \"1\": 3}}");
    IllegalArgumentException e =
        assertThrows(IllegalArgumentException.class, () -> earliest.ends(LATEST));
    assertTrue(e.getMessage().contains("t-0 ends at -2"), e.getMessage());
    BatchBounds one = ending("{\"t\": {\"0\": 3}}");
    e = assertThrows(IllegalArgumentException.class, () -> one.ends(LATEST));
    assertTrue(e.getMessage().contains("name every one"), e.getMessage());
    BatchBounds word = ending("earliest");
    e = assertThrows(IllegalArgumentException.class, () -> word.ends(LATEST));
    assertTrue(e.getMessage().contains("cannot end at earliest"), e.getMessage());
  }
}

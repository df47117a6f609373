package io.floodgate.spark.write;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Test;

class SinkPartsTest {
  private static Map<String, String> options() {
    Map<String, String> options = new HashMap<>();
    options.put("topic", "out");
    options.put("kafka.bootstrap.servers", "localhost:9092");
    options.put("schema", "flight");
    options.put("schemas", "{}");
    options.put("transactionalIdPrefix", "g.copy.sink");
    return options;
  }

  @Test
  void optionsTakeDefaultsAndNameTheTaskProducers() {
    SinkOptions parsed = SinkOptions.parse(options());
    assertEquals("out", parsed.stream);
    assertEquals("single-object", parsed.encoding);
    assertFalse(parsed.bounded());
    assertTrue(parsed.soleWriter);
    assertEquals("g.copy.sink.3", parsed.transactionalId(3));
    assertTrue(SinkOptions.isWrite(options()));
  }

  @Test
  void optionsRefuseWhatTheSinkOwnsAndNameTheOption() {
    Map<String, String> given = options();
    given.put("kafka.transactional.id", "mine");
    IllegalArgumentException refused =
        assertThrows(IllegalArgumentException.class, () -> SinkOptions.parse(given));
    assertTrue(
        refused.getMessage().startsWith("floodgate_kafka sink: option 'kafka.transactional.id'"));

    Map<String, String> confluent = options();
    confluent.put("encoding", "confluent");
    assertTrue(
        assertThrows(IllegalArgumentException.class, () -> SinkOptions.parse(confluent))
            .getMessage()
            .contains("schemaId"));

    Map<String, String> bad = options();
    bad.put("maxQueueSize", "0");
    assertTrue(
        assertThrows(IllegalArgumentException.class, () -> SinkOptions.parse(bad))
            .getMessage()
            .contains("'maxQueueSize' = '0' is not a whole number >= 1"));

    Map<String, String> group = options();
    group.put("consumerGroup", "g");
    assertTrue(
        assertThrows(IllegalArgumentException.class, () -> SinkOptions.parse(group))
            .getMessage()
            .contains("checkpointLocation"));
  }

  @Test
  void aMarkerCountsForItsOwnQueryOnly() {
    BatchMarker marker = new BatchMarker("q-1", "g.copy.sink.0", "out");
    OffsetAndMetadata ours = marker.of(5, 12).get(new TopicPartition("out", 0));
    assertEquals(5, ours.offset());
    assertEquals(5, BatchMarker.lastCommitted("q-1", ours));
    assertEquals(-1, BatchMarker.lastCommitted("q-2", ours)); // a new checkpoint
    assertEquals(-1, BatchMarker.lastCommitted("q-1", null));
    assertEquals(-1, BatchMarker.lastCommitted("q-1", new OffsetAndMetadata(9, "not json")));
  }

  @Test
  void inputOffsetsAreTheOffsetLogsEntriesOfTheInputTopics() throws Exception {
    List<String> lines =
        List.of(
            "v1",
            "{\"batchWatermarkMs\":0,\"batchTimestampMs\":1}",
            "{\"flights\":{\"0\":310,\"1\":297}}",
            "-",
            "{\"other\":{\"0\":5}}");
    Map<TopicPartition, OffsetAndMetadata> offsets =
        InputOffsets.parse(lines, List.of("flights"), 4);
    assertEquals(2, offsets.size());
    assertEquals(310, offsets.get(new TopicPartition("flights", 0)).offset());
    assertEquals("{\"batch\":4}", offsets.get(new TopicPartition("flights", 1)).metadata());
  }

  @Test
  void theUsersTransactionTimeoutWinsOverTheSinksOwn() {
    Map<String, String> given = options();
    given.put("transactionTimeoutMs", "70000");
    assertEquals(
        "70000",
        TransactionalProducers.properties(SinkOptions.parse(given), "g.copy.sink.0")
            .getProperty("transaction.timeout.ms"));
    given.put("kafka.transaction.timeout.ms", "10000");
    assertEquals(
        "10000",
        TransactionalProducers.properties(SinkOptions.parse(given), "g.copy.sink.0")
            .getProperty("transaction.timeout.ms"));
  }

  @Test
  void aFailpointIsArmedForItsBatchOnly() {
    assertEquals("", SinkFailpoints.armed("after-commit:3", "after-commit", 3));
    assertEquals("fail", SinkFailpoints.armed("after-commit:3:fail", "after-commit", 3));
    assertNull(SinkFailpoints.armed("after-commit:31", "after-commit", 3));
    assertNull(SinkFailpoints.armed("before-commit:3", "after-commit", 3));
    assertNull(SinkFailpoints.armed(null, "after-commit", 3));
  }
}

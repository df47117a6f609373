package io.floodgate.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;

import io.floodgate.spark.kafka.TopicOffsets;
import io.floodgate.spark.options.BatchBounds;
import io.floodgate.spark.options.SourceOptions;
import io.floodgate.spark.read.KafkaRange;
import io.floodgate.spark.read.KafkaTask;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.consumer.MockConsumer;
import org.apache.kafka.clients.consumer.OffsetResetStrategy;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.spark.sql.connector.read.InputPartition;
import org.junit.jupiter.api.Test;

/**
 * A batch query's {@code latest} is left to the tasks, which read it when the query runs (each
 * collect), as Spark's Kafka source resolves it at each execution; a given end stays fixed.
 */
class KafkaBatchTest {
  private static List<KafkaRange> plan(Map<String, String> extra) {
    MockConsumer<byte[], byte[]> broker = new MockConsumer<>(OffsetResetStrategy.NONE);
    broker.updatePartitions(
        "t",
        List.of(
            new PartitionInfo("t", 0, null, null, null),
            new PartitionInfo("t", 1, null, null, null)));
    TopicPartition p0 = new TopicPartition("t", 0);
    TopicPartition p1 = new TopicPartition("t", 1);
    broker.updateBeginningOffsets(Map.of(p0, 0L, p1, 0L));
    broker.updateEndOffsets(Map.of(p0, 4L, p1, 0L)); // partition 1 holds nothing yet
    Map<String, String> given = new HashMap<>();
    given.put("kafka.bootstrap.servers", "127.0.0.1:9");
    given.put("subscribe", "t");
    given.putAll(extra);
    BatchBounds bounds = BatchBounds.take(given);
    SourceOptions options = SourceOptions.parse(given);
    KafkaBatch batch =
        new KafkaBatch(options, null, null, bounds, () -> new TopicOffsets(options, broker));
    List<KafkaRange> out = new ArrayList<>();
    for (InputPartition task : batch.planInputPartitions()) {
      out.addAll(List.of(((KafkaTask) task).ranges()));
    }
    out.sort((a, b) -> Integer.compare(a.partition(), b.partition()));
    return out;
  }

  @Test
  void rangesToLatestAreReadToTheEndTheBrokerHasWhenTheTasksRun() {
    assertEquals(
        List.of(
            new KafkaRange("t", 0, 0, 4, null, null, true),
            new KafkaRange("t", 1, 0, 0, null, null, true)),
        plan(Map.of()));
  }

  @Test
  void aGivenEndStaysAndMinusOneIsLatest() {
    assertEquals(
        List.of(
            new KafkaRange("t", 0, 0, 3, null, null, false),
            new KafkaRange("t", 1, 0, 0, null, null, true)),
        plan(Map.of("endingOffsets", "{\"t\": {\"0\": 3, \"1\": -1}}")));
  }
}

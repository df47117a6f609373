package io.floodgate.spark.kafka;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import io.floodgate.spark.options.SourceOptions;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.consumer.MockConsumer;
import org.apache.kafka.clients.consumer.OffsetResetStrategy;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.DisconnectException;
import org.apache.kafka.common.errors.TimeoutException;
import org.junit.jupiter.api.Test;

/**
 * The driver's offset reads tried again over a short broker outage, as Spark's {@code
 * KafkaOffsetReaderAdmin.withRetries}: {@code fetchOffset.numRetries} attempts in all, {@code
 * fetchOffset.retryIntervalMs} apart. Kafka's {@code MockConsumer}, failing its first reads.
 */
class TopicOffsetsRetryTest {
  private static final TopicPartition T0 = new TopicPartition("t", 0);

  /** A cluster of topic {@code t} (one partition, latest offset 9) whose first reads fail. */
  private static final class Flaky extends MockConsumer<byte[], byte[]> {
    int failures;
    RuntimeException error = new DisconnectException("broker gone");
    int reads;

    Flaky(int failures) {
      super(OffsetResetStrategy.NONE);
      this.failures = failures;
      updatePartitions("t", List.of(new PartitionInfo("t", 0, null, null, null)));
      updateEndOffsets(Map.of(T0, 9L));
    }

    @Override
    public synchronized Map<TopicPartition, Long> endOffsets(
        Collection<TopicPartition> partitions) {
      reads++;
      if (failures-- > 0) {
        throw error;
      }
      return super.endOffsets(partitions);
    }
  }

  private static TopicOffsets offsets(Flaky cluster, String retries) {
    Map<String, String> options = new HashMap<>();
    options.put("kafka.bootstrap.servers", "b:1");
    options.put("subscribe", "t");
    options.put("fetchOffset.retryIntervalMs", "0");
    if (retries != null) {
      options.put("fetchOffset.numRetries", retries);
    }
    return new TopicOffsets(SourceOptions.parse(options), cluster);
  }

  @Test
  void twoFailedReadsAreTriedAgainWithinTheDefaultThreeAttempts() {
    Flaky cluster = new Flaky(2);
    assertEquals(Map.of(T0, 9L), offsets(cluster, null).latest());
    assertEquals(3, cluster.reads);
  }

  @Test
  void theLastAttemptsErrorIsRaised() {
    Flaky cluster = new Flaky(2);
    assertThrows(DisconnectException.class, () -> offsets(cluster, "2").latest());
    assertEquals(2, cluster.reads);
  }

  @Test
  void aReadThatTimedOutIsNotTriedAgain() {
    Flaky cluster = new Flaky(1);
    cluster.error = new TimeoutException("60 s");
    assertThrows(TimeoutException.class, () -> offsets(cluster, null).latest(List.of(T0)));
    assertEquals(1, cluster.reads);
  }

  @Test
  void theOptionsAreWholeNumbers() {
    SourceOptions defaults =
        SourceOptions.parse(Map.of("kafka.bootstrap.servers", "b:1", "subscribe", "t"));
    assertEquals(3, defaults.fetchOffsetNumRetries);
    assertEquals(1000L, defaults.fetchOffsetRetryIntervalMs);
    IllegalArgumentException e =
        assertThrows(
            IllegalArgumentException.class,
            () ->
                SourceOptions.parse(
                    Map.of(
                        "kafka.bootstrap.servers", "b:1",
                        "subscribe", "t",
                        "fetchOffset.numRetries", "0")));
    assertEquals(
        "floodgate_kafka: fetchOffset.numRetries = '0'; allowed: a whole number >= 1",
        e.getMessage());
  }
}

package io.floodgate.spark.read;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.floodgate.spark.options.SourceOptions;
import io.floodgate.spark.serde.StreamSchema;
import io.floodgate.spark.swept.DataLossException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.consumer.OffsetOutOfRangeException;
import org.apache.kafka.common.TopicPartition;
import org.apache.spark.sql.connector.metric.CustomTaskMetric;
import org.apache.spark.sql.types.StructType;
import org.junit.jupiter.api.Test;

/**
 * A task's reads where offsets are gone, on Kafka's {@code MockConsumer}: {@code failOnDataLoss}
 * holds inside a range as Spark's {@code KafkaDataConsumer} holds it (fail naming the loss, or skip
 * what is gone and go on, counted), a range planned to {@code latest} reads to the end the broker
 * has when the task runs, and a consumer that failed is closed, not pooled. What a task counts is
 * in its metrics when its last row was read.
 */
class RangeReaderTest {
  private static final TopicPartition TP = new TopicPartition("t", 0);

  /** Spark's Kafka columns: key, value, topic, partition, offset, ... */
  private static final int OFFSET_COLUMN = 4;

  /**
   * The reader's metrics when {@link RangeReader#next} returned {@code false}, where Spark takes a
   * task's last values (before it closes the reader), by name.
   */
  private final Map<String, Long> metrics = new HashMap<>();

  private static SourceOptions options(boolean failOnDataLoss) {
    return SourceOptions.parse(
        Map.of(
            "kafka.bootstrap.servers",
            "127.0.0.1:9",
            "subscribe",
            TP.topic(),
            "failOnDataLoss",
            Boolean.toString(failOnDataLoss)));
  }

  private RangeReader reader(boolean failOnDataLoss, OneConsumer consumers, KafkaRange... ranges) {
    SourceOptions options = options(failOnDataLoss);
    StructType schema = StreamSchema.of(options.stream, null, false, null);
    return new RangeReader(
        options, schema, new RowLayout(schema, null, options), ranges, null, consumers);
  }

  /**
   * The offsets of every row read, the reader closed after; its last metrics in {@link #metrics}.
   */
  private List<Long> offsetsRead(RangeReader reader) {
    List<Long> out = new ArrayList<>();
    try (reader) {
      while (reader.next()) {
        out.add(reader.get().getLong(OFFSET_COLUMN));
      }
      for (CustomTaskMetric m : reader.currentMetricsValues()) {
        metrics.put(m.name(), m.value());
      }
    }
    return out;
  }

  @Test
  void anOutOfRangeAnswerMidRangeFailsNamingTheLossWithFailOnDataLoss() {
    OneConsumer consumers = new OneConsumer();
    consumers.holds(0, 10);
    consumers.recordsAtNextPoll(0, 3);
    consumers.mock.schedulePollTask(
        () -> {
          consumers.holds(6, 10); // retention passed offsets 3 to 5 while the task read
          consumers.mock.setPollException(new OffsetOutOfRangeException(Map.of(TP, 3L)));
        });
    RangeReader reader = reader(true, consumers, new KafkaRange("t", 0, 0, 10, null, null));

    DataLossException lost = assertThrows(DataLossException.class, () -> offsetsRead(reader));
    assertEquals(3, lost.start());
    assertTrue(
        lost.getMessage().startsWith("data loss on topic 't' partition 0"), lost.getMessage());
    assertTrue(lost.getMessage().contains("holds [6, 10)"), lost.getMessage());
    assertTrue(lost.getMessage().contains("failOnDataLoss"), lost.getMessage());
    assertEquals(1, consumers.discarded);
    assertEquals(0, consumers.released);
  }

  @Test
  void anOutOfRangeAnswerMidRangeSkipsToTheLogStartWithoutFailOnDataLoss() {
    OneConsumer consumers = new OneConsumer();
    consumers.holds(0, 10);
    consumers.recordsAtNextPoll(0, 3);
    consumers.mock.schedulePollTask(
        () -> {
          consumers.holds(6, 10);
          consumers.mock.setPollException(new OffsetOutOfRangeException(Map.of(TP, 3L)));
        });
    consumers.recordsAtNextPoll(6, 10);
    RangeReader reader = reader(false, consumers, new KafkaRange("t", 0, 0, 10, null, null));

    assertEquals(List.of(0L, 1L, 2L, 6L, 7L, 8L, 9L), offsetsRead(reader));
    assertEquals(
        Map.of(
            "rowsRead", 7L,
            "offsetOutOfRange", 3L,
            "dataLoss", 1L,
            "deadLettered", 0L,
            "sweptRead", 0L),
        metrics);
    assertEquals(1, consumers.released); // read to its end: pooled
  }

  @Test
  void aRangeEndingPastTheLogsEndFailsNamingTheLossWithFailOnDataLoss() {
    OneConsumer consumers = new OneConsumer();
    consumers.holds(0, 2); // the topic was created again since the planning: it ends at 2
    consumers.recordsAtNextPoll(0, 2);
    RangeReader reader = reader(true, consumers, new KafkaRange("t", 0, 0, 5, null, null));

    DataLossException lost = assertThrows(DataLossException.class, () -> offsetsRead(reader));
    assertEquals(2, lost.start());
    assertEquals(5, lost.end());
    assertTrue(lost.getMessage().contains("holds [0, 2)"), lost.getMessage());
  }

  @Test
  void aRangeEndingPastTheLogsEndEndsThereWithoutFailOnDataLoss() {
    OneConsumer consumers = new OneConsumer();
    consumers.holds(0, 2);
    consumers.recordsAtNextPoll(0, 2);
    RangeReader reader = reader(false, consumers, new KafkaRange("t", 0, 0, 5, null, null));

    assertEquals(List.of(0L, 1L), offsetsRead(reader));
    assertEquals(2, metrics.get("rowsRead"));
    assertEquals(3, metrics.get("offsetOutOfRange"));
    assertEquals(1, metrics.get("dataLoss"));
  }

  @Test
  void aRangeToLatestReadsToTheEndTheBrokerHasWhenTheTaskRuns() {
    OneConsumer consumers = new OneConsumer();
    consumers.holds(0, 4); // two tuples written since the planning read 2
    consumers.recordsAtNextPoll(0, 4);
    RangeReader reader = reader(true, consumers, new KafkaRange("t", 0, 0, 2, null, null, true));

    assertEquals(List.of(0L, 1L, 2L, 3L), offsetsRead(reader));
  }

  @Test
  void aConsumerWhoseRangeFailedToStartIsClosedNotPooled() {
    OneConsumer consumers = new OneConsumer();
    consumers.holds(0, 1); // below the range's start: the offsets went back since the planning
    RangeReader reader = reader(true, consumers, new KafkaRange("t", 0, 3, 3, null, null, true));

    DataLossException lost = assertThrows(DataLossException.class, () -> offsetsRead(reader));
    assertTrue(lost.getMessage().contains("went back from 3 to 1"), lost.getMessage());
    assertEquals(1, consumers.discarded);
    assertEquals(0, consumers.released);
    assertTrue(consumers.mock.closed());
  }
}

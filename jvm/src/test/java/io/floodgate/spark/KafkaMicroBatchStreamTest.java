package io.floodgate.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.floodgate.spark.alignment.EventTimeAligner;
import io.floodgate.spark.kafka.TopicOffsets;
import io.floodgate.spark.offsets.InitialOffsetLog;
import io.floodgate.spark.offsets.SourceOffset;
import io.floodgate.spark.options.SourceOptions;
import io.floodgate.spark.read.KafkaRange;
import io.floodgate.spark.read.KafkaTask;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import org.apache.hadoop.conf.Configuration;
import org.apache.kafka.clients.consumer.MockConsumer;
import org.apache.kafka.clients.consumer.OffsetResetStrategy;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The planning's guarantees of Spark's Kafka source, on Kafka's {@code MockConsumer}: the first
 * offsets are kept in the checkpoint and read back after a restart, and offsets that go back (a
 * topic deleted and created again) and a partition added whose earliest offset is not 0 are data
 * loss; the latest offsets reported and the lag are those of the last planning, as Spark's source
 * reports them.
 */
class KafkaMicroBatchStreamTest {
  private static final TopicPartition TP = new TopicPartition("t", 0);
  private static final TopicPartition ADDED = new TopicPartition("t", 1);

  @TempDir Path checkpoint;

  /** A broker holding {@code [low, high)} of the one partition of topic {@code t}. */
  private static CountingBroker broker(long low, long high) {
    return broker(low, new long[] {high});
  }

  /** A broker holding {@code [low, highs[p])} of each partition {@code p} of topic {@code t}. */
  private static CountingBroker broker(long low, long... highs) {
    CountingBroker consumer = new CountingBroker();
    List<PartitionInfo> partitions = new ArrayList<>();
    for (int p = 0; p < highs.length; p++) {
      TopicPartition tp = new TopicPartition("t", p);
      partitions.add(new PartitionInfo("t", p, null, null, null));
      consumer.updateBeginningOffsets(Map.of(tp, low));
      consumer.updateEndOffsets(Map.of(tp, highs[p]));
    }
    consumer.updatePartitions("t", partitions);
    return consumer;
  }

  /** Kafka's {@code MockConsumer}, counting the reads of the latest offsets. */
  private static final class CountingBroker extends MockConsumer<byte[], byte[]> {
    int endOffsetReads;

    CountingBroker() {
      super(OffsetResetStrategy.NONE);
    }

    @Override
    public synchronized Map<TopicPartition, Long> endOffsets(
        Collection<TopicPartition> partitions) {
      endOffsetReads++;
      return super.endOffsets(partitions);
    }
  }

  /**
   * A broker holding {@code [0, 4)} of partition 0 of topic {@code t} and {@code [low, high)} of
   * partition 1, added to the topic after the query planned its offsets (they name partition 0
   * only).
   */
  private static MockConsumer<byte[], byte[]> partitionAdded(long low, long high) {
    MockConsumer<byte[], byte[]> consumer = new MockConsumer<>(OffsetResetStrategy.NONE);
    consumer.updatePartitions(
        "t",
        List.of(
            new PartitionInfo("t", 0, null, null, null),
            new PartitionInfo("t", 1, null, null, null)));
    consumer.updateBeginningOffsets(Map.of(TP, 0L, ADDED, low));
    consumer.updateEndOffsets(Map.of(TP, 4L, ADDED, high));
    return consumer;
  }

  private KafkaMicroBatchStream stream(
      MockConsumer<byte[], byte[]> broker, Map<String, String> extra) {
    Map<String, String> given = new HashMap<>(extra);
    given.put("subscribe", "t");
    return streamOf(broker, given);
  }

  /** A stream of the topics {@code given} names, on {@code broker}. */
  private KafkaMicroBatchStream streamOf(
      MockConsumer<byte[], byte[]> broker, Map<String, String> given) {
    Map<String, String> all = new HashMap<>(given);
    all.put("kafka.bootstrap.servers", "127.0.0.1:9");
    SourceOptions options = SourceOptions.parse(all);
    InitialOffsetLog log =
        new InitialOffsetLog(checkpoint.resolve("sources/0").toString(), new Configuration());
    return new KafkaMicroBatchStream(
        options, null, null, EventTimeAligner.NONE, log, new TopicOffsets(options, broker));
  }

  private static SourceOffset at(long offset) {
    return new SourceOffset(Map.of(TP, offset));
  }

  private static List<KafkaRange> ranges(InputPartition[] tasks) {
    List<KafkaRange> out = new ArrayList<>();
    for (InputPartition task : tasks) {
      out.addAll(List.of(((KafkaTask) task).ranges()));
    }
    return out;
  }

  @Test
  void theFirstOffsetsAreKeptInTheCheckpointAndReadBackAfterARestart() {
    Map<String, String> latest = Map.of("startingOffsets", "latest");
    assertEquals(at(7), stream(broker(0, 7), latest).initialOffset());
    assertTrue(Files.exists(checkpoint.resolve("sources/0/0")));

    // The driver died before micro-batch 0 was committed; tuples came meanwhile.
    assertEquals(at(7), stream(broker(0, 12), latest).initialOffset());
  }

  @Test
  void aCheckpointOfAnOlderFloodgateWithoutTheFileGetsOne() throws Exception {
    Files.createDirectories(checkpoint.resolve("offsets"));
    Files.writeString(checkpoint.resolve("offsets/0"), "v1\n{}\n{\"t\": {\"0\": 3}}");
    Files.createDirectories(checkpoint.resolve("sources/0"));

    Map<String, String> earliest = Map.of("startingOffsets", "earliest");
    assertEquals(at(2), stream(broker(2, 9), earliest).initialOffset());
    assertEquals(at(2), stream(broker(4, 9), earliest).initialOffset());
  }

  @Test
  void offsetsThatWentBackFailTheQueryNamingThePartitionAndBothOffsets() {
    KafkaMicroBatchStream stream = stream(broker(0, 5), Map.of("failOnDataLoss", "true"));

    IllegalStateException lost =
        assertThrows(
            IllegalStateException.class,
            () -> stream.latestOffset(at(100), ReadLimit.allAvailable()));
    assertTrue(
        lost.getMessage().contains("partition t-0's offset was changed from 100 to 5"),
        lost.getMessage());
    assertTrue(lost.getMessage().contains("failOnDataLoss"), lost.getMessage());
  }

  @Test
  void offsetsThatWentBackAreReadOnFromTheNewLogStartWithoutFailOnDataLoss() {
    KafkaMicroBatchStream stream = stream(broker(0, 5), Map.of("failOnDataLoss", "false"));

    SourceOffset end = (SourceOffset) stream.latestOffset(at(100), ReadLimit.allAvailable());
    assertEquals(at(5), end);
    assertEquals(
        List.of(new KafkaRange("t", 0, 0, 5, null, null)),
        ranges(stream.planInputPartitions(at(100), end)));
    assertEquals("1", stream.metrics(Optional.empty()).get("dataLoss"));
  }

  @Test
  void theLatestOffsetReportedIsTheOneTheLastPlanningReadWithoutAskingTheBrokerAgain() {
    CountingBroker broker = broker(0, 5);
    KafkaMicroBatchStream stream = stream(broker, Map.of());
    assertNull(stream.reportLatestOffset()); // nothing planned yet, as Spark's source

    assertEquals(at(2), stream.latestOffset(at(0), ReadLimit.maxRows(2)));
    int reads = broker.endOffsetReads;
    broker.updateEndOffsets(Map.of(TP, 9L)); // tuples written since the planning

    assertEquals(at(5), stream.reportLatestOffset());
    assertEquals(reads, broker.endOffsetReads);
  }

  @Test
  void theLagCountsOnlyTopicPartitionsBothInTheConsumedOffsetsAndTheLatest() {
    KafkaMicroBatchStream stream = stream(broker(0, 10, 4, 6), Map.of());
    // t-2 was added to the topic after the consumed micro-batch was planned: it is not behind.
    SourceOffset consumed = new SourceOffset(Map.of(TP, 7L, new TopicPartition("t", 1), 0L));
    stream.latestOffset(consumed, ReadLimit.allAvailable());

    Map<String, String> metrics = stream.metrics(Optional.of(consumed));
    assertEquals("7", metrics.get("lag"));
    assertEquals("3", metrics.get("minOffsetsBehindLatest"));
    assertEquals("4", metrics.get("maxOffsetsBehindLatest"));
    assertEquals("3.5", metrics.get("avgOffsetsBehindLatest"));
  }

  @Test
  void aMicroBatchPlannedBackIsReadFromTheNewLogStartAfterARestart() {
    // Planned and logged before the driver died; the new log starts at 2 now.
    KafkaMicroBatchStream restarted = stream(broker(2, 5), Map.of("failOnDataLoss", "false"));

    assertEquals(
        List.of(new KafkaRange("t", 0, 2, 5, null, null)),
        ranges(restarted.planInputPartitions(at(100), at(5))));
  }

  @Test
  void aPartitionAddedFromOffsetZeroIsReadFromThereWithFailOnDataLoss() {
    KafkaMicroBatchStream stream = stream(partitionAdded(0, 3), Map.of("failOnDataLoss", "true"));

    SourceOffset end = (SourceOffset) stream.latestOffset(at(4), ReadLimit.allAvailable());
    assertEquals(new SourceOffset(Map.of(TP, 4L, ADDED, 3L)), end);
    assertEquals(
        List.of(new KafkaRange("t", 1, 0, 3, null, null)),
        ranges(stream.planInputPartitions(at(4), end)));
    assertEquals("0", stream.metrics(Optional.empty()).get("dataLoss"));
  }

  @Test
  void aPartitionAddedAbove0FailsTheQueryNamingThePartitionAndItsStart() {
    KafkaMicroBatchStream stream = stream(partitionAdded(5, 8), Map.of("failOnDataLoss", "true"));

    IllegalStateException lost =
        assertThrows(
            IllegalStateException.class,
            () -> stream.latestOffset(at(4), ReadLimit.allAvailable()));
    assertTrue(
        lost.getMessage().contains("added partition t-1 starts from 5 instead of 0"),
        lost.getMessage());
    assertTrue(lost.getMessage().contains("failOnDataLoss"), lost.getMessage());
  }

  @Test
  void aPartitionAddedAbove0FailsTheMicroBatchLoggedBeforeARestart() {
    // Planned and logged before the driver died, with partition 1 from its earliest offset.
    KafkaMicroBatchStream restarted =
        stream(partitionAdded(5, 8), Map.of("failOnDataLoss", "true"));

    SourceOffset end = new SourceOffset(Map.of(TP, 4L, ADDED, 8L));
    IllegalStateException lost =
        assertThrows(IllegalStateException.class, () -> restarted.planInputPartitions(at(4), end));
    assertTrue(
        lost.getMessage().contains("added partition t-1 starts from 5 instead of 0"),
        lost.getMessage());
  }

  @Test
  void aPartitionAddedAbove0IsReadFromItsEarliestOffsetWithoutFailOnDataLoss() {
    KafkaMicroBatchStream stream = stream(partitionAdded(5, 8), Map.of("failOnDataLoss", "false"));

    SourceOffset end = (SourceOffset) stream.latestOffset(at(4), ReadLimit.allAvailable());
    assertEquals(new SourceOffset(Map.of(TP, 4L, ADDED, 8L)), end);
    assertEquals(
        List.of(new KafkaRange("t", 1, 5, 8, null, null)),
        ranges(stream.planInputPartitions(at(4), end)));
    Map<String, String> metrics = stream.metrics(Optional.empty());
    assertEquals("1", metrics.get("dataLoss"), "counted once, though planned twice");
    assertEquals("5", metrics.get("offsetOutOfRange"));
  }

  @Test
  void aTopicCreatedThatThePatternMatchesIsAddedByTheSameRule() {
    Map<String, String> pattern = new HashMap<>();
    pattern.put("failOnDataLoss", "true");
    pattern.put("subscribePattern", "^u$");
    MockConsumer<byte[], byte[]> broker = new MockConsumer<>(OffsetResetStrategy.NONE);
    TopicPartition created = new TopicPartition("u", 0);
    broker.updatePartitions("u", List.of(new PartitionInfo("u", 0, null, null, null)));
    broker.updateBeginningOffsets(Map.of(created, 2L));
    broker.updateEndOffsets(Map.of(created, 6L));
    KafkaMicroBatchStream stream = streamOf(broker, pattern);

    IllegalStateException lost =
        assertThrows(
            IllegalStateException.class,
            () -> stream.latestOffset(new SourceOffset(Map.of()), ReadLimit.allAvailable()));
    assertTrue(
        lost.getMessage().contains("added partition u-0 starts from 2 instead of 0"),
        lost.getMessage());
  }
}

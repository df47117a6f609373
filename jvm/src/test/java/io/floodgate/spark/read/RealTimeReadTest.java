package io.floodgate.spark.read;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.floodgate.spark.offsets.KafkaPartitionOffset;
import io.floodgate.spark.options.SourceOptions;
import io.floodgate.spark.serde.StreamSchema;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.spark.sql.connector.read.streaming.SupportsRealTimeRead.RecordStatus;
import org.apache.spark.sql.types.StructType;
import org.junit.jupiter.api.Test;

/**
 * A real-time task's reads, on Kafka's {@code MockConsumer}: a range with no end is read until the
 * batch's deadline (Spark's {@code nextWithTimeout}), an idle partition is no stall, and the task
 * says where it stopped ({@code getOffset}), past what it read, as Spark's Kafka source does.
 */
class RealTimeReadTest {
  private static final int OFFSET_COLUMN = 4;

  private static RealTimeReader reader(OneConsumer consumers, long start) {
    return reader(consumers, start, Long.MAX_VALUE, null);
  }

  private static RealTimeReader reader(
      OneConsumer consumers, long start, long end, RealTimeEndLog endLog) {
    SourceOptions options =
        SourceOptions.parse(Map.of("kafka.bootstrap.servers", "127.0.0.1:9", "subscribe", "t"));
    StructType schema = StreamSchema.of(options.stream, null, false, null);
    KafkaRange range = new KafkaRange("t", 0, start, end, null, null);
    RangeReader ranges =
        new RangeReader(
            options,
            schema,
            new RowLayout(schema, null, options),
            new KafkaRange[] {range},
            null,
            consumers);
    return new RealTimeReader(ranges, options, endLog);
  }

  /** An end log that keeps the commits it is asked for. */
  private static final class Commits {
    final List<String> groups = new ArrayList<>();
    final List<Map<TopicPartition, OffsetAndMetadata>> offsets = new ArrayList<>();

    RealTimeEndLog log(String queryId, long batch) {
      return new RealTimeEndLog(
          "g.copy.sink.ends.flights",
          queryId,
          batch,
          (group, committed) -> {
            groups.add(group);
            offsets.add(committed);
          });
    }
  }

  /** The offsets read until the deadline, {@code timeoutMs} from the first call. */
  private static List<Long> readUntilDeadline(RealTimeReader reader, long timeoutMs) {
    long deadline = System.currentTimeMillis() + timeoutMs;
    List<Long> out = new ArrayList<>();
    while (true) {
      long now = System.currentTimeMillis();
      RecordStatus status = reader.nextWithTimeout(now, Math.max(0, deadline - now));
      if (!status.hasRecord()) {
        return out;
      }
      out.add(reader.get().getLong(OFFSET_COLUMN));
    }
  }

  @Test
  void aRangeWithNoEndIsReadUntilTheDeadlineAndSaysWhereItStopped() {
    OneConsumer consumers = new OneConsumer();
    consumers.holds(0, 5);
    consumers.recordsAtNextPoll(2, 5);
    RealTimeReader reader = reader(consumers, 2);

    long started = System.currentTimeMillis();
    assertEquals(List.of(2L, 3L, 4L), readUntilDeadline(reader, 300));
    assertTrue(System.currentTimeMillis() - started >= 300, "returned before the deadline");
    assertEquals(new KafkaPartitionOffset("t", 0, 5), reader.getOffset());
    reader.close();
    assertEquals(1, consumers.released); // stopped at the deadline, cleanly: pooled
    assertEquals(0, consumers.discarded);
  }

  @Test
  void anIdlePartitionIsNoStallAndStaysWhereItStarted() {
    OneConsumer consumers = new OneConsumer();
    consumers.holds(0, 7);
    RealTimeReader reader = reader(consumers, 7);

    assertTrue(readUntilDeadline(reader, 200).isEmpty());
    assertEquals(new KafkaPartitionOffset("t", 0, 7), reader.getOffset());
    reader.close();
  }

  @Test
  void aRetryThatBeginsPastTheDeadlineStandsAtItsStart() {
    OneConsumer consumers = new OneConsumer();
    consumers.holds(0, 9);
    RealTimeReader reader = reader(consumers, 4); // Spark asks for no row: its deadline passed

    assertEquals(new KafkaPartitionOffset("t", 0, 4), reader.getOffset());
    reader.close();
  }

  @Test
  void recordsArrivingDuringTheBatchAreReadAsTheyCome() {
    OneConsumer consumers = new OneConsumer();
    consumers.holds(0, 1);
    consumers.recordsAtNextPoll(0, 1);
    consumers.mock.schedulePollTask(() -> consumers.holds(0, 3)); // two written meanwhile
    consumers.recordsAtNextPoll(1, 3);
    RealTimeReader reader = reader(consumers, 0);

    assertEquals(List.of(0L, 1L, 2L), readUntilDeadline(reader, 300));
    assertEquals(new KafkaPartitionOffset("t", 0, 3), reader.getOffset());
    reader.close();
  }

  @Test
  void theOffsetOfATaskStoppedMidFetchIsPastTheLastRowTaken() {
    OneConsumer consumers = new OneConsumer();
    consumers.holds(0, 4);
    consumers.recordsAtNextPoll(0, 4);
    RealTimeReader reader = reader(consumers, 0);

    long now = System.currentTimeMillis();
    assertTrue(reader.nextWithTimeout(now, 1_000L).hasRecord());
    assertTrue(reader.nextWithTimeout(now, 1_000L).hasRecord());
    // Spark's wrapper finds the deadline passed and asks where the task stands.
    assertEquals(new KafkaPartitionOffset("t", 0, 2), reader.getOffset());
    reader.close();
  }

  @Test
  void theEndIsLoggedOnceWhenSparkAsksWhereTheTaskStopped() {
    OneConsumer consumers = new OneConsumer();
    consumers.holds(0, 5);
    consumers.recordsAtNextPoll(2, 5);
    Commits commits = new Commits();
    RealTimeReader reader = reader(consumers, 2, Long.MAX_VALUE, commits.log("q-1", 4));

    assertEquals(List.of(2L, 3L, 4L), readUntilDeadline(reader, 200));
    assertTrue(commits.offsets.isEmpty(), "logged before Spark asked");
    assertEquals(new KafkaPartitionOffset("t", 0, 5), reader.getOffset());
    assertEquals(new KafkaPartitionOffset("t", 0, 5), reader.getOffset());
    reader.close();

    assertEquals(List.of("g.copy.sink.ends.flights"), commits.groups);
    OffsetAndMetadata end = commits.offsets.get(0).get(new TopicPartition("t", 0));
    assertEquals(5, end.offset());
    TopicPartition tp = new TopicPartition("t", 0);
    assertEquals(Map.of(tp, 5L), RealTimeEndLog.ends(Map.of(tp, end), "q-1", 4));
    assertTrue(RealTimeEndLog.ends(Map.of(tp, end), "q-1", 5).isEmpty()); // another batch
    assertTrue(RealTimeEndLog.ends(Map.of(tp, end), "q-2", 4).isEmpty()); // another query
  }

  @Test
  void aBatchRunAgainStopsWhereItsFirstRunStoppedBeforeTheDeadline() {
    OneConsumer consumers = new OneConsumer();
    consumers.holds(0, 9);
    consumers.recordsAtNextPoll(2, 9);
    Commits commits = new Commits();
    RealTimeReader reader = reader(consumers, 2, 6, commits.log("q-1", 4));

    long started = System.currentTimeMillis();
    assertEquals(List.of(2L, 3L, 4L, 5L), readUntilDeadline(reader, 5_000));
    assertTrue(System.currentTimeMillis() - started < 5_000, "waited for the deadline");
    assertEquals(new KafkaPartitionOffset("t", 0, 6), reader.getOffset());
    reader.close();
    assertEquals(6, commits.offsets.get(0).get(new TopicPartition("t", 0)).offset());
  }

  @Test
  void aBatchRunAgainThatItsDeadlineCutsShortFailsBeforeItsEndIsLogged() {
    OneConsumer consumers = new OneConsumer();
    consumers.holds(0, 9);
    Commits commits = new Commits();
    RealTimeReader reader = reader(consumers, 2, 9, commits.log("q-1", 4));

    assertTrue(readUntilDeadline(reader, 0).isEmpty()); // the deadline passed before a row
    IllegalStateException cut = assertThrows(IllegalStateException.class, reader::getOffset);
    assertTrue(cut.getMessage().contains("must read t-0 to offset 9"), cut.getMessage());
    assertTrue(cut.getMessage().contains("deadline passed at offset 2"), cut.getMessage());
    assertTrue(commits.offsets.isEmpty());
    reader.close();
  }
}

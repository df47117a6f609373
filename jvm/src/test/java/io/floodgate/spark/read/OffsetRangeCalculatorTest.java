package io.floodgate.spark.read;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import org.apache.kafka.common.TopicPartition;
import org.apache.spark.sql.kafka010.KafkaOffsetRange;
import org.apache.spark.sql.kafka010.KafkaOffsetRangeCalculator;
import org.junit.jupiter.api.Test;
import scala.Option;
import scala.jdk.javaapi.CollectionConverters;

/**
 * {@link OffsetRangeCalculator} against Spark's own {@code KafkaOffsetRangeCalculator} (the
 * connector's jar, a test dependency): the same parts, so a query reads with as many tasks, over
 * the same offsets, as Spark's Kafka source. No broker.
 */
class OffsetRangeCalculatorTest {

  private static KafkaRange range(String topic, int partition, long start, long end) {
    return new KafkaRange(topic, partition, start, end, 7L, 3L);
  }

  /** What Spark's calculator makes of {@code ranges}, as "topic-partition:start-end" strings. */
  private static List<String> spark(List<KafkaRange> ranges, Integer minParts, Long maxRecords) {
    List<KafkaOffsetRange> given = new ArrayList<>();
    for (KafkaRange r : ranges) {
      given.add(
          new KafkaOffsetRange(
              new TopicPartition(r.topic(), r.partition()), r.start(), r.end(), Option.empty()));
    }
    KafkaOffsetRangeCalculator calculator =
        new KafkaOffsetRangeCalculator(Option.apply(minParts), Option.apply(maxRecords));
    List<String> out = new ArrayList<>();
    for (KafkaOffsetRange r :
        CollectionConverters.asJava(
            calculator.getRanges(
                CollectionConverters.asScala(given).toList(),
                CollectionConverters.asScala(List.<String>of()).toList()))) {
      out.add(r.topicPartition() + ":" + r.fromOffset() + "-" + r.untilOffset());
    }
    return out;
  }

  private static List<String> ours(List<KafkaRange> ranges, Integer minParts, Long maxRecords) {
    List<String> out = new ArrayList<>();
    for (KafkaRange r : OffsetRangeCalculator.split(ranges, minParts, maxRecords)) {
      out.add(r.topic() + "-" + r.partition() + ":" + r.start() + "-" + r.end());
    }
    return out;
  }

  @Test
  void oneSkewedPartitionIsSplitToMinPartitions() {
    List<KafkaRange> ranges = List.of(range("t", 0, 1, 17));
    assertEquals(List.of("t-0:1-5", "t-0:5-9", "t-0:9-13", "t-0:13-17"), ours(ranges, 4, null));
    assertEquals(spark(ranges, 4, null), ours(ranges, 4, null));
  }

  @Test
  void aSmallPartitionStaysWholeAndTheLargeOneTakesTheOtherTasks() {
    List<KafkaRange> ranges = List.of(range("t", 0, 1, 5), range("t", 1, 1, 21));
    assertEquals(List.of("t-0:1-5", "t-1:1-11", "t-1:11-21"), ours(ranges, 3, null));
    assertEquals(spark(ranges, 3, null), ours(ranges, 3, null));
  }

  @Test
  void maxRecordsPerPartitionBoundsEveryPart() {
    List<KafkaRange> ranges = List.of(range("t", 0, 0, 10), range("u", 0, 100, 103));
    assertEquals(
        List.of("t-0:0-2", "t-0:2-4", "t-0:4-7", "t-0:7-10", "u-0:100-103"),
        ours(ranges, null, 3L));
    assertEquals(spark(ranges, null, 3L), ours(ranges, null, 3L));
  }

  @Test
  void enoughPartitionsAndNoMaxRecordsLeaveTheRangesAlone() {
    List<KafkaRange> ranges = List.of(range("t", 0, 0, 1000), range("t", 1, 0, 1));
    assertEquals(List.of("t-0:0-1000", "t-1:0-1"), ours(ranges, 2, null));
    assertEquals(List.of("t-0:0-1000", "t-1:0-1"), ours(ranges, null, null));
  }

  @Test
  void partsKeepTheMicroBatchsWatermarkAndId() {
    for (KafkaRange part : OffsetRangeCalculator.split(List.of(range("t", 0, 0, 9)), 3, null)) {
      assertEquals(7L, part.watermarkMs());
      assertEquals(3L, part.batchId());
    }
  }

  @Test
  void aRangeEndingAtLatestIsSplitAndOnlyItsLastPartReadsOnToLatest() {
    KafkaRange toLatest = new KafkaRange("t", 0, 0, 10, null, null, true);
    KafkaRange empty = new KafkaRange("t", 1, 4, 4, null, null, true);
    List<KafkaRange> parts = OffsetRangeCalculator.split(List.of(toLatest, empty), 2, null);
    assertEquals(
        List.of(
            new KafkaRange("t", 0, 0, 5, null, null, false),
            new KafkaRange("t", 0, 5, 10, null, null, true),
            empty),
        parts);
  }

  /**
   * A task reading a whole range prefers the executor Spark's calculator gives its topic-partition
   * (executors sorted by host then id, descending); parts of a split range prefer none.
   */
  @Test
  void aWholeRangesTaskPrefersTheExecutorSparkPicksForItsPartition() {
    List<String> executors =
        ExecutorLocations.sorted(
            List.of(
                new ExecutorLocations.Executor("host-a", "1"),
                new ExecutorLocations.Executor("host-b", "2"),
                new ExecutorLocations.Executor("host-a", "3")));
    assertEquals(List.of("executor_host-b_2", "executor_host-a_3", "executor_host-a_1"), executors);
    List<KafkaRange> ranges = new ArrayList<>();
    for (int p = 0; p < 12; p++) {
      ranges.add(range("topic-" + (p % 3), p, 0, 10));
    }
    List<KafkaOffsetRange> given = new ArrayList<>();
    for (KafkaRange r : ranges) {
      given.add(
          new KafkaOffsetRange(
              new TopicPartition(r.topic(), r.partition()), r.start(), r.end(), Option.empty()));
    }
    List<KafkaOffsetRange> located =
        CollectionConverters.asJava(
            new KafkaOffsetRangeCalculator(Option.empty(), Option.empty())
                .getRanges(
                    CollectionConverters.asScala(given).toList(),
                    CollectionConverters.asScala(executors).toList()));
    org.apache.spark.sql.connector.read.InputPartition[] tasks =
        KafkaTask.partitions(ranges, null, executors);
    for (int i = 0; i < ranges.size(); i++) {
      assertEquals(
          List.of(located.get(i).preferredLoc().get()),
          List.of(tasks[i].preferredLocations()),
          ranges.get(i).toString());
    }
    for (org.apache.spark.sql.connector.read.InputPartition part :
        KafkaTask.partitions(
            OffsetRangeCalculator.split(List.of(range("t", 0, 0, 10)), 2, null), null, executors)) {
      assertEquals(0, part.preferredLocations().length);
    }
  }

  /** Random micro-batches: the same parts as Spark's calculator, option by option. */
  @Test
  void randomRangesSplitAsSparksCalculatorDoes() {
    Random random = new Random(20261202L);
    for (int round = 0; round < 2000; round++) {
      List<KafkaRange> ranges = new ArrayList<>();
      int partitions = 1 + random.nextInt(6);
      for (int p = 0; p < partitions; p++) {
        long start = random.nextInt(1000);
        long size = random.nextInt(4) == 0 ? 0 : random.nextInt(random.nextBoolean() ? 10 : 5000);
        ranges.add(range(random.nextBoolean() ? "a" : "b", p, start, start + size));
      }
      Integer minParts = random.nextBoolean() ? 1 + random.nextInt(20) : null;
      Long maxRecords = random.nextBoolean() ? 1L + random.nextInt(2000) : null;
      List<KafkaRange> nonEmpty = new ArrayList<>();
      ranges.forEach(
          r -> {
            if (r.size() > 0) {
              nonEmpty.add(r);
            }
          });
      List<String> expected = spark(ranges, minParts, maxRecords);
      assertEquals(
          expected,
          ours(nonEmpty, minParts, maxRecords),
          () -> ranges + " minPartitions=" + minParts + " maxRecordsPerPartition=" + maxRecords);
    }
  }
}

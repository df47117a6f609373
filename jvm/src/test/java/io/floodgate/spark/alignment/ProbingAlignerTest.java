package io.floodgate.spark.alignment;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.function.LongUnaryOperator;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.MockConsumer;
import org.apache.kafka.clients.consumer.OffsetResetStrategy;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.record.TimestampType;
import org.junit.jupiter.api.Test;

/**
 * What a planning reads of the broker: the event times the previous triggers read (their cuts,
 * planned ends and the tuples fetched with them) are not read again, nor is the head of a partition
 * whose head did not move. The broker is Kafka's {@link MockConsumer}, its records' Kafka
 * timestamps their event times ({@code timestampMode = server}, without the time index).
 */
class ProbingAlignerTest {
  private static final long HOUR = 3_600_000L;
  private static final String TOPIC = "aligner-test";
  private static final TopicPartition P0 = new TopicPartition(TOPIC, 0);
  private static final TopicPartition P1 = new TopicPartition(TOPIC, 1);

  /**
   * A broker holding {@code size} tuples a partition (partition 0's may grow), each poll answering
   * from the positions of the partitions not paused (Kafka's {@link MockConsumer} forgets its
   * records after a poll: they are added again), and telling which partitions each poll fetched.
   */
  private static final class Broker extends MockConsumer<byte[], byte[]> {
    private final Map<TopicPartition, LongUnaryOperator> times;
    private final int size;
    int sizeOfP0;
    final List<Set<TopicPartition>> fetched = new ArrayList<>();

    Broker(Map<TopicPartition, LongUnaryOperator> times, int size) {
      super(OffsetResetStrategy.EARLIEST);
      this.times = times;
      this.size = size;
      this.sizeOfP0 = size;
    }

    @Override
    public synchronized ConsumerRecords<byte[], byte[]> poll(Duration timeout) {
      Set<TopicPartition> fetching = new HashSet<>(assignment());
      fetching.removeAll(paused());
      fetched.add(fetching);
      times.forEach(
          (tp, time) -> {
            for (long o = 0; o < (tp.equals(P0) ? sizeOfP0 : size); o++) {
              addRecord(
                  new ConsumerRecord<>(
                      TOPIC,
                      tp.partition(),
                      o,
                      time.applyAsLong(o),
                      TimestampType.CREATE_TIME,
                      0,
                      0,
                      new byte[0],
                      new byte[0],
                      new RecordHeaders(),
                      Optional.empty()));
            }
          });
      return super.poll(timeout);
    }

    /** Polls that fetched {@code tp}. */
    long fetchesOf(TopicPartition tp) {
      return fetched.stream().filter(s -> s.contains(tp)).count();
    }
  }

  private static ProbingAligner aligner(EventTimeProbe probe) {
    return new ProbingAligner("test", HOUR, probe, null);
  }

  private static EventTimeProbe probe(Broker broker) {
    return new EventTimeProbe(
        () -> broker,
        TOPIC,
        RecordEventTime.kafkaTimestamp(),
        Duration.ofSeconds(5),
        Duration.ofSeconds(5));
  }

  @Test
  void aTriggerReadsOnlyWhatThePreviousTriggersDidNotRead() {
    // Partition 1's event times run twice as fast as partition 0's: it is capped every trigger.
    Broker broker = new Broker(Map.of(P0, o -> o * HOUR, P1, o -> 2 * o * HOUR), 1000);
    EventTimeProbe probe = probe(broker);
    try (ProbingAligner aligner = aligner(probe)) {
      Map<TopicPartition, Long> latest = Map.of(P0, 1000L, P1, 1000L);
      // Planned event times 399 h and 798 h: the bound is 400 h, tuple 201 of partition 1 the
      // first past it (402 h).
      assertEquals(
          Map.of(P0, 400L, P1, 201L),
          aligner.align(Map.of(P0, 0L, P1, 0L), Map.of(P0, 400L, P1, 400L), latest, Set.of()));
      long first = probe.reads();
      // Bound 800 h: tuple 401 (802 h). The cut starts where the last one was, and the tuples
      // read with the last planned end (399 onwards) hold the new cut: one read, of the new
      // planned ends.
      assertEquals(
          Map.of(P0, 800L, P1, 401L),
          aligner.align(Map.of(P0, 400L, P1, 201L), Map.of(P0, 800L, P1, 601L), latest, Set.of()));
      assertEquals(1, probe.reads() - first, "reads of the second trigger");
    }
  }

  @Test
  void aCappedPartitionsCutIsFoundTheReadAfterAnInterpolatedGuess() {
    Broker broker = new Broker(Map.of(P0, o -> o * HOUR, P1, o -> 2 * o * HOUR), 10_000);
    EventTimeProbe probe = probe(broker);
    try (ProbingAligner aligner = aligner(probe)) {
      Map<TopicPartition, Long> latest = Map.of(P0, 10_000L, P1, 10_000L);
      // Bound 4 000 h: tuple 2 001 of partition 1 is the first past it, exactly (the tuples read
      // with the guess straddle it), not within 1/64 of the range.
      assertEquals(
          Map.of(P0, 4000L, P1, 2001L),
          aligner.align(Map.of(P0, 0L, P1, 0L), Map.of(P0, 4000L, P1, 4000L), latest, Set.of()));
      // The planned ends, the range's first tuple, one guess.
      assertEquals(3, probe.reads());
    }
  }

  @Test
  void aPartitionWhoseHeadDidNotMoveIsNotReadAgain() {
    Broker broker = new Broker(Map.of(P0, o -> o * HOUR, P1, o -> o * HOUR), 1000);
    broker.sizeOfP0 = 100;
    EventTimeProbe probe = probe(broker);
    try (ProbingAligner aligner = aligner(probe)) {
      // Partition 0 is read up to its head (100, not idle): its head's event time holds partition
      // 1 back, trigger after trigger, while no tuple arrives.
      Map<TopicPartition, Long> latest = Map.of(P0, 100L, P1, 1000L);
      assertEquals(
          Map.of(P0, 100L, P1, 101L),
          aligner.align(Map.of(P0, 100L, P1, 90L), Map.of(P0, 100L, P1, 300L), latest, Set.of()));
      long headReads = broker.fetchesOf(P0);
      assertTrue(headReads > 0);
      assertEquals(
          Map.of(P0, 100L, P1, 101L),
          aligner.align(Map.of(P0, 100L, P1, 101L), Map.of(P0, 100L, P1, 300L), latest, Set.of()));
      assertEquals(headReads, broker.fetchesOf(P0), "fetches of the head that did not move");
      // Once it moves, it is read.
      broker.sizeOfP0 = 150;
      Map<TopicPartition, Long> moved = Map.of(P0, 150L, P1, 1000L);
      aligner.align(Map.of(P0, 100L, P1, 101L), Map.of(P0, 150L, P1, 300L), moved, Set.of());
      assertFalse(broker.fetchesOf(P0) == headReads, "the head that moved is read");
    }
  }
}

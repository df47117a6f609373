package io.floodgate.spark.alignment;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.UUID;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.MockConsumer;
import org.apache.kafka.clients.consumer.OffsetResetStrategy;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.record.TimestampType;
import org.junit.jupiter.api.Test;

/**
 * A probe never answers "no event time" for a partition the broker did not answer for: that would
 * let the partition hold nobody back, and the others be read past its tuples (found after a
 * broker's kill -9: tuples dead-lettered as late). Here the "broker" is a port nobody listens on.
 */
class EventTimeProbeTest {
  private static final String TOPIC = "probe-test";
  private static final TopicPartition P0 = new TopicPartition(TOPIC, 0);
  private static final TopicPartition P1 = new TopicPartition(TOPIC, 1);

  private static EventTimeProbe unansweredProbe(Duration patience) {
    Properties p = new Properties();
    p.setProperty("bootstrap.servers", "127.0.0.1:9");
    p.setProperty("client.id", "event-time-probe-test-" + UUID.randomUUID());
    p.setProperty("isolation.level", "read_committed");
    return new EventTimeProbe(
        p, TOPIC, RecordEventTime.kafkaTimestamp(), Duration.ofMillis(200), patience);
  }

  @Test
  void aPartitionTheBrokerDoesNotAnswerForFailsThePlanningByName() {
    // A broker that never answers (Kafka's MockConsumer with no records): each read waits its
    // 200 ms out, and the probe asks again until the patience is spent. A mock, so that no
    // consumer's start (seconds on a loaded machine) eats the patience before the second read.
    Duration patience = Duration.ofSeconds(1);
    MockConsumer<byte[], byte[]> silent = new MockConsumer<>(OffsetResetStrategy.NONE);
    try (EventTimeProbe probe =
        new EventTimeProbe(
            () -> silent,
            TOPIC,
            RecordEventTime.kafkaTimestamp(),
            Duration.ofMillis(200),
            patience)) {
      probe.limit(Map.of(P0, 100L, P1, 100L));
      long started = System.nanoTime();
      EventTimesUnansweredException e =
          assertThrows(EventTimesUnansweredException.class, () -> probe.many(Map.of(P0, 5L)));
      assertEquals(Map.of(P0, 5L), e.offsets());
      assertEquals(TOPIC, e.topic());
      assertTrue(e.getMessage().startsWith("FG-SOURCE-005"), e.getMessage());
      assertTrue(e.getMessage().contains("{probe-test-0=5}"), e.getMessage());
      assertTrue(
          Duration.ofNanos(System.nanoTime() - started).compareTo(patience) >= 0,
          "asked again until the patience was spent");
      assertTrue(probe.reads() >= 2, "read " + probe.reads() + " time(s)");
      // Nothing unanswered was cached as "no event time".
      assertEquals(Map.of(), probe.known(Map.of(P0, 5L)));
    }
  }

  @Test
  void anOffsetAtOrPastTheLimitHasNoEventTimeWithoutAskingTheBroker() {
    try (EventTimeProbe probe = unansweredProbe(Duration.ofSeconds(1))) {
      probe.limit(Map.of(P0, 100L));
      Map<TopicPartition, Long> wanted = new HashMap<>();
      wanted.put(P0, 100L);
      wanted.put(P1, 0L); // a partition the limit does not know: nothing below 0
      Map<TopicPartition, Long> found = probe.many(wanted);
      assertNull(found.get(P0));
      assertNull(found.get(P1));
      assertEquals(2, found.size());
      assertEquals(0, probe.reads());
    }
  }

  /**
   * A broker whose partition 0 holds transaction markers (no tuple) at offsets 0-9 and, once
   * written, a tuple at 10 (event time 77): a read committed fetch skips the markers and stops at
   * the last stable offset.
   */
  private static final class MarkersThenATuple extends MockConsumer<byte[], byte[]> {
    boolean written;

    MarkersThenATuple() {
      super(OffsetResetStrategy.EARLIEST);
    }

    @Override
    public synchronized ConsumerRecords<byte[], byte[]> poll(Duration timeout) {
      if (written) {
        addRecord(
            new ConsumerRecord<>(
                TOPIC,
                0,
                10,
                77L,
                TimestampType.CREATE_TIME,
                0,
                0,
                new byte[0],
                new byte[0],
                new RecordHeaders(),
                Optional.empty()));
      } else if (!paused().contains(P0)) {
        seek(P0, 10); // past the markers, at the last stable offset
      }
      return super.poll(timeout);
    }
  }

  @Test
  void anOffsetOfMarkersIsReadAgainOnceTheLimitMoves() {
    MarkersThenATuple broker = new MarkersThenATuple();
    try (EventTimeProbe probe =
        new EventTimeProbe(
            () -> broker,
            TOPIC,
            RecordEventTime.kafkaTimestamp(),
            Duration.ofSeconds(5),
            Duration.ofSeconds(5))) {
      probe.limit(Map.of(P0, 10L));
      Map<TopicPartition, Long> found = probe.many(Map.of(P0, 5L));
      assertNull(found.get(P0)); // nothing but markers before the limit
      probe.limit(Map.of(P0, 10L));
      assertNull(probe.many(Map.of(P0, 5L)).get(P0));
      assertEquals(1, probe.reads(), "the same limit: the cached answer");
      broker.written = true;
      probe.limit(Map.of(P0, 11L));
      assertEquals(77L, probe.many(Map.of(P0, 5L)).get(P0)); // the next tuple's event time
    }
  }
}

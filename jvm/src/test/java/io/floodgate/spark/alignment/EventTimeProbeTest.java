package io.floodgate.spark.alignment;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.UUID;
import org.junit.jupiter.api.Test;

/**
 * A probe never answers "no event time" for a partition the broker did not answer for: that would
 * let the partition hold nobody back, and the others be read past its tuples (found after a
 * broker's kill -9: tuples dead-lettered as late). Here the "broker" is a port nobody listens on.
 */
class EventTimeProbeTest {
  private static final String TOPIC = "probe-test";

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
    try (EventTimeProbe probe = unansweredProbe(Duration.ofSeconds(1))) {
      probe.limit(Map.of(0, 100L, 1, 100L));
      long started = System.nanoTime();
      EventTimesUnansweredException e =
          assertThrows(EventTimesUnansweredException.class, () -> probe.many(Map.of(0, 5L)));
      assertEquals(Map.of(0, 5L), e.offsets());
      assertEquals(TOPIC, e.topic());
      assertTrue(e.getMessage().startsWith("FG-SOURCE-005"), e.getMessage());
      assertTrue(e.getMessage().contains("{0=5}"), e.getMessage());
      assertTrue(
          Duration.ofNanos(System.nanoTime() - started).compareTo(Duration.ofSeconds(1)) >= 0,
          "asked again until the patience was spent");
      assertTrue(probe.reads() >= 2, "read " + probe.reads() + " time(s)");
      // Nothing unanswered was cached as "no event time".
      assertEquals(Map.of(), probe.known(Map.of(0, 5L)));
    }
  }

  @Test
  void anOffsetAtOrPastTheLimitHasNoEventTimeWithoutAskingTheBroker() {
    try (EventTimeProbe probe = unansweredProbe(Duration.ofSeconds(1))) {
      probe.limit(Map.of(0, 100L));
      Map<Integer, Long> wanted = new HashMap<>();
      wanted.put(0, 100L);
      wanted.put(1, 0L); // a partition the limit does not know: nothing below 0
      Map<Integer, Long> found = probe.many(wanted);
      assertNull(found.get(0));
      assertNull(found.get(1));
      assertEquals(2, found.size());
      assertEquals(0, probe.reads());
    }
  }
}

package io.floodgate.spark.alignment;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.Map;
import java.util.Set;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;

/**
 * {@link IdleTracker}: a head that stands still for the timeout makes its partition idle, counting
 * only time the source watched.
 */
class IdleTrackerTest {
  @Test
  void aHeadThatStandsStillMakesItsPartitionIdle() {
    AtomicLong now = new AtomicLong();
    IdleTracker<Integer> tracker = new IdleTracker<>(10_000, now::get);
    assertEquals(Set.of(), tracker.observe(Map.of(0, 5L, 1, 7L)));
    now.set(4_500);
    assertEquals(Set.of(), tracker.observe(Map.of(0, 5L, 1, 7L)));
    now.set(9_000);
    assertEquals(Set.of(), tracker.observe(Map.of(0, 5L, 1, 8L)));
    now.set(10_000);
    assertEquals(Set.of(0), tracker.observe(Map.of(0, 5L, 1, 8L)));
    now.set(11_000);
    assertEquals(Set.of(), tracker.observe(Map.of(0, 6L, 1, 8L))); // partition 0 moved again
    now.set(15_000);
    assertEquals(Set.of(), tracker.observe(Map.of(0, 6L, 1, 8L)));
    now.set(19_000);
    assertEquals(Set.of(1), tracker.observe(Map.of(0, 6L, 1, 8L)));
  }

  @Test
  void timeTheSourceDidNotWatchDoesNotCount() {
    // A broker away for 15 s: no planning meanwhile. Its partitions are not idle when it is
    // back, and one whose producer has yet to deliver becomes idle only a whole timeout later.
    AtomicLong now = new AtomicLong();
    IdleTracker<Integer> tracker = new IdleTracker<>(10_000, now::get);
    tracker.observe(Map.of(0, 5L, 1, 7L));
    now.set(1_000);
    tracker.observe(Map.of(0, 6L, 1, 7L));
    now.set(16_000);
    assertEquals(Set.of(), tracker.observe(Map.of(0, 9L, 1, 7L)));
    now.set(20_000);
    assertEquals(Set.of(), tracker.observe(Map.of(0, 9L, 1, 7L)));
    for (long t = 21_000; t < 26_000; t += 1_000) {
      now.set(t);
      assertEquals(Set.of(), tracker.observe(Map.of(0, 10L, 1, 7L)));
    }
    now.set(26_000);
    assertEquals(Set.of(1), tracker.observe(Map.of(0, 11L, 1, 7L)));
  }

  @Test
  void steadyGapsOfALongTriggerIntervalCount() {
    AtomicLong now = new AtomicLong();
    IdleTracker<Integer> tracker = new IdleTracker<>(10_000, now::get);
    tracker.observe(Map.of(0, 5L, 1, 7L));
    now.set(30_000);
    assertEquals(Set.of(), tracker.observe(Map.of(0, 6L, 1, 7L)));
    now.set(60_000);
    assertEquals(Set.of(0, 1), tracker.observe(Map.of(0, 6L, 1, 7L)));
  }

  @Test
  void headsAboveTheBoxedLongCacheAreComparedByValue() {
    // Long.valueOf caches -128..127 only: heads must compare by value, not by reference.
    AtomicLong now = new AtomicLong();
    IdleTracker<Integer> tracker = new IdleTracker<>(1_000, now::get);
    tracker.observe(Map.of(0, Long.valueOf(1_000_000L)));
    now.set(500);
    tracker.observe(Map.of(0, Long.valueOf(1_000_000L)));
    now.set(1_000);
    assertEquals(Set.of(0), tracker.observe(Map.of(0, Long.valueOf(1_000_000L))));
  }
}

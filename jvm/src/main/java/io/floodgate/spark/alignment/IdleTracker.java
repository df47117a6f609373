package io.floodgate.spark.alignment;

import java.util.HashMap;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;
import java.util.function.LongSupplier;

/**
 * Which partitions are idle: their high watermark has not moved for {@code idlePartitionTimeoutMs}
 * (option {@code idlePartitionTimeoutMs}), so they hold nobody back in event-time alignment (as a
 * split marked idle by Flink's {@code withIdleness} does): a head is timed from the first
 * observation at which it had its current value, and a partition is idle from the first observation
 * at least the timeout later.
 *
 * <p>Only time the source watched counts. An observation more than half the timeout after the one
 * before, and more than twice the gap before that (the source did not plan meanwhile as it had: a
 * long micro-batch, or a broker its reads waited for), starts every head's clock again; steady
 * gaps, as a long trigger interval makes, count. Else a broker away for longer than the timeout
 * makes every partition idle at once when it comes back, and the partitions whose producers have
 * yet to deliver again hold nobody back: the watermark can pass tuples still on their way, and the
 * aggregations dead-letter them as late. A partition that is really idle still becomes so: once it
 * holds the others back, the micro-batches are empty and plannings come at the trigger's pace.
 *
 * <p>Not thread-safe: the driver's planning thread observes.
 */
public final class IdleTracker<K> {
  private final long timeoutMs;
  private final LongSupplier clockMs;

  /** Per partition: the head last seen and when it was first seen at that value (clock ms). */
  private final Map<K, long[]> seen = new HashMap<>();

  /** When the last observation was made (clock ms); {@code null} before the first. */
  private Long lastObservationMs;

  /** The gap before the last observation (ms); {@code null} before the second. */
  private Long lastGapMs;

  /** A tracker on the monotonic clock ({@link System#nanoTime()}). */
  public IdleTracker(long timeoutMs) {
    this(timeoutMs, () -> System.nanoTime() / 1_000_000);
  }

  /**
   * @param timeoutMs how long (ms) a head may stand still before its partition is idle
   * @param clockMs a monotonic clock in milliseconds (tests inject one)
   */
  public IdleTracker(long timeoutMs, LongSupplier clockMs) {
    this.timeoutMs = timeoutMs;
    this.clockMs = clockMs;
  }

  /**
   * Record the high watermarks read now.
   *
   * @param latest the high watermark per partition (a topic-partition, or any key)
   * @return the partitions idle as of now (a new, mutable set)
   */
  public Set<K> observe(Map<K, Long> latest) {
    long now = clockMs.getAsLong();
    if (lastObservationMs != null) {
      long gap = now - lastObservationMs;
      if (gap > timeoutMs / 2 && (lastGapMs == null || gap > 2 * lastGapMs)) {
        seen.values().forEach(last -> last[1] = now);
      }
      lastGapMs = gap;
    }
    lastObservationMs = now;
    Set<K> idle = new HashSet<>();
    for (Map.Entry<K, Long> e : latest.entrySet()) {
      long[] last = seen.get(e.getKey());
      if (last == null || last[0] != e.getValue()) {
        seen.put(e.getKey(), new long[] {e.getValue(), now});
      } else if (now - last[1] >= timeoutMs) {
        idle.add(e.getKey());
      }
    }
    return idle;
  }
}

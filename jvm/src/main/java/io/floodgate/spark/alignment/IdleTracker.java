package io.floodgate.spark.alignment;

import java.util.HashMap;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;
import java.util.function.LongSupplier;

/**
 * Which partitions are idle: their high watermark has not moved for {@code idlePartitionTimeoutMs}
 * (option {@code idlePartitionTimeoutMs}), so they hold nobody back in event-time alignment, as the
 * Python source's {@code pipeline.spark.alignment.IdleTracker}: a head is timed from the first
 * observation at which it had its current value, and a partition is idle from the first observation
 * at least the timeout later.
 *
 * <p>Not thread-safe: the driver's planning thread observes.
 */
public final class IdleTracker {
  private final long timeoutMs;
  private final LongSupplier clockMs;

  /** Per partition: the head last seen and when it was first seen at that value (clock ms). */
  private final Map<Integer, long[]> seen = new HashMap<>();

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
   * @param latest the high watermark per partition
   * @return the partitions idle as of now (a new, mutable set)
   */
  public Set<Integer> observe(Map<Integer, Long> latest) {
    long now = clockMs.getAsLong();
    Set<Integer> idle = new HashSet<>();
    for (Map.Entry<Integer, Long> e : latest.entrySet()) {
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

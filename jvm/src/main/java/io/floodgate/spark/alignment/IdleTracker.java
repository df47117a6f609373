package io.floodgate.spark.alignment;

import java.util.HashMap;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;

/**
 * Which partitions are idle: their high watermark has not moved for {@code idlePartitionTimeoutMs}
 * (option {@code idlePartitionTimeoutMs}), so they hold nobody back in event-time alignment, as the
 * Python source's {@code pipeline.spark.alignment.IdleTracker}.
 */
public final class IdleTracker {
  private final long timeoutMs;
  private final Map<Integer, long[]> seen = new HashMap<>();

  public IdleTracker(long timeoutMs) {
    this.timeoutMs = timeoutMs;
  }

  /**
   * Record the high watermarks now.
   *
   * @return the partitions whose watermark has not moved for the timeout (a new, mutable set)
   */
  public Set<Integer> observe(Map<Integer, Long> latest) {
    long now = System.nanoTime() / 1_000_000;
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

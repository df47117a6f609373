package io.floodgate.spark;

import java.io.Serializable;

/**
 * The event-time window of a query's streaming aggregation, {@code window(event_time, duration,
 * slide, start)} in ms (tumbling: slide = duration), from option {@code lateWindow}.
 *
 * <p>Spark's stateful aggregation drops a row as late when the end of its window is at or before
 * the watermark for late events ({@code WatermarkSupport.watermarkExpression}); a tuple of a
 * sliding window is in several windows, and only lost once the latest of them is.
 */
public record EventTimeWindow(long durationMs, long slideMs, long startMs) implements Serializable {
  /**
   * @throws IllegalArgumentException a duration or slide under 1 ms, or a slide over the duration
   */
  public EventTimeWindow {
    if (durationMs < 1 || slideMs < 1 || slideMs > durationMs) {
      throw new IllegalArgumentException(
          "window duration "
              + durationMs
              + " ms and slide "
              + slideMs
              + " ms: allowed: both >= 1 ms, the slide at most the duration (as Spark's window)");
    }
  }

  /** End (epoch ms, exclusive) of the latest window that holds {@code eventTimeMs}. */
  public long lastEnd(long eventTimeMs) {
    long lastStart = eventTimeMs - Math.floorMod(eventTimeMs - startMs, slideMs);
    return lastStart + durationMs;
  }

  /** Whether Spark would drop the tuple from every window (watermark 0: none is late). */
  public boolean isLate(long eventTimeMs, long watermarkMs) {
    return watermarkMs > 0 && lastEnd(eventTimeMs) <= watermarkMs;
  }

  /**
   * Option {@code lateWindow}: {@code <duration ms>,<slide ms>,<start ms>}.
   *
   * @throws IllegalArgumentException not three whole numbers, duration and slide >= 1
   */
  public static EventTimeWindow parseOption(String text) {
    String[] parts = text.split(",", -1);
    try {
      if (parts.length != 3) {
        throw new IllegalArgumentException("not three numbers");
      }
      return new EventTimeWindow(
          Long.parseLong(parts[0].strip()),
          Long.parseLong(parts[1].strip()),
          Long.parseLong(parts[2].strip()));
    } catch (IllegalArgumentException e) {
      throw SourceOptions.refuse(
          "lateWindow = '"
              + text
              + "'; allowed: '<duration ms>,<slide ms>,<start ms>' with duration and slide >= 1 ("
              + e.getMessage()
              + ")");
    }
  }
}

package io.floodgate.spark.options;

import java.io.Serializable;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

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
   * One part of {@code lateWindow}: a sign and digits (Unicode's), single {@code _} between digits,
   * spaces around.
   */
  private static final Pattern WHOLE =
      Pattern.compile("\\s*([+-]?\\d+(?:_\\d+)*)\\s*", Pattern.UNICODE_CHARACTER_CLASS);

  /**
   * Option {@code lateWindow}: {@code <duration ms>,<slide ms>,<start ms>}, as {@code
   * pipeline.spark.options.EventTimeWindow.option} writes it: three whole numbers (spaces around, a
   * sign, digits grouped by {@code _}, as Python's {@code int} reads them).
   *
   * @throws IllegalArgumentException not three whole numbers, duration and slide >= 1
   */
  public static EventTimeWindow parseOption(String text) {
    String[] parts = text.split(",", -1);
    try {
      if (parts.length != 3) {
        throw new IllegalArgumentException("expected 3 values, got " + parts.length);
      }
      return new EventTimeWindow(whole(parts[0]), whole(parts[1]), whole(parts[2]));
    } catch (IllegalArgumentException e) {
      throw OptionText.refuse(
          "lateWindow = "
              + OptionText.repr(text)
              + "; allowed: '<duration ms>,<slide ms>,<start ms>' with duration and slide >= 1 ("
              + e.getMessage()
              + ")");
    }
  }

  private static long whole(String text) {
    Matcher match = WHOLE.matcher(text);
    if (!match.matches()) {
      throw new IllegalArgumentException("not a whole number: " + OptionText.repr(text));
    }
    return Long.parseLong(match.group(1).replace("_", ""));
  }
}

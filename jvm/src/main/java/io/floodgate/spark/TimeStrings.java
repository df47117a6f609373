package io.floodgate.spark;

import java.util.Locale;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Spark's time strings ({@code JavaUtils.timeStringAsMs}), as options such as {@code
 * maxTriggerDelay} take them.
 */
final class TimeStrings {
  private static final Pattern TEXT = Pattern.compile("\\s*(\\d+)\\s*([a-z]*)\\s*");
  private static final Map<String, Double> UNIT_MS =
      Map.of(
          "us",
          0.001,
          "ms",
          1.0,
          "s",
          1000.0,
          "m",
          60_000.0,
          "min",
          60_000.0,
          "h",
          3_600_000.0,
          "d",
          86_400_000.0);

  private TimeStrings() {}

  /**
   * A whole number with an optional unit ({@code us, ms, s, m, min, h, d}; none is ms), in ms.
   *
   * @throws IllegalArgumentException another text (names {@code key})
   */
  static long toMillis(String key, String text) {
    Matcher match = TEXT.matcher(text.toLowerCase(Locale.ROOT));
    if (!match.matches() || !(match.group(2).isEmpty() || UNIT_MS.containsKey(match.group(2)))) {
      throw SourceOptions.refuse(
          key
              + " = '"
              + text
              + "'; allowed: a whole number with a unit (us, ms, s, m, min, h, d; none is ms), as"
              + " Spark's time strings");
    }
    double unit = match.group(2).isEmpty() ? 1.0 : UNIT_MS.get(match.group(2));
    return (long) (Long.parseLong(match.group(1)) * unit);
  }
}

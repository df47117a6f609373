package io.floodgate.spark.options;

import java.util.Locale;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Spark's time strings ({@code JavaUtils.timeStringAsMs}), as options such as {@code
 * maxTriggerDelay} take them, with the cases of {@code tests/golden/options/cases.json} ({@code
 * maxTriggerDelay}) as their specification.
 */
final class TimeStrings {
  /** Digits and a unit, spaces around and between; {@code \d} and {@code \s} are Unicode's. */
  private static final Pattern TEXT =
      Pattern.compile("\\s*(\\d+)\\s*([a-z]*)\\s*", Pattern.UNICODE_CHARACTER_CLASS);

  /** Milliseconds of each unit but {@code us} (a thousandth of one). */
  private static final Map<String, Long> UNIT_MS =
      Map.of("ms", 1L, "s", 1000L, "m", 60_000L, "min", 60_000L, "h", 3_600_000L, "d", 86_400_000L);

  private TimeStrings() {}

  /**
   * A whole number with an optional unit ({@code us, ms, s, m, min, h, d}; none is ms), in ms:
   * exact for every unit but {@code us}, whose value is {@code (long) (n * 0.001)} in doubles
   * (truncated); beyond {@code Long.MAX_VALUE} ms it is {@code Long.MAX_VALUE} (as Spark's {@code
   * TimeUnit.convert}).
   *
   * @param key the option, named in the refusal
   * @param text the option's value
   * @return milliseconds, {@code >= 0}
   * @throws IllegalArgumentException another text (names {@code key})
   */
  static long toMillis(String key, String text) {
    Matcher match = TEXT.matcher(text.toLowerCase(Locale.ROOT));
    String unit = match.matches() ? match.group(2) : null;
    if (unit == null || !(unit.isEmpty() || unit.equals("us") || UNIT_MS.containsKey(unit))) {
      throw OptionText.refuse(
          key
              + " = "
              + OptionText.repr(text)
              + "; allowed: a whole number with a unit (us, ms, s, m, min, h, d; none is ms), as"
              + " Spark's time strings");
    }
    long count;
    try {
      count = Long.parseLong(match.group(1));
    } catch (NumberFormatException e) {
      return Long.MAX_VALUE; // more digits than a long holds
    }
    if (unit.equals("us")) {
      return (long) (count * 0.001);
    }
    long ms = unit.isEmpty() ? 1L : UNIT_MS.get(unit);
    try {
      return Math.multiplyExact(count, ms);
    } catch (ArithmeticException e) {
      return Long.MAX_VALUE;
    }
  }
}

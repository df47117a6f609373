package io.floodgate.spark.options;

import static io.floodgate.spark.options.OptionText.refuse;
import static io.floodgate.spark.options.OptionText.repr;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.SortedMap;
import java.util.TreeMap;

/**
 * Spark's option map, read by kind: keys are case-insensitive, as Spark's ({@code
 * CaseInsensitiveMap}), and an empty value is a missing one. Each typed getter checks its value and
 * refuses another with {@link OptionText#refuse}'s {@link IllegalArgumentException}, naming the
 * option, the value given (quoted as {@link OptionText#repr}) and what is allowed.
 */
final class OptionMap {
  private final Map<String, String> values = new LinkedHashMap<>();

  OptionMap(Map<String, String> options) {
    options.forEach((k, v) -> values.put(k.toLowerCase(Locale.ROOT), v));
  }

  String get(String key) {
    String value = values.get(key.toLowerCase(Locale.ROOT));
    return value == null || value.isEmpty() ? null : value;
  }

  String required(String key) {
    String value = get(key);
    if (value == null) {
      throw refuse("option '" + key + "' is required");
    }
    return value;
  }

  /** {@link #choice} of a value in any case, returned in lower case (as Spark's enumerations). */
  String choiceIgnoringCase(String key, List<String> allowed, String fallback) {
    String value = values.getOrDefault(key.toLowerCase(Locale.ROOT), fallback);
    if (!allowed.contains(value.strip().toLowerCase(Locale.ROOT))) {
      throw refuse(key + " = " + repr(value) + "; allowed: " + String.join(", ", allowed));
    }
    return value.strip().toLowerCase(Locale.ROOT);
  }

  String choice(String key, List<String> allowed, String fallback) {
    String value = values.getOrDefault(key.toLowerCase(Locale.ROOT), fallback);
    if (!allowed.contains(value)) {
      throw refuse(key + " = " + repr(value) + "; allowed: " + String.join(", ", allowed));
    }
    return value;
  }

  /**
   * A timestamp option, as Spark's {@code getKafkaOffsetRangeLimit} reads one: the value trimmed, a
   * whole number of milliseconds since the epoch ({@code null}: not given).
   *
   * @throws IllegalArgumentException not a whole number, or below 0 (Kafka's {@code
   *     offsetsForTimes} takes none)
   */
  Long timestamp(String key) {
    String text = get(key);
    if (text == null) {
      return null;
    }
    String trimmed = text.strip();
    Long value =
        !trimmed.isEmpty() && trimmed.chars().allMatch(Character::isDigit)
            ? parseLong(trimmed)
            : null;
    if (value == null) {
      throw refuse(
          key
              + " = "
              + repr(text)
              + ": Expected a single long value, got "
              + trimmed
              + " (as Spark's Kafka source); allowed: milliseconds since the epoch, >= 0");
    }
    return value;
  }

  boolean flag(String key, boolean fallback) {
    String value =
        values
            .getOrDefault(key.toLowerCase(Locale.ROOT), String.valueOf(fallback))
            .toLowerCase(Locale.ROOT);
    if (!value.equals("true") && !value.equals("false")) {
      throw refuse(key + " = " + repr(value) + "; allowed: true, false");
    }
    return value.equals("true");
  }

  Long whole(String key, long minimum, String unit) {
    String text = get(key);
    if (text == null) {
      return null;
    }
    Long value = text.chars().allMatch(Character::isDigit) ? parseLong(text) : null;
    if (value == null || value < minimum) {
      String what = unit.isEmpty() ? "a whole number" : "a whole number of " + unit;
      throw refuse(key + " = " + repr(text) + "; allowed: " + what + " >= " + minimum);
    }
    return value;
  }

  private static Long parseLong(String text) {
    try {
      return Long.parseLong(text);
    } catch (NumberFormatException e) {
      return null;
    }
  }

  SortedMap<String, SortedMap<Integer, Long>> offsets(String key) {
    String text = get(key);
    if (text == null) {
      return new TreeMap<>();
    }
    try {
      return Assignment.allOffsets(text);
    } catch (IllegalArgumentException e) {
      throw refuse(
          key
              + " = "
              + repr(text)
              + "; allowed: offsets as {\"<topic>\": {\"<partition>\": <offset>}}");
    }
  }

  /**
   * A comma-separated list of names, each stripped, empty ones left out; {@code null} when missing.
   *
   * @throws IllegalArgumentException no name in it
   */
  List<String> names(String key) {
    String text = get(key);
    if (text == null) {
      return null;
    }
    List<String> names = new ArrayList<>();
    for (String name : text.split(",")) {
      if (!name.strip().isEmpty()) {
        names.add(name.strip());
      }
    }
    if (names.isEmpty()) {
      throw refuse(key + " = " + repr(text) + "; allowed: names separated by commas");
    }
    return List.copyOf(names);
  }

  void exclusive(String first, String second) {
    if (get(first) != null && get(second) != null) {
      throw refuse(
          "options '" + first + "' and '" + second + "' say the same thing; give one of them");
    }
  }

  Map<String, String> prefixed(String prefix) {
    Map<String, String> out = new LinkedHashMap<>();
    values.forEach(
        (k, v) -> {
          if (k.startsWith(prefix)) {
            out.put(k.substring(prefix.length()), v);
          }
        });
    return out;
  }
}

package io.floodgate.spark.options;

import static io.floodgate.spark.options.OptionText.refuse;
import static io.floodgate.spark.options.OptionText.repr;

import java.util.ArrayList;
import java.util.List;
import java.util.SortedMap;

/**
 * What the topic options name: exactly one of {@code topic}, {@code subscribe}, {@code
 * subscribePattern}, {@code assign} (Spark's {@code KafkaSourceProvider} takes one of its three),
 * read by {@link #read}.
 *
 * @param key the option given
 * @param topics the topics ({@code null}: a pattern)
 * @param pattern the pattern ({@code null}: topics)
 * @param assigned {@code assign}'s partitions ({@code null}: not given)
 */
record TopicNames(
    String key, List<String> topics, String pattern, SortedMap<String, List<Integer>> assigned) {
  /** The options that name the topics read, exactly one of which is given. */
  static final List<String> TOPIC_OPTIONS =
      List.of("topic", "subscribe", "subscribePattern", "assign");

  /** The default of option {@code stream}: the one topic, else the topics joined, the pattern. */
  String stream() {
    if (topics == null) {
      return pattern;
    }
    return String.join(",", topics);
  }

  /**
   * The topics read: exactly one of {@code topic}, {@code subscribe}, {@code subscribePattern},
   * {@code assign} (Spark's {@code KafkaSourceProvider} takes one of its three).
   *
   * @throws IllegalArgumentException none or two of them, {@code topic} naming several, {@code
   *     subscribe} naming none, a pattern that does not compile, or {@code assign} of another shape
   */
  static TopicNames read(OptionMap opts) {
    List<String> given = new ArrayList<>();
    for (String k : TOPIC_OPTIONS) {
      if (opts.get(k) != null) {
        given.add(k);
      }
    }
    if (given.size() > 1) {
      throw refuse(
          "options '"
              + String.join("' and '", given)
              + "' each name what to read; give one of them");
    }
    if (given.isEmpty()) {
      throw refuse("option 'subscribe' (or 'subscribePattern', 'topic', or 'assign') is required");
    }
    String key = given.get(0);
    String text = opts.required(key);
    switch (key) {
      case "assign" -> {
        SortedMap<String, List<Integer>> assigned = Assignment.parse(text);
        return new TopicNames(key, List.copyOf(assigned.keySet()), null, assigned);
      }
      case "subscribePattern" -> {
        String pattern = text.strip();
        String refusal =
            "subscribePattern = "
                + repr(text)
                + "; allowed: a regular expression matched against topic names";
        if (pattern.isEmpty()) {
          throw refuse(refusal);
        }
        try {
          java.util.regex.Pattern.compile(pattern);
        } catch (java.util.regex.PatternSyntaxException e) {
          throw refuse(
              refusal
                  + " ("
                  + e.getDescription()
                  + " at position "
                  + e.getIndex()
                  + "; Java's java.util.regex)");
        }
        return new TopicNames(key, null, pattern, null);
      }
      default -> {
        List<String> topics = new ArrayList<>();
        for (String t : text.split(",")) {
          String name = t.strip();
          if (!name.isEmpty() && !topics.contains(name)) {
            topics.add(name);
          }
        }
        if (topics.isEmpty()) {
          throw refuse(key + " = " + repr(text) + "; allowed: topic names separated by commas");
        }
        if (key.equals("topic") && topics.size() != 1) {
          throw refuse(
              "topic = " + repr(text) + "; allowed: one topic (name several with subscribe)");
        }
        return new TopicNames(key, List.copyOf(topics), null, null);
      }
    }
  }
}

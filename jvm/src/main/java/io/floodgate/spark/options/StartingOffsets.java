package io.floodgate.spark.options;

import static io.floodgate.spark.options.OptionText.pyList;
import static io.floodgate.spark.options.OptionText.refuse;
import static io.floodgate.spark.options.OptionText.repr;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.SortedMap;
import java.util.TreeMap;

/**
 * Where a query starts, as options {@code startingOffsets} ({@link #read}) and {@code
 * startingOffsetsByTimestamp} ({@link #partitionTimestamps}) name it, checked against the topics
 * read ({@link TopicNames}) as Spark's {@code KafkaSourceProvider} checks them.
 *
 * @param kind {@code committed}, {@code earliest}, {@code latest}, {@code specific} (JSON offsets)
 *     or {@code timestamp}
 * @param offsets topic to partition to offset (-2 earliest, -1 latest), for {@code specific}; empty
 *     otherwise
 */
record StartingOffsets(String kind, SortedMap<String, SortedMap<Integer, Long>> offsets) {
  /** Starting by timestamp: no offsets; the timestamps are read apart. */
  static StartingOffsets byTimestamp() {
    return new StartingOffsets("timestamp", new TreeMap<>());
  }

  /**
   * A word, or Spark's JSON {@code {"<topic>": {"<partition>": <offset>}}} with -2 earliest and -1
   * latest. Every topic it names must be read: one {@code subscribe}/{@code topic} names ({@code
   * subscribePattern}: any, checked against the matched topics at the start), and with {@code
   * assign} exactly the assigned topic-partitions.
   */
  static StartingOffsets read(OptionMap opts, TopicNames named, String fallback) {
    String text = opts.get("startingOffsets");
    List<String> words = List.of("committed", "earliest", "latest");
    if (text == null) {
      return new StartingOffsets(fallback, new TreeMap<>());
    }
    String word = text.strip().toLowerCase(Locale.ROOT);
    if (words.contains(word)) {
      return new StartingOffsets(word, new TreeMap<>());
    }
    String allowed =
        "allowed: "
            + String.join(", ", words)
            + ", or JSON {\"<topic>\": {\"<partition>\": <offset>}, ...} with -2 for earliest"
            + " and -1 for latest, as Spark's Kafka source";
    SortedMap<String, SortedMap<Integer, Long>> offsets;
    try {
      offsets = Assignment.allOffsets(text);
    } catch (IllegalArgumentException e) {
      throw refuse("startingOffsets = " + repr(text) + "; " + allowed);
    }
    boolean bad = offsets.isEmpty();
    for (SortedMap<Integer, Long> perTopic : offsets.values()) {
      bad |= perTopic.isEmpty() || perTopic.firstKey() < 0;
      for (long o : perTopic.values()) {
        bad |= o < SourceOptions.EARLIEST;
      }
    }
    if (bad) {
      throw refuse("startingOffsets = " + repr(text) + "; " + allowed);
    }
    if (named.topics() != null) {
      for (String t : offsets.keySet()) { // in name order: the first one not read is named
        if (!named.topics().contains(t)) {
          List<String> quoted = new ArrayList<>();
          named.topics().forEach(n -> quoted.add(repr(n)));
          throw refuse(
              "startingOffsets names topic "
                  + repr(t)
                  + ", which "
                  + named.key()
                  + " does not; allowed: the topics read ("
                  + String.join(", ", quoted)
                  + ")");
        }
      }
    }
    if (named.assigned() != null) {
      java.util.SortedSet<String> topics = new java.util.TreeSet<>(offsets.keySet());
      topics.addAll(named.assigned().keySet());
      for (String t : topics) {
        List<Integer> given = new ArrayList<>(offsets.getOrDefault(t, new TreeMap<>()).keySet());
        List<Integer> assigned = named.assigned().getOrDefault(t, List.of());
        if (!given.equals(assigned)) {
          throw refuse(
              "startingOffsets names partitions "
                  + given
                  + " of "
                  + repr(t)
                  + " and assign "
                  + assigned
                  + ": name the same partitions (as Spark)");
        }
      }
    }
    return new StartingOffsets("specific", offsets);
  }

  /**
   * {@code startingOffsetsByTimestamp}'s JSON {@code {"<topic>": {"<partition>": <epoch ms>}}}
   * (Spark's {@code JsonUtils.partitionTimestamps}); empty when not given. Its topics must be
   * topics read, as {@code startingOffsets}' are; that it names every topic-partition read is
   * checked when the query starts.
   */
  static SortedMap<String, SortedMap<Integer, Long>> partitionTimestamps(
      OptionMap opts, String key, TopicNames named) {
    String text = opts.get(key);
    if (text == null) {
      return new TreeMap<>();
    }
    String allowed =
        "; allowed: JSON {\"<topic>\": {\"<partition>\": <epoch ms>}, ...}, timestamps >= 0,"
            + " as Spark's Kafka source";
    SortedMap<String, SortedMap<Integer, Long>> timestamps;
    try {
      timestamps = Assignment.allOffsets(text.strip());
    } catch (IllegalArgumentException e) {
      throw refuse(key + " = " + repr(text) + allowed);
    }
    boolean bad = timestamps.isEmpty();
    for (SortedMap<Integer, Long> perTopic : timestamps.values()) {
      bad |= perTopic.isEmpty() || perTopic.firstKey() < 0;
      for (long t : perTopic.values()) {
        bad |= t < 0;
      }
    }
    if (bad) {
      throw refuse(key + " = " + repr(text) + allowed);
    }
    if (named.topics() != null) {
      for (String t : timestamps.keySet()) {
        if (!named.topics().contains(t)) {
          throw refuse(
              key
                  + " names topic "
                  + repr(t)
                  + ", which "
                  + named.key()
                  + " does not; allowed: the topics read "
                  + pyList(named.topics()));
        }
      }
    }
    return timestamps;
  }
}

package io.floodgate.spark.options;

import io.floodgate.spark.offsets.TopicPartitions;
import java.io.Serializable;
import java.util.HashMap;
import java.util.Locale;
import java.util.Map;
import java.util.SortedMap;
import java.util.function.Function;
import org.apache.kafka.common.TopicPartition;

/**
 * What a batch query ({@code spark.read}) reads of its topics, from the options a streaming query
 * does not take: {@code endingOffsets} ({@code latest}, the default, or Spark's JSON with -1 for a
 * topic-partition's latest offset), {@code endingTimestamp} and {@code endingOffsetsByTimestamp}
 * (which win over it, in that order, as Spark's {@code getKafkaOffsetRangeLimit}), and whether
 * {@code startingOffsets} (or a starting timestamp) was given at all (a batch query starts at
 * {@code earliest} by default, as Spark's Kafka source; a streaming one at {@code latest} or the
 * committed offsets). Spark's {@code KafkaSourceProvider} reads the same two options, with the same
 * refusals: a batch cannot start at {@code latest} nor end at {@code earliest}.
 */
public final class BatchBounds implements Serializable {
  private static final long serialVersionUID = 1L;

  /** The option a streaming query refuses. */
  static final String ENDING_OFFSETS = "endingOffsets";

  /** The batch-only option ending every topic-partition at one timestamp. */
  static final String ENDING_TIMESTAMP = "endingTimestamp";

  /** The batch-only option ending each topic-partition at its own timestamp. */
  static final String ENDING_OFFSETS_BY_TIMESTAMP = "endingOffsetsByTimestamp";

  /** {@code endingOffsets} as given, {@code null} when it was not. */
  final String endingOffsets;

  /** {@code endingTimestamp} as given, {@code null} when it was not. */
  final String endingTimestamp;

  /** {@code endingOffsetsByTimestamp} as given, {@code null} when it was not. */
  final String endingOffsetsByTimestamp;

  /**
   * Whether the options name {@code startingOffsets}, {@code startingTimestamp} or {@code
   * startingOffsetsByTimestamp}.
   */
  public final boolean startingGiven;

  private BatchBounds(
      String endingOffsets,
      String endingTimestamp,
      String endingOffsetsByTimestamp,
      boolean startingGiven) {
    this.endingOffsets = endingOffsets;
    this.endingTimestamp = OptionText.emptyAsNull(endingTimestamp);
    this.endingOffsetsByTimestamp = OptionText.emptyAsNull(endingOffsetsByTimestamp);
    this.startingGiven = startingGiven;
  }

  /**
   * The batch-only option given, refused in a streaming query with Spark's message ({@code
   * KafkaSourceProvider.validateStreamOptions}); {@code null}: none. Spark ignores {@code
   * endingTimestamp} in a streaming query; the source refuses it too, as it does any option it
   * would not act on.
   */
  public String streamingRefusal() {
    if (endingOffsets != null) {
      return "option 'endingOffsets' is not supported in a streaming query: it applies to batch"
          + " queries only (spark.read), as in Spark's Kafka source (ending offset not valid in"
          + " streaming queries)";
    }
    for (String key : new String[] {ENDING_OFFSETS_BY_TIMESTAMP, ENDING_TIMESTAMP}) {
      if ((key.equals(ENDING_TIMESTAMP) ? endingTimestamp : endingOffsetsByTimestamp) != null) {
        return "option '"
            + key
            + "' is not supported in a streaming query: it applies to batch queries only"
            + " (spark.read), as in Spark's Kafka source (ending timestamp not valid in streaming"
            + " queries)";
      }
    }
    return null;
  }

  /**
   * Take the batch-only options out of {@code options} (keys are case-insensitive), leaving the
   * rest for {@link SourceOptions#parse}.
   */
  public static BatchBounds take(Map<String, String> options) {
    String ending = null;
    String endingTime = null;
    String endingTimes = null;
    boolean starting = false;
    for (String key : new HashMap<>(options).keySet()) {
      String lower = key.toLowerCase(Locale.ROOT);
      if (lower.equals(ENDING_OFFSETS.toLowerCase(Locale.ROOT))) {
        ending = options.remove(key);
      } else if (lower.equals(ENDING_TIMESTAMP.toLowerCase(Locale.ROOT))) {
        endingTime = options.remove(key);
      } else if (lower.equals(ENDING_OFFSETS_BY_TIMESTAMP.toLowerCase(Locale.ROOT))) {
        endingTimes = options.remove(key);
      } else if (lower.equals("startingoffsets")
          || lower.equals("startingtimestamp")
          || lower.equals("startingoffsetsbytimestamp")) {
        starting = true;
      }
    }
    return new BatchBounds(ending, endingTime, endingTimes, starting);
  }

  /**
   * The end offset of each topic-partition read: {@code latest} (the last stable offsets) or
   * Spark's JSON {@code {"<topic>": {"<partition>": <offset>}, ...}} naming every topic-partition
   * read, -1 for its latest (Spark's {@code KafkaSourceProvider} and {@code
   * KafkaOffsetReaderAdmin.fetchSpecificOffsets} take the same).
   *
   * @param latest the last stable offset of every topic-partition read
   * @throws IllegalArgumentException {@code earliest}, -2, a topic-partition not read or one read
   *     not named, or another shape
   */
  public SortedMap<TopicPartition, Long> ends(SortedMap<TopicPartition, Long> latest) {
    return ends(
        latest,
        t -> {
          throw new IllegalStateException("no timestamp lookup");
        });
  }

  /**
   * The end offset of each topic-partition read, by Spark's precedence: {@code endingTimestamp}
   * (every topic-partition's first offset whose timestamp is at or after it), else {@code
   * endingOffsetsByTimestamp} (Spark's JSON naming every topic-partition read, a timestamp each),
   * else {@code endingOffsets} ({@link #ends(SortedMap)}). A topic-partition with no offset at or
   * after its ending timestamp ends at its latest offset, as Spark's {@code
   * KafkaOffsetReaderAdmin.readTimestampOffsets} does for an end.
   *
   * @param latest the last stable offset of every topic-partition read
   * @param offsetsForTimes Kafka's {@code offsetsForTimes}: per topic-partition asked, the first
   *     offset whose timestamp is at or after the one asked, {@code null} or absent for none
   * @throws IllegalArgumentException a timestamp that is not a whole number of ms, JSON naming not
   *     exactly the topic-partitions read, or an {@code endingOffsets} refused by {@link
   *     #ends(SortedMap)}
   */
  public SortedMap<TopicPartition, Long> ends(
      SortedMap<TopicPartition, Long> latest,
      Function<Map<TopicPartition, Long>, Map<TopicPartition, Long>> offsetsForTimes) {
    Map<TopicPartition, Long> timestamps = endingTimestamps(latest.keySet());
    if (timestamps == null) {
      return endsByOffsets(latest);
    }
    Map<TopicPartition, Long> found = offsetsForTimes.apply(timestamps);
    SortedMap<TopicPartition, Long> ends = TopicPartitions.empty();
    for (TopicPartition tp : latest.keySet()) {
      Long o = found.get(tp);
      ends.put(tp, o != null ? o : latest.get(tp));
    }
    return ends;
  }

  /** The ending timestamp of each topic-partition read; {@code null}: no ending timestamp given. */
  private Map<TopicPartition, Long> endingTimestamps(java.util.Set<TopicPartition> read) {
    if (endingTimestamp != null) {
      String text = endingTimestamp.strip();
      if (text.isEmpty() || !text.chars().allMatch(Character::isDigit)) {
        throw OptionText.refuse(
            "endingTimestamp = '"
                + endingTimestamp
                + "': Expected a single long value, got "
                + text
                + " (as Spark's Kafka source); allowed: milliseconds since the epoch, >= 0");
      }
      long ts = Long.parseLong(text);
      Map<TopicPartition, Long> out = new HashMap<>();
      read.forEach(tp -> out.put(tp, ts));
      return out;
    }
    if (endingOffsetsByTimestamp == null) {
      return null;
    }
    String allowed =
        "allowed: JSON {\"<topic>\": {\"<partition>\": <epoch ms>}, ...} naming every"
            + " topic-partition read, timestamps >= 0, as Spark's Kafka source";
    SortedMap<TopicPartition, Long> given;
    try {
      given = TopicPartitions.flatten(Assignment.allOffsets(endingOffsetsByTimestamp.strip()));
    } catch (IllegalArgumentException e) {
      throw OptionText.refuse(
          "endingOffsetsByTimestamp = " + endingOffsetsByTimestamp + "; " + allowed);
    }
    if (given.values().stream().anyMatch(t -> t < 0)) {
      throw OptionText.refuse(
          "endingOffsetsByTimestamp = " + endingOffsetsByTimestamp + "; " + allowed);
    }
    if (!given.keySet().equals(read)) {
      throw OptionText.refuse(
          "endingOffsetsByTimestamp names topic-partitions "
              + given.keySet()
              + ", but the source reads "
              + sortedSet(read)
              + ": name every one (as Spark's Kafka source requires)");
    }
    return given;
  }

  private static java.util.SortedSet<TopicPartition> sortedSet(java.util.Set<TopicPartition> tps) {
    java.util.SortedSet<TopicPartition> out = new java.util.TreeSet<>(TopicPartitions.ORDER);
    out.addAll(tps);
    return out;
  }

  private SortedMap<TopicPartition, Long> endsByOffsets(SortedMap<TopicPartition, Long> latest) {
    String text = endingOffsets == null ? "latest" : endingOffsets.strip();
    if (text.equalsIgnoreCase("latest")) {
      return TopicPartitions.sorted(latest);
    }
    String allowed =
        "allowed: latest, or JSON {\"<topic>\": {\"<partition>\": <offset>}, ...} with -1 for"
            + " latest, as Spark's Kafka source (a batch query cannot end at earliest)";
    SortedMap<TopicPartition, Long> given;
    try {
      given = TopicPartitions.flatten(Assignment.allOffsets(text));
    } catch (IllegalArgumentException e) {
      throw OptionText.refuse("endingOffsets = " + text + "; " + allowed);
    }
    if (!given.keySet().equals(latest.keySet())) {
      throw OptionText.refuse(
          "endingOffsets names topic-partitions "
              + given.keySet()
              + ", but the source reads "
              + latest.keySet()
              + ": name every one (as Spark's Kafka source requires)");
    }
    SortedMap<TopicPartition, Long> ends = TopicPartitions.empty();
    for (Map.Entry<TopicPartition, Long> e : given.entrySet()) {
      long o = e.getValue();
      if (o < SourceOptions.LATEST) {
        throw OptionText.refuse(
            "endingOffsets = " + text + ": " + e.getKey() + " ends at " + o + "; " + allowed);
      }
      ends.put(e.getKey(), o == SourceOptions.LATEST ? latest.get(e.getKey()) : o);
    }
    return ends;
  }

  /**
   * Whether {@code tp}'s end is {@code latest} ({@code endingOffsets} not given, {@code latest}, or
   * -1 in its JSON): resolved each time the query is executed, not once when it is planned.
   *
   * @param tp a topic-partition read ({@link #ends} checked the options)
   */
  public boolean endsAtLatest(TopicPartition tp) {
    if (endingTimestamp != null || endingOffsetsByTimestamp != null) {
      return false; // a timestamp's offset, or the planning's latest where none is at or after it
    }
    String text = endingOffsets == null ? "latest" : endingOffsets.strip();
    if (text.equalsIgnoreCase("latest")) {
      return true;
    }
    Long given = TopicPartitions.flatten(Assignment.allOffsets(text)).get(tp);
    return given != null && given == SourceOptions.LATEST;
  }
}

package io.floodgate.spark;

import io.floodgate.spark.offsets.TopicPartitions;
import java.io.Serializable;
import java.util.HashMap;
import java.util.Locale;
import java.util.Map;
import java.util.SortedMap;
import org.apache.kafka.common.TopicPartition;

/**
 * What a batch query ({@code spark.read}) reads of its topics, from the options a streaming query
 * does not take: {@code endingOffsets} ({@code latest}, the default, or Spark's JSON with -1 for a
 * topic-partition's latest offset), and whether {@code startingOffsets} was given at all (a batch
 * query starts at {@code earliest} by default, as Spark's Kafka source; a streaming one at {@code
 * latest} or the committed offsets). Spark's {@code KafkaSourceProvider} reads the same two
 * options, with the same refusals: a batch cannot start at {@code latest} nor end at {@code
 * earliest}.
 */
final class BatchBounds implements Serializable {
  private static final long serialVersionUID = 1L;

  /** The option a streaming query refuses. */
  static final String ENDING_OFFSETS = "endingOffsets";

  /** {@code endingOffsets} as given, {@code null} when it was not. */
  final String endingOffsets;

  /** Whether the options name {@code startingOffsets}. */
  final boolean startingGiven;

  private BatchBounds(String endingOffsets, boolean startingGiven) {
    this.endingOffsets = endingOffsets;
    this.startingGiven = startingGiven;
  }

  /**
   * Take the batch-only options out of {@code options} (keys are case-insensitive), leaving the
   * rest for {@link SourceOptions#parse}.
   */
  static BatchBounds take(Map<String, String> options) {
    String ending = null;
    boolean starting = false;
    for (String key : new HashMap<>(options).keySet()) {
      String lower = key.toLowerCase(Locale.ROOT);
      if (lower.equals(ENDING_OFFSETS.toLowerCase(Locale.ROOT))) {
        ending = options.remove(key);
      } else if (lower.equals("startingoffsets")) {
        starting = true;
      }
    }
    return new BatchBounds(ending, starting);
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
  SortedMap<TopicPartition, Long> ends(SortedMap<TopicPartition, Long> latest) {
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
      throw SourceOptions.refuse("endingOffsets = " + text + "; " + allowed);
    }
    if (!given.keySet().equals(latest.keySet())) {
      throw SourceOptions.refuse(
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
        throw SourceOptions.refuse(
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
  boolean endsAtLatest(TopicPartition tp) {
    String text = endingOffsets == null ? "latest" : endingOffsets.strip();
    if (text.equalsIgnoreCase("latest")) {
      return true;
    }
    Long given = TopicPartitions.flatten(Assignment.allOffsets(text)).get(tp);
    return given != null && given == SourceOptions.LATEST;
  }
}

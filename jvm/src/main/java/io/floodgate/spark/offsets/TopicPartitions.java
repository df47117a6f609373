package io.floodgate.spark.offsets;

import java.util.Comparator;
import java.util.Map;
import java.util.SortedMap;
import java.util.TreeMap;
import org.apache.kafka.common.TopicPartition;

/**
 * Kafka's {@link TopicPartition}, the key of every per-partition map of the source (offsets,
 * backlogs, event times, commits), in one order: by topic name, then partition number, the ordering
 * of Spark's Kafka connector ({@code JsonUtils.partitionOffsets}). Topic names are ASCII ({@code
 * [a-zA-Z0-9._-]}), so {@link String#compareTo} orders them code point by code point.
 */
public final class TopicPartitions {
  /** By topic, then partition. */
  public static final Comparator<TopicPartition> ORDER =
      Comparator.comparing(TopicPartition::topic).thenComparingInt(TopicPartition::partition);

  private TopicPartitions() {}

  /** A new map of {@code map}'s entries in {@link #ORDER}. */
  public static <V> SortedMap<TopicPartition, V> sorted(Map<TopicPartition, V> map) {
    SortedMap<TopicPartition, V> out = new TreeMap<>(ORDER);
    out.putAll(map);
    return out;
  }

  /** An empty map in {@link #ORDER}. */
  public static <V> SortedMap<TopicPartition, V> empty() {
    return new TreeMap<>(ORDER);
  }

  /**
   * Per-topic offsets ({@code {"<topic>": {<partition>: offset}}}, the shape of Spark's offsets
   * JSON and of the options {@code startingOffsets} and {@code discardBefore}) as one map.
   */
  public static SortedMap<TopicPartition, Long> flatten(
      Map<String, ? extends Map<Integer, Long>> perTopic) {
    SortedMap<TopicPartition, Long> out = empty();
    perTopic.forEach(
        (topic, offsets) -> offsets.forEach((p, o) -> out.put(new TopicPartition(topic, p), o)));
    return out;
  }

  /** The reverse of {@link #flatten}: topics and partitions in order. */
  public static SortedMap<String, SortedMap<Integer, Long>> perTopic(
      Map<TopicPartition, Long> offsets) {
    SortedMap<String, SortedMap<Integer, Long>> out = new TreeMap<>();
    offsets.forEach(
        (tp, o) -> out.computeIfAbsent(tp.topic(), t -> new TreeMap<>()).put(tp.partition(), o));
    return out;
  }
}

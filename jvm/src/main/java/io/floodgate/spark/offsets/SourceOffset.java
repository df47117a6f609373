package io.floodgate.spark.offsets;

import java.util.Collections;
import java.util.Map;
import java.util.SortedMap;
import java.util.TreeMap;
import org.apache.spark.sql.connector.read.streaming.Offset;

/**
 * The source's offset in Spark's offset log: a topic's next offset per partition ({@link
 * PartitionOffsets} gives the text).
 */
public final class SourceOffset extends Offset {
  private final String topic;
  private final SortedMap<Integer, Long> offsets;

  /** The offsets of {@code topic}; the map is copied. */
  public SourceOffset(String topic, Map<Integer, Long> offsets) {
    this.topic = topic;
    this.offsets = Collections.unmodifiableSortedMap(new TreeMap<>(offsets));
  }

  /** The offset whose {@link #json()} is {@code json}. */
  public static SourceOffset parse(String topic, String json) {
    return new SourceOffset(topic, PartitionOffsets.fromJson(topic, json));
  }

  /** The topic's offsets of an offset Spark hands back (ours, or one it deserialized). */
  public static SourceOffset of(String topic, Offset offset) {
    if (offset instanceof SourceOffset own) {
      return own;
    }
    return parse(topic, offset.json());
  }

  public String topic() {
    return topic;
  }

  /** Partition to next offset, in partition order. */
  public SortedMap<Integer, Long> offsets() {
    return offsets;
  }

  @Override
  public String json() {
    return PartitionOffsets.toJson(topic, offsets);
  }
}

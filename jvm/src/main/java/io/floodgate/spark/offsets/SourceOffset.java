package io.floodgate.spark.offsets;

import java.util.Collections;
import java.util.Map;
import java.util.SortedMap;
import org.apache.kafka.common.TopicPartition;
import org.apache.spark.sql.connector.read.streaming.Offset;

/**
 * The source's offset in Spark's offset log: the next offset of every topic-partition read ({@link
 * PartitionOffsets} gives the text, {@code {"<topic>": {"<partition>": <offset>}}}, Spark's Kafka
 * source's shape with spaces).
 */
public final class SourceOffset extends Offset {
  private final SortedMap<TopicPartition, Long> offsets;

  /** The offsets of {@code offsets}' topic-partitions; the map is copied. */
  public SourceOffset(Map<TopicPartition, Long> offsets) {
    this.offsets = Collections.unmodifiableSortedMap(TopicPartitions.sorted(offsets));
  }

  /** The offset whose {@link #json()} is {@code json}. */
  public static SourceOffset parse(String json) {
    return new SourceOffset(PartitionOffsets.fromJson(json));
  }

  /** The offsets of an offset Spark hands back (ours, or one it deserialized). */
  public static SourceOffset of(Offset offset) {
    if (offset instanceof SourceOffset own) {
      return own;
    }
    return parse(offset.json());
  }

  /** Topic-partition to next offset, in {@link TopicPartitions#ORDER}. */
  public SortedMap<TopicPartition, Long> offsets() {
    return offsets;
  }

  @Override
  public String json() {
    return PartitionOffsets.toJson(offsets);
  }
}

package io.floodgate.spark;

import io.floodgate.spark.read.KafkaRange;
import io.floodgate.spark.read.KafkaTask;
import io.floodgate.spark.read.RangeReaderFactory;
import io.floodgate.spark.read.RowLayout;
import io.floodgate.spark.read.SourceAccumulators;
import io.floodgate.spark.swept.BlobRow;
import io.floodgate.spark.swept.SweepCatalogReader;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.SortedMap;
import java.util.TreeMap;
import org.apache.spark.SparkContext;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.types.StructType;

/**
 * A batch query of the topic ({@code spark.read.format("floodgate_kafka")}), as Spark's Kafka
 * source reads one: from {@code startingOffsets} ({@code earliest} by default; {@code committed} or
 * Spark's JSON, -2 earliest) to {@code endingOffsets} ({@code latest} by default, or Spark's JSON,
 * -1 latest), each partition's range read by the same tasks as a micro-batch's (swept ranges from
 * their BLOBs with {@code sweepCatalog}, dead letters, {@code failOnDataLoss}). With {@code
 * sweepCatalog}, {@code earliest} starts where the partition's swept BLOBs do.
 */
final class KafkaBatch implements Batch {
  private final SourceOptions options;
  private final StructType schema;
  private final RowLayout layout;
  private final BatchBounds bounds;

  KafkaBatch(SourceOptions options, StructType schema, RowLayout layout, BatchBounds bounds) {
    this.options = options;
    this.schema = schema;
    this.layout = layout;
    this.bounds = bounds;
  }

  /**
   * A task per partition with tuples in {@code [start, end)} (at most {@code maxTasks}).
   *
   * @throws IllegalArgumentException a start at {@code latest} (-1), an end at {@code earliest}
   *     (-2), or a partition whose end is before its start, as Spark's Kafka source refuses them
   */
  @Override
  public InputPartition[] planInputPartitions() {
    String how = bounds.startingGiven ? options.startingOffsets : "earliest";
    if (how.equals("latest")
        || (how.equals("specific")
            && options.startingPartitionOffsets.containsValue(SourceOptions.LATEST))) {
      throw SourceOptions.refuse(
          "startingOffsets: a batch query cannot start at latest (-1), as Spark's Kafka source;"
              + " allowed: earliest (the default), committed, or JSON with -2 for earliest");
    }
    List<KafkaRange> ranges = new ArrayList<>();
    try (TopicOffsets offsets = new TopicOffsets(options)) {
      SortedMap<Integer, Long> start = offsets.start(how, options.startingPartitionOffsets);
      if (how.equals("earliest")) {
        start = withSwept(start);
      }
      SortedMap<Integer, Long> end = bounds.ends(options.topic, offsets.latest());
      for (Map.Entry<Integer, Long> e : end.entrySet()) {
        long from = start.get(e.getKey());
        if (e.getValue() < from) {
          throw SourceOptions.refuse(
              "partition "
                  + e.getKey()
                  + " of '"
                  + options.topic
                  + "' ends at offset "
                  + e.getValue()
                  + ", before its start "
                  + from);
        }
        if (e.getValue() > from) {
          ranges.add(new KafkaRange(options.topic, e.getKey(), from, e.getValue(), null, null));
        }
      }
    }
    return KafkaTask.partitions(ranges, options.maxTasks);
  }

  /**
   * {@code earliest} with option {@code sweepCatalog}: where the swept BLOBs below the broker's log
   * start begin, so that a backfill reads the backlog the sweeper moved out of the broker too (read
   * back from its BLOBs, in order); the broker's own earliest offsets without it.
   */
  private SortedMap<Integer, Long> withSwept(SortedMap<Integer, Long> earliest) {
    if (options.sweepCatalog == null) {
      return earliest;
    }
    SweepCatalogReader catalog = new SweepCatalogReader(options.sweepCatalog);
    SortedMap<Integer, Long> out = new TreeMap<>(earliest);
    for (Map.Entry<Integer, Long> e : earliest.entrySet()) {
      List<BlobRow> below = catalog.covering(options.topic, e.getKey(), 0, e.getValue());
      if (!below.isEmpty()) {
        out.put(e.getKey(), Math.min(e.getValue(), below.get(0).startOffset()));
      }
    }
    return out;
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return new RangeReaderFactory(
        options,
        schema,
        layout,
        SourceAccumulators.register(SparkContext.getOrCreate(), options.stream),
        RangeReaderFactory.hadoopConf(options));
  }
}

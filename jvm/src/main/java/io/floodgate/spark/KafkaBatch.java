package io.floodgate.spark;

import io.floodgate.spark.kafka.TopicOffsets;
import io.floodgate.spark.offsets.TopicPartitions;
import io.floodgate.spark.options.BatchBounds;
import io.floodgate.spark.options.OptionText;
import io.floodgate.spark.options.SourceOptions;
import io.floodgate.spark.read.ExecutorLocations;
import io.floodgate.spark.read.KafkaRange;
import io.floodgate.spark.read.KafkaTask;
import io.floodgate.spark.read.OffsetRangeCalculator;
import io.floodgate.spark.read.RangeReaderFactory;
import io.floodgate.spark.read.RowLayout;
import io.floodgate.spark.swept.BlobRow;
import io.floodgate.spark.swept.SweepCatalogReader;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.SortedMap;
import java.util.function.Supplier;
import org.apache.kafka.common.TopicPartition;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.types.StructType;

/**
 * A batch query of the topics read ({@code spark.read.format("floodgate_kafka")}: {@code topic},
 * {@code subscribe}, {@code subscribePattern} or {@code assign}), as Spark's Kafka source reads
 * one: from {@code startingOffsets} ({@code earliest} by default; {@code committed} or Spark's
 * JSON, -2 earliest) to {@code endingOffsets} ({@code latest} by default, or Spark's JSON, -1
 * latest), each topic-partition's range read by the same tasks as a micro-batch's (swept ranges
 * from their BLOBs with {@code sweepCatalog}, dead letters, {@code failOnDataLoss}). With {@code
 * sweepCatalog}, {@code earliest} starts where the topic-partition's swept BLOBs do.
 *
 * <p>An end at {@code latest} is read again by each task when the query runs ({@link
 * KafkaRange#endAtLatest}): a DataFrame collected twice reads what was written in between, as
 * Spark's Kafka source resolves {@code latest} at each execution ({@code KafkaRelation.buildScan},
 * {@code KafkaBatch.planInputPartitions}) and never when the DataFrame is defined. Spark may run a
 * DataFrame's plan again without planning it again (its {@code BatchScanExec} keeps the input
 * partitions), so the planning's reading serves only to size and refuse the ranges.
 */
final class KafkaBatch implements Batch {
  private final SourceOptions options;
  private final StructType schema;
  private final RowLayout layout;
  private final BatchBounds bounds;
  private final Supplier<TopicOffsets> offsets;

  /** The application's executors, sorted, for the tasks' preferred locations (tests: none). */
  private Supplier<List<String>> executors = List::of;

  KafkaBatch(SourceOptions options, StructType schema, RowLayout layout, BatchBounds bounds) {
    this(options, schema, layout, bounds, () -> new TopicOffsets(options));
    this.executors = ExecutorLocations::current;
  }

  /**
   * @param offsets the driver's reads of the topics' offsets, one per planning (closed after it)
   */
  KafkaBatch(
      SourceOptions options,
      StructType schema,
      RowLayout layout,
      BatchBounds bounds,
      Supplier<TopicOffsets> offsets) {
    this.options = options;
    this.schema = schema;
    this.layout = layout;
    this.bounds = bounds;
    this.offsets = offsets;
  }

  /**
   * A task per topic-partition with tuples in {@code [start, end)} (at most {@code maxTasks}); one
   * whose end is {@code latest} has a task even when it holds nothing now, as it may when the query
   * runs.
   *
   * @throws IllegalArgumentException a start at {@code latest} (-1), an end at {@code earliest}
   *     (-2), or a topic-partition whose end is before its start, as Spark's Kafka source refuses
   *     them
   */
  @Override
  public InputPartition[] planInputPartitions() {
    String how = bounds.startingGiven ? options.startingOffsets : "earliest";
    boolean startsAtLatest = how.equals("latest");
    for (Map<Integer, Long> perTopic : options.startingPartitionOffsets.values()) {
      startsAtLatest |= how.equals("specific") && perTopic.containsValue(SourceOptions.LATEST);
    }
    if (startsAtLatest) {
      throw OptionText.refuse(
          "startingOffsets: a batch query cannot start at latest (-1), as Spark's Kafka source;"
              + " allowed: earliest (the default), committed, or JSON with -2 for earliest");
    }
    List<KafkaRange> ranges = new ArrayList<>();
    try (TopicOffsets offsets = this.offsets.get()) {
      SortedMap<TopicPartition, Long> start = offsets.start(how, options.startingPartitionOffsets);
      if (how.equals("earliest")) {
        start = withSwept(start);
      }
      SortedMap<TopicPartition, Long> end =
          bounds.ends(offsets.latest(start.keySet()), offsets::offsetsForTimes);
      for (Map.Entry<TopicPartition, Long> e : end.entrySet()) {
        TopicPartition tp = e.getKey();
        long from = start.get(tp);
        if (e.getValue() < from) {
          throw OptionText.refuse(
              "partition "
                  + tp.partition()
                  + " of '"
                  + tp.topic()
                  + "' ends at offset "
                  + e.getValue()
                  + ", before its start "
                  + from);
        }
        boolean atLatest = bounds.endsAtLatest(tp);
        if (e.getValue() > from || atLatest) {
          ranges.add(
              new KafkaRange(tp.topic(), tp.partition(), from, e.getValue(), null, null, atLatest));
        }
      }
    }
    return KafkaTask.partitions(
        OffsetRangeCalculator.split(ranges, options.minPartitions, options.maxRecordsPerPartition),
        options.maxTasks,
        executors.get());
  }

  /**
   * {@code earliest} with option {@code sweepCatalog}: where the swept BLOBs below the broker's log
   * start begin, per topic-partition, so that a backfill reads the backlog the sweeper moved out of
   * the broker too (read back from its BLOBs, in order); the broker's own earliest offsets without
   * it.
   */
  private SortedMap<TopicPartition, Long> withSwept(SortedMap<TopicPartition, Long> earliest) {
    if (options.sweepCatalog == null) {
      return earliest;
    }
    SweepCatalogReader catalog = new SweepCatalogReader(options.sweepCatalog);
    SortedMap<TopicPartition, Long> out = TopicPartitions.sorted(earliest);
    for (Map.Entry<TopicPartition, Long> e : earliest.entrySet()) {
      TopicPartition tp = e.getKey();
      List<BlobRow> below = catalog.covering(tp.topic(), tp.partition(), 0, e.getValue());
      if (!below.isEmpty()) {
        out.put(tp, Math.min(e.getValue(), below.get(0).startOffset()));
      }
    }
    return out;
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return new RangeReaderFactory(options, schema, layout, RangeReaderFactory.hadoopConf(options));
  }
}

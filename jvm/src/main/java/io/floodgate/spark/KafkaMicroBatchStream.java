package io.floodgate.spark;

import io.floodgate.spark.alignment.EventTimeAligner;
import io.floodgate.spark.alignment.IdleTracker;
import io.floodgate.spark.kafka.Subscription;
import io.floodgate.spark.kafka.TopicOffsets;
import io.floodgate.spark.offsets.BatchPlanner;
import io.floodgate.spark.offsets.InitialOffsetLog;
import io.floodgate.spark.offsets.SourceOffset;
import io.floodgate.spark.offsets.TopicPartitions;
import io.floodgate.spark.offsets.WatermarkLog;
import io.floodgate.spark.options.SourceOptions;
import io.floodgate.spark.read.ExecutorLocations;
import io.floodgate.spark.read.KafkaRange;
import io.floodgate.spark.read.KafkaTask;
import io.floodgate.spark.read.OffsetRangeCalculator;
import io.floodgate.spark.read.RangeReaderFactory;
import io.floodgate.spark.read.RowLayout;
import java.io.InterruptedIOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.SortedMap;
import java.util.function.Supplier;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.InterruptException;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.PartitionOffset;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReadMaxRows;
import org.apache.spark.sql.connector.read.streaming.ReportsSourceMetrics;
import org.apache.spark.sql.connector.read.streaming.SupportsAdmissionControl;
import org.apache.spark.sql.connector.read.streaming.SupportsRealTimeMode;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;
import org.apache.spark.sql.types.StructType;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Plans the micro-batches of one streaming query over the topics it reads ({@code topic}, {@code
 * subscribe}, {@code subscribePattern} or {@code assign}), on the driver, as Spark's own {@code
 * KafkaMicroBatchStream} does: every offset is per topic-partition.
 *
 * <ul>
 *   <li>{@link #latestOffset(Offset, ReadLimit)}: the topic-partitions read now ({@link
 *       Subscription}, asked again each time: a partition added to a topic, or a topic created that
 *       matches {@code subscribePattern}, starts at its earliest offset, as Spark's source starts
 *       them), their available offsets capped by the read limit ({@code maxOffsetsPerTrigger}, one
 *       budget over every topic-partition; {@link BatchPlanner}), delayed by {@code
 *       minOffsetsPerTrigger}/{@code maxTriggerDelay}, capped in event time ({@code
 *       maxEventTimeDriftMs}), and never past the target of a Trigger.AvailableNow run;
 *   <li>{@link #planInputPartitions}: a task per topic-partition with tuples in {@code [start,
 *       end)}, or at most {@code maxTasks} tasks ({@link KafkaTask#group});
 *   <li>{@link #commit}: every topic-partition's end offset to the consumer group ({@code
 *       commitOffsets}).
 * </ul>
 *
 * <p>The first offsets ({@link #initialOffset}) are planned once and kept in the checkpoint ({@link
 * InitialOffsetLog}), as Spark's source keeps them: a restart before micro-batch 0 was committed
 * plans it from the same offsets.
 *
 * <p>Data loss is found where Spark's source finds it, and fails the planning with {@code
 * failOnDataLoss} (the default); without, it is logged and the query goes on: a topic-partition
 * that is no longer there (its topic deleted) is dropped ({@code FG-SOURCE-004}); one added whose
 * earliest offset is not 0 is read from there ({@code FG-SOURCE-004}); one whose offsets went back
 * (its topic deleted and created again, or truncated: the last stable offset is below the offset to
 * read next) is read on from its new log start ({@code FG-SOURCE-006}). {@link BatchStarts} holds
 * these rules; {@link SourceMetrics} the metrics Spark asks for.
 *
 * <p>Offsets are {@link SourceOffset}s, whose JSON {@code tests/golden/offsets} specifies byte for
 * byte ({@link io.floodgate.spark.offsets.PartitionOffsets}): the text the removed Python source
 * wrote, so a checkpoint it wrote resumes here ({@code test_python_source_checkpoint.py}).
 */
public final class KafkaMicroBatchStream
    implements MicroBatchStream,
        SupportsAdmissionControl,
        SupportsTriggerAvailableNow,
        SupportsRealTimeMode,
        ReportsSourceMetrics {
  private static final Logger LOG = LoggerFactory.getLogger(KafkaMicroBatchStream.class);

  private final SourceOptions options;
  private final StructType schema;
  private final RowLayout layout;
  private final EventTimeAligner aligner;
  private final IdleTracker idle;
  private final TopicOffsets offsets;

  /** The checkpoint's first offsets; {@code null}: none kept (no checkpoint location). */
  private final InitialOffsetLog firstOffsets;

  /** {@link #initialOffset}, once known. */
  private SourceOffset initial;

  private SortedMap<TopicPartition, Long> availableNowTarget;

  /** When the last micro-batch was let through (minOffsetsPerTrigger); 0: never. */
  private long lastTriggerMs;

  /**
   * The last stable offsets the last planning read ({@link #latest}): for {@link
   * #reportLatestOffset}, the lag metrics and {@link #commit}.
   */
  private SortedMap<TopicPartition, Long> lastLatest = TopicPartitions.empty();

  /** Where a real-time batch that runs again stopped in its first run. */
  private final RealTimeReplay replay;

  private final Supplier<List<String>> executors;

  /** Where each micro-batch starts, and the data loss found there. */
  private final BatchStarts starts;

  KafkaMicroBatchStream(
      SourceOptions options,
      StructType schema,
      RowLayout layout,
      EventTimeAligner aligner,
      InitialOffsetLog firstOffsets) {
    this(
        options,
        schema,
        layout,
        aligner,
        firstOffsets,
        new TopicOffsets(options),
        ExecutorLocations::current);
  }

  /**
   * @param firstOffsets where the first offsets are kept ({@code <checkpointLocation>/0}); {@code
   *     null}: nowhere
   * @param offsets the driver's reads of the topics' offsets
   */
  KafkaMicroBatchStream(
      SourceOptions options,
      StructType schema,
      RowLayout layout,
      EventTimeAligner aligner,
      InitialOffsetLog firstOffsets,
      TopicOffsets offsets) {
    this(options, schema, layout, aligner, firstOffsets, offsets, List::of);
  }

  /**
   * @param executors the application's executors, sorted ({@link ExecutorLocations#current}), read
   *     at each planning for the tasks' preferred locations
   */
  private KafkaMicroBatchStream(
      SourceOptions options,
      StructType schema,
      RowLayout layout,
      EventTimeAligner aligner,
      InitialOffsetLog firstOffsets,
      TopicOffsets offsets,
      Supplier<List<String>> executors) {
    this.executors = executors;
    this.options = options;
    this.schema = schema;
    this.layout = layout;
    this.aligner = aligner;
    this.idle = new IdleTracker(options.idlePartitionTimeoutMs);
    this.firstOffsets = firstOffsets;
    this.offsets = offsets;
    this.starts = new BatchStarts(options, offsets);
    this.replay = new RealTimeReplay(options);
  }

  /**
   * The last stable offsets (read committed) of the topic-partitions read now, read from the broker
   * and remembered in {@link #lastLatest}.
   */
  private SortedMap<TopicPartition, Long> latest() {
    lastLatest = offsets.latest();
    return lastLatest;
  }

  /**
   * {@code call()}, the Kafka client's {@code InterruptException} turned into the {@code
   * InterruptedIOException} Spark takes for a stop ({@code
   * StreamExecution.isInterruptionException}): Spark interrupts the stream thread to stop a query,
   * and a planning call then in the consumer would otherwise end the query "with error". Spark's
   * own Kafka source plans in an {@code UninterruptibleThread} instead.
   */
  private static <T> T stoppable(Supplier<T> call) {
    try {
      return call.get();
    } catch (InterruptException e) {
      Thread.currentThread().interrupt();
      InterruptedIOException stop =
          new InterruptedIOException(
              "floodgate_kafka: interrupted while planning (query stopping)");
      stop.initCause(e);
      throw new UncheckedIOException(stop);
    }
  }

  /**
   * Where the query starts: the offsets kept in the checkpoint, or (the first time) those of {@code
   * startingOffsets}, written there before they are returned (Spark's {@code
   * KafkaMicroBatchStream.getOrCreateInitialPartitionOffsets}). Spark asks again when it re-runs
   * micro-batch 0 after a restart; a checkpoint an older Floodgate wrote has no such file, and gets
   * one now, as Spark's source does with an empty log.
   */
  @Override
  public Offset initialOffset() {
    if (initial == null) {
      initial =
          stoppable(
              () ->
                  new SourceOffset(
                      firstOffsets == null
                          ? startingOffsets()
                          : firstOffsets.getOrCreate(this::startingOffsets)));
      LOG.info("source {}: initial offsets {}", options.stream, initial.offsets());
    }
    return initial;
  }

  private SortedMap<TopicPartition, Long> startingOffsets() {
    SortedMap<TopicPartition, Long> start =
        offsets.start(options.startingOffsets, options.startingPartitionOffsets);
    LOG.info(
        "source {}: first offsets from startingOffsets = {}: {}{}",
        options.stream,
        options.startingOffsets,
        start,
        firstOffsets == null ? "" : ", kept in " + firstOffsets.file());
    return start;
  }

  @Override
  public Offset deserializeOffset(String json) {
    return SourceOffset.parse(json);
  }

  @Override
  public ReadLimit getDefaultReadLimit() {
    return options.maxRowsPerTrigger != null
        ? ReadLimit.maxRows(options.maxRowsPerTrigger)
        : ReadLimit.allAvailable();
  }

  @Override
  public Offset latestOffset() {
    throw new UnsupportedOperationException(
        "latestOffset(Offset, ReadLimit) should be called instead of this method");
  }

  @Override
  public Offset latestOffset(Offset start, ReadLimit limit) {
    return stoppable(() -> plan(start, limit));
  }

  private Offset plan(Offset start, ReadLimit limit) {
    SortedMap<TopicPartition, Long> before = lastLatest;
    SortedMap<TopicPartition, Long> latest = latest();
    SortedMap<TopicPartition, Long> begin =
        starts.forPlanning(SourceOffset.of(start).offsets(), latest, before);
    if (availableNowTarget != null) {
      SortedMap<TopicPartition, Long> capped = TopicPartitions.empty();
      latest.forEach(
          (p, o) -> capped.put(p, Math.min(o, availableNowTarget.getOrDefault(p, begin.get(p)))));
      latest = capped;
    }
    if (delayed(begin, latest)) {
      return start;
    }
    Long maxRows = limit instanceof ReadMaxRows max ? max.maxRows() : null;
    SortedMap<TopicPartition, Long> end =
        BatchPlanner.planBatchEnd(begin, latest, maxRows, TopicPartitions.ORDER);
    if (options.maxEventTimeDriftMs != null) {
      Set<TopicPartition> idlePartitions = idle.observe(latest);
      if (availableNowTarget != null) {
        for (Map.Entry<TopicPartition, Long> e : latest.entrySet()) {
          if (begin.getOrDefault(e.getKey(), 0L) >= e.getValue()) {
            idlePartitions.add(e.getKey());
          }
        }
      }
      end = aligner.align(begin, end, latest, idlePartitions);
    }
    return new SourceOffset(end);
  }

  /**
   * Whether to wait for more tuples: fewer than {@code minOffsetsPerTrigger} are new and {@code
   * maxTriggerDelay} has not passed since the last micro-batch (Spark's {@code
   * KafkaMicroBatchStream.delayBatch}); never under Trigger.AvailableNow.
   */
  private boolean delayed(Map<TopicPartition, Long> begin, Map<TopicPartition, Long> latest) {
    Long minimum = options.minRowsPerTrigger;
    if (minimum == null || availableNowTarget != null) {
      return false;
    }
    long now = System.currentTimeMillis();
    if (lastTriggerMs == 0 || now - lastTriggerMs >= options.maxTriggerDelayMs) {
      lastTriggerMs = now;
      return false;
    }
    long waiting = 0;
    for (Map.Entry<TopicPartition, Long> e : latest.entrySet()) {
      waiting += Math.max(0, e.getValue() - begin.getOrDefault(e.getKey(), 0L));
    }
    if (waiting < minimum) {
      return true;
    }
    lastTriggerMs = now;
    return false;
  }

  /**
   * The last stable offsets the last {@link #latestOffset(Offset, ReadLimit)} read, as Spark's
   * {@code KafkaMicroBatchStream.reportLatestOffset} returns them: Spark asks right after that
   * call, and a second read of the broker would cost each trigger two more requests and could
   * report offsets the micro-batch was not planned against.
   *
   * @return {@code null} before the first planning, as Spark's source
   */
  @Override
  public Offset reportLatestOffset() {
    return lastLatest.isEmpty() ? null : new SourceOffset(lastLatest);
  }

  @Override
  public void prepareForTriggerAvailableNow() {
    availableNowTarget = stoppable(this::latest);
  }

  /**
   * Where the tasks of a batch from {@code start} to {@code finish} begin ({@link BatchStarts}).
   */
  private SortedMap<TopicPartition, Long> taskStarts(
      Offset start, SortedMap<TopicPartition, Long> finish) {
    return stoppable(() -> starts.forTasks(SourceOffset.of(start).offsets(), finish));
  }

  @Override
  public InputPartition[] planInputPartitions(Offset start, Offset end) {
    SortedMap<TopicPartition, Long> finish = SourceOffset.of(end).offsets();
    SortedMap<TopicPartition, Long> begin = taskStarts(start, finish);
    Long watermark = null;
    Long batch = null;
    if (options.watermarkCheckpoint != null) {
      long[] logged = WatermarkLog.batchWatermark(options.watermarkCheckpoint, finish, 8);
      if (logged == null) {
        LOG.warn(
            "FG-SOURCE-002 source {}: no offset log entry for {} under {}: late tuples of this"
                + " micro-batch are not dead-lettered (Spark drops them)",
            options.stream,
            finish,
            options.watermarkCheckpoint);
      } else {
        batch = logged[0];
        watermark = logged[1];
      }
    }
    List<KafkaRange> ranges = new ArrayList<>();
    for (Map.Entry<TopicPartition, Long> e : finish.entrySet()) {
      long from = begin.getOrDefault(e.getKey(), 0L);
      if (e.getValue() > from) {
        TopicPartition tp = e.getKey();
        ranges.add(
            new KafkaRange(tp.topic(), tp.partition(), from, e.getValue(), watermark, batch));
      }
    }
    return KafkaTask.partitions(
        OffsetRangeCalculator.split(ranges, options.minPartitions, options.maxRecordsPerPartition),
        options.maxTasks,
        executors.get());
  }

  /**
   * Spark's Real-Time Mode starts this query: refuse what a real-time batch cannot honour ({@link
   * RealTimeMode#refuse}).
   *
   * @throws UnsupportedOperationException naming the option
   */
  @Override
  public void prepareForRealTimeMode() {
    RealTimeMode.refuse(options);
  }

  /**
   * A real-time batch's tasks: one per topic-partition the planning found ({@link #latestOffset},
   * which Spark calls first), each reading from {@code start} with no end until the batch's
   * deadline; topic-partitions added or gone, or whose offsets went back, as in a micro-batch.
   */
  @Override
  public InputPartition[] planInputPartitions(Offset start) {
    SortedMap<TopicPartition, Long> found =
        lastLatest.isEmpty() ? stoppable(this::latest) : lastLatest;
    List<KafkaRange> ranges =
        RealTimeMode.ranges(taskStarts(start, found), found, stoppable(replay::firstRunEnds));
    return KafkaTask.partitions(ranges, null, executors.get());
  }

  /** A real-time batch's end: where each of its tasks stopped. */
  @Override
  public Offset mergeOffsets(PartitionOffset[] offsets) {
    return RealTimeMode.merge(offsets);
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return new RangeReaderFactory(options, schema, layout, RangeReaderFactory.hadoopConf(options));
  }

  @Override
  public void commit(Offset end) {
    if (!options.commitOffsets) {
      return;
    }
    Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
    SourceOffset.of(end)
        .offsets()
        .forEach(
            (tp, o) -> {
              // A topic-partition gone since (its topic deleted, failOnDataLoss = false) is not
              // committed: the group's commit of it would fail once its retries time out.
              if (lastLatest.isEmpty() || lastLatest.containsKey(tp)) {
                offsets.put(tp, new OffsetAndMetadata(o));
              }
            });
    if (!offsets.isEmpty()) {
      stoppable(
          () -> {
            this.offsets.commit(offsets);
            return null;
          });
    }
  }

  /**
   * The source's metrics in every {@code StreamingQueryProgress} ({@link SourceMetrics}): the
   * offsets behind the last stable offsets the last planning read, the alignment's counts, and the
   * data loss the planning skipped.
   */
  @Override
  public Map<String, String> metrics(Optional<Offset> latestConsumedOffset) {
    return SourceMetrics.of(
        latestConsumedOffset.map(o -> SourceOffset.of(o).offsets()), lastLatest, aligner, starts);
  }

  @Override
  public void stop() {
    offsets.close();
    aligner.close();
  }

  @Override
  public String toString() {
    return "FloodgateKafka[" + options.describe() + "]";
  }
}

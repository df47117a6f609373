package io.floodgate.spark;

import io.floodgate.spark.alignment.EventTimeAligner;
import io.floodgate.spark.alignment.IdleTracker;
import io.floodgate.spark.offsets.BatchPlanner;
import io.floodgate.spark.offsets.InitialOffsetLog;
import io.floodgate.spark.offsets.SourceOffset;
import io.floodgate.spark.offsets.TopicPartitions;
import io.floodgate.spark.offsets.WatermarkLog;
import io.floodgate.spark.read.ExecutorLocations;
import io.floodgate.spark.read.KafkaRange;
import io.floodgate.spark.read.KafkaTask;
import io.floodgate.spark.read.OffsetRangeCalculator;
import io.floodgate.spark.read.RangeReaderFactory;
import io.floodgate.spark.read.RowLayout;
import java.io.InterruptedIOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.Collections;
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
 * read next) is read on from its new log start ({@code FG-SOURCE-006}).
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

  /**
   * The new start of each topic-partition whose offsets went back, by the offset it went back from
   * ({@link #wentBack}), kept so that the micro-batch's tasks read from where it was planned.
   */
  private final Map<TopicPartition, Map.Entry<Long, Long>> wentBackStarts = new HashMap<>();

  private SortedMap<TopicPartition, Long> availableNowTarget;

  /** When the last micro-batch was let through (minOffsetsPerTrigger); 0: never. */
  private long lastTriggerMs;

  /**
   * The last stable offsets the last planning read ({@link #latest}): for {@link
   * #reportLatestOffset}, the lag metrics and {@link #commit}.
   */
  private SortedMap<TopicPartition, Long> lastLatest = TopicPartitions.empty();

  /**
   * Offsets, and times, the planning found lost and skipped ({@code failOnDataLoss = false}): the
   * topic-partitions gone ({@link #present}, times only) and those whose offsets went back ({@link
   * #wentBack}), since the query started. The tasks count theirs in their own metrics ({@link
   * io.floodgate.spark.read.TaskMetrics}).
   */
  private long plannedOffsetOutOfRange;

  private long plannedDataLoss;

  /**
   * Where each topic-partition first seen after the query started begins (a partition added to a
   * topic, a topic created that matches the pattern): its earliest offset when first seen (as
   * Spark's Kafka source starts them), kept so that the micro-batch's tasks read from where it was
   * planned.
   */
  private final Map<TopicPartition, Long> addedStarts = new HashMap<>();

  private final Supplier<List<String>> executors;

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
        skipDiscarded(
            wentBack(
                withAdded(present(SourceOffset.of(start).offsets(), latest), latest.keySet()),
                latest,
                before));
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
   * {@code begin} without the topic-partitions no longer read ({@code latest} lacks them: the topic
   * was deleted), as Spark's Kafka source ({@code KafkaMicroBatchStream.planInputPartitions}: "...
   * are gone. Some data may have been missed"): with {@code failOnDataLoss} (the default) the query
   * fails, naming them; else they are dropped, logging {@code FG-SOURCE-004}.
   *
   * @throws IllegalStateException a topic-partition was deleted and {@code failOnDataLoss} is true
   */
  private SortedMap<TopicPartition, Long> present(
      SortedMap<TopicPartition, Long> begin, Map<TopicPartition, Long> latest) {
    SortedMap<TopicPartition, Long> out = TopicPartitions.sorted(begin);
    List<TopicPartition> gone = new ArrayList<>();
    for (TopicPartition tp : begin.keySet()) {
      if (!latest.containsKey(tp)) {
        gone.add(tp);
        out.remove(tp);
      }
    }
    if (!gone.isEmpty()) {
      String what =
          "source "
              + options.stream
              + ": topic-partitions "
              + gone
              + " are gone (their topic was deleted)";
      if (options.failOnDataLoss) {
        throw new IllegalStateException(
            what
                + "; their tuples after the last micro-batch may be lost. Set failOnDataLoss ="
                + " false to go on without them (as Spark's Kafka source)");
      }
      plannedDataLoss += gone.size();
      LOG.warn("FG-SOURCE-004 {}: dropped from the offsets (failOnDataLoss = false)", what);
    }
    return out;
  }

  /**
   * {@code begin} with each topic-partition whose offsets went back ({@code latest} below the
   * offset to read next: its topic deleted and created again, or its log truncated) moved to where
   * its log starts now. Spark's source reports the same ("Partition ...'s offset was changed from X
   * to Y, some data may have been missed", {@code KafkaOffsetReaderAdmin
   * .getOffsetRangesFromResolvedOffsets}); planned from the old offset, the partition would read
   * nothing until its new log passed it, then skip what lies below without a word.
   *
   * <p>With {@code failOnDataLoss = false} the partition is read on from its new log start (Spark's
   * goes on from the new end, losing what was written below it meanwhile), logging {@code
   * FG-SOURCE-006} and counting {@code dataLoss} and, in {@code offsetOutOfRange}, the offsets
   * between the old offset and the old log end last seen. After a truncation that start may be
   * below tuples read before: they are read again rather than risk losing new ones.
   *
   * @param before the last stable offsets the planning read before this call (for the count)
   * @throws IllegalStateException with {@code failOnDataLoss} (the default), naming each such
   *     topic-partition, the offset it went back from and the one it went back to
   */
  private SortedMap<TopicPartition, Long> wentBack(
      SortedMap<TopicPartition, Long> begin,
      Map<TopicPartition, Long> latest,
      Map<TopicPartition, Long> before) {
    SortedMap<TopicPartition, Long> back = TopicPartitions.empty();
    begin.forEach(
        (tp, from) -> {
          Long now = latest.get(tp);
          if (now != null && now < from) {
            back.put(tp, now);
          }
        });
    if (back.isEmpty()) {
      return begin;
    }
    SortedMap<TopicPartition, Long> out = TopicPartitions.sorted(begin);
    List<TopicPartition> unknown = new ArrayList<>();
    for (TopicPartition tp : back.keySet()) {
      Map.Entry<Long, Long> known = wentBackStarts.get(tp);
      if (known != null && known.getKey().equals(begin.get(tp))) {
        out.put(tp, known.getValue()); // reported when this micro-batch was planned
      } else {
        unknown.add(tp);
      }
    }
    if (unknown.isEmpty()) {
      return out;
    }
    StringBuilder what = new StringBuilder();
    for (TopicPartition tp : unknown) {
      what.append(what.length() == 0 ? "" : "; ")
          .append("partition ")
          .append(tp)
          .append("'s offset was changed from ")
          .append(begin.get(tp))
          .append(" to ")
          .append(back.get(tp));
    }
    String message =
        "source "
            + options.stream
            + ": "
            + what
            + " (its topic deleted and created again, or its log truncated): the tuples after"
            + " the last micro-batch may be lost";
    if (options.failOnDataLoss) {
      throw new IllegalStateException(
          message
              + ". Set failOnDataLoss = false to read on from the new log start (as Spark's"
              + " Kafka source allows)");
    }
    SortedMap<TopicPartition, Long> starts = offsets.earliest(unknown);
    SortedMap<TopicPartition, Long> readFrom = TopicPartitions.empty();
    for (TopicPartition tp : unknown) {
      long from = begin.get(tp);
      long to = Math.min(starts.getOrDefault(tp, back.get(tp)), back.get(tp));
      wentBackStarts.put(tp, Map.entry(from, to));
      readFrom.put(tp, to);
      out.put(tp, to);
      plannedDataLoss++;
      plannedOffsetOutOfRange += Math.max(0, before.getOrDefault(tp, from) - from);
    }
    LOG.warn(
        "FG-SOURCE-006 {}; read on from the new log start {} (failOnDataLoss = false)",
        message,
        readFrom);
    return out;
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
   * {@code begin} with each of {@code partitions} it does not name: a topic-partition first seen
   * since the offsets were planned (a partition added to a topic, a topic created that matches
   * {@code subscribePattern}) starts at its earliest offset, as Spark's Kafka source starts it
   * ({@code KafkaOffsetReaderAdmin.getOffsetRangesFromResolvedOffsets}: "new" is in the end offsets
   * and not in the start ones, the previous micro-batch's end or the first offsets).
   *
   * <p>One whose earliest offset is not 0 is data loss, as in Spark ("Added partition t-1 starts
   * from 5 instead of 0"): records were deleted from it (retention, {@code DeleteRecords}) before
   * the query first saw it. With {@code failOnDataLoss} (the default) the planning fails; else it
   * is read from its earliest offset, logging {@code FG-SOURCE-004} and counting {@code dataLoss}
   * (once per partition) and, in {@code offsetOutOfRange}, the offsets below its start.
   *
   * @throws IllegalStateException an added topic-partition starts above 0 and {@code
   *     failOnDataLoss} is true, naming each such partition and its earliest offset
   */
  private SortedMap<TopicPartition, Long> withAdded(
      SortedMap<TopicPartition, Long> begin, Set<TopicPartition> partitions) {
    List<TopicPartition> unseen = new ArrayList<>();
    for (TopicPartition p : partitions) {
      if (!begin.containsKey(p) && !addedStarts.containsKey(p)) {
        unseen.add(p);
      }
    }
    if (!unseen.isEmpty()) {
      SortedMap<TopicPartition, Long> found = offsets.earliest(unseen);
      LOG.info(
          "source {}: topic-partitions added since the query started: read from their earliest"
              + " offsets {}",
          options.stream,
          found);
      reportAddedAfterZero(found);
      addedStarts.putAll(found);
    }
    SortedMap<TopicPartition, Long> out = TopicPartitions.sorted(begin);
    for (TopicPartition p : partitions) {
      out.putIfAbsent(p, addedStarts.getOrDefault(p, 0L));
    }
    return out;
  }

  /**
   * The data loss of added topic-partitions whose earliest offset ({@code found}) is not 0 ({@link
   * #withAdded}): fails with {@code failOnDataLoss}, else logs and counts it.
   */
  private void reportAddedAfterZero(Map<TopicPartition, Long> found) {
    StringBuilder what = new StringBuilder();
    long skipped = 0;
    int lost = 0;
    for (Map.Entry<TopicPartition, Long> e : found.entrySet()) {
      if (e.getValue() != 0) {
        what.append(what.length() == 0 ? "" : "; ")
            .append("added partition ")
            .append(e.getKey())
            .append(" starts from ")
            .append(e.getValue())
            .append(" instead of 0");
        skipped += Math.max(0, e.getValue());
        lost++;
      }
    }
    if (lost == 0) {
      return;
    }
    String message =
        "source "
            + options.stream
            + ": "
            + what
            + " (records deleted before the query first saw it: retention or DeleteRecords),"
            + " some data may have been missed";
    if (options.failOnDataLoss) {
      throw new IllegalStateException(
          message
              + ". Set failOnDataLoss = false to read it from its earliest offset (as Spark's"
              + " Kafka source allows)");
    }
    plannedDataLoss += lost;
    plannedOffsetOutOfRange += skipped;
    LOG.warn("FG-SOURCE-004 {}; read from the earliest offset (failOnDataLoss = false)", message);
  }

  /** {@code begin} moved up to {@code discardBefore}, for the topic-partitions it holds. */
  private SortedMap<TopicPartition, Long> skipDiscarded(Map<TopicPartition, Long> begin) {
    SortedMap<TopicPartition, Long> moved = TopicPartitions.sorted(begin);
    TopicPartitions.flatten(options.discardBefore)
        .forEach(
            (p, o) -> {
              if (moved.containsKey(p)) {
                moved.merge(p, o, Math::max);
              }
            });
    return moved;
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
   * Where the tasks of a batch from {@code start} to {@code finish} begin: topic-partitions added
   * since at their first offset, those whose offsets went back at their new start, offsets
   * discarded skipped (the planning's own rules, {@link #withAdded}, {@link #wentBack}, {@link
   * #skipDiscarded}).
   */
  private SortedMap<TopicPartition, Long> taskStarts(
      Offset start, SortedMap<TopicPartition, Long> finish) {
    return stoppable(
        () ->
            skipDiscarded(
                wentBack(
                    withAdded(SourceOffset.of(start).offsets(), finish.keySet()),
                    finish,
                    Map.of())));
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
    List<KafkaRange> ranges = RealTimeMode.ranges(taskStarts(start, found), found);
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
   * The source's metrics in every {@code StreamingQueryProgress}. Over the topic-partitions both in
   * {@code latestConsumedOffset} and in the last stable offsets the last planning read (as Spark's
   * {@code KafkaMicroBatchStream.metrics}: a partition added since, or gone, is in one only), the
   * offsets each is behind, never below 0: {@code lag} (their sum), and Spark's {@code
   * minOffsetsBehindLatest}, {@code maxOffsetsBehindLatest} and {@code avgOffsetsBehindLatest}
   * (those three only when a partition is in both). Then {@code alignmentCaps}, {@code
   * alignmentReads} (rounds of event-time reads of the broker the planning made), and {@code
   * offsetOutOfRange} and {@code dataLoss}: the offsets, and times, the planning found lost and
   * skipped with {@code failOnDataLoss = false}, since the query started. What the tasks count is
   * in the scan's SQL metrics instead ({@link io.floodgate.spark.read.TaskMetrics}).
   */
  @Override
  public Map<String, String> metrics(Optional<Offset> latestConsumedOffset) {
    Map<String, String> out = new HashMap<>();
    if (latestConsumedOffset.isPresent()) {
      SortedMap<TopicPartition, Long> consumed =
          SourceOffset.of(latestConsumedOffset.get()).offsets();
      List<Long> behind = new ArrayList<>();
      lastLatest.forEach(
          (tp, latest) -> {
            Long at = consumed.get(tp);
            if (at != null) {
              behind.add(Math.max(0, latest - at));
            }
          });
      long lag = behind.stream().mapToLong(Long::longValue).sum();
      out.put("lag", Long.toString(lag));
      if (!behind.isEmpty()) {
        out.put("minOffsetsBehindLatest", Long.toString(Collections.min(behind)));
        out.put("maxOffsetsBehindLatest", Long.toString(Collections.max(behind)));
        out.put("avgOffsetsBehindLatest", Double.toString((double) lag / behind.size()));
      }
    }
    out.put("alignmentCaps", Long.toString(aligner.capped()));
    out.put("alignmentReads", Long.toString(aligner.eventTimeReads()));
    out.put("offsetOutOfRange", Long.toString(plannedOffsetOutOfRange));
    out.put("dataLoss", Long.toString(plannedDataLoss));
    return out;
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

package io.floodgate.spark;

import io.floodgate.spark.kafka.TopicOffsets;
import io.floodgate.spark.offsets.TopicPartitions;
import io.floodgate.spark.options.SourceOptions;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.SortedMap;
import org.apache.kafka.common.TopicPartition;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Where a micro-batch's topic-partitions start, on the driver, and the data loss found on the way,
 * as Spark's Kafka source finds it ({@code KafkaMicroBatchStream}, {@code KafkaOffsetReaderAdmin
 * .getOffsetRangesFromResolvedOffsets}): the previous micro-batch's end (or the first offsets)
 * without the topic-partitions gone ({@link #present}), with those added since at their earliest
 * offset ({@link #withAdded}), those whose offsets went back at their new log start ({@link
 * #wentBack}), and {@code discardBefore} skipped ({@link #skipDiscarded}).
 *
 * <p>With {@code failOnDataLoss} (the default) data loss fails the planning with an {@link
 * IllegalStateException} naming the topic-partitions and offsets in Spark's words; without, it is
 * logged ({@code FG-SOURCE-004}, {@code FG-SOURCE-006}) and counted ({@link #dataLoss}, {@link
 * #offsetOutOfRange}, the source's metrics). The starts chosen are kept, so that the tasks of a
 * micro-batch ({@link #forTasks}) read from where it was planned ({@link #forPlanning}).
 */
final class BatchStarts {
  /** The stream's logger: these lines are the planning's. */
  private static final Logger LOG = LoggerFactory.getLogger(KafkaMicroBatchStream.class);

  private final SourceOptions options;
  private final TopicOffsets offsets;

  /**
   * The new start of each topic-partition whose offsets went back, by the offset it went back from
   * ({@link #wentBack}), kept so that the micro-batch's tasks read from where it was planned.
   */
  private final Map<TopicPartition, Map.Entry<Long, Long>> wentBackStarts = new HashMap<>();

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

  /**
   * @param offsets the driver's reads of the topics' offsets (the earliest offsets of those added
   *     or gone back)
   */
  BatchStarts(SourceOptions options, TopicOffsets offsets) {
    this.options = options;
    this.offsets = offsets;
  }

  /**
   * Where a micro-batch from {@code start} begins, planned against {@code latest}.
   *
   * @param start the previous micro-batch's end, or the first offsets
   * @param latest the last stable offsets of the topic-partitions read now
   * @param before the last stable offsets the planning read before (for the counts)
   * @throws IllegalStateException data loss, with {@code failOnDataLoss}
   */
  SortedMap<TopicPartition, Long> forPlanning(
      SortedMap<TopicPartition, Long> start,
      SortedMap<TopicPartition, Long> latest,
      SortedMap<TopicPartition, Long> before) {
    return skipDiscarded(
        wentBack(withAdded(present(start, latest), latest.keySet()), latest, before));
  }

  /**
   * Where the tasks of a batch from {@code start} to {@code finish} begin: topic-partitions added
   * since at their first offset, those whose offsets went back at their new start, offsets
   * discarded skipped (the planning's own rules).
   *
   * @throws IllegalStateException data loss not found when the batch was planned, with {@code
   *     failOnDataLoss}
   */
  SortedMap<TopicPartition, Long> forTasks(
      SortedMap<TopicPartition, Long> start, SortedMap<TopicPartition, Long> finish) {
    return skipDiscarded(wentBack(withAdded(start, finish.keySet()), finish, Map.of()));
  }

  /** Offsets the planning found lost and skipped since the query started. */
  long offsetOutOfRange() {
    return plannedOffsetOutOfRange;
  }

  /** Times the planning found data lost and went on, since the query started. */
  long dataLoss() {
    return plannedDataLoss;
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
}

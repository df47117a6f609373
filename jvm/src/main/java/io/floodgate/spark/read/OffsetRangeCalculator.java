package io.floodgate.spark.read;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

/**
 * Splits the Kafka partitions' ranges of a micro-batch or batch query over more Spark tasks, by
 * options {@code minPartitions} and {@code maxRecordsPerPartition}, with the rule of Spark's {@code
 * KafkaOffsetRangeCalculator.getRanges} (Spark 4.2), so that a query reads with the same number of
 * tasks, over the same offsets, as Spark's Kafka source:
 *
 * <ol>
 *   <li>neither option, or {@code minPartitions} at most the number of non-empty ranges and no
 *       {@code maxRecordsPerPartition}: the ranges as they are;
 *   <li>{@code maxRecordsPerPartition}: each range in {@code ceil(size / max)} near-equal parts;
 *   <li>then, when {@code minPartitions} is above the number of ranges: a range whose share of the
 *       offsets ({@code round(size / total * minPartitions)}) is at most one part stays whole, the
 *       others are split in {@code max(round(size / splitTotal * (minPartitions - whole)), 1)}
 *       parts, {@code splitTotal} the offsets of the ranges split.
 * </ol>
 *
 * <p>Parts are near-equal: part {@code i} of {@code n} takes {@code remaining / (n - i)} offsets,
 * the last part any remainder. Sizes are offsets, not tuples (transaction markers and compacted
 * tuples take offsets too), as in Spark. Each part is a {@link KafkaRange} of its own, read as a
 * range is (its own consumer from the pool, its own data-loss checks, the micro-batch's watermark
 * and id); a range ending at {@code latest} ({@link KafkaRange#endAtLatest}) is split at the
 * planning's reading of it and its last part keeps reading to the latest offset when it runs. An
 * empty range (a batch query's end at {@code latest} that holds nothing yet) is never split and is
 * not counted, as Spark leaves empty ranges out.
 */
public final class OffsetRangeCalculator {
  private OffsetRangeCalculator() {}

  /**
   * The ranges split by the options, in the order of {@code ranges}, a range's parts in offset
   * order.
   *
   * @param ranges one range per topic-partition
   * @param minPartitions {@code minPartitions} ({@code >= 1}), or {@code null}
   * @param maxRecordsPerPartition {@code maxRecordsPerPartition} ({@code >= 1}), or {@code null}
   */
  public static List<KafkaRange> split(
      List<KafkaRange> ranges, Integer minPartitions, Long maxRecordsPerPartition) {
    List<KafkaRange> nonEmpty = new ArrayList<>();
    List<KafkaRange> empty = new ArrayList<>();
    for (KafkaRange r : ranges) {
      (r.size() > 0 ? nonEmpty : empty).add(r);
    }
    if ((minPartitions == null || nonEmpty.size() >= minPartitions)
        && maxRecordsPerPartition == null) {
      return ranges;
    }
    List<KafkaRange> bounded = nonEmpty;
    if (maxRecordsPerPartition != null) {
      bounded = new ArrayList<>();
      for (KafkaRange r : nonEmpty) {
        bounded.addAll(divide(r, (int) Math.ceil((double) r.size() / maxRecordsPerPartition)));
      }
    }
    List<KafkaRange> out = bounded;
    if (minPartitions != null && minPartitions > bounded.size()) {
      long total = 0;
      for (KafkaRange r : bounded) {
        total += r.size();
      }
      long wholeTotal = 0;
      int wholeCount = 0;
      Set<String> whole =
          new HashSet<>(); // topic-partitions kept whole, as Spark's by TopicPartition
      for (KafkaRange r : bounded) {
        if (partCount(r.size(), total, minPartitions) == 1) {
          wholeTotal += r.size();
          wholeCount++;
          whole.add(key(r));
        }
      }
      long splitTotal = total - wholeTotal;
      int splitMin = Math.max(minPartitions - wholeCount, 1);
      out = new ArrayList<>();
      for (KafkaRange r : bounded) {
        int parts = whole.contains(key(r)) ? 1 : partCount(r.size(), splitTotal, splitMin);
        out.addAll(divide(r, parts));
      }
    }
    List<KafkaRange> all = new ArrayList<>(out);
    all.addAll(empty);
    return all;
  }

  /** Spark's {@code getPartCount}: {@code max(round(size / total * minParts), 1)}. */
  private static int partCount(long size, long total, int minParts) {
    return (int) Math.max(Math.round((double) size / total * minParts), 1);
  }

  private static String key(KafkaRange r) {
    return r.topic() + "\u0000" + r.partition();
  }

  /**
   * {@code range} in {@code parts} near-equal parts, empty ones left out (Spark's {@code
   * getDividedPartition}); only the last keeps {@link KafkaRange#endAtLatest}.
   */
  static List<KafkaRange> divide(KafkaRange range, int parts) {
    List<KafkaRange> out = new ArrayList<>();
    if (parts <= 1) {
      out.add(range);
      return out;
    }
    long remaining = range.size();
    long start = range.start();
    for (int part = 0; part < parts; part++) {
      long size = remaining / (parts - part);
      remaining -= size;
      long end = Math.min(start + size, range.end());
      boolean last = part == parts - 1;
      if (end > start || (last && range.endAtLatest())) {
        out.add(
            new KafkaRange(
                range.topic(),
                range.partition(),
                start,
                end,
                range.watermarkMs(),
                range.batchId(),
                last && range.endAtLatest()));
      }
      start = end;
    }
    return out;
  }
}

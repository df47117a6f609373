package io.floodgate.spark.offsets;

import java.math.BigInteger;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.SortedMap;
import java.util.TreeMap;

/**
 * How much of each partition a micro-batch reads under option {@code maxOffsetsPerTrigger}: the
 * rule below, specified by the cases of {@code tests/golden/planning/plan_batch_end.json} ({@code
 * BatchPlannerGoldenTest}). Sums and products of offsets are exact ({@code BigInteger}): backlogs
 * near {@code Long.MAX_VALUE} do not overflow.
 */
public final class BatchPlanner {
  private BatchPlanner() {}

  /**
   * A micro-batch's end offsets under a row limit.
   *
   * <p>When everything available fits in {@code maxRows} the batch takes all of it. Otherwise it
   * takes exactly {@code maxRows} tuples: every partition with a backlog first gets one tuple, then
   * the rest of the budget is shared in proportion to the backlogs (largest remainder, ties to the
   * lower partition), which keeps partitions aligned in event time when producers write in time
   * order. With fewer rows than partitions waiting, one tuple each goes to {@code maxRows} of them,
   * round-robin over the partitions in numeric order from {@code (sum(start) / maxRows) %
   * partitions}, so every partition is served within as many batches as there are partitions, with
   * no state between calls.
   *
   * @param start next offset to read per partition (every partition read), in any order
   * @param latest the high watermark per partition; a partition missing here has no backlog
   * @param maxRows most tuples in total; {@code null} for no limit
   * @return end per partition of {@code start}, {@code start <= end <= max(start, latest)}, in
   *     partition order
   * @throws IllegalArgumentException {@code maxRows < 1} when not everything fits
   */
  public static SortedMap<Integer, Long> planBatchEnd(
      Map<Integer, Long> start, Map<Integer, Long> latest, Long maxRows) {
    return planBatchEnd(start, latest, maxRows, Comparator.<Integer>naturalOrder());
  }

  /**
   * {@link #planBatchEnd(Map, Map, Long)} over keys of any kind in {@code order}: one budget over
   * every topic-partition of a source that reads several topics ({@link TopicPartitions#ORDER}: by
   * topic, then partition), the round-robin and the ties going in that order.
   *
   * @param order the keys' order (the partitions' "numeric order" above)
   * @return end per key of {@code start}, a map in {@code order}
   */
  public static <K> SortedMap<K, Long> planBatchEnd(
      Map<K, Long> start, Map<K, Long> latest, Long maxRows, Comparator<? super K> order) {
    SortedMap<K, Long> starts = new TreeMap<>(order);
    starts.putAll(start);
    SortedMap<K, Long> backlog = new TreeMap<>(order);
    starts.forEach((p, s) -> backlog.put(p, Math.max(0, latest.getOrDefault(p, s) - s)));
    BigInteger total = sum(backlog.values());
    SortedMap<K, Long> end = new TreeMap<>(order);
    if (maxRows == null || total.compareTo(BigInteger.valueOf(maxRows)) <= 0) {
      starts.forEach((p, s) -> end.put(p, s + backlog.get(p)));
      return end;
    }
    if (maxRows < 1) {
      throw new IllegalArgumentException("maxRows must be positive or null, got " + maxRows);
    }
    SortedMap<K, Long> take = new TreeMap<>(order);
    starts.keySet().forEach(p -> take.put(p, 0L));
    List<K> waiting = new ArrayList<>();
    backlog.forEach(
        (p, b) -> {
          if (b > 0) {
            waiting.add(p);
          }
        });
    if (maxRows < waiting.size()) {
      List<K> keys = new ArrayList<>(starts.keySet());
      int cursor =
          sum(starts.values())
              .divide(BigInteger.valueOf(maxRows))
              .mod(BigInteger.valueOf(keys.size()))
              .intValueExact();
      List<K> rotated = new ArrayList<>(keys.subList(cursor, keys.size()));
      rotated.addAll(keys.subList(0, cursor));
      long given = 0;
      for (K p : rotated) {
        if (given == maxRows) {
          break;
        }
        if (backlog.get(p) > 0) {
          take.put(p, 1L);
          given++;
        }
      }
      starts.forEach((p, s) -> end.put(p, s + take.get(p)));
      return end;
    }
    long budget = maxRows - waiting.size();
    waiting.forEach(p -> take.put(p, 1L));
    if (budget > 0) {
      SortedMap<K, Long> remaining = new TreeMap<>(order);
      starts.keySet().forEach(p -> remaining.put(p, backlog.get(p) - take.get(p)));
      BigInteger remainingTotal = sum(remaining.values()); // > budget, as total > maxRows
      BigInteger budgetBig = BigInteger.valueOf(budget);
      long shared = 0;
      for (K p : starts.keySet()) {
        long share =
            budgetBig
                .multiply(BigInteger.valueOf(remaining.get(p)))
                .divide(remainingTotal)
                .longValueExact();
        take.put(p, take.get(p) + share);
        shared += share;
      }
      long left = budget - shared;
      List<K> byRemainder = new ArrayList<>(starts.keySet());
      byRemainder.sort(
          Comparator.<K, BigInteger>comparing(
                  p -> budgetBig.multiply(BigInteger.valueOf(remaining.get(p))).mod(remainingTotal),
                  Comparator.reverseOrder())
              .thenComparing(order));
      for (K p : byRemainder) {
        if (left == 0) {
          break;
        }
        if (take.get(p) < backlog.get(p)) {
          take.put(p, take.get(p) + 1);
          left--;
        }
      }
    }
    starts.forEach((p, s) -> end.put(p, s + take.get(p)));
    return end;
  }

  private static BigInteger sum(Iterable<Long> values) {
    BigInteger total = BigInteger.ZERO;
    for (long v : values) {
      total = total.add(BigInteger.valueOf(v));
    }
    return total;
  }
}

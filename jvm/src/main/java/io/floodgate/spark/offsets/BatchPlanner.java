package io.floodgate.spark.offsets;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.SortedMap;
import java.util.TreeMap;

/**
 * How much of each partition a micro-batch reads: the rule the Python source applies ({@code
 * pipeline.offsets.plan_batch_end}), ported line for line so both sources plan the same batches
 * from the same offsets.
 */
public final class BatchPlanner {
  private BatchPlanner() {}

  /**
   * A micro-batch's end offsets under a row limit.
   *
   * <p>When everything available fits in {@code maxRows} the batch takes all of it. Otherwise it
   * takes exactly {@code maxRows} tuples: every partition with a backlog first gets one tuple, then
   * the rest of the budget is shared in proportion to the backlogs (largest remainder), which keeps
   * partitions aligned in event time when producers write in time order. With fewer rows than
   * partitions waiting, one tuple each goes to {@code maxRows} of them, round-robin from {@code
   * sum(start) / maxRows}, so every partition is served within as many batches as there are
   * partitions, with no state between calls.
   *
   * @param start next offset to read per partition (every partition read)
   * @param latest the high watermark per partition; a partition missing here has no backlog
   * @param maxRows most tuples in total; {@code null} for no limit
   * @return end per partition of {@code start}, {@code start <= end <= max(start, latest)}
   * @throws IllegalArgumentException {@code maxRows < 1}
   */
  public static SortedMap<Integer, Long> planBatchEnd(
      Map<Integer, Long> start, Map<Integer, Long> latest, Long maxRows) {
    SortedMap<Integer, Long> backlog = new TreeMap<>();
    long total = 0;
    for (Map.Entry<Integer, Long> e : start.entrySet()) {
      long b = Math.max(0, latest.getOrDefault(e.getKey(), e.getValue()) - e.getValue());
      backlog.put(e.getKey(), b);
      total += b;
    }
    SortedMap<Integer, Long> end = new TreeMap<>();
    if (maxRows == null || total <= maxRows) {
      start.forEach((p, s) -> end.put(p, s + backlog.get(p)));
      return end;
    }
    if (maxRows < 1) {
      throw new IllegalArgumentException("maxRows must be positive or null, got " + maxRows);
    }
    SortedMap<Integer, Long> take = new TreeMap<>();
    start.keySet().forEach(p -> take.put(p, 0L));
    List<Integer> waiting = new ArrayList<>();
    backlog.forEach(
        (p, b) -> {
          if (b > 0) {
            waiting.add(p);
          }
        });
    if (maxRows < waiting.size()) {
      List<Integer> order = new ArrayList<>(start.keySet());
      long sum = start.values().stream().mapToLong(Long::longValue).sum();
      int cursor = (int) Math.floorMod(Math.floorDiv(sum, maxRows), (long) order.size());
      List<Integer> rotated = new ArrayList<>(order.subList(cursor, order.size()));
      rotated.addAll(order.subList(0, cursor));
      long given = 0;
      for (int p : rotated) {
        if (given == maxRows) {
          break;
        }
        if (backlog.get(p) > 0) {
          take.put(p, 1L);
          given++;
        }
      }
      start.forEach((p, s) -> end.put(p, s + take.get(p)));
      return end;
    }
    long budget = maxRows - waiting.size();
    waiting.forEach(p -> take.put(p, 1L));
    if (budget > 0) {
      SortedMap<Integer, Long> remaining = new TreeMap<>();
      long remainingTotal = 0;
      for (int p : start.keySet()) {
        long r = backlog.get(p) - take.get(p);
        remaining.put(p, r);
        remainingTotal += r;
      }
      long shared = 0;
      for (int p : start.keySet()) {
        long share = multiplyDivide(budget, remaining.get(p), remainingTotal);
        take.put(p, take.get(p) + share);
        shared += share;
      }
      long left = budget - shared;
      final long denominator = remainingTotal;
      List<Integer> byRemainder = new ArrayList<>(start.keySet());
      byRemainder.sort(
          Comparator.<Integer>comparingLong(
                  p -> -multiplyModulo(budget, remaining.get(p), denominator))
              .thenComparingInt(p -> p));
      for (int p : byRemainder) {
        if (left == 0) {
          break;
        }
        if (take.get(p) < backlog.get(p)) {
          take.put(p, take.get(p) + 1);
          left--;
        }
      }
    }
    start.forEach((p, s) -> end.put(p, s + take.get(p)));
    return end;
  }

  private static long multiplyDivide(long a, long b, long c) {
    return java.math.BigInteger.valueOf(a)
        .multiply(java.math.BigInteger.valueOf(b))
        .divide(java.math.BigInteger.valueOf(c))
        .longValueExact();
  }

  private static long multiplyModulo(long a, long b, long c) {
    return java.math.BigInteger.valueOf(a)
        .multiply(java.math.BigInteger.valueOf(b))
        .mod(java.math.BigInteger.valueOf(c))
        .longValueExact();
  }
}

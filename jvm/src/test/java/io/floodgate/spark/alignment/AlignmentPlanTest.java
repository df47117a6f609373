package io.floodgate.spark.alignment;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import java.util.SortedMap;
import java.util.TreeMap;
import org.junit.jupiter.api.Test;

/**
 * {@link AlignmentPlan#align}: worked cases of the rule, its properties over random partitions
 * (seeded), and the cuts answered by a time index.
 */
class AlignmentPlanTest {
  private static final long HOUR = 3_600_000L;

  /** Per partition, its tuples' event times in offset order; a lookup over them. */
  private record Log(Map<Integer, List<Long>> times) {
    /** The event times at {@code {partition: offset}}, {@code null} past a partition's end. */
    Map<Integer, Long> at(Map<Integer, Long> wanted) {
      Map<Integer, Long> out = new HashMap<>();
      wanted.forEach(
          (p, o) -> {
            List<Long> series = times.get(p);
            out.put(p, o >= 0 && o < series.size() ? series.get(Math.toIntExact(o)) : null);
          });
      return out;
    }

    /** Kafka's time index over the whole log: the first offset whose time is past the bound. */
    Map<Integer, Long> firstPast(Set<Integer> partitions, long bound) {
      Map<Integer, Long> out = new HashMap<>();
      for (int p : partitions) {
        List<Long> series = times.get(p);
        Long first = null;
        for (int o = 0; o < series.size(); o++) {
          if (series.get(o) > bound) {
            first = (long) o;
            break;
          }
        }
        out.put(p, first);
      }
      return out;
    }

    Map<Integer, Long> latest() {
      Map<Integer, Long> out = new TreeMap<>();
      times.forEach((p, s) -> out.put(p, (long) s.size()));
      return out;
    }
  }

  private static List<Long> hours(int from, int to) {
    List<Long> out = new ArrayList<>();
    for (int h = from; h < to; h++) {
      out.add(h * HOUR);
    }
    return out;
  }

  private static Map<Integer, Long> offsets(long... values) {
    Map<Integer, Long> out = new TreeMap<>();
    for (int p = 0; p < values.length; p++) {
      out.put(p, values[p]);
    }
    return out;
  }

  @Test
  void aPartitionWithoutATupleYetHoldsEveryoneBackUntilIdle() {
    Log log = new Log(Map.of(0, hours(0, 50), 1, List.of()));
    Map<Integer, Long> begin = offsets(0, 0);
    Map<Integer, Long> end = offsets(50, 0);
    Map<Integer, Long> latest = offsets(50, 0);
    assertEquals(begin, AlignmentPlan.align(begin, end, latest, log::at, HOUR, Set.of(), null));
    assertEquals(end, AlignmentPlan.align(begin, end, latest, log::at, HOUR, Set.of(1), null));
  }

  @Test
  void aPartitionFarAheadWaitsForTheOneBehind() {
    // Partition 0 is planned up to hour 10, partition 1 up to hour 1000: with 2 hours of drift,
    // partition 1 reads up to hour 12 only.
    Log log = new Log(Map.of(0, hours(0, 11), 1, hours(5, 1001)));
    Map<Integer, Long> begin = offsets(0, 0);
    Map<Integer, Long> end = log.latest();
    SortedMap<Integer, Long> aligned =
        AlignmentPlan.align(begin, end, log.latest(), log::at, 2 * HOUR, Set.of(), null);
    assertEquals(11L, aligned.get(0));
    List<Long> one = log.times().get(1);
    assertEquals(12 * HOUR, one.get(Math.toIntExact(aligned.get(1)) - 1));
    assertEquals(13 * HOUR, one.get(Math.toIntExact(aligned.get(1))));
  }

  @Test
  void anIdlePartitionHoldsNobodyBack() {
    Log log = new Log(Map.of(0, List.of(0L, HOUR), 1, hours(0, 100)));
    Map<Integer, Long> begin = offsets(2, 0); // partition 0 has nothing more to read
    Map<Integer, Long> end = offsets(2, 100);
    Map<Integer, Long> latest = offsets(2, 100);
    SortedMap<Integer, Long> held =
        AlignmentPlan.align(begin, end, latest, log::at, HOUR, Set.of(), null);
    assertEquals(3L, held.get(1)); // its head (hour 1) holds partition 1 at hour 2
    SortedMap<Integer, Long> free =
        AlignmentPlan.align(begin, end, latest, log::at, HOUR, Set.of(0), null);
    assertEquals(100L, free.get(1));
  }

  /** Rounds of reads a planning with {@code cutPartitions} capped partitions asks for. */
  private static int asks(int cutPartitions) {
    Map<Integer, List<Long>> times = new HashMap<>();
    times.put(0, hours(0, 11));
    for (int p = 1; p <= cutPartitions; p++) {
      List<Long> series = new ArrayList<>();
      for (long i = 0; i < 100_000; i++) {
        series.add(i * (10 + p) * HOUR / 100);
      }
      times.put(p, series);
    }
    Log log = new Log(times);
    Map<Integer, Long> begin = new TreeMap<>();
    times.keySet().forEach(p -> begin.put(p, 0L));
    List<Map<Integer, Long>> calls = new ArrayList<>();
    EventTimes counting =
        wanted -> {
          calls.add(wanted);
          return log.at(wanted);
        };
    SortedMap<Integer, Long> aligned =
        AlignmentPlan.align(begin, log.latest(), log.latest(), counting, 2 * HOUR, Set.of(), null);
    for (int p = 1; p <= cutPartitions; p++) {
      List<Long> series = times.get(p);
      int cut = Math.toIntExact(aligned.get(p));
      assertTrue(series.get(cut - 1) <= 12 * HOUR);
      assertTrue(series.get(cut + 100_000 / 64) > 12 * HOUR);
    }
    return calls.size();
  }

  @Test
  void thePartitionsSearchesGoInStepOneReadForAll() {
    // Searched one after the other, six capped partitions would ask six times as often as one.
    int one = asks(1);
    assertTrue(one > 2, "a capped partition is searched: " + one);
    assertTrue(asks(6) <= one + 2);
  }

  @Test
  void anIndexAnswersTheCutsInOneRequestWithoutASearch() {
    Log log = new Log(Map.of(0, hours(0, 11), 1, hours(5, 1001), 2, hours(3, 2000)));
    Map<Integer, Long> begin = offsets(0, 0, 0);
    List<Set<Integer>> requests = new ArrayList<>();
    List<Map<Integer, Long>> reads = new ArrayList<>();
    SortedMap<Integer, Long> aligned =
        AlignmentPlan.align(
            begin,
            log.latest(),
            log.latest(),
            wanted -> {
              reads.add(wanted);
              return log.at(wanted);
            },
            2 * HOUR,
            Set.of(),
            null,
            (partitions, bound) -> {
              requests.add(Set.copyOf(partitions));
              return log.firstPast(partitions, bound);
            });
    assertEquals(offsets(11, 8, 10), aligned); // hours 5-12 and 3-12: exact cuts
    assertEquals(List.of(Set.of(1, 2)), requests);
    assertEquals(1, reads.size()); // the planned event times only
  }

  @Test
  void anIndexAnswerBeforeTheRangeIsSearchedInstead() {
    // Partition 1 holds an old tuple past the bound at offset 0 (out of order, or a transaction
    // marker's timestamp): the log's first offset past the bound says nothing of [5, 100).
    List<Long> one = new ArrayList<>(hours(0, 60));
    one.set(0, 500 * HOUR);
    Log log = new Log(Map.of(0, hours(0, 11), 1, one));
    Map<Integer, Long> begin = offsets(0, 5);
    SortedMap<Integer, Long> aligned =
        AlignmentPlan.align(
            begin, log.latest(), log.latest(), log::at, 2 * HOUR, Set.of(), null, log::firstPast);
    assertEquals(offsets(11, 13), aligned);
  }

  @Test
  void anUnboundedDriftChangesNothing() {
    Random random = new Random(7);
    for (int example = 0; example < 200; example++) {
      Case c = Case.draw(random);
      boolean waiting = c.log.times().values().stream().anyMatch(List::isEmpty);
      SortedMap<Integer, Long> aligned =
          AlignmentPlan.align(
              c.begin, c.end, c.log.latest(), c.log::at, 1_000_000_000_000_000L, Set.of(), null);
      assertEquals(waiting ? c.begin : c.end, aligned, "example " + example);
    }
  }

  @Test
  void noPartitionIsReadPastTheLeastPlannedEventTimePlusTheDrift() {
    Random random = new Random(38);
    for (int example = 0; example < 400; example++) {
      Case c = Case.draw(random);
      long drift = (long) (random.nextDouble() * 10 * HOUR);
      Set<Integer> idle = new HashSet<>();
      c.log
          .times()
          .keySet()
          .forEach(
              p -> {
                if (random.nextBoolean()) {
                  idle.add(p);
                }
              });
      for (boolean indexed : new boolean[] {false, true}) {
        SortedMap<Integer, Long> aligned =
            AlignmentPlan.align(
                c.begin,
                c.end,
                c.log.latest(),
                c.log::at,
                drift,
                idle,
                null,
                indexed ? c.log::firstPast : null);
        c.check(aligned, drift, idle, indexed, "example " + example);
      }
    }
  }

  /** A random topic: per partition, non-decreasing event times, a begin and a planned end. */
  private record Case(Log log, Map<Integer, Long> begin, Map<Integer, Long> end) {
    static Case draw(Random random) {
      int count = 1 + random.nextInt(6);
      Map<Integer, List<Long>> times = new HashMap<>();
      Map<Integer, Long> begin = new TreeMap<>();
      Map<Integer, Long> end = new TreeMap<>();
      for (int p = 0; p < count; p++) {
        int size = random.nextInt(61);
        long at = (long) (random.nextDouble() * 500 * HOUR);
        List<Long> series = new ArrayList<>();
        for (int i = 0; i < size; i++) {
          at += random.nextInt(4) == 0 ? 0 : (long) (random.nextDouble() * 3 * HOUR);
          series.add(at);
        }
        times.put(p, series);
        long b = random.nextInt(size + 1);
        begin.put(p, b);
        end.put(p, b + random.nextInt(Math.toIntExact(size - b) + 1));
      }
      return new Case(new Log(times), begin, end);
    }

    void check(
        SortedMap<Integer, Long> aligned,
        long drift,
        Set<Integer> idle,
        boolean indexed,
        String what) {
      Map<Integer, List<Long>> times = log.times();
      Map<Integer, Long> planned = new TreeMap<>();
      for (int p : times.keySet()) {
        List<Long> series = times.get(p);
        if (end.get(p) > begin.get(p)) {
          planned.put(p, series.get(Math.toIntExact(end.get(p)) - 1));
        } else if (!idle.contains(p) && !series.isEmpty()) {
          planned.put(p, series.get(series.size() - 1));
        }
      }
      for (int p : times.keySet()) {
        assertTrue(begin.get(p) <= aligned.get(p) && aligned.get(p) <= end.get(p), what);
      }
      if (times.entrySet().stream()
          .anyMatch(e -> e.getValue().isEmpty() && !idle.contains(e.getKey()))) {
        assertEquals(begin, aligned, what);
        return;
      }
      if (planned.isEmpty()) {
        assertEquals(end, aligned, what);
        return;
      }
      long bound = planned.values().stream().mapToLong(Long::longValue).min().getAsLong() + drift;
      for (int p : times.keySet()) {
        List<Long> series = times.get(p);
        for (long o = begin.get(p); o < aligned.get(p); o++) {
          assertTrue(series.get(Math.toIntExact(o)) <= bound, what + ": partition " + p);
        }
        if (aligned.get(p) < end.get(p)) {
          long beyond = aligned.get(p);
          while (series.get(Math.toIntExact(beyond)) <= bound) {
            beyond++;
          }
          long left = beyond - aligned.get(p);
          // The search leaves at most 1/64 of the planned range; the index leaves nothing.
          long tolerance = indexed ? 0 : (end.get(p) - begin.get(p)) / 64;
          assertTrue(left <= tolerance, what + ": partition " + p + " left " + left);
        }
      }
      int behind = planned.entrySet().stream().min(Map.Entry.comparingByValue()).get().getKey();
      assertEquals(end.get(behind), aligned.get(behind), what);
    }
  }

  @Test
  void theInterpolationIsExactWhereTheProductOverflowsALong() {
    long a = 3_000_000_000_000L;
    long b = 40_000_000_000L;
    assertEquals(
        java.math.BigInteger.valueOf(a)
            .multiply(java.math.BigInteger.valueOf(b))
            .divide(java.math.BigInteger.valueOf(b + 7))
            .longValueExact(),
        EventTimeCut.scaled(a, b, b + 7));
    assertEquals(7 * 5 / 3, EventTimeCut.scaled(7, 5, 3));
  }
}

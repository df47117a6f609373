package io.floodgate.spark.alignment;

import java.util.Collections;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Set;
import java.util.SortedMap;
import java.util.TreeMap;
import java.util.TreeSet;

/**
 * The rule that caps a planned micro-batch in event time (docs/architecture.md, "Micro-batches
 * aligned in event time"), as Flink's watermark alignment does across splits:
 *
 * <ul>
 *   <li>each partition's <em>planned event time</em> is the event time at its planned end (the last
 *       tuple it would read), or at its head when it has nothing more to read;
 *   <li>the bound is the least planned event time over the partitions, plus the drift;
 *   <li>no partition is read past the bound: its end moves back to the first tuple whose event time
 *       is beyond it, answered by a {@link CutIndex} where there is one (Kafka's time index), else
 *       found by an interpolation search ({@link EventTimeCut}), the partitions' searches in step
 *       so that each step is one round of reads for all;
 *   <li>a partition that is idle ({@link IdleTracker}) and has nothing more to read holds nobody
 *       back (Flink's {@code withIdleness}).
 * </ul>
 *
 * <p>The partition that sets the bound keeps its planned end, so every micro-batch reads something
 * whenever there is something to read. Pure: it reads the broker only through its arguments.
 */
public final class AlignmentPlan {
  /**
   * A capped partition's search stops once the cut is known within {@code 1 / 64} of its planned
   * range: the cut may fall up to that many offsets short of the first tuple past the bound.
   */
  public static final long CUT_TOLERANCE_DIVISOR = 64;

  private AlignmentPlan() {}

  /**
   * {@link #align(Map, Map, Map, EventTimes, long, Set, KnownEventTimes, CutIndex)} with no index.
   */
  public static SortedMap<Integer, Long> align(
      Map<Integer, Long> begin,
      Map<Integer, Long> end,
      Map<Integer, Long> latest,
      EventTimes eventTimesAt,
      long driftMs,
      Set<Integer> idle,
      KnownEventTimes known) {
    return align(begin, end, latest, eventTimesAt, driftMs, idle, known, null);
  }

  /**
   * Cap a planned micro-batch so that no partition is read past the least planned event time plus
   * {@code driftMs}.
   *
   * @param begin the next offset to read per partition
   * @param end the end planned by offsets per partition ({@code begin[p] <= end[p]})
   * @param latest the high watermark (last stable offset) per partition
   * @param eventTimesAt the event times at offsets, asked for every partition that needs one at
   *     once, so that a reader of the broker answers all with one fetch ({@link
   *     EventTimeProbe#many})
   * @param driftMs how far (ms) any partition may be read ahead of the least one
   * @param idle partitions that have stopped receiving tuples: with nothing more to read they hold
   *     nobody back
   * @param known the event times known without reading the broker ({@link EventTimeProbe#between}:
   *     the tuples earlier reads fetched, this planning's and the previous triggers'); a search
   *     takes those steps first ({@link EventTimeCut#learn}), so that it reads only what is new and
   *     the rounds of reads are shared by as many partitions as can be; {@code null}: none
   * @param index the first offset past the bound, asked once for all capped partitions before any
   *     search; an answer at or before {@code begin[p]} tells nothing of {@code [begin[p], end[p])}
   *     (an older tuple past the bound, a transaction marker) and that partition is searched;
   *     {@code null}: every capped partition is searched
   * @return the aligned end per partition, {@code begin[p] <= aligned[p] <= end[p]}; the partition
   *     with the least planned event time keeps {@code end[p]}. While a partition that is not idle
   *     has never held a tuple ({@code latest[p] == 0}), {@code begin}: its first tuples may be the
   *     earliest of all, so nobody is read until it has one or is idle, as an empty split holds
   *     Flink's watermark back until it is marked idle.
   */
  public static SortedMap<Integer, Long> align(
      Map<Integer, Long> begin,
      Map<Integer, Long> end,
      Map<Integer, Long> latest,
      EventTimes eventTimesAt,
      long driftMs,
      Set<Integer> idle,
      KnownEventTimes known,
      CutIndex index) {
    for (int p : begin.keySet()) {
      if (latest.getOrDefault(p, 0L) == 0 && !idle.contains(p)) {
        return new TreeMap<>(begin);
      }
    }
    Map<Integer, Long> wanted = new LinkedHashMap<>();
    for (Map.Entry<Integer, Long> e : new TreeMap<>(begin).entrySet()) {
      int p = e.getKey();
      long start = e.getValue();
      long stop = end.getOrDefault(p, start);
      if (stop > start) {
        wanted.put(p, stop - 1);
      } else if (!idle.contains(p) && latest.getOrDefault(p, 0L) > 0) {
        wanted.put(p, latest.get(p) - 1); // caught up: its head is where it is
      }
    }
    Map<Integer, Long> planned = new TreeMap<>();
    eventTimesAt
        .at(wanted)
        .forEach(
            (p, at) -> {
              if (at != null) {
                planned.put(p, at);
              }
            });
    if (planned.isEmpty()) {
      return new TreeMap<>(end);
    }
    long bound = planned.values().stream().mapToLong(Long::longValue).min().getAsLong() + driftMs;
    SortedMap<Integer, Long> aligned = new TreeMap<>(end);
    Map<Integer, EventTimeCut> cuts = new TreeMap<>();
    for (Map.Entry<Integer, Long> e : planned.entrySet()) {
      int p = e.getKey();
      Long start = begin.get(p);
      if (start == null) {
        continue;
      }
      long stop = end.getOrDefault(p, start);
      if (stop > start && e.getValue() > bound) {
        long aimBelow = known == null ? 0 : known.readAhead() / 2;
        cuts.put(p, new EventTimeCut(start, stop, bound, e.getValue(), aimBelow));
      }
    }
    if (index != null && !cuts.isEmpty()) {
      Map<Integer, Long> firsts = index.firstPast(new TreeSet<>(cuts.keySet()), bound);
      for (Iterator<Integer> it = cuts.keySet().iterator(); it.hasNext(); ) {
        int p = it.next();
        Long first = firsts.get(p);
        if (first != null && first > begin.get(p)) {
          aligned.put(p, Math.min(first, end.get(p)));
          it.remove();
        }
      }
    }
    // The partitions' searches go in step: each step is one read of the broker for all.
    while (!cuts.isEmpty()) {
      if (known != null) {
        for (Iterator<Map.Entry<Integer, EventTimeCut>> it = cuts.entrySet().iterator();
            it.hasNext(); ) {
          Map.Entry<Integer, EventTimeCut> e = it.next();
          EventTimeCut cut = e.getValue();
          cut.learn(known.between(e.getKey(), cut.openFrom(), cut.openTo()));
          if (cut.result() != null) {
            aligned.put(e.getKey(), cut.result());
            it.remove();
          }
        }
        if (cuts.isEmpty()) {
          break;
        }
      }
      Map<Integer, Long> asked = new HashMap<>();
      cuts.forEach((p, cut) -> asked.put(p, cut.asking()));
      Map<Integer, Long> answers = eventTimesAt.at(asked);
      for (Iterator<Map.Entry<Integer, EventTimeCut>> it = cuts.entrySet().iterator();
          it.hasNext(); ) {
        Map.Entry<Integer, EventTimeCut> e = it.next();
        EventTimeCut cut = e.getValue();
        cut.observe(
            answers.get(e.getKey()),
            known == null
                ? Collections.emptyNavigableMap()
                : known.between(e.getKey(), cut.asking(), cut.openTo()));
        if (cut.result() != null) {
          aligned.put(e.getKey(), cut.result());
          it.remove();
        }
      }
    }
    return aligned;
  }
}

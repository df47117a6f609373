package io.floodgate.spark.alignment;

import java.math.BigInteger;
import java.util.Collections;
import java.util.Map;
import java.util.NavigableMap;

/**
 * One partition's search for the least offset in {@code [start, stop)} whose tuple's event time is
 * past {@code bound} (the tuple at {@code stop - 1} is known to be past it), for {@link
 * AlignmentPlan}.
 *
 * <p>First the tuple at {@code start}; then an interpolation search, every other step a bisection:
 * a partition's event times grow about evenly with its offsets, so interpolation finds the cut in a
 * few reads, and the bisections bound the reads by twice {@code log2(stop - start)} whatever the
 * times. It stops once the cut lies within {@link AlignmentPlan#CUT_TOLERANCE_DIVISOR 1/64} of the
 * range and cuts at the low end of what is left (the partition reads up to that many tuples fewer
 * this micro-batch, never one past the bound). Unknown event times count as within the bound, so an
 * unreadable tuple never stops a partition for good. Ask {@link #asking()}, tell {@link
 * #observe(Long)} its event time, until {@link #result()} is set; event times known without a read
 * ({@link #learn}) take steps for free, and a read's tuples past the offset asked ({@link
 * KnownEventTimes#readAhead}) usually end the search the round after an interpolated guess.
 *
 * <p>Not thread-safe.
 */
final class EventTimeCut {
  private final long bound;
  private final long tolerance;
  private final long aimBelow;

  /** The answer lies in {@code [low, high]}; {@code (known, knownTime)} is within the bound. */
  private long low;

  private long high;
  private long known;
  private Long knownTime;
  private Long highTime;
  private long asking;
  private Long result;
  private boolean first = true;

  /**
   * Whether {@link #asking()} is an interpolated guess, else a bisection: asked steps alternate.
   */
  private boolean interpolate = false;

  /**
   * @param start the range's first offset
   * @param stop the range's end (exclusive)
   * @param bound the event-time bound (epoch ms)
   * @param stopTime the event time at {@code stop - 1}, past {@code bound}
   * @param aimBelow how far (offsets) below its estimate an interpolated guess asks: half of what a
   *     read makes known past the offset asked ({@link KnownEventTimes#readAhead}), so that those
   *     tuples straddle the cut; {@code 0}: at the estimate
   */
  EventTimeCut(long start, long stop, long bound, long stopTime, long aimBelow) {
    this.bound = bound;
    this.tolerance = (stop - start) / AlignmentPlan.CUT_TOLERANCE_DIVISOR;
    this.aimBelow = aimBelow;
    this.low = start + 1;
    this.high = stop - 1;
    this.known = start;
    this.knownTime = null;
    this.highTime = stopTime;
    this.asking = start;
  }

  /** The offset whose event time to {@link #observe} next. */
  long asking() {
    return asking;
  }

  /** The cut once found, else {@code null}. */
  Long result() {
    return result;
  }

  /**
   * The offsets still open, {@code [openFrom(), openTo())}: the event time of any of them tells the
   * search something ({@link #learn}).
   */
  long openFrom() {
    return first ? asking : low;
  }

  /** The end (exclusive) of the offsets still open ({@link #openFrom()}). */
  long openTo() {
    return high;
  }

  /** Take the event time (epoch ms, {@code null}: unknown) of the tuple at {@link #asking()}. */
  void observe(Long at) {
    observe(at, Collections.emptyNavigableMap());
  }

  /**
   * Take the event time of the tuple at {@link #asking()}, and those the same read made known past
   * it ({@link KnownEventTimes#readAhead}), before the search decides what to ask next: a run of
   * them across the bound gives the cut exactly.
   *
   * @param at the event time (epoch ms, {@code null}: unknown) at {@link #asking()}
   * @param alsoKnown {@code offset -> event time} (epoch ms, or {@code null}), in offset order
   */
  void observe(Long at, NavigableMap<Long, Long> alsoKnown) {
    take(asking, at);
    takeAll(alsoKnown);
    interpolate = !interpolate;
    next();
  }

  /**
   * Take the event times already known of open offsets ({@link #openFrom()}), in offset order, as
   * if each had been asked: a tuple within the bound moves the low end past it, one past the bound
   * the high end to it, so that the next offset asked is one nobody knows yet. A known run of
   * consecutive offsets across the bound gives the cut exactly. Before the range's first tuple is
   * known, nothing else is taken (a first tuple past the bound cuts at it). Free steps do not count
   * in the alternation of interpolations and bisections, which bounds the reads.
   *
   * @param times {@code offset -> event time} (epoch ms, or {@code null}), in offset order
   * @return whether anything was taken (then {@link #asking()} moved, or {@link #result()} is set)
   */
  boolean learn(NavigableMap<Long, Long> times) {
    if (result != null) {
      return false;
    }
    boolean took = false;
    if (first) {
      if (!times.containsKey(asking)) {
        return false;
      }
      take(asking, times.get(asking));
      interpolate = !interpolate; // the first tuple is known: the asked step it spares
      took = true;
    }
    took |= takeAll(times);
    if (took) {
      next();
    }
    return took;
  }

  /** {@link #take} each of {@code times} in offset order; whether any was open. */
  private boolean takeAll(NavigableMap<Long, Long> times) {
    boolean took = false;
    for (Map.Entry<Long, Long> e : times.entrySet()) {
      if (result != null) {
        break;
      }
      took |= take(e.getKey(), e.getValue());
    }
    return took;
  }

  /** Take the event time at {@code offset} if it is open; whether it was. */
  private boolean take(long offset, Long at) {
    if (first) {
      if (offset != asking) {
        return false;
      }
      first = false;
      if (at != null && at > bound) {
        result = known;
      } else {
        knownTime = at;
      }
      return true;
    }
    if (offset < low || offset >= high) {
      return false;
    }
    if (at != null && at > bound) {
      high = offset;
      highTime = at;
    } else {
      low = offset + 1;
      if (at != null) {
        known = offset;
        knownTime = at;
      }
    }
    return true;
  }

  /** The next offset to ask, or the result once the cut is known within the tolerance. */
  private void next() {
    if (result != null) {
      return;
    }
    if (high - low <= tolerance) {
      result = low;
      return;
    }
    long middle = Math.floorDiv(low + high, 2L);
    if (interpolate && knownTime != null && highTime != null) {
      long span = highTime - knownTime;
      if (span > 0) {
        long guess = known + scaled(bound - knownTime, high - known, span) - aimBelow;
        middle = Math.min(Math.max(guess, low), high - 1);
      }
    }
    asking = middle;
  }

  /**
   * {@code floor(a * b / c)}, exact where {@code a * b} overflows a long (as a {@code BigInteger}).
   */
  static long scaled(long a, long b, long c) {
    try {
      return Math.floorDiv(Math.multiplyExact(a, b), c);
    } catch (ArithmeticException overflow) {
      return BigInteger.valueOf(a)
          .multiply(BigInteger.valueOf(b))
          .divide(BigInteger.valueOf(c))
          .longValueExact();
    }
  }
}

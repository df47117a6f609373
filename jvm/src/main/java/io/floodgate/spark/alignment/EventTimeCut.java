package io.floodgate.spark.alignment;

import java.math.BigInteger;

/**
 * One partition's search for the least offset in {@code [start, stop)} whose tuple's event time is
 * past {@code bound} (the tuple at {@code stop - 1} is known to be past it), the Python source's
 * {@code pipeline.spark.alignment._Cut}.
 *
 * <p>First the tuple at {@code start}; then an interpolation search, every other step a bisection:
 * a partition's event times grow about evenly with its offsets, so interpolation finds the cut in a
 * few reads, and the bisections bound the reads by twice {@code log2(stop - start)} whatever the
 * times. It stops once the cut lies within {@link AlignmentPlan#CUT_TOLERANCE_DIVISOR 1/64} of the
 * range and cuts at the low end of what is left (the partition reads up to that many tuples fewer
 * this micro-batch, never one past the bound). Unknown event times count as within the bound, so an
 * unreadable tuple never stops a partition for good. Ask {@link #asking()}, tell {@link
 * #observe(Long)} its event time, until {@link #result()} is set.
 *
 * <p>Not thread-safe.
 */
final class EventTimeCut {
  private final long bound;
  private final long tolerance;

  /** The answer lies in {@code [low, high]}; {@code (known, knownTime)} is within the bound. */
  private long low;

  private long high;
  private long known;
  private Long knownTime;
  private Long highTime;
  private long asking;
  private Long result;
  private boolean first = true;
  private boolean interpolate = true;

  /**
   * @param start the range's first offset
   * @param stop the range's end (exclusive)
   * @param bound the event-time bound (epoch ms)
   * @param stopTime the event time at {@code stop - 1}, past {@code bound}
   */
  EventTimeCut(long start, long stop, long bound, long stopTime) {
    this.bound = bound;
    this.tolerance = (stop - start) / AlignmentPlan.CUT_TOLERANCE_DIVISOR;
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

  /** Take the event time (epoch ms, {@code null}: unknown) of the tuple at {@link #asking()}. */
  void observe(Long at) {
    if (first) {
      first = false;
      if (at != null && at > bound) {
        result = known;
        return;
      }
      knownTime = at;
    } else if (at != null && at > bound) {
      high = asking;
      highTime = at;
    } else {
      low = asking + 1;
      if (at != null) {
        known = asking;
        knownTime = at;
      }
    }
    if (high - low <= tolerance) {
      result = low;
      return;
    }
    long middle = Math.floorDiv(low + high, 2L);
    if (interpolate && knownTime != null && highTime != null) {
      long span = highTime - knownTime;
      if (span > 0) {
        long guess = known + scaled(bound - knownTime, high - known, span);
        middle = Math.min(Math.max(guess, low), high - 1);
      }
    }
    interpolate = !interpolate;
    asking = middle;
  }

  /** {@code floor(a * b / c)}, exact where {@code a * b} overflows a long (Python's ints). */
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

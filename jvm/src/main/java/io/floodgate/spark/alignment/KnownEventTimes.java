package io.floodgate.spark.alignment;

import java.util.NavigableMap;

/**
 * The event times a reader of the broker already knows, without reading it: what {@link
 * EventTimeProbe} cached from earlier reads, this planning's and the previous triggers' (the tuples
 * a read fetched past the offset it was asked for, the cuts and planned ends found before). An
 * event-time search ({@link EventTimeCut}) takes these steps first, so that a planning reads the
 * broker only for what is new.
 */
public interface KnownEventTimes {
  /**
   * The known event times of a partition's offsets in {@code [from, to)}.
   *
   * @param partition the partition
   * @param from the first offset (inclusive)
   * @param to the end (exclusive)
   * @return {@code offset -> event time} (epoch ms, {@code null}: the offset holds no tuple that
   *     tells one), in offset order; offsets not known are left out. A map that allows {@code null}
   *     values.
   */
  NavigableMap<Long, Long> between(int partition, long from, long to);

  /**
   * How many offsets from an offset read a read makes known ({@link EventTimeProbe#PROBE_BATCH}): a
   * search aims its interpolated guesses half that below the estimate, so that the tuples read with
   * the guess straddle the cut and it is found without another read. {@code 1}: only the offset
   * read.
   */
  default long readAhead() {
    return 1;
  }
}

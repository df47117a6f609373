package io.floodgate.spark.alignment;

import java.util.Map;

/**
 * The event times of the tuples at some offsets: {@code {partition: offset} -> {partition: event
 * time}} (epoch ms): the parameters {@code eventTimesAt} (read from the broker) and {@code known}
 * (cached only) of {@link AlignmentPlan#align}.
 *
 * <p>An answer maps a partition to {@code null} where its event time is unknown (the offset holds
 * no tuple before the high watermark, the broker no longer holds it, or it does not decode); a
 * partition left out of the answer was not looked up (a {@code known} lookup answers only what it
 * has cached).
 */
@FunctionalInterface
public interface EventTimes {
  /**
   * @param wanted an offset per partition
   * @return the event time (epoch ms, or {@code null}) per partition answered; a map that allows
   *     {@code null} values
   */
  Map<Integer, Long> at(Map<Integer, Long> wanted);
}

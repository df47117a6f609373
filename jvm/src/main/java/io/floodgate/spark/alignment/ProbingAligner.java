package io.floodgate.spark.alignment;

import java.util.Map;
import java.util.Set;
import java.util.SortedMap;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The aligner of option {@code maxEventTimeDriftMs}: {@link AlignmentPlan#align} with the event
 * times read from the broker at planning ({@link EventTimeProbe}, cached per offset), and, where a
 * record's timestamp is its event time, the cuts from Kafka's time index ({@link KafkaTimeIndex}),
 * as the Python source's {@code KafkaStreamReader._aligned}.
 */
final class ProbingAligner implements EventTimeAligner {
  private static final Logger LOG = LoggerFactory.getLogger(ProbingAligner.class);

  private final String stream;
  private final long driftMs;
  private final EventTimeProbe probe;
  private final KafkaTimeIndex index;
  private long capped;

  /**
   * @param stream the stream (for the log)
   * @param driftMs option {@code maxEventTimeDriftMs}
   * @param probe the event-time reader
   * @param index Kafka's time index ({@code timestampMode = server}), else {@code null}
   */
  ProbingAligner(String stream, long driftMs, EventTimeProbe probe, KafkaTimeIndex index) {
    this.stream = stream;
    this.driftMs = driftMs;
    this.probe = probe;
    this.index = index;
  }

  @Override
  public SortedMap<Integer, Long> align(
      Map<Integer, Long> begin,
      Map<Integer, Long> end,
      Map<Integer, Long> latest,
      Set<Integer> idle) {
    probe.limit(latest);
    SortedMap<Integer, Long> aligned =
        AlignmentPlan.align(begin, end, latest, probe::many, driftMs, idle, probe::known, index);
    probe.forgetBefore(begin);
    for (Map.Entry<Integer, Long> e : aligned.entrySet()) {
      if (e.getValue() < end.getOrDefault(e.getKey(), e.getValue())) {
        capped++;
      }
    }
    if (!aligned.equals(end) && LOG.isDebugEnabled()) {
      LOG.debug(
          "source {}: micro-batch aligned in event time: {} instead of {} (idle: {}; so far {}"
              + " rounds of probe reads, {} time index requests)",
          stream,
          aligned,
          end,
          idle,
          probe.reads(),
          index == null ? 0 : index.requests());
    }
    return aligned;
  }

  @Override
  public long capped() {
    return capped;
  }

  @Override
  public void close() {
    probe.close();
    if (index != null) {
      index.close();
    }
  }
}

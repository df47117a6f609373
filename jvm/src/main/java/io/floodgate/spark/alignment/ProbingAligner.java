package io.floodgate.spark.alignment;

import io.floodgate.spark.offsets.TopicPartitions;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.NavigableMap;
import java.util.Set;
import java.util.SortedMap;
import java.util.TreeMap;
import java.util.TreeSet;
import org.apache.kafka.common.TopicPartition;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The aligner of option {@code maxEventTimeDriftMs}: {@link AlignmentPlan#align} with the event
 * times read from the broker at planning ({@link EventTimeProbe}, cached per offset from one
 * planning to the next, so that a trigger reads only what the ones before did not), and, where a
 * record's timestamp is its event time, the cuts from Kafka's time index ({@link KafkaTimeIndex}),
 * over every topic-partition read.
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
  public SortedMap<TopicPartition, Long> align(
      Map<TopicPartition, Long> begin,
      Map<TopicPartition, Long> end,
      Map<TopicPartition, Long> latest,
      Set<TopicPartition> idle) {
    probe.limit(latest);
    Keys keys = new Keys(begin.keySet());
    SortedMap<Integer, Long> alignedByIndex =
        AlignmentPlan.align(
            keys.index(begin),
            keys.index(end),
            keys.index(latest),
            wanted -> keys.index(probe.many(keys.topicPartitions(wanted))),
            driftMs,
            keys.index(idle),
            new KnownEventTimes() {
              @Override
              public NavigableMap<Long, Long> between(int partition, long from, long to) {
                return probe.between(keys.topicPartition(partition), from, to);
              }

              @Override
              public long readAhead() {
                return EventTimeProbe.PROBE_BATCH;
              }
            },
            index == null
                ? null
                : (partitions, boundMs) ->
                    keys.index(index.firstPast(keys.topicPartitions(partitions), boundMs)));
    SortedMap<TopicPartition, Long> aligned = keys.topicPartitions(alignedByIndex);
    probe.forgetBefore(begin);
    for (Map.Entry<TopicPartition, Long> e : aligned.entrySet()) {
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

  /**
   * The topic-partitions of one planning numbered in {@link TopicPartitions#ORDER} ({@code
   * 0..n-1}), so that {@link AlignmentPlan}, whose rule is stated over partitions, plans over every
   * topic-partition read; its lowest-partition ties go to the lowest (topic, partition).
   */
  private static final class Keys {
    private final List<TopicPartition> byIndex;
    private final Map<TopicPartition, Integer> indexOf = new HashMap<>();

    Keys(Set<TopicPartition> tps) {
      byIndex = new ArrayList<>(tps);
      byIndex.sort(TopicPartitions.ORDER);
      for (int i = 0; i < byIndex.size(); i++) {
        indexOf.put(byIndex.get(i), i);
      }
    }

    /** {@code map} keyed by index; keys of no index are left out. A map allowing nulls. */
    Map<Integer, Long> index(Map<TopicPartition, Long> map) {
      Map<Integer, Long> out = new TreeMap<>();
      map.forEach(
          (tp, v) -> {
            Integer i = indexOf.get(tp);
            if (i != null) {
              out.put(i, v);
            }
          });
      return out;
    }

    Set<Integer> index(Set<TopicPartition> set) {
      Set<Integer> out = new TreeSet<>();
      set.forEach(
          tp -> {
            Integer i = indexOf.get(tp);
            if (i != null) {
              out.add(i);
            }
          });
      return out;
    }

    TopicPartition topicPartition(int index) {
      return byIndex.get(index);
    }

    SortedMap<TopicPartition, Long> topicPartitions(Map<Integer, Long> map) {
      SortedMap<TopicPartition, Long> out = TopicPartitions.empty();
      map.forEach((i, v) -> out.put(byIndex.get(i), v));
      return out;
    }

    Set<TopicPartition> topicPartitions(Set<Integer> set) {
      Set<TopicPartition> out = new HashSet<>();
      set.forEach(i -> out.add(byIndex.get(i)));
      return out;
    }
  }

  @Override
  public long capped() {
    return capped;
  }

  @Override
  public long eventTimeReads() {
    return probe.reads();
  }

  @Override
  public void close() {
    probe.close();
    if (index != null) {
      index.close();
    }
  }
}

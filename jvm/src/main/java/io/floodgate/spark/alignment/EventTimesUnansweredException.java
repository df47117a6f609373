package io.floodgate.spark.alignment;

import io.floodgate.spark.offsets.TopicPartitions;
import java.time.Duration;
import java.util.Map;
import org.apache.kafka.common.TopicPartition;

/**
 * The broker did not answer the event-time reads of some partitions at planning for as long as the
 * source waits ({@link EventTimeProbe}): the micro-batch is not planned, and the query fails with
 * {@code FG-SOURCE-005}. Planning without them could read the other partitions past their tuples,
 * which would then come late; a restart of the query resumes from its checkpoint. The code is
 * listed in docs/reference/codes.md.
 */
public class EventTimesUnansweredException extends IllegalStateException {
  private static final long serialVersionUID = 1L;

  private final String topic;
  private final Map<TopicPartition, Long> offsets;

  /**
   * @param topic the topics read (their names joined by {@code ,}, or the pattern)
   * @param offsets the unanswered reads, {@code {topic-partition: offset}}
   * @param waited how long the probe asked
   */
  public EventTimesUnansweredException(
      String topic, Map<TopicPartition, Long> offsets, Duration waited) {
    super(
        "FG-SOURCE-005 source of topic '"
            + topic
            + "': the broker did not answer the event-time reads of partitions "
            + TopicPartitions.sorted(offsets)
            + " ({topic-partition=offset}) for "
            + waited.toSeconds()
            + " s; the micro-batch is not planned, since reading the other partitions without"
            + " them could make their tuples late. Restart the query group once the broker"
            + " answers: it resumes from its checkpoint");
    this.topic = topic;
    this.offsets = Map.copyOf(offsets);
  }

  /** The topics read (names joined by {@code ,}, or the pattern). */
  public String topic() {
    return topic;
  }

  /** The unanswered reads, {@code {topic-partition: offset}}. */
  public Map<TopicPartition, Long> offsets() {
    return offsets;
  }
}

package io.floodgate.spark.alignment;

import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Kafka's time index as a {@link CutIndex}, for {@code timestampMode = server}, where a record's
 * Kafka timestamp is its event time: ListOffsets by timestamp ({@code
 * KafkaConsumer.offsetsForTimes}, KIP-79) answers "the first offset whose timestamp is at or after
 * T" for every partition in one request to each partition leader. The first offset past a bound is
 * that of {@code bound + 1}.
 *
 * <p>The broker scans from the start of the log, control batches and aborted writes included: an
 * older tuple out of order, or a transaction marker (stamped with the coordinator's clock), may be
 * the answer, before or inside the range to cut. Every tuple before the answer is within the bound
 * all the same, so a cut there never reads past it; {@link AlignmentPlan} searches a partition
 * whose answer lies at or before its range's start.
 */
public final class KafkaTimeIndex implements AutoCloseable {
  private static final Logger LOG = LoggerFactory.getLogger(KafkaTimeIndex.class);

  private final String topic;
  private final Duration timeout;
  private final Properties properties;
  private KafkaConsumer<byte[], byte[]> consumer;

  /** Requests made (for tests and the planning's cost). */
  private long requests;

  /**
   * @param consumerProperties a consumer of the cluster ({@code KafkaClients.consumer}; read
   *     committed)
   * @param topic the topics read, for messages (names joined by {@code ,}, or the pattern)
   * @param timeout how long one request may wait for the brokers
   */
  public KafkaTimeIndex(Properties consumerProperties, String topic, Duration timeout) {
    this.topic = topic;
    this.timeout = timeout;
    this.properties = consumerProperties;
  }

  /**
   * For each topic-partition, the first offset of its log whose record's timestamp is past {@code
   * boundMs}, in one request for all ({@link CutIndex#firstPast}, keyed by topic-partition).
   *
   * <p>A request that fails (the broker does not answer in time, a leader moves) is logged and
   * answers nothing: the partitions are then searched.
   */
  public Map<TopicPartition, Long> firstPast(Set<TopicPartition> partitions, long boundMs) {
    Map<TopicPartition, Long> query = new HashMap<>();
    partitions.forEach(p -> query.put(p, boundMs + 1));
    Map<TopicPartition, Long> out = new HashMap<>();
    if (query.isEmpty()) {
      return out;
    }
    if (consumer == null) {
      consumer =
          new KafkaConsumer<>(properties, new ByteArrayDeserializer(), new ByteArrayDeserializer());
    }
    requests++;
    try {
      consumer
          .offsetsForTimes(query, timeout)
          .forEach((tp, found) -> out.put(tp, found == null ? null : offset(found)));
    } catch (KafkaException e) {
      LOG.warn(
          "source of topic {}: offsets by timestamp not answered, searching instead: {}",
          topic,
          e.toString());
      return new HashMap<>();
    }
    return out;
  }

  private static Long offset(OffsetAndTimestamp found) {
    return found.offset() >= 0 ? found.offset() : null;
  }

  /** ListOffsets requests made so far. */
  public long requests() {
    return requests;
  }

  @Override
  public void close() {
    if (consumer != null) {
      consumer.close(Duration.ofSeconds(5));
      consumer = null;
    }
  }
}

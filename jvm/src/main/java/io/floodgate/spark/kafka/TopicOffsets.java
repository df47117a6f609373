package io.floodgate.spark.kafka;

import io.floodgate.spark.offsets.TopicPartitions;
import io.floodgate.spark.options.OptionText;
import io.floodgate.spark.options.SourceOptions;
import java.time.Duration;
import java.util.Collection;
import java.util.HashSet;
import java.util.Map;
import java.util.SortedMap;
import java.util.SortedSet;
import java.util.TreeSet;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * The driver's reads of the offsets of the topic-partitions read ({@link Subscription}), for a
 * streaming query's planning ({@link io.floodgate.spark.KafkaMicroBatchStream}) and a batch query's
 * ({@link io.floodgate.spark.KafkaBatch}): the topic-partitions, their earliest and last stable
 * offsets, the consumer group's commits, and where a query starts ({@code startingOffsets}). One
 * consumer (read committed, never subscribing), made on first use.
 *
 * <p>Every read is tried up to {@code fetchOffset.numRetries} times (default 3), {@code
 * fetchOffset.retryIntervalMs} apart (default 1000), with a new consumer each time, as Spark's
 * {@code KafkaOffsetReaderAdmin.withRetries} does over a short broker outage; only Kafka's errors
 * are tried again (Spark tries any), not the options' refusals, and not a read that timed out: the
 * consumer itself waits and retries for its {@code default.api.timeout.ms} (Kafka's default 60 s,
 * set with the option {@code kafka.default.api.timeout.ms}), and a topic deleted meanwhile is found
 * by the listing after it ({@link #latest()}), which three such waits would only delay.
 *
 * <p>Not thread-safe: the driver's planning thread uses it.
 */
public final class TopicOffsets implements AutoCloseable {
  private final SourceOptions options;
  private final Subscription subscription;
  private static final org.slf4j.Logger LOG = org.slf4j.LoggerFactory.getLogger(TopicOffsets.class);

  private Consumer<byte[], byte[]> consumer;

  /** Whether the consumer was given (tests): kept across attempts instead of made anew. */
  private final boolean given;

  public TopicOffsets(SourceOptions options) {
    this(options, null);
  }

  /**
   * @param consumer the consumer to read with (tests: Kafka's {@code MockConsumer}); {@code null}:
   *     one made from the options on first use
   */
  public TopicOffsets(SourceOptions options, Consumer<byte[], byte[]> consumer) {
    this.options = options;
    this.subscription = new Subscription(options);
    this.consumer = consumer;
    this.given = consumer != null;
  }

  /**
   * {@code read}, tried again on a Kafka error up to {@code fetchOffset.numRetries} attempts in
   * all, {@code fetchOffset.retryIntervalMs} apart, the consumer closed and made anew in between
   * (Spark's {@code withRetries} and {@code resetAdmin}).
   *
   * @throws org.apache.kafka.common.KafkaException the last attempt's error
   */
  private <T> T retrying(String what, java.util.function.Supplier<T> read) {
    for (int attempt = 1; ; attempt++) {
      try {
        return read.get();
      } catch (org.apache.kafka.common.KafkaException e) {
        if (attempt >= options.fetchOffsetNumRetries || e instanceof TimeoutException) {
          throw e;
        }
        LOG.warn(
            "source {}: reading {} failed (attempt {} of {}), trying again in {} ms: {}",
            options.stream,
            what,
            attempt,
            options.fetchOffsetNumRetries,
            options.fetchOffsetRetryIntervalMs,
            e.toString());
        if (!given && consumer != null) {
          consumer.close(Duration.ZERO);
          consumer = null;
        }
        try {
          Thread.sleep(options.fetchOffsetRetryIntervalMs);
        } catch (InterruptedException stop) {
          Thread.currentThread().interrupt();
          throw new org.apache.kafka.common.errors.InterruptException(stop);
        }
      }
    }
  }

  public Consumer<byte[], byte[]> consumer() {
    if (consumer == null) {
      consumer =
          new KafkaConsumer<>(
              KafkaClients.consumer(options, Map.of()),
              new ByteArrayDeserializer(),
              new ByteArrayDeserializer());
    }
    return consumer;
  }

  /**
   * The topic-partitions read now, looked up again at every call ({@link Subscription}).
   *
   * @throws IllegalStateException a named topic does not exist
   * @throws IllegalArgumentException {@code assign} names partitions a topic does not have
   */
  public SortedSet<TopicPartition> topicPartitions() {
    return retrying("the topic-partitions", () -> subscription.partitions(consumer()));
  }

  /**
   * The last stable offsets (read committed) of the topic-partitions read now.
   *
   * <p>A topic deleted between the listing of the topic-partitions and the read of their offsets
   * (the broker answers nothing for it until the read times out) is listed again once: when the
   * topic-partitions read have changed meanwhile, those of now are read, so that the planning sees
   * the topic gone ({@code failOnDataLoss}) instead of failing on the timeout.
   *
   * @throws TimeoutException the offsets were not answered in time, the topic-partitions unchanged
   */
  public SortedMap<TopicPartition, Long> latest() {
    SortedSet<TopicPartition> tps = topicPartitions();
    try {
      return latest(tps);
    } catch (TimeoutException e) {
      SortedSet<TopicPartition> now = topicPartitions();
      if (now.equals(tps)) {
        throw e;
      }
      return latest(now);
    }
  }

  /** The last stable offsets (read committed) of {@code tps}. */
  public SortedMap<TopicPartition, Long> latest(Collection<TopicPartition> tps) {
    if (tps.isEmpty()) {
      return TopicPartitions.empty();
    }
    return retrying("the latest offsets", () -> TopicPartitions.sorted(consumer().endOffsets(tps)));
  }

  /** The earliest offsets the broker holds of {@code tps}. */
  public SortedMap<TopicPartition, Long> earliest(Collection<TopicPartition> tps) {
    if (tps.isEmpty()) {
      return TopicPartitions.empty();
    }
    return retrying(
        "the earliest offsets", () -> TopicPartitions.sorted(consumer().beginningOffsets(tps)));
  }

  /**
   * Kafka's {@code offsetsForTimes}: per topic-partition of {@code timestamps} (epoch ms), the
   * first offset whose timestamp is at or after it; a topic-partition with none is left out.
   */
  public Map<TopicPartition, Long> offsetsForTimes(Map<TopicPartition, Long> timestamps) {
    Map<TopicPartition, Long> out = new java.util.HashMap<>();
    if (timestamps.isEmpty()) {
      return out;
    }
    retrying("the offsets for timestamps", () -> consumer().offsetsForTimes(timestamps))
        .forEach(
            (tp, found) -> {
              if (found != null) {
                out.put(tp, found.offset());
              }
            });
    return out;
  }

  /**
   * Where a query starts by timestamp ({@code startingTimestamp} or {@code
   * startingOffsetsByTimestamp}), as Spark's {@code KafkaOffsetReaderAdmin.readTimestampOffsets}
   * does: each topic-partition at its first offset whose timestamp is at or after its starting
   * timestamp; one with none fails the query ({@code startingOffsetsByTimestampStrategy = error},
   * with Spark's message) or starts at its latest offset ({@code latest}).
   *
   * @param timestamps the starting timestamp of every topic-partition read (epoch ms)
   * @param found {@link #offsetsForTimes} of them
   * @param latest the latest offsets of the topic-partitions read
   * @param strategy {@code error} or {@code latest}
   * @throws IllegalArgumentException a topic-partition with no offset at or after its timestamp,
   *     with strategy {@code error}
   */
  public static SortedMap<TopicPartition, Long> startsByTimestamp(
      Map<TopicPartition, Long> timestamps,
      Map<TopicPartition, Long> found,
      Map<TopicPartition, Long> latest,
      String strategy) {
    SortedMap<TopicPartition, Long> start = TopicPartitions.empty();
    for (TopicPartition tp : TopicPartitions.sorted(timestamps).keySet()) {
      Long o = found.get(tp);
      if (o == null && !strategy.equals("latest")) {
        throw OptionText.refuse(
            "No offset matched from request of topic-partition "
                + tp
                + " and timestamp "
                + timestamps.get(tp)
                + ". (as Spark's Kafka source; startingOffsetsByTimestampStrategy = latest starts"
                + " such a topic-partition at its latest offset)");
      }
      start.put(tp, o != null ? o : latest.get(tp));
    }
    return start;
  }

  /**
   * Where a query starts, per topic-partition read: {@code latest}, {@code earliest}, {@code
   * specific} (Spark's JSON naming every topic-partition read, -2 earliest and -1 latest), {@code
   * timestamp} ({@link #startsByTimestamp} of {@code startingTimestamp}, or of {@code
   * startingOffsetsByTimestamp}, which must name every topic-partition read) or {@code committed}
   * (the consumer group's offsets, the earliest where it has none).
   *
   * @param how one of the five
   * @param specific the JSON's offsets per topic, for {@code specific}
   * @throws IllegalArgumentException {@code specific} does not name exactly the topic-partitions
   *     read (Spark's {@code KafkaOffsetReaderAdmin.fetchSpecificOffsets}: "you must specify all
   *     TopicPartitions")
   */
  public SortedMap<TopicPartition, Long> start(
      String how, Map<String, ? extends Map<Integer, Long>> specific) {
    SortedSet<TopicPartition> tps = topicPartitions();
    SortedMap<TopicPartition, Long> start = TopicPartitions.empty();
    switch (how) {
      case "latest" -> start.putAll(latest(tps));
      case "earliest" -> start.putAll(earliest(tps));
      case "timestamp" -> {
        Map<TopicPartition, Long> timestamps = new java.util.HashMap<>();
        if (options.startingTimestamp != null) {
          tps.forEach(tp -> timestamps.put(tp, options.startingTimestamp));
        } else {
          timestamps.putAll(TopicPartitions.flatten(options.startingPartitionTimestamps));
          if (!timestamps.keySet().equals(tps)) {
            throw OptionText.refuse(
                "startingOffsetsByTimestamp names topic-partitions "
                    + TopicPartitions.sorted(timestamps).keySet()
                    + " but the source reads "
                    + tps
                    + ": name every one (as Spark's Kafka source requires)");
          }
        }
        start.putAll(
            startsByTimestamp(
                timestamps,
                offsetsForTimes(timestamps),
                latest(tps),
                options.startingTimestampStrategy));
      }
      case "specific" -> {
        SortedMap<TopicPartition, Long> given = TopicPartitions.flatten(specific);
        if (!given.keySet().equals(tps)) {
          SortedSet<TopicPartition> missing = new TreeSet<>(TopicPartitions.ORDER);
          missing.addAll(tps);
          missing.removeAll(given.keySet());
          SortedSet<TopicPartition> extra = new TreeSet<>(TopicPartitions.ORDER);
          extra.addAll(given.keySet());
          extra.removeAll(tps);
          throw OptionText.refuse(
              "startingOffsets names topic-partitions "
                  + given.keySet()
                  + " but the source reads "
                  + tps
                  + (missing.isEmpty() ? "" : "; not named: " + missing)
                  + (extra.isEmpty() ? "" : "; not read: " + extra)
                  + ": name every one (as Spark's Kafka source requires; -2 earliest, -1"
                  + " latest)");
        }
        SortedMap<TopicPartition, Long> low = earliest(tps);
        SortedMap<TopicPartition, Long> high = latest(tps);
        given.forEach(
            (tp, o) ->
                start.put(
                    tp,
                    o == SourceOptions.EARLIEST
                        ? low.get(tp)
                        : o == SourceOptions.LATEST ? high.get(tp) : o));
      }
      default -> {
        SortedMap<TopicPartition, Long> low = earliest(tps);
        Map<TopicPartition, OffsetAndMetadata> committed =
            tps.isEmpty()
                ? Map.of()
                : retrying("the committed offsets", () -> consumer().committed(new HashSet<>(tps)));
        for (TopicPartition tp : tps) {
          OffsetAndMetadata c = committed.get(tp);
          start.put(tp, c != null ? c.offset() : low.get(tp));
        }
      }
    }
    return start;
  }

  /** Commit {@code offsets} (every topic-partition's) to the consumer group. */
  public void commit(Map<TopicPartition, OffsetAndMetadata> offsets) {
    consumer().commitSync(offsets);
  }

  @Override
  public void close() {
    if (consumer != null) {
      consumer.close(Duration.ofSeconds(5));
      consumer = null;
    }
  }
}

package io.floodgate.spark;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.SortedMap;
import java.util.TreeMap;
import java.util.TreeSet;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * The driver's reads of the topic's offsets, for a streaming query's planning ({@link
 * KafkaMicroBatchStream}) and a batch query's ({@link KafkaBatch}): the partitions read, their
 * earliest and last stable offsets, the consumer group's commits, and where a query starts ({@code
 * startingOffsets}). One consumer (read committed, never subscribing), made on first use.
 *
 * <p>Not thread-safe: the driver's planning thread uses it.
 */
final class TopicOffsets implements AutoCloseable {
  private static final Duration READ_TIMEOUT = Duration.ofSeconds(60);

  private final SourceOptions options;
  private KafkaConsumer<byte[], byte[]> consumer;

  TopicOffsets(SourceOptions options) {
    this.options = options;
  }

  KafkaConsumer<byte[], byte[]> consumer() {
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
   * The partitions read: the topic's, or those option {@code assign} names.
   *
   * @throws IllegalStateException the topic does not exist
   * @throws IllegalArgumentException {@code assign} names partitions the topic does not have
   */
  List<Integer> partitions() {
    List<PartitionInfo> infos = consumer().partitionsFor(options.topic, Duration.ofSeconds(30));
    if (infos == null || infos.isEmpty()) {
      throw new IllegalStateException(
          "topic '" + options.topic + "' is not available: unknown topic");
    }
    TreeSet<Integer> all = new TreeSet<>();
    infos.forEach(i -> all.add(i.partition()));
    if (options.assignedPartitions == null) {
      return new ArrayList<>(all);
    }
    TreeSet<Integer> absent = new TreeSet<>(options.assignedPartitions);
    absent.removeAll(all);
    if (!absent.isEmpty()) {
      throw SourceOptions.refuse(
          "assign names partitions "
              + absent
              + " of '"
              + options.topic
              + "', which has partitions "
              + all);
    }
    return options.assignedPartitions;
  }

  List<TopicPartition> topicPartitions() {
    List<TopicPartition> out = new ArrayList<>();
    partitions().forEach(p -> out.add(new TopicPartition(options.topic, p)));
    return out;
  }

  /** The last stable offsets (read committed) of the partitions read. */
  SortedMap<Integer, Long> latest() {
    SortedMap<Integer, Long> out = new TreeMap<>();
    consumer()
        .endOffsets(topicPartitions(), READ_TIMEOUT)
        .forEach((tp, o) -> out.put(tp.partition(), o));
    return out;
  }

  /** The earliest offsets the broker holds of {@code tps}. */
  SortedMap<Integer, Long> earliest(List<TopicPartition> tps) {
    SortedMap<Integer, Long> out = new TreeMap<>();
    consumer().beginningOffsets(tps, READ_TIMEOUT).forEach((tp, o) -> out.put(tp.partition(), o));
    return out;
  }

  /**
   * Where a query starts, per partition: {@code latest}, {@code earliest}, {@code specific}
   * (Spark's JSON, every partition named, -2 earliest and -1 latest) or {@code committed} (the
   * consumer group's offsets, the earliest where it has none).
   *
   * @param how one of the four
   * @param specific the JSON's offsets, for {@code specific}
   * @throws IllegalArgumentException {@code specific} does not name every partition read
   */
  SortedMap<Integer, Long> start(String how, SortedMap<Integer, Long> specific) {
    List<TopicPartition> tps = topicPartitions();
    SortedMap<Integer, Long> start = new TreeMap<>();
    switch (how) {
      case "latest" -> start.putAll(latest());
      case "earliest" -> start.putAll(earliest(tps));
      case "specific" -> {
        SortedMap<Integer, Long> low = earliest(tps);
        SortedMap<Integer, Long> high = latest();
        if (!specific.keySet().equals(low.keySet())) {
          throw SourceOptions.refuse(
              "startingOffsets names partitions "
                  + specific.keySet()
                  + " of '"
                  + options.topic
                  + "', which reads partitions "
                  + low.keySet()
                  + ": name every one (as Spark's Kafka source requires)");
        }
        for (Map.Entry<Integer, Long> e : specific.entrySet()) {
          long o = e.getValue();
          start.put(
              e.getKey(),
              o == SourceOptions.EARLIEST
                  ? low.get(e.getKey())
                  : o == SourceOptions.LATEST ? high.get(e.getKey()) : o);
        }
      }
      default -> {
        SortedMap<Integer, Long> low = earliest(tps);
        Map<TopicPartition, OffsetAndMetadata> committed =
            consumer().committed(new HashSet<>(tps), READ_TIMEOUT);
        for (TopicPartition tp : tps) {
          OffsetAndMetadata c = committed.get(tp);
          start.put(tp.partition(), c != null ? c.offset() : low.get(tp.partition()));
        }
      }
    }
    return start;
  }

  /** Commit {@code offsets} to the consumer group. */
  void commit(Map<TopicPartition, OffsetAndMetadata> offsets) {
    consumer().commitSync(offsets, READ_TIMEOUT);
  }

  @Override
  public void close() {
    if (consumer != null) {
      consumer.close(Duration.ofSeconds(5));
      consumer = null;
    }
  }
}

package io.floodgate.spark.write;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.errors.RetriableException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Reads an output stream queue's length from the broker, as the query group's Python queue probe
 * does: per partition, the high watermark less the slowest reader's committed offset (the log start
 * for a reader with no commit), summed. A read the broker does not answer (a broker restarting, a
 * leader or coordinator moving) is tried again for up to {@link #WAIT_MS}, as the probe's is
 * ({@code FG-QUEUE-001}).
 *
 * <p>It does not know the sweep catalog, so tuples swept out of the broker still count: the length
 * read is at least the queue's, and a share computed from it is never too large ({@link
 * FreeSpaceShare}).
 */
public final class OutputQueue {
  private static final Logger LOG = LoggerFactory.getLogger(OutputQueue.class);

  /** How long a read is tried again while the broker does not answer, ms. */
  public static final long WAIT_MS = 60_000;

  /** How long one broker request of a read may take. */
  public static final Duration REQUEST_TIMEOUT = Duration.ofSeconds(15);

  private final Admin admin;
  private final String topic;
  private final List<String> readers;
  private final Duration timeout;

  /**
   * @param admin a client of the output topic's cluster (not closed here)
   * @param topic the output topic
   * @param readers the consumer groups that read the queue (its reception groups)
   * @param timeout per broker request
   */
  public OutputQueue(Admin admin, String topic, List<String> readers, Duration timeout) {
    this.admin = admin;
    this.topic = topic;
    this.readers = List.copyOf(readers);
    this.timeout = timeout;
  }

  /**
   * One read of the queue.
   *
   * @param length the queue's length, tuples
   * @param consumed how far its slowest readers are, summed over partitions (each partition's
   *     slowest committed offset, or its log start): what they consumed between two reads is the
   *     difference
   */
  public record Reading(long length, long consumed) {}

  /**
   * The queue's length now, tuples.
   *
   * @throws IllegalStateException the broker did not answer for {@link #WAIT_MS}, or the topic does
   *     not exist (the message names the topic and the cause)
   */
  public long length() {
    return reading().length();
  }

  /**
   * The queue's length and its readers' positions now ({@link Reading}).
   *
   * @throws IllegalStateException as {@link #length}
   */
  public Reading reading() {
    long deadline = System.currentTimeMillis() + WAIT_MS;
    long backoffMs = 100;
    for (int attempt = 1; ; attempt++) {
      try {
        return read();
      } catch (IllegalStateException e) {
        boolean transient_ =
            e.getCause() instanceof RetriableException || e.getCause() instanceof TimeoutException;
        if (!transient_ || System.currentTimeMillis() + backoffMs > deadline) {
          throw e;
        }
        LOG.warn(
            "FG-QUEUE-001 output stream queue of topic '{}': broker not answering, retrying the"
                + " queue read (attempt {}): {}",
            topic,
            attempt,
            e.getCause().toString());
        try {
          Thread.sleep(backoffMs);
        } catch (InterruptedException interrupted) {
          Thread.currentThread().interrupt();
          throw e;
        }
        backoffMs = Math.min(2_000, backoffMs * 2);
      }
    }
  }

  private Reading read() {
    try {
      List<TopicPartition> partitions = partitions();
      Map<TopicPartition, OffsetSpec> latest = new HashMap<>();
      Map<TopicPartition, OffsetSpec> earliest = new HashMap<>();
      for (TopicPartition tp : partitions) {
        latest.put(tp, OffsetSpec.latest());
        earliest.put(tp, OffsetSpec.earliest());
      }
      Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> highs =
          get(admin.listOffsets(latest).all());
      Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> starts =
          get(admin.listOffsets(earliest).all());
      Map<TopicPartition, Long> slowest = new HashMap<>();
      for (String group : readers) {
        Map<TopicPartition, OffsetAndMetadata> committed =
            get(admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata());
        for (TopicPartition tp : partitions) {
          OffsetAndMetadata c = committed.get(tp);
          long position =
              c == null ? starts.get(tp).offset() : Math.max(c.offset(), starts.get(tp).offset());
          slowest.merge(tp, position, Math::min);
        }
      }
      long length = 0;
      long consumed = 0;
      for (TopicPartition tp : partitions) {
        long position = slowest.getOrDefault(tp, starts.get(tp).offset());
        length += Math.max(0, highs.get(tp).offset() - position);
        consumed += position;
      }
      return new Reading(length, consumed);
    } catch (ExecutionException | TimeoutException e) {
      Throwable cause = e instanceof ExecutionException ? e.getCause() : e;
      throw new IllegalStateException(
          "cannot read the output stream queue of topic '" + topic + "': " + cause, cause);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException("interrupted while reading topic '" + topic + "'", e);
    }
  }

  private List<TopicPartition> partitions()
      throws ExecutionException, InterruptedException, TimeoutException {
    List<TopicPartition> partitions = new ArrayList<>();
    for (TopicPartitionInfo info :
        get(admin.describeTopics(List.of(topic)).allTopicNames()).get(topic).partitions()) {
      partitions.add(new TopicPartition(topic, info.partition()));
    }
    return partitions;
  }

  /** The output stream queue of a sink: its topic, read by its reception groups. */
  static OutputQueue of(SinkOptions options) {
    return new OutputQueue(
        TransactionalProducers.admin(options),
        options.topic,
        options.queueReaders,
        REQUEST_TIMEOUT);
  }

  private <T> T get(org.apache.kafka.common.KafkaFuture<T> future)
      throws ExecutionException, InterruptedException, TimeoutException {
    return future.get(timeout.toMillis(), TimeUnit.MILLISECONDS);
  }
}

package io.floodgate.spark.read;

import java.time.Duration;
import java.util.Deque;
import java.util.Iterator;
import java.util.Objects;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedDeque;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * The consumers of one executor, kept between micro-batches: a task borrows one for its partition's
 * range and gives it back, so the next micro-batch's task for that partition skips the connection,
 * the metadata and the fetch session's start. This is what Spark's Kafka source does ({@code
 * KafkaDataConsumer}'s pool, keyed by group and topic-partition); idle consumers are closed after
 * {@link #IDLE_TIMEOUT_MS}.
 *
 * <p>In local mode the driver and every task thread share this pool. A consumer is owned by one
 * thread at a time (KafkaConsumer refuses multi-threaded use with {@code
 * ConcurrentModificationException}): taking it from the pool, for a task or for closing, is an
 * atomic claim of its deque node, so two threads never get the same one.
 */
public final class ConsumerPool {
  /** A consumer idle this long is closed when the pool is next used. */
  public static final long IDLE_TIMEOUT_MS = 5 * 60_000;

  /** Consumers kept idle per key at most (more are closed when given back). */
  static final int MAX_IDLE_PER_KEY = 2;

  private static final ConcurrentHashMap<Key, Deque<Idle>> IDLE = new ConcurrentHashMap<>();

  private ConsumerPool() {}

  /** What makes two consumers interchangeable: the same properties and the same partition. */
  record Key(Properties properties, String topic, int partition) {}

  private record Idle(KafkaConsumer<byte[], byte[]> consumer, long since) {}

  /**
   * A consumer with {@code properties} for {@code topic}'s {@code partition}: an idle one of the
   * pool, or a new one. Give it back with {@link #release}, or close it after an error.
   */
  public static KafkaConsumer<byte[], byte[]> acquire(
      Properties properties, String topic, int partition) {
    evictIdle(System.currentTimeMillis());
    Deque<Idle> idle = IDLE.get(new Key(properties, topic, partition));
    Idle kept = idle == null ? null : idle.pollFirst();
    if (kept != null) {
      return kept.consumer();
    }
    return new KafkaConsumer<>(
        Objects.requireNonNull(properties),
        new ByteArrayDeserializer(),
        new ByteArrayDeserializer());
  }

  /** Give {@code consumer} back for the next task reading the same partition. */
  public static void release(
      Properties properties, String topic, int partition, KafkaConsumer<byte[], byte[]> consumer) {
    release(properties, topic, partition, consumer, System.currentTimeMillis());
  }

  /** {@link #release} at {@code nowMs} (ms since the epoch; tests give an old one). */
  static void release(
      Properties properties,
      String topic,
      int partition,
      KafkaConsumer<byte[], byte[]> consumer,
      long nowMs) {
    Deque<Idle> idle =
        IDLE.computeIfAbsent(
            new Key(properties, topic, partition), k -> new ConcurrentLinkedDeque<>());
    if (idle.size() >= MAX_IDLE_PER_KEY) {
      consumer.close(Duration.ZERO);
      return;
    }
    idle.addFirst(new Idle(consumer, nowMs));
  }

  /**
   * Close the consumers idle for more than {@link #IDLE_TIMEOUT_MS} at {@code nowMs}.
   *
   * @return how many this call closed
   */
  static int evictIdle(long nowMs) {
    int closed = 0;
    for (Deque<Idle> deque : IDLE.values()) {
      Iterator<Idle> it = deque.descendingIterator();
      while (it.hasNext()) {
        Idle idle = it.next();
        // removeFirstOccurrence claims the node by compare-and-set, as pollFirst does: of the
        // threads that see this consumer expired, or take it for a task, exactly one gets it.
        // The iterator's own remove() does not claim, and two tasks starting together both
        // closed the same consumer.
        if (nowMs - idle.since() > IDLE_TIMEOUT_MS && deque.removeFirstOccurrence(idle)) {
          idle.consumer().close(Duration.ZERO);
          closed++;
        }
      }
    }
    return closed;
  }

  /** Consumers idle in the pool now, over all keys. */
  static int idleCount() {
    return IDLE.values().stream().mapToInt(Deque::size).sum();
  }
}

package io.floodgate.spark.read;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotSame;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Properties;
import java.util.UUID;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * The pool hands a consumer to one thread at a time. In local mode every task thread shares it, and
 * Kafka's consumer refuses a second thread with {@code ConcurrentModificationException} (found when
 * two tasks started together and both closed the same expired consumer).
 */
class ConsumerPoolTest {
  private static final int THREADS = 8;
  private static final long LONG_AGO = 0L;

  /** Properties no other test shares; the consumer never connects (nothing polls). */
  private final Properties properties = properties();

  private static Properties properties() {
    Properties p = new Properties();
    p.setProperty("bootstrap.servers", "127.0.0.1:9");
    p.setProperty("client.id", "consumer-pool-test-" + UUID.randomUUID());
    return p;
  }

  /** A consumer made outside the pool (acquire would evict the expired ones set up before). */
  private KafkaConsumer<byte[], byte[]> newConsumer() {
    return new KafkaConsumer<>(
        properties, new ByteArrayDeserializer(), new ByteArrayDeserializer());
  }

  @AfterEach
  void drain() {
    ConsumerPool.evictIdle(Long.MAX_VALUE);
  }

  @Test
  void aGivenBackConsumerIsTheNextTasksOne() {
    KafkaConsumer<byte[], byte[]> first = ConsumerPool.acquire(properties, "t", 0);
    ConsumerPool.release(properties, "t", 0, first);
    KafkaConsumer<byte[], byte[]> second = ConsumerPool.acquire(properties, "t", 0);
    KafkaConsumer<byte[], byte[]> other = ConsumerPool.acquire(properties, "t", 1);
    try {
      assertEquals(first, second);
      assertNotSame(first, other);
    } finally {
      second.close(Duration.ZERO);
      other.close(Duration.ZERO);
    }
  }

  @Test
  void threadsEvictingTogetherCloseEachExpiredConsumerOnce() throws Exception {
    int partitions = 40;
    for (int p = 0; p < partitions; p++) {
      ConsumerPool.release(properties, "t", p, newConsumer(), LONG_AGO);
    }
    AtomicInteger closed = new AtomicInteger();
    runTogether(() -> closed.addAndGet(ConsumerPool.evictIdle(System.currentTimeMillis())));
    assertEquals(partitions, closed.get());
  }

  @Test
  void aTaskNeverGetsAConsumerAnotherThreadIsClosing() throws Exception {
    int rounds = 200;
    for (int round = 0; round < rounds; round++) {
      ConsumerPool.release(properties, "t", 0, newConsumer(), LONG_AGO);
      List<KafkaConsumer<byte[], byte[]>> taken = Collections.synchronizedList(new ArrayList<>());
      AtomicInteger thread = new AtomicInteger();
      runTogether(
          () -> {
            // Half the threads only evict; the others take a consumer for a task, as acquire
            // (which also evicts) does when two tasks start.
            if (thread.getAndIncrement() % 2 == 0) {
              ConsumerPool.evictIdle(System.currentTimeMillis());
            } else {
              KafkaConsumer<byte[], byte[]> consumer = ConsumerPool.acquire(properties, "t", 0);
              taken.add(consumer);
              consumer.assignment(); // throws if closed, or in use by another thread
            }
          });
      for (KafkaConsumer<byte[], byte[]> consumer : taken) {
        consumer.close(Duration.ZERO);
      }
      assertEquals(0, ConsumerPool.idleCount(), "the expired consumer was taken or closed");
    }
  }

  /** Run {@code work} on {@link #THREADS} threads released at once; rethrow the first failure. */
  private static void runTogether(Runnable work) throws Exception {
    ExecutorService pool = Executors.newFixedThreadPool(THREADS);
    CountDownLatch start = new CountDownLatch(1);
    try {
      List<Future<?>> done = new ArrayList<>();
      for (int i = 0; i < THREADS; i++) {
        done.add(
            pool.submit(
                () -> {
                  start.await();
                  work.run();
                  return null;
                }));
      }
      start.countDown();
      for (Future<?> f : done) {
        f.get();
      }
    } finally {
      pool.shutdownNow();
    }
  }
}

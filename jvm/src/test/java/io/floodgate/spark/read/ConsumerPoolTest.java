package io.floodgate.spark.read;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

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
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * The pool hands a consumer to one thread at a time, keeps at most its capacity, and its evictor
 * thread closes idle consumers (Spark's {@code InternalKafkaConsumerPool}). In local mode every
 * task thread shares the pool, and Kafka's consumer refuses a second thread with {@code
 * ConcurrentModificationException} (found when a task and an evicting thread both took the same
 * consumer).
 */
class ConsumerPoolTest {
  private static final int THREADS = 8;
  private static final long MINUTE = 60_000L;

  /** No evictor thread: the tests run the evictor's step themselves. */
  private static final ConsumerCacheSettings NO_EVICTOR =
      new ConsumerCacheSettings(64, 5 * MINUTE, 0, false);

  /** Properties no other test shares; the consumer never connects (nothing polls). */
  private final Properties properties = properties();

  /** The pool's clock, ms: the tests move it. */
  private final AtomicLong now = new AtomicLong(1_000_000L);

  private final List<ConsumerPool> pools = new ArrayList<>();

  private static Properties properties() {
    Properties p = new Properties();
    p.setProperty("bootstrap.servers", "127.0.0.1:9");
    p.setProperty("client.id", "consumer-pool-test-" + UUID.randomUUID());
    return p;
  }

  private ConsumerPool pool(ConsumerCacheSettings settings) {
    ConsumerPool pool = new ConsumerPool(settings, now::get);
    pools.add(pool);
    return pool;
  }

  @AfterEach
  void closePools() {
    pools.forEach(ConsumerPool::close);
  }

  @Test
  void aPutBackConsumerIsTheNextTasksOne() {
    ConsumerPool pool = pool(NO_EVICTOR);
    KafkaConsumer<byte[], byte[]> first = pool.borrow(properties, "t", 0);
    pool.putBack(properties, "t", 0, first);
    KafkaConsumer<byte[], byte[]> second = pool.borrow(properties, "t", 0);
    KafkaConsumer<byte[], byte[]> other = pool.borrow(properties, "t", 1);
    try {
      assertSame(first, second);
      assertNotSame(first, other);
      assertEquals(2, pool.size());
    } finally {
      second.close(Duration.ZERO);
      other.close(Duration.ZERO);
    }
    assertEquals(0, pool.size(), "a consumer its task closed leaves the pool's count");
  }

  @Test
  void aKeyKeepsAtMostThreeIdleConsumers() {
    ConsumerPool pool = pool(NO_EVICTOR);
    List<KafkaConsumer<byte[], byte[]>> borrowed = new ArrayList<>();
    for (int i = 0; i < 5; i++) {
      borrowed.add(pool.borrow(properties, "t", 0));
    }
    borrowed.forEach(c -> pool.putBack(properties, "t", 0, c));
    assertEquals(ConsumerPool.MAX_IDLE_PER_KEY, pool.idleCount());
    assertEquals(ConsumerPool.MAX_IDLE_PER_KEY, pool.size(), "the others are closed");
  }

  @Test
  void atCapacityANewConsumerClosesTheLongestIdleFirst() {
    ConsumerPool pool = pool(new ConsumerCacheSettings(2, 5 * MINUTE, 0, false));
    KafkaConsumer<byte[], byte[]> older = pool.borrow(properties, "t", 0);
    KafkaConsumer<byte[], byte[]> newer = pool.borrow(properties, "t", 1);
    pool.putBack(properties, "t", 0, older);
    now.addAndGet(1);
    pool.putBack(properties, "t", 1, newer);

    KafkaConsumer<byte[], byte[]> third = pool.borrow(properties, "t", 2);
    assertEquals(2, pool.size());
    assertEquals(1, pool.idleCount());
    assertSame(newer, pool.borrow(properties, "t", 1), "the newer idle one is kept");
    KafkaConsumer<byte[], byte[]> again = pool.borrow(properties, "t", 0);
    assertNotSame(older, again, "the older idle one was closed");
    third.close();
    newer.close();
    again.close();
  }

  @Test
  void theCapacityIsSoftWhenNoConsumerIsIdle() {
    ConsumerPool pool = pool(new ConsumerCacheSettings(1, 5 * MINUTE, 0, false));
    KafkaConsumer<byte[], byte[]> a = pool.borrow(properties, "t", 0);
    KafkaConsumer<byte[], byte[]> b = pool.borrow(properties, "t", 1);
    assertEquals(2, pool.size(), "a task gets a consumer even when the pool is full");
    a.close();
    b.close();
  }

  @Test
  void theEvictorStepClosesOnlyConsumersIdlePastTheTimeout() {
    ConsumerPool pool = pool(NO_EVICTOR);
    KafkaConsumer<byte[], byte[]> old = pool.borrow(properties, "t", 0);
    KafkaConsumer<byte[], byte[]> recent = pool.borrow(properties, "t", 1);
    pool.putBack(properties, "t", 0, old);
    now.addAndGet(2 * MINUTE);
    pool.putBack(properties, "t", 1, recent);
    assertEquals(1, pool.evictIdle(now.get() + 4 * MINUTE));
    assertEquals(1, pool.idleCount());
    assertSame(recent, pool.borrow(properties, "t", 1));
    recent.close();
  }

  @Test
  void aNonPositiveTimeoutNeverEvicts() {
    ConsumerPool pool = pool(new ConsumerCacheSettings(64, 0, MINUTE, false));
    pool.putBack(properties, "t", 0, pool.borrow(properties, "t", 0));
    assertFalse(pool.evicting(), "no evictor thread without a timeout");
    assertEquals(0, pool.evictIdle(Long.MAX_VALUE));
    assertEquals(1, pool.idleCount());
  }

  @Test
  void theEvictorThreadClosesIdleConsumers() throws Exception {
    ConsumerPool pool = pool(new ConsumerCacheSettings(64, MINUTE, 1, false));
    assertTrue(pool.evicting());
    pool.putBack(properties, "t", 0, pool.borrow(properties, "t", 0));
    Thread evictor =
        Thread.getAllStackTraces().keySet().stream()
            .filter(t -> t.getName().equals(ConsumerPool.EVICTOR_THREAD))
            .findFirst()
            .orElseThrow(() -> new AssertionError("no thread " + ConsumerPool.EVICTOR_THREAD));
    assertTrue(evictor.isDaemon(), "the evictor must not keep an executor's JVM alive");
    assertEquals(1, pool.idleCount(), "not idle past the timeout yet");

    now.addAndGet(2 * MINUTE); // idle past the timeout: the next run closes it
    long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
    while (pool.size() > 0) {
      if (System.nanoTime() > deadline) {
        fail("the evictor thread closed nothing in 60 s");
      }
      Thread.sleep(5);
    }
    assertEquals(0, pool.idleCount());
  }

  @Test
  void threadsEvictingTogetherCloseEachExpiredConsumerOnce() throws Exception {
    ConsumerPool pool = pool(NO_EVICTOR);
    int partitions = 40;
    for (int p = 0; p < partitions; p++) {
      pool.putBack(properties, "t", p, pool.borrow(properties, "t", p));
    }
    AtomicInteger closed = new AtomicInteger();
    runTogether(() -> closed.addAndGet(pool.evictIdle(Long.MAX_VALUE)));
    assertEquals(partitions, closed.get());
    assertEquals(0, pool.size());
  }

  /**
   * Tasks take the consumers that evicting threads close at the same time: each consumer put back
   * must end either closed by one evictor or taken, open, by one task. The consumers are fresh for
   * the tasks (a borrow takes them) and expired for the evictors (which evict at a time far ahead),
   * so both kinds of thread race for every one.
   */
  @Test
  void aTaskNeverGetsAConsumerAnotherThreadIsClosing() throws Exception {
    ConsumerPool pool = pool(NO_EVICTOR);
    int rounds = 200;
    int partitions = 4;
    for (int round = 0; round < rounds; round++) {
      List<KafkaConsumer<byte[], byte[]>> put = new ArrayList<>();
      for (int p = 0; p < partitions; p++) {
        put.add(pool.borrow(properties, "t", p));
      }
      for (int p = 0; p < partitions; p++) {
        pool.putBack(properties, "t", p, put.get(p));
      }
      List<KafkaConsumer<byte[], byte[]>> taken = Collections.synchronizedList(new ArrayList<>());
      AtomicInteger evicted = new AtomicInteger();
      AtomicInteger thread = new AtomicInteger();
      runTogether(
          () -> {
            if (thread.getAndIncrement() % 2 == 0) {
              evicted.addAndGet(pool.evictIdle(Long.MAX_VALUE));
            } else {
              for (int p = 0; p < partitions; p++) {
                KafkaConsumer<byte[], byte[]> consumer = pool.borrow(properties, "t", p);
                if (put.contains(consumer)) {
                  taken.add(consumer);
                  consumer.assignment(); // throws if closed, or in use by another thread
                } else {
                  consumer.close(Duration.ZERO); // a new one: this partition's was gone
                }
              }
            }
          });
      for (KafkaConsumer<byte[], byte[]> consumer : taken) {
        consumer.assignment(); // throws if an evictor closed it after the task took it
        consumer.close(Duration.ZERO);
      }
      assertEquals(partitions, evicted.get() + taken.size(), "each consumer taken or closed, once");
      assertEquals(0, pool.size(), "round " + round);
    }
  }

  /** Run {@code work} on {@link #THREADS} threads released at once; rethrow the first failure. */
  private static void runTogether(Runnable work) throws Exception {
    ExecutorService threads = Executors.newFixedThreadPool(THREADS);
    CountDownLatch start = new CountDownLatch(1);
    try {
      List<Future<?>> done = new ArrayList<>();
      for (int i = 0; i < THREADS; i++) {
        done.add(
            threads.submit(
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
      threads.shutdownNow();
    }
  }
}

package io.floodgate.spark.read;

import java.lang.management.ManagementFactory;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.Deque;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedDeque;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.LongSupplier;
import javax.management.JMException;
import javax.management.ObjectName;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The consumers of one executor, kept between micro-batches: a task borrows one for its partition's
 * range and puts it back, so the next micro-batch's task for that partition skips the connection,
 * the metadata and the fetch session's start. This is Spark's Kafka source's pool ({@code
 * KafkaDataConsumer} over {@code InternalKafkaConsumerPool}), with its settings ({@link
 * ConsumerCacheSettings}, {@code spark.kafka.consumer.cache.*}):
 *
 * <ul>
 *   <li>a soft capacity of consumers, borrowed and idle together: a task that needs a new consumer
 *       when the pool is full closes idle ones, oldest first ({@code clearOldest}), and gets one
 *       even when none was idle;
 *   <li>at most {@link #MAX_IDLE_PER_KEY} idle consumers per key (Spark's {@code maxIdlePerKey});
 *   <li>a background evictor thread ({@link #EVICTOR_THREAD}, a daemon) that closes consumers idle
 *       longer than the timeout, once per interval. A borrow never closes an expired consumer: it
 *       takes it, as Spark's pool does between evictor runs.
 * </ul>
 *
 * <p>A consumer closed by its task (after an error, as Spark's {@code invalidateObject}) leaves the
 * pool's count by its own {@code close}.
 *
 * <p>In local mode the driver and every task thread share the executor's pool. A consumer is owned
 * by one thread at a time (KafkaConsumer refuses multi-threaded use with {@code
 * ConcurrentModificationException}): taking it from the pool, for a task or for closing, is an
 * atomic claim of its deque node, so two threads never get the same one.
 */
public final class ConsumerPool implements AutoCloseable {
  private static final Logger LOG = LoggerFactory.getLogger(ConsumerPool.class);

  /** Idle consumers kept per key at most (more are closed when put back): Spark's value. */
  static final int MAX_IDLE_PER_KEY = 3;

  /** The evictor thread's name. */
  public static final String EVICTOR_THREAD = "floodgate-kafka-consumer-pool-evictor";

  /** The executor's pool, made at its first use from the executor's Spark conf. */
  private static volatile ConsumerPool executorPool;

  private final ConsumerCacheSettings settings;
  private final LongSupplier clockMs;
  private final ConcurrentHashMap<Key, Deque<Idle>> idle = new ConcurrentHashMap<>();

  /** Consumers this pool made and that are not closed yet: borrowed and idle. */
  private final AtomicInteger size = new AtomicInteger();

  private final ScheduledExecutorService evictor;
  private final ObjectName mbean;

  /** What makes two consumers interchangeable: the same properties and the same partition. */
  record Key(Properties properties, String topic, int partition) {}

  private record Idle(Pooled consumer, long since) {}

  /**
   * A pool with {@code settings}, its idle times taken from {@code clockMs} (ms since the epoch);
   * starts the evictor thread when {@link ConsumerCacheSettings#evicts}.
   */
  ConsumerPool(ConsumerCacheSettings settings, LongSupplier clockMs) {
    this.settings = settings;
    this.clockMs = clockMs;
    if (settings.evicts()) {
      evictor =
          Executors.newSingleThreadScheduledExecutor(
              run -> {
                Thread thread = new Thread(run, EVICTOR_THREAD);
                thread.setDaemon(true);
                return thread;
              });
      evictor.scheduleWithFixedDelay(
          this::evictorRun,
          settings.evictorIntervalMs(),
          settings.evictorIntervalMs(),
          TimeUnit.MILLISECONDS);
    } else {
      evictor = null;
    }
    mbean = settings.jmx() ? register(this) : null;
  }

  /**
   * This executor's pool, with the settings of its Spark conf ({@link
   * ConsumerCacheSettings#ofExecutor}).
   *
   * @throws IllegalArgumentException a {@code spark.kafka.consumer.cache.*} value is refused
   */
  static ConsumerPool ofExecutor() {
    ConsumerPool pool = executorPool;
    if (pool == null) {
      synchronized (ConsumerPool.class) {
        pool = executorPool;
        if (pool == null) {
          pool = new ConsumerPool(ConsumerCacheSettings.ofExecutor(), System::currentTimeMillis);
          executorPool = pool;
        }
      }
    }
    return pool;
  }

  /**
   * A consumer with {@code properties} for {@code topic}'s {@code partition} from the executor's
   * pool ({@link #borrow}). Give it back with {@link #release}, or close it after an error.
   */
  public static KafkaConsumer<byte[], byte[]> acquire(
      Properties properties, String topic, int partition) {
    return ofExecutor().borrow(properties, topic, partition);
  }

  /** Give {@code consumer} back to the executor's pool ({@link #putBack}). */
  public static void release(
      Properties properties, String topic, int partition, KafkaConsumer<byte[], byte[]> consumer) {
    ofExecutor().putBack(properties, topic, partition, consumer);
  }

  /**
   * A consumer with {@code properties} for {@code topic}'s {@code partition}: the most recently
   * idle one of its key, or a new one (closing idle ones, oldest first, while the pool is at its
   * capacity). Put it back with {@link #putBack}, or close it after an error.
   */
  KafkaConsumer<byte[], byte[]> borrow(Properties properties, String topic, int partition) {
    Deque<Idle> deque = idle.get(new Key(properties, topic, partition));
    Idle kept = deque == null ? null : deque.pollFirst();
    if (kept != null) {
      return kept.consumer();
    }
    if (size.get() >= settings.capacity()) {
      clearOldest(size.get() - settings.capacity() + 1);
    }
    return new Pooled(properties, this);
  }

  /** Give {@code consumer} back for the next task reading the same partition. */
  void putBack(
      Properties properties, String topic, int partition, KafkaConsumer<byte[], byte[]> consumer) {
    if (!(consumer instanceof Pooled pooled) || pooled.pool != this) {
      throw new IllegalArgumentException("a consumer this pool did not make: " + consumer);
    }
    Deque<Idle> deque =
        idle.computeIfAbsent(
            new Key(properties, topic, partition), k -> new ConcurrentLinkedDeque<>());
    if (deque.size() >= MAX_IDLE_PER_KEY) {
      consumer.close(Duration.ZERO);
      return;
    }
    deque.addFirst(new Idle(pooled, clockMs.getAsLong()));
  }

  /**
   * Close the consumers idle for more than the timeout at {@code nowMs} (ms since the epoch): one
   * run of the evictor. None when the timeout is {@code <= 0}.
   *
   * @return how many this call closed
   */
  int evictIdle(long nowMs) {
    if (settings.timeoutMs() <= 0) {
      return 0;
    }
    int closed = 0;
    for (Deque<Idle> deque : idle.values()) {
      Iterator<Idle> it = deque.descendingIterator();
      while (it.hasNext()) {
        Idle entry = it.next();
        // removeFirstOccurrence claims the node by compare-and-set, as pollFirst does: of the
        // threads that see this consumer expired, or take it for a task, exactly one gets it.
        // The iterator's own remove() does not claim, and a task got a consumer being closed.
        if (nowMs - entry.since() > settings.timeoutMs() && deque.removeFirstOccurrence(entry)) {
          entry.consumer().close(Duration.ZERO);
          closed++;
        }
      }
    }
    return closed;
  }

  /** Close up to {@code count} idle consumers, the longest idle first (Spark's clearOldest). */
  private void clearOldest(int count) {
    List<Map.Entry<Deque<Idle>, Idle>> all = new ArrayList<>();
    for (Deque<Idle> deque : idle.values()) {
      deque.forEach(entry -> all.add(Map.entry(deque, entry)));
    }
    all.sort(Comparator.comparingLong(e -> e.getValue().since()));
    int closed = 0;
    for (Map.Entry<Deque<Idle>, Idle> e : all) {
      if (closed >= count) {
        break;
      }
      if (e.getKey().removeFirstOccurrence(e.getValue())) { // claimed, as in evictIdle
        e.getValue().consumer().close(Duration.ZERO);
        closed++;
      }
    }
    if (closed > 0) {
      LOG.info(
          "Kafka consumer pool at its capacity ({} = {}): closed {} idle consumer(s)",
          ConsumerCacheSettings.CAPACITY,
          settings.capacity(),
          closed);
    }
  }

  private void evictorRun() {
    try {
      evictIdle(clockMs.getAsLong());
    } catch (RuntimeException e) { // a run that throws would cancel every later one
      LOG.warn("closing idle Kafka consumers failed; the evictor runs again", e);
    }
  }

  /** Consumers idle in the pool now, over all keys. */
  int idleCount() {
    return idle.values().stream().mapToInt(Deque::size).sum();
  }

  /** Consumers this pool made that are not closed: borrowed and idle. */
  int size() {
    return size.get();
  }

  /** Whether the evictor thread runs. */
  boolean evicting() {
    return evictor != null && !evictor.isShutdown();
  }

  /** Stop the evictor, close every idle consumer and leave JMX; borrowed ones stay open. */
  @Override
  public void close() {
    if (evictor != null) {
      evictor.shutdownNow();
    }
    for (Deque<Idle> deque : idle.values()) {
      for (Idle entry = deque.pollFirst(); entry != null; entry = deque.pollFirst()) {
        entry.consumer().close(Duration.ZERO);
      }
    }
    if (mbean != null) {
      try {
        ManagementFactory.getPlatformMBeanServer().unregisterMBean(mbean);
      } catch (JMException e) {
        LOG.debug("unregistering {} failed", mbean, e);
      }
    }
  }

  /** The pool's counts over JMX ({@code spark.kafka.consumer.cache.jmx.enable}). */
  public interface StatsMXBean {
    /** Consumers idle in the pool. */
    int getIdle();

    /** Consumers made and not closed: borrowed and idle. */
    int getSize();

    /** {@code spark.kafka.consumer.cache.capacity}. */
    int getCapacity();
  }

  private static final AtomicInteger POOLS = new AtomicInteger();

  private static ObjectName register(ConsumerPool pool) {
    try {
      ObjectName name =
          new ObjectName(
              "io.floodgate.spark:type=ConsumerPool,name=floodgate-kafka-consumer-pool-"
                  + POOLS.incrementAndGet());
      StatsMXBean stats =
          new StatsMXBean() {
            @Override
            public int getIdle() {
              return pool.idleCount();
            }

            @Override
            public int getSize() {
              return pool.size();
            }

            @Override
            public int getCapacity() {
              return pool.settings.capacity();
            }
          };
      ManagementFactory.getPlatformMBeanServer()
          .registerMBean(new javax.management.StandardMBean(stats, StatsMXBean.class, true), name);
      return name;
    } catch (JMException e) {
      LOG.warn("the Kafka consumer pool's JMX MBean could not be registered", e);
      return null;
    }
  }

  /** A consumer of this pool: its close leaves the pool's count, once. */
  private static final class Pooled extends KafkaConsumer<byte[], byte[]> {
    private final ConsumerPool pool;
    private final AtomicBoolean closed = new AtomicBoolean();

    Pooled(Properties properties, ConsumerPool pool) {
      super(properties, new ByteArrayDeserializer(), new ByteArrayDeserializer());
      this.pool = pool;
      pool.size.incrementAndGet();
    }

    @Override
    public void close() {
      try {
        super.close();
      } finally {
        left();
      }
    }

    @Override
    public void close(Duration timeout) {
      try {
        super.close(timeout);
      } finally {
        left();
      }
    }

    private void left() {
      if (closed.compareAndSet(false, true)) {
        pool.size.decrementAndGet();
      }
    }
  }
}

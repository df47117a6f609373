package io.floodgate.spark.write;

import io.floodgate.spark.kafka.Admins;
import io.floodgate.spark.kafka.ClientProperties;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.Deque;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * The write tasks' producers, kept per executor JVM between micro-batches, one per {@code
 * transactional.id}: a task of the next batch on the same executor takes its partition's producer
 * back instead of making one and waiting for its {@code initTransactions}. With {@code delivery =
 * at-least-once} ({@link SinkOptions#exactlyOnce()} false) the producers are idempotent ones
 * without a {@code transactional.id} (the id names them as their {@code client.id}): Kafka still
 * writes each record once per send, in order, but a replayed batch sends it again.
 *
 * <p>A producer is handed to one task at a time ({@link #take}); the task gives it back after its
 * transaction ended ({@link #give}), or closes it after any error. A producer that another
 * executor's producer of the same {@code transactional.id} fenced meanwhile fails its next
 * transaction with {@code ProducerFencedException}: the task closes it and Spark retries the task,
 * whose new producer's {@code initTransactions} fences the other in turn. A daemon thread closes
 * producers idle for {@link #IDLE_TIMEOUT_MS}, as Spark's Kafka consumer cache evicts idle
 * consumers.
 */
public final class TransactionalProducers {
  /** How long {@code initTransactions} and a commit may take, ms ({@code max.block.ms}). */
  public static final long BLOCK_MS = 60_000;

  /** The producer's {@code transaction.timeout.ms}: an abandoned transaction ends after it. */
  public static final long TRANSACTION_TIMEOUT_MS = 60_000;

  /**
   * How long a producer may sit idle before it is closed, ms: a query stopped or moved to other
   * executors leaves its producers here, which would otherwise keep their connections.
   */
  public static final long IDLE_TIMEOUT_MS = 60_000;

  private record Idle(Producer<byte[], byte[]> producer, long since) {}

  private static final Map<String, Deque<Idle>> IDLE = new HashMap<>();

  static {
    Runtime.getRuntime()
        .addShutdownHook(new Thread(TransactionalProducers::closeAll, "floodgate-sink-close"));
    Thread evictor = new Thread(TransactionalProducers::evictForever, "floodgate-sink-evictor");
    evictor.setDaemon(true);
    evictor.start();
  }

  private TransactionalProducers() {}

  /**
   * The producer of {@code transactionalId}, made (and, for exactly-once, its transactions
   * initialised) if this JVM holds none idle.
   *
   * @throws org.apache.kafka.common.KafkaException {@code initTransactions} failed or timed out
   */
  public static Producer<byte[], byte[]> take(SinkOptions options, String transactionalId) {
    String key = key(options, transactionalId);
    synchronized (IDLE) {
      Deque<Idle> idle = IDLE.get(key);
      if (idle != null && !idle.isEmpty()) {
        return idle.pop().producer();
      }
    }
    Producer<byte[], byte[]> producer = new KafkaProducer<>(properties(options, transactionalId));
    if (!options.exactlyOnce()) {
      return producer;
    }
    try {
      producer.initTransactions();
    } catch (RuntimeException e) {
      producer.close(Duration.ZERO);
      throw e;
    }
    return producer;
  }

  /** Keep {@code producer}, whose transaction ended, for the next task of its partition. */
  public static void give(SinkOptions options, String transactionalId, Producer<byte[], byte[]> p) {
    synchronized (IDLE) {
      IDLE.computeIfAbsent(key(options, transactionalId), k -> new ArrayDeque<>())
          .push(new Idle(p, System.currentTimeMillis()));
    }
  }

  /** This JVM's admin client of the sink's cluster (made once, closed at exit; {@link Admins}). */
  public static Admin admin(SinkOptions options) {
    return Admins.of(options.bootstrapServers, options.client);
  }

  static Properties properties(SinkOptions options, String transactionalId) {
    Properties props = new Properties();
    // A real-time batch sends each tuple as it comes: no wait to fill a producer batch (Kafka's
    // clients before 4.0 defaulted to 0, as Spark's Kafka sink runs). A given linger.ms wins.
    props.put(ProducerConfig.LINGER_MS_CONFIG, options.realTime ? "0" : "5");
    props.put(ProducerConfig.BATCH_SIZE_CONFIG, String.valueOf(256 * 1024));
    props.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, "lz4");
    props.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, String.valueOf(BLOCK_MS));
    props.putAll(ClientProperties.forJava(options.client));
    props.put("bootstrap.servers", options.bootstrapServers);
    if (options.exactlyOnce()) {
      // A transaction.timeout.ms the user gave ([kafka.client]) wins, as linger.ms does.
      props.putIfAbsent(
          ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, String.valueOf(options.transactionTimeoutMs));
      props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
    } else {
      props.put(ProducerConfig.CLIENT_ID_CONFIG, transactionalId);
    }
    props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
    props.put(ProducerConfig.ACKS_CONFIG, "all");
    props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
    props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
    return props;
  }

  private static String key(SinkOptions options, String transactionalId) {
    return options.bootstrapServers
        + "|"
        + options.client
        + "|"
        + options.delivery
        + "|"
        + options.transactionTimeoutMs
        + "|"
        + transactionalId;
  }

  /** Close the producers idle for longer than {@code timeoutMs}; how many were closed. */
  static int evict(long timeoutMs) {
    long now = System.currentTimeMillis();
    java.util.List<Producer<byte[], byte[]>> stale = new java.util.ArrayList<>();
    synchronized (IDLE) {
      for (Deque<Idle> idle : IDLE.values()) {
        idle.removeIf(
            entry -> {
              boolean old = now - entry.since() >= timeoutMs;
              if (old) {
                stale.add(entry.producer());
              }
              return old;
            });
      }
      IDLE.values().removeIf(Deque::isEmpty);
    }
    stale.forEach(p -> p.close(Duration.ofSeconds(1)));
    return stale.size();
  }

  private static void evictForever() {
    while (true) {
      try {
        Thread.sleep(IDLE_TIMEOUT_MS / 2);
        evict(IDLE_TIMEOUT_MS);
      } catch (InterruptedException e) {
        return;
      } catch (RuntimeException e) {
        // A producer's close failed: the next round tries the others.
      }
    }
  }

  private static void closeAll() {
    synchronized (IDLE) {
      IDLE.values().forEach(d -> d.forEach(e -> e.producer().close(Duration.ofSeconds(1))));
      IDLE.clear();
    }
  }
}

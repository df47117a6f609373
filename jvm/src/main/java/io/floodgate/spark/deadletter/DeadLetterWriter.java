package io.floodgate.spark.deadletter;

import io.floodgate.spark.serde.TupleRejected;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeSet;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.Supplier;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Collects the tuples one Spark task refuses, then sends them all to the dead-letter topic at the
 * end of the task, with the original key, value and headers plus Floodgate's: {@code
 * floodgate.reason, floodgate.error, floodgate.stream, floodgate.query, floodgate.topic,
 * floodgate.partition, floodgate.offset} (UTF-8), keyed {@code
 * <query>@<topic>/<partition>/<offset>} so a reader drops the repeats of a retried task. The
 * headers, key and producer settings are specified by {@code tests/golden/contract/source.json};
 * {@code pipeline.deadletter} names the headers for the Python readers (the ledger behind {@code
 * floodgate audit}).
 *
 * <p>At least once: a retried task sends them again. A dead letter the topic does not acknowledge
 * in time fails the task ({@link DeadLettersUnsentException}, {@code FG-SOURCE-007}), so Spark
 * retries it; none is dropped without a failure.
 */
public final class DeadLetterWriter {
  private static final Logger LOG = LoggerFactory.getLogger(DeadLetterWriter.class);

  /** How long a task waits for the broker to acknowledge its dead letters, ms. */
  public static final long DELIVERY_TIMEOUT_MS = 30_000;

  /**
   * How long closing the producer may wait for requests still in flight, ms; then Kafka aborts them
   * (their dead letters are counted unsent, {@link DeadLettersUnsentException}).
   */
  public static final long CLOSE_TIMEOUT_MS = 5_000;

  /**
   * Floodgate's dead-letter headers, in the order a dead letter carries them after the tuple's own:
   * {@code tests/golden/contract/source.json}, as {@code pipeline.deadletter.DLQ_HEADERS} lists
   * them.
   */
  public static final List<String> HEADERS =
      List.of(
          "floodgate.reason",
          "floodgate.error",
          "floodgate.stream",
          "floodgate.query",
          "floodgate.topic",
          "floodgate.partition",
          "floodgate.offset");

  /**
   * The producer's own settings: idempotent, every replica's ack (a dead letter is the only copy of
   * a tuple the queries refused), as {@code tests/golden/contract/source.json} specifies.
   */
  public static final Map<String, String> PRODUCER =
      Map.of(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true", ProducerConfig.ACKS_CONFIG, "all");

  private final String topic;
  private final Properties producerProperties;
  private final String stream;
  private final String query;
  private final List<Map.Entry<ConsumerRecord<byte[], byte[]>, TupleRejected>> pending =
      new ArrayList<>();

  /**
   * @param topic the dead-letter topic; {@code null}: none, and {@link #send} throws the first
   *     refusal instead
   * @param producerProperties the Kafka client's properties (bootstrap servers, security)
   * @param stream the input stream the tuples came from
   * @param query the reading query's name ({@code null} outside a query group)
   */
  public DeadLetterWriter(
      String topic, Properties producerProperties, String stream, String query) {
    this.topic = topic;
    this.producerProperties = producerProperties;
    this.stream = stream;
    this.query = query;
  }

  /** Refuse {@code record} for {@code why}. */
  public void add(ConsumerRecord<byte[], byte[]> record, TupleRejected why) {
    pending.add(Map.entry(record, why));
  }

  /** How many tuples are refused so far. */
  public int size() {
    return pending.size();
  }

  /**
   * Send every pending tuple, wait for the acknowledgements, and log them as one {@code
   * FG-SOURCE-001} line per reason. The producer is closed within {@link #CLOSE_TIMEOUT_MS}
   * whatever happened (Kafka's {@code close()} without a timeout waits for ever on a broker that
   * does not answer, and a failed task's end would hang).
   *
   * @param batchId the micro-batch they were read for (for the log)
   * @throws IllegalStateException no dead-letter topic (naming the first refusal)
   * @throws DeadLettersUnsentException ({@code FG-SOURCE-007}) not every dead letter acknowledged
   *     within {@link #DELIVERY_TIMEOUT_MS}: the task fails, naming how many, and Spark retries it
   */
  public void send(Long batchId) {
    if (!pending.isEmpty() && topic != null) {
      Properties props = new Properties();
      props.putAll(producerProperties);
      props.putAll(PRODUCER);
      // send() blocks for metadata and buffer space at most this long (Kafka's default: 60 s).
      props.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, Long.toString(DELIVERY_TIMEOUT_MS));
      send(
          batchId,
          () -> new KafkaProducer<>(props, new ByteArraySerializer(), new ByteArraySerializer()),
          DELIVERY_TIMEOUT_MS);
    } else {
      send(batchId, null, DELIVERY_TIMEOUT_MS);
    }
  }

  /**
   * {@link #send(Long)} through the producer {@code producers} makes, waiting {@code timeoutMs} ms
   * at most for the acknowledgements (tests give Kafka's {@code MockProducer} and a short wait).
   */
  void send(Long batchId, Supplier<Producer<byte[], byte[]>> producers, long timeoutMs) {
    if (pending.isEmpty()) {
      return;
    }
    if (topic == null) {
      Map.Entry<ConsumerRecord<byte[], byte[]>, TupleRejected> first = pending.get(0);
      ConsumerRecord<byte[], byte[]> r = first.getKey();
      throw new IllegalStateException(
          first.getValue().describe(stream, r.topic(), r.partition(), r.offset()),
          first.getValue());
    }
    long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(timeoutMs);
    int acknowledged = 0;
    Throwable firstError = null;
    Producer<byte[], byte[]> producer = producers.get();
    try {
      List<Future<RecordMetadata>> sent = new ArrayList<>();
      try {
        for (Map.Entry<ConsumerRecord<byte[], byte[]>, TupleRejected> e : pending) {
          sent.add(producer.send(record(e.getKey(), e.getValue())));
        }
      } catch (KafkaException e) { // not sent (metadata, buffer full): the rest are not either
        firstError = e;
      }
      for (Future<RecordMetadata> f : sent) {
        try {
          f.get(Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
          acknowledged++;
        } catch (ExecutionException e) {
          firstError = firstError == null ? e.getCause() : firstError;
        } catch (TimeoutException e) {
          firstError = firstError == null ? e : firstError;
        }
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      firstError = e;
    } finally {
      try {
        producer.close(Duration.ofMillis(CLOSE_TIMEOUT_MS));
      } catch (RuntimeException e) {
        LOG.warn("closing the dead-letter producer of topic '{}' failed", topic, e);
      }
    }
    if (acknowledged < pending.size()) {
      throw new DeadLettersUnsentException(
          topic,
          pending.size() - acknowledged,
          pending.size(),
          stream,
          batchId,
          timeoutMs,
          firstError);
    }
    logSummary(batchId);
    pending.clear();
  }

  /** The dead letter of {@code r}: its key, value and headers, then Floodgate's headers. */
  private ProducerRecord<byte[], byte[]> record(
      ConsumerRecord<byte[], byte[]> r, TupleRejected why) {
    RecordHeaders headers = new RecordHeaders();
    for (Header h : r.headers()) {
      headers.add(h);
    }
    List<String> values =
        List.of(
            why.reason(),
            why.describe(stream, r.topic(), r.partition(), r.offset()),
            stream,
            query == null ? "" : query,
            r.topic(),
            Integer.toString(r.partition()),
            Long.toString(r.offset()));
    for (int i = 0; i < HEADERS.size(); i++) {
      header(headers, HEADERS.get(i), values.get(i));
    }
    byte[] key = key(query, r.topic(), r.partition(), r.offset());
    return new ProducerRecord<>(topic, null, key, r.value(), headers);
  }

  private void logSummary(Long batchId) {
    Map<String, List<Map.Entry<ConsumerRecord<byte[], byte[]>, TupleRejected>>> byReason =
        new LinkedHashMap<>();
    for (Map.Entry<ConsumerRecord<byte[], byte[]>, TupleRejected> e : pending) {
      byReason.computeIfAbsent(e.getValue().reason(), k -> new ArrayList<>()).add(e);
    }
    byReason.forEach(
        (reason, refused) -> {
          ConsumerRecord<byte[], byte[]> r = refused.get(0).getKey();
          TreeSet<Integer> partitions = new TreeSet<>();
          refused.forEach(e -> partitions.add(e.getKey().partition()));
          LOG.warn(
              "FG-SOURCE-001 dead-lettered {} tuple{} of stream '{}' as '{}' (query '{}',"
                  + " micro-batch {}, partitions {}) to '{}'; first: {}",
              refused.size(),
              refused.size() == 1 ? "" : "s",
              stream,
              reason,
              query,
              batchId,
              partitions,
              topic,
              refused.get(0).getValue().describe(stream, r.topic(), r.partition(), r.offset()));
        });
  }

  /**
   * A dead letter's key, {@code <query>@<topic>/<partition>/<offset>} ({@code query} null: empty),
   * unique per reading query and tuple ({@code tests/golden/contract/source.json} holds cases).
   */
  public static byte[] key(String query, String topic, int partition, long offset) {
    return ((query == null ? "" : query) + "@" + topic + "/" + partition + "/" + offset)
        .getBytes(StandardCharsets.UTF_8);
  }

  private static void header(RecordHeaders headers, String key, String value) {
    headers.add(key, value.getBytes(StandardCharsets.UTF_8));
  }
}

package io.floodgate.spark.deadletter;

import io.floodgate.spark.serde.TupleRejected;
import java.nio.charset.StandardCharsets;
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
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
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
 * <query>@<topic>/<partition>/<offset>} so a reader drops the repeats of a retried task. The record
 * shape is the Python source's ({@code pipeline.deadletter}); {@code floodgate audit} reads both.
 *
 * <p>At least once: a retried task sends them again.
 */
public final class DeadLetterWriter {
  private static final Logger LOG = LoggerFactory.getLogger(DeadLetterWriter.class);

  /** How long a task waits for the broker to acknowledge its dead letters. */
  public static final long DELIVERY_TIMEOUT_MS = 30_000;

  /**
   * Floodgate's dead-letter headers, in the order a dead letter carries them after the tuple's own:
   * Python's {@code pipeline.deadletter.DLQ_HEADERS} ({@code tests/golden/contract/}).
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
   * a tuple the queries refused); Python's {@code DEAD_LETTER_PRODUCER}.
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
   * FG-SOURCE-001} line per reason.
   *
   * @param batchId the micro-batch they were read for (for the log)
   * @throws IllegalStateException no dead-letter topic (naming the first refusal), or a record not
   *     acknowledged within {@link #DELIVERY_TIMEOUT_MS}
   */
  public void send(Long batchId) {
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
    Properties props = new Properties();
    props.putAll(producerProperties);
    props.putAll(PRODUCER);
    try (KafkaProducer<byte[], byte[]> producer =
        new KafkaProducer<>(props, new ByteArraySerializer(), new ByteArraySerializer())) {
      List<Future<RecordMetadata>> sent = new ArrayList<>();
      for (Map.Entry<ConsumerRecord<byte[], byte[]>, TupleRejected> e : pending) {
        ConsumerRecord<byte[], byte[]> r = e.getKey();
        RecordHeaders headers = new RecordHeaders();
        for (Header h : r.headers()) {
          headers.add(h);
        }
        List<String> values =
            List.of(
                e.getValue().reason(),
                e.getValue().describe(stream, r.topic(), r.partition(), r.offset()),
                stream,
                query == null ? "" : query,
                r.topic(),
                Integer.toString(r.partition()),
                Long.toString(r.offset()));
        for (int i = 0; i < HEADERS.size(); i++) {
          header(headers, HEADERS.get(i), values.get(i));
        }
        byte[] key = key(query, r.topic(), r.partition(), r.offset());
        sent.add(producer.send(new ProducerRecord<>(topic, null, key, r.value(), headers)));
      }
      producer.flush();
      for (Future<RecordMetadata> f : sent) {
        f.get(DELIVERY_TIMEOUT_MS, TimeUnit.MILLISECONDS);
      }
    } catch (ExecutionException | TimeoutException e) {
      throw new IllegalStateException(
          "dead-letter topic '" + topic + "': not acknowledged: " + e.getMessage(), e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException("interrupted while sending dead letters", e);
    }
    logSummary(batchId);
    pending.clear();
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
   * unique per reading query and tuple: Python's {@code dead_letter_key}.
   */
  public static byte[] key(String query, String topic, int partition, long offset) {
    return ((query == null ? "" : query) + "@" + topic + "/" + partition + "/" + offset)
        .getBytes(StandardCharsets.UTF_8);
  }

  private static void header(RecordHeaders headers, String key, String value) {
    headers.add(key, value.getBytes(StandardCharsets.UTF_8));
  }
}

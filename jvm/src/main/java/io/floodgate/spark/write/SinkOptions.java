package io.floodgate.spark.write;

import io.floodgate.spark.kafka.Names;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The options of the {@code floodgate_kafka} sink ({@code
 * df.writeStream.format("floodgate_kafka")}), parsed and checked once on the driver, then shipped
 * to the write tasks.
 *
 * <p>Spark's Kafka sink dialect where it has one ({@code topic}, {@code kafka.bootstrap.servers},
 * {@code kafka.*}), then Floodgate's own:
 *
 * <ul>
 *   <li>{@code stream}, {@code schema}, {@code schemas}: the output stream's name, its schema's
 *       name and the schema repository (JSON, as the source takes it);
 *   <li>{@code encoding}: {@code single-object} (default) or {@code confluent}, which needs {@code
 *       schemaId}, the registry's id of the schema;
 *   <li>{@code key}: the key columns, comma separated (none: records without a key);
 *   <li>{@code transactionalIdPrefix}: task {@code p}'s producer has {@code transactional.id}
 *       {@code <prefix>.<p>}; its batch markers go to consumer group {@code <prefix>.<p>} too;
 *   <li>{@code consumerGroup} and {@code inputTopics}: where the driver commits the input offsets
 *       of each micro-batch once its tasks committed (none: not committed);
 *   <li>{@code checkpointLocation}: the query's checkpoint, whose offset log holds those offsets;
 *   <li>{@code maxQueueSize}, {@code queueReaders}, {@code sleepOnOverStoreMs}, {@code
 *       sleepOnOverStoreRetryCount}, {@code soleWriter}: the output stream queue's bound ({@link
 *       OutputQueue}); no {@code maxQueueSize}: unbounded;
 *   <li>{@code delivery}: {@code exactly-once} (default: a transaction per write task) or {@code
 *       at-least-once} (an idempotent producer, each tuple sent at once, no transaction: a replayed
 *       batch writes its tuples again);
 *   <li>{@code realTime}: the query runs in Spark's Real-Time Mode, where a write task lasts the
 *       whole batch: a bounded queue is checked as the task's tuples go out, and with {@code
 *       exactly-once} the task's transaction lasts the batch and commits its input position ({@link
 *       KafkaDataWriter}, {@link InputMarker});
 *   <li>{@code sourceEndsLogged}: the query's source logs where each real-time task stopped (the
 *       {@code floodgate_kafka} source's {@code realTimeEndsGroup}), so that a real-time batch run
 *       again reads the same input: a write task that reads no input of its own (after a shuffle)
 *       then commits exactly once by its batch marker, as in a micro-batch;
 *   <li>{@code transactionTimeoutMs}: the producers' {@code transaction.timeout.ms} (default {@link
 *       TransactionalProducers#TRANSACTION_TIMEOUT_MS}), longer than a task's transaction;
 *   <li>{@code queryGroup}, {@code query}: names for errors and logs.
 * </ul>
 *
 * <p>Every refusal is an {@link IllegalArgumentException} whose message starts with {@code
 * floodgate_kafka sink:} and names the option, the value given and what is allowed.
 */
public final class SinkOptions implements Serializable {
  private static final long serialVersionUID = 1L;

  /** How output tuples reach their stream. */
  public static final List<String> DELIVERIES = List.of("exactly-once", "at-least-once");

  /** The encodings of an output stream's tuples. */
  public static final List<String> ENCODINGS = List.of("single-object", "confluent");

  public final String topic;
  public final String bootstrapServers;

  /** {@code kafka.*} options without the prefix, in librdkafka's or the Java client's names. */
  public final Map<String, String> client;

  public final String stream;
  public final String schemaName;
  public final String schemasJson;
  public final String encoding;
  public final int schemaId;
  public final List<String> keyColumns;
  public final String transactionalIdPrefix;
  public final String consumerGroup;
  public final List<String> inputTopics;
  public final String checkpointLocation;

  /** The output stream queue's bound, tuples; 0: unbounded. */
  public final long maxQueueSize;

  public final List<String> queueReaders;
  public final long sleepOnOverStoreMs;
  public final int sleepOnOverStoreRetryCount;

  /** The query is the only writer of its output stream: a task may read the queue again. */
  public final boolean soleWriter;

  /** {@code exactly-once} or {@code at-least-once} ({@link #DELIVERIES}). */
  public final String delivery;

  /** The query runs in Spark's Real-Time Mode: a write task lasts its whole batch. */
  public final boolean realTime;

  /** The query's source logs where each real-time task stopped ({@code sourceEndsLogged}). */
  public final boolean sourceEndsLogged;

  /** The transactional producers' {@code transaction.timeout.ms}. */
  public final long transactionTimeoutMs;

  public final String queryGroup;
  public final String query;

  private SinkOptions(Map<String, String> given) {
    Map<String, String> opts = new LinkedHashMap<>();
    given.forEach((k, v) -> opts.put(k, v));
    topic = required(opts, "topic");
    Map<String, String> props = new LinkedHashMap<>();
    opts.forEach(
        (k, v) -> {
          if (k.startsWith("kafka.")) {
            props.put(k.substring("kafka.".length()), v);
          }
        });
    String bootstrap = props.remove("bootstrap.servers");
    if (bootstrap == null || bootstrap.isBlank()) {
      throw refuse("option 'kafka.bootstrap.servers' is required");
    }
    for (String owned : List.of("transactional.id", "enable.idempotence", "acks", "group.id")) {
      if (props.containsKey(owned)) {
        throw refuse(
            "option 'kafka."
                + owned
                + "' is not supported: the sink sets it for exactly-once output (a"
                + " transactional producer per write task, acks=all)");
      }
    }
    bootstrapServers = bootstrap;
    client = Collections.unmodifiableMap(props);
    stream = opts.getOrDefault("stream", topic);
    schemaName = required(opts, "schema");
    schemasJson = required(opts, "schemas");
    encoding = opts.getOrDefault("encoding", "single-object");
    if (!ENCODINGS.contains(encoding)) {
      throw refuse(
          "option 'encoding' = '"
              + encoding
              + "' is unknown; allowed: "
              + String.join(", ", ENCODINGS));
    }
    Long id = whole(opts, "schemaId", 0);
    if (encoding.equals("confluent") && id == null) {
      throw refuse("option 'encoding' = 'confluent' needs option 'schemaId' (the registry's id)");
    }
    schemaId = id == null ? 0 : Math.toIntExact(id);
    keyColumns = names(opts.get("key"));
    transactionalIdPrefix = required(opts, "transactionalIdPrefix");
    consumerGroup = opts.get("consumerGroup");
    inputTopics = names(opts.get("inputTopics"));
    checkpointLocation = opts.get("checkpointLocation");
    if (consumerGroup != null && checkpointLocation == null) {
      throw refuse(
          "option 'consumerGroup' needs option 'checkpointLocation': the input offsets are read"
              + " from the query's offset log");
    }
    Long max = whole(opts, "maxQueueSize", 1);
    maxQueueSize = max == null ? 0 : max;
    queueReaders = names(opts.get("queueReaders"));
    Long sleepMs = whole(opts, "sleepOnOverStoreMs", 0);
    sleepOnOverStoreMs = sleepMs == null ? 0 : sleepMs;
    Long retries = whole(opts, "sleepOnOverStoreRetryCount", 0);
    sleepOnOverStoreRetryCount = retries == null ? 0 : Math.toIntExact(retries);
    soleWriter = bool(opts, "soleWriter", true);
    delivery = opts.getOrDefault("delivery", "exactly-once");
    if (!DELIVERIES.contains(delivery)) {
      throw refuse(
          "option 'delivery' = '"
              + delivery
              + "' is unknown; allowed: "
              + String.join(", ", DELIVERIES));
    }
    realTime = bool(opts, "realTime", false);
    sourceEndsLogged = bool(opts, "sourceEndsLogged", false);
    Long timeout = whole(opts, "transactionTimeoutMs", 1);
    transactionTimeoutMs =
        timeout == null ? TransactionalProducers.TRANSACTION_TIMEOUT_MS : timeout;
    queryGroup = opts.getOrDefault("queryGroup", "");
    query = opts.getOrDefault("query", stream);
  }

  /**
   * Parse and check a write's options.
   *
   * @param options the options given to {@code writeStream} (case as given)
   * @throws IllegalArgumentException a missing or bad option (named, with what is allowed)
   */
  public static SinkOptions parse(Map<String, String> options) {
    return new SinkOptions(options);
  }

  /**
   * Whether {@code options} are a write's: Spark asks the provider for a table's schema before it
   * knows whether the table is read or written, and only a write names {@code
   * transactionalIdPrefix}.
   */
  public static boolean isWrite(Map<String, String> options) {
    return options.containsKey("transactionalIdPrefix");
  }

  /** Whether each write task writes in a transaction of its own ({@code exactly-once}). */
  public boolean exactlyOnce() {
    return delivery.equals("exactly-once");
  }

  /** Whether the output stream queue is bounded. */
  public boolean bounded() {
    return maxQueueSize > 0;
  }

  /** The {@code transactional.id} of write task {@code partition}'s producer. */
  public String transactionalId(int partition) {
    return Names.taskTransactionalId(transactionalIdPrefix, partition);
  }

  /** Where {@code query group.query} is, for messages. */
  public String where() {
    return queryGroup.isEmpty()
        ? "query " + query
        : "query group " + queryGroup + " query " + query;
  }

  private static String required(Map<String, String> opts, String key) {
    String value = opts.get(key);
    if (value == null || value.isBlank()) {
      throw refuse("option '" + key + "' is required");
    }
    return value;
  }

  private static Long whole(Map<String, String> opts, String key, long minimum) {
    String text = opts.get(key);
    if (text == null) {
      return null;
    }
    long value;
    try {
      value = Long.parseLong(text.strip());
    } catch (NumberFormatException e) {
      value = Long.MIN_VALUE;
    }
    if (value < minimum) {
      throw refuse("option '" + key + "' = '" + text + "' is not a whole number >= " + minimum);
    }
    return value;
  }

  private static boolean bool(Map<String, String> opts, String key, boolean otherwise) {
    String text = opts.get(key);
    if (text == null) {
      return otherwise;
    }
    if (!text.equals("true") && !text.equals("false")) {
      throw refuse("option '" + key + "' = '" + text + "' is not a boolean; allowed: true, false");
    }
    return Boolean.parseBoolean(text);
  }

  private static List<String> names(String text) {
    List<String> names = new ArrayList<>();
    if (text != null) {
      for (String name : text.split(",")) {
        if (!name.strip().isEmpty()) {
          names.add(name.strip());
        }
      }
    }
    return Collections.unmodifiableList(names);
  }

  static IllegalArgumentException refuse(String message) {
    return new IllegalArgumentException("floodgate_kafka sink: " + message);
  }
}

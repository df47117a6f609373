package io.floodgate.spark.options;

import java.io.Serializable;
import java.util.List;
import java.util.Map;
import java.util.SortedMap;

/**
 * The options of the {@code floodgate_kafka} source, parsed and checked once: Spark's Kafka dialect
 * ({@code subscribe}, {@code kafka.bootstrap.servers}, {@code startingOffsets}, {@code
 * maxOffsetsPerTrigger}, ...) and Floodgate's own ({@code schema}, {@code schemas}, {@code
 * deadLetterTopic}, ...), described in docs/reference/spark-kafka-options.md. What the source makes
 * of an option map, its fields or its refusal, is specified by {@code
 * tests/golden/options/cases.json} ({@code SourceOptionsGoldenTest}: a Java field is the camel case
 * of the name the golden file gives it). A query group writes the map from {@code
 * pipeline.spark.options.SourceOptions}, the options typed in Python.
 *
 * <p>This class is the model: the typed, serializable fields Spark's driver and executors read. The
 * map is read, checked and refused by {@code SourceOptionsParser} (through {@link #parse}), which
 * reads each option as Spark's {@code KafkaSourceProvider} reads its own.
 *
 * <p>Every refusal is an {@link IllegalArgumentException} whose message starts with {@code
 * floodgate_kafka:} and names the option, the value given and what is allowed ({@link
 * OptionText#refuse}).
 */
public final class SourceOptions implements Serializable {
  private static final long serialVersionUID = 1L;

  /** The source's short name, as registered with Spark. */
  public static final String SOURCE_NAME = "floodgate_kafka";

  /** Spark's {@code startingOffsets} JSON: -2 a partition's earliest offset, -1 its latest. */
  public static final long EARLIEST = -2;

  public static final long LATEST = -1;

  /** Spark's default {@code maxTriggerDelay} with {@code minOffsetsPerTrigger}. */
  public static final String DEFAULT_MAX_TRIGGER_DELAY = "15m";

  public final String bootstrapServers;

  /**
   * The topics read, as {@code topic} (one), {@code subscribe} (comma-separated; each trimmed,
   * empties and repeats dropped, first kept) or {@code assign} (its topics in name order) names
   * them; {@code null} with {@code subscribePattern}.
   */
  public final List<String> topics;

  /**
   * {@code subscribePattern}: a Java regular expression found anywhere in a topic's name ({@code
   * Pattern.matcher(name).find()}, as Spark's Admin-based {@code SubscribePatternStrategy}'s {@code
   * findFirstIn}); {@code null} otherwise.
   */
  public final String topicPattern;

  /**
   * {@code assign}: topic to its sorted partitions, topics in name order; {@code null}: not given.
   */
  public final SortedMap<String, List<Integer>> assigned;

  public final String stream;
  public final String schemaName;
  public final String schemasJson;
  public final String groupId;
  public final Long maxRowsPerTrigger;

  /** {@code committed}, {@code earliest}, {@code latest} or {@code specific}. */
  public final String startingOffsets;

  /**
   * {@code startingOffsets} as JSON: topic to partition to offset (-2 earliest, -1 latest), topics
   * and partitions in order; empty for a word.
   */
  public final SortedMap<String, SortedMap<Integer, Long>> startingPartitionOffsets;

  /**
   * {@code startingTimestamp}: every topic-partition read starts at its first offset whose Kafka
   * timestamp is at or after this (epoch ms), as Spark's {@code GlobalTimestampRangeLimit}; {@code
   * null}: not given. Given, it wins over {@code startingOffsetsByTimestamp} and {@code
   * startingOffsets} (kind {@code timestamp}).
   */
  public final Long startingTimestamp;

  /**
   * {@code startingOffsetsByTimestamp}: topic to partition to timestamp (epoch ms), Spark's {@code
   * SpecificTimestampRangeLimit}; empty when not given or when {@code startingTimestamp} is. Given,
   * it wins over {@code startingOffsets} (kind {@code timestamp}).
   */
  public final SortedMap<String, SortedMap<Integer, Long>> startingPartitionTimestamps;

  /**
   * {@code startingOffsetsByTimestampStrategy}: what a topic-partition with no offset at or after
   * its starting timestamp does: {@code error} (the default, as Spark) or {@code latest} (it starts
   * at its latest offset).
   */
  public final String startingTimestampStrategy;

  /**
   * {@code minPartitions}: least Spark tasks a micro-batch or batch query is read with, a Kafka
   * partition's range split over several tasks when there are fewer ({@code
   * io.floodgate.spark.read.OffsetRangeCalculator}); {@code null}: not given.
   */
  public final Integer minPartitions;

  /**
   * {@code maxRecordsPerPartition}: most offsets a Spark task reads of a Kafka partition, longer
   * ranges split; {@code null}: not given.
   */
  public final Long maxRecordsPerPartition;

  /**
   * {@code fetchOffset.numRetries}: attempts at a driver's read of offsets or metadata before the
   * error is raised (Spark's {@code KafkaOffsetReaderAdmin.withRetries}; default 3).
   */
  public final int fetchOffsetNumRetries;

  /** {@code fetchOffset.retryIntervalMs}: milliseconds between those attempts (default 1000). */
  public final long fetchOffsetRetryIntervalMs;

  public final String deadLetterTopic;

  /** {@code server} (the Kafka timestamp) or {@code data_source} ({@code timestampField}). */
  public final String timestampMode;

  public final String timestampField;
  public final boolean commitOffsets;

  /** {@code kafka.*} options without the prefix: the client's properties, as the user wrote. */
  public final Map<String, String> client;

  public final String query;

  /** {@code discardBefore}: topic to partition to the first offset read; empty: none. */
  public final SortedMap<String, SortedMap<Integer, Long>> discardBefore;

  public final String sweepCatalog;

  /**
   * {@code realTimeEndsGroup}: the consumer group where each real-time task logs where it stopped
   * ({@link io.floodgate.spark.read.RealTimeEndLog}); {@code null}: no log.
   */
  public final String realTimeEndsGroup;

  public final boolean keyRequired;
  public final Long maxEventTimeAheadMs;
  public final String watermarkCheckpoint;
  public final EventTimeWindow lateWindow;

  /** Most tasks a micro-batch is read with ({@code null}: one per Kafka partition). */
  public final Long maxTasks;

  public final Long maxEventTimeDriftMs;
  public final long idlePartitionTimeoutMs;

  /** {@code single-object} or {@code confluent}. */
  public final String encoding;

  public final Map<String, String> schemaRegistry;

  /**
   * {@code raw} or {@code confluent}: the Kafka key in the Confluent wire format, an Avro record of
   * {@link #keyFields} ({@code io.floodgate.spark.serde.KeySchema}).
   */
  public final String keyEncoding;

  /** The key record's fields ({@code keyFields}, comma-separated; {@code null}: none given). */
  public final List<String> keyFields;

  public final Long minRowsPerTrigger;
  public final long maxTriggerDelayMs;
  public final boolean failOnDataLoss;
  public final boolean includeHeaders;

  /**
   * The stream's fields the queries read ({@code fields}, comma-separated; {@code null}: all). The
   * table's schema has columns for these only (and {@code timestampField}), so a query reading
   * another fails its analysis naming the column: Spark's {@code MicroBatchExecution} builds a
   * streaming scan with the relation's whole output as the required columns, so the query group
   * names the fields its queries read here. Each must be a field of the stream ({@link
   * io.floodgate.spark.serde.StreamSchema#requireFields}).
   */
  public final List<String> fields;

  private SourceOptions(SourceOptionsParser parsed) {
    bootstrapServers = parsed.bootstrapServers;
    topics = parsed.topics;
    topicPattern = parsed.topicPattern;
    assigned = parsed.assigned;
    stream = parsed.stream;
    schemaName = parsed.schemaName;
    schemasJson = parsed.schemasJson;
    groupId = parsed.groupId;
    maxRowsPerTrigger = parsed.maxRowsPerTrigger;
    startingOffsets = parsed.startingOffsets;
    startingPartitionOffsets = parsed.startingPartitionOffsets;
    startingTimestamp = parsed.startingTimestamp;
    startingPartitionTimestamps = parsed.startingPartitionTimestamps;
    startingTimestampStrategy = parsed.startingTimestampStrategy;
    minPartitions = parsed.minPartitions;
    maxRecordsPerPartition = parsed.maxRecordsPerPartition;
    fetchOffsetNumRetries = parsed.fetchOffsetNumRetries;
    fetchOffsetRetryIntervalMs = parsed.fetchOffsetRetryIntervalMs;
    deadLetterTopic = parsed.deadLetterTopic;
    timestampMode = parsed.timestampMode;
    timestampField = parsed.timestampField;
    commitOffsets = parsed.commitOffsets;
    client = parsed.client;
    query = parsed.query;
    discardBefore = parsed.discardBefore;
    sweepCatalog = parsed.sweepCatalog;
    realTimeEndsGroup = parsed.realTimeEndsGroup;
    keyRequired = parsed.keyRequired;
    maxEventTimeAheadMs = parsed.maxEventTimeAheadMs;
    watermarkCheckpoint = parsed.watermarkCheckpoint;
    lateWindow = parsed.lateWindow;
    maxTasks = parsed.maxTasks;
    maxEventTimeDriftMs = parsed.maxEventTimeDriftMs;
    idlePartitionTimeoutMs = parsed.idlePartitionTimeoutMs;
    encoding = parsed.encoding;
    schemaRegistry = parsed.schemaRegistry;
    keyEncoding = parsed.keyEncoding;
    keyFields = parsed.keyFields;
    minRowsPerTrigger = parsed.minRowsPerTrigger;
    maxTriggerDelayMs = parsed.maxTriggerDelayMs;
    failOnDataLoss = parsed.failOnDataLoss;
    includeHeaders = parsed.includeHeaders;
    fields = parsed.fields;
  }

  /**
   * Parse Spark's option map (keys in any case).
   *
   * @throws IllegalArgumentException a required option is missing, two keys that say the same thing
   *     are both given, an option is refused (with the reason), or a value is not allowed
   */
  public static SourceOptions parse(Map<String, String> options) {
    return new SourceOptions(new SourceOptionsParser(new OptionMap(options)));
  }

  /** What the source reads, for logs and names: the topics joined by {@code ,}, or the pattern. */
  public String describe() {
    return topics != null ? String.join(",", topics) : topicPattern;
  }

  /** Whether tuples are decoded with a schema (option {@code schema} given). */
  public boolean decoded() {
    return schemaName != null;
  }
}

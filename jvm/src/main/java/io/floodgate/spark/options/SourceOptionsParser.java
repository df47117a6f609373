package io.floodgate.spark.options;

import static io.floodgate.spark.options.OptionText.emptyAsNull;
import static io.floodgate.spark.options.OptionText.pyList;
import static io.floodgate.spark.options.OptionText.refuse;

import io.floodgate.spark.kafka.Names;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.SortedMap;
import java.util.TreeMap;

/**
 * Reads an option map into the values of {@link SourceOptions}, one option after another in a fixed
 * order, so that of several wrong options the one refused is always the same (the refusals of
 * {@code tests/golden/options/cases.json}, byte for byte). Spark's precedences are kept: {@code
 * kafka.bootstrap.servers} over {@code bootstrap.servers}, {@code startingTimestamp} over {@code
 * startingOffsetsByTimestamp} over {@code startingOffsets} (Spark's {@code
 * KafkaSourceProvider.getKafkaOffsetRangeLimit}).
 *
 * <p>The constructor throws {@link OptionText#refuse}'s {@link IllegalArgumentException}: an option
 * missing, refused ({@link RefusedOptions}), given twice under two names, or a value not allowed.
 */
final class SourceOptionsParser {
  // The values read, each the field of SourceOptions of the same name (documented there).
  String bootstrapServers;
  List<String> topics;
  String topicPattern;
  SortedMap<String, List<Integer>> assigned;
  String stream;
  String schemaName;
  String schemasJson;
  String groupId;
  Long maxRowsPerTrigger;
  String startingOffsets;
  SortedMap<String, SortedMap<Integer, Long>> startingPartitionOffsets;
  Long startingTimestamp;
  SortedMap<String, SortedMap<Integer, Long>> startingPartitionTimestamps;
  String startingTimestampStrategy;
  Integer minPartitions;
  Long maxRecordsPerPartition;
  int fetchOffsetNumRetries;
  long fetchOffsetRetryIntervalMs;
  String deadLetterTopic;
  String timestampMode;
  String timestampField;
  boolean commitOffsets;
  Map<String, String> client;
  String query;
  SortedMap<String, SortedMap<Integer, Long>> discardBefore;
  String sweepCatalog;
  String realTimeEndsGroup;
  boolean keyRequired;
  Long maxEventTimeAheadMs;
  String watermarkCheckpoint;
  EventTimeWindow lateWindow;
  Long maxTasks;
  Long maxEventTimeDriftMs;
  long idlePartitionTimeoutMs;
  String encoding;
  Map<String, String> schemaRegistry;
  String keyEncoding;
  List<String> keyFields;
  Long minRowsPerTrigger;
  long maxTriggerDelayMs;
  boolean failOnDataLoss;
  boolean includeHeaders;
  List<String> fields;

  SourceOptionsParser(OptionMap opts) {
    RefusedOptions.checkOptions(opts);
    opts.exclusive("bootstrap.servers", "kafka.bootstrap.servers");
    opts.exclusive("group.id", "kafka.group.id");
    opts.exclusive("maxRowsPerTrigger", "maxOffsetsPerTrigger");
    TopicNames named = TopicNames.read(opts);
    topics = named.topics();
    topicPattern = named.pattern();
    assigned = named.assigned();
    if ((opts.get("watermarkCheckpoint") != null) != (opts.get("lateWindow") != null)) {
      List<String> given = new ArrayList<>();
      for (String k : List.of("watermarkCheckpoint", "lateWindow")) {
        if (opts.get(k) != null) {
          given.add(k);
        }
      }
      throw refuse("watermarkCheckpoint and lateWindow go together; given: " + pyList(given));
    }
    schemaName = opts.get("schema");
    schemasJson = opts.get("schemas");
    if (schemaName != null && schemasJson == null) {
      opts.required("schemas");
    }
    timestampMode = opts.choice("timestampMode", List.of("server", "data_source"), "server");
    if (schemaName == null) {
      List<String> needs = new ArrayList<>();
      for (String k : List.of("schemas", "deadLetterTopic", "lateWindow")) {
        if (opts.get(k) != null) {
          needs.add(k);
        }
      }
      if (timestampMode.equals("data_source")) {
        needs.add("timestampMode");
      }
      if (!needs.isEmpty()) {
        throw refuse(
            "options "
                + pyList(needs)
                + " need option 'schema' (the stream's schema in the repository): without it"
                + " the source reads raw Kafka columns and decodes nothing");
      }
    }
    Map<String, String> clientProps = opts.prefixed("kafka.");
    RefusedOptions.checkClient(clientProps);
    // kafka.bootstrap.servers, else bootstrap.servers; an empty value is a missing one.
    String bootstrap = emptyAsNull(clientProps.remove("bootstrap.servers"));
    if (bootstrap == null) {
      bootstrap = opts.get("bootstrap.servers");
    }
    if (bootstrap == null) {
      throw refuse("option 'kafka.bootstrap.servers' (or 'bootstrap.servers') is required");
    }
    bootstrapServers = bootstrap;
    String group = emptyAsNull(clientProps.remove("group.id"));
    if (group == null) {
      group = opts.get("group.id");
    }
    boolean namedGroup = group != null;
    if (group == null) {
      group = Names.sourceGroupId(opts.get("groupIdPrefix"));
    }
    groupId = group;
    client = Collections.unmodifiableMap(clientProps);
    Long maxRows = opts.whole("maxRowsPerTrigger", 1, "");
    maxRowsPerTrigger = maxRows != null ? maxRows : opts.whole("maxOffsetsPerTrigger", 1, "");
    // Spark's precedence: startingTimestamp, then startingOffsetsByTimestamp, then
    // startingOffsets (KafkaSourceProvider.getKafkaOffsetRangeLimit); one given hides the next.
    boolean byTime =
        opts.get("startingTimestamp") != null || opts.get("startingOffsetsByTimestamp") != null;
    StartingOffsets starting =
        byTime
            ? StartingOffsets.byTimestamp()
            : StartingOffsets.read(opts, named, namedGroup ? "committed" : "latest");
    startingPartitionOffsets = starting.offsets();
    startingTimestampStrategy =
        opts.choiceIgnoringCase(
            "startingOffsetsByTimestampStrategy", List.of("error", "latest"), "error");
    startingTimestamp = opts.timestamp("startingTimestamp");
    startingPartitionTimestamps =
        startingTimestamp != null
            ? new TreeMap<>()
            : StartingOffsets.partitionTimestamps(opts, "startingOffsetsByTimestamp", named);
    startingOffsets =
        startingTimestamp != null || !startingPartitionTimestamps.isEmpty()
            ? "timestamp"
            : starting.kind();
    Long minParts = opts.whole("minPartitions", 1, "");
    if (minParts != null && minParts > Integer.MAX_VALUE) {
      throw refuse(
          "minPartitions = " + minParts + "; allowed: a whole number >= 1 and <= 2147483647");
    }
    minPartitions = minParts == null ? null : minParts.intValue();
    maxRecordsPerPartition = opts.whole("maxRecordsPerPartition", 1, "");
    Long retries = opts.whole("fetchOffset.numRetries", 1, "");
    if (retries != null && retries > 1000) {
      throw refuse(
          "fetchOffset.numRetries = " + retries + "; allowed: a whole number >= 1, <= 1000");
    }
    fetchOffsetNumRetries = retries == null ? 3 : retries.intValue();
    Long interval = opts.whole("fetchOffset.retryIntervalMs", 0, "milliseconds");
    fetchOffsetRetryIntervalMs = interval == null ? 1000 : interval;
    for (String split : List.of("minPartitions", "maxRecordsPerPartition")) {
      if (opts.get(split) != null && opts.get("maxTasks") != null) {
        throw refuse(
            "options '"
                + split
                + "' and 'maxTasks' go not together: "
                + split
                + " splits a Kafka partition's range over more tasks, maxTasks deals ranges"
                + " out to fewer; give one of them");
      }
    }
    failOnDataLoss = opts.flag("failOnDataLoss", true);
    if (!failOnDataLoss && opts.get("sweepCatalog") != null) {
      throw refuse(
          "failOnDataLoss = false and sweepCatalog go not together: offsets the broker no"
              + " longer holds are read back from their BLOBs, never skipped");
    }
    // The rest in a fixed order, so that of several wrong options the one refused is always the
    // same.
    Long idle = opts.whole("idlePartitionTimeoutMs", 0, "milliseconds");
    idlePartitionTimeoutMs = idle != null ? idle : 10_000L;
    String stream = opts.get("stream");
    this.stream = stream != null ? stream : named.stream();
    deadLetterTopic = opts.get("deadLetterTopic");
    timestampField = opts.get("timestampField");
    commitOffsets = opts.flag("commitOffsets", namedGroup);
    query = opts.get("query");
    discardBefore = opts.offsets("discardBefore");
    sweepCatalog = opts.get("sweepCatalog");
    realTimeEndsGroup = opts.get("realTimeEndsGroup");
    keyRequired = opts.flag("keyRequired", false);
    maxEventTimeAheadMs = opts.whole("maxEventTimeAheadMs", 0, "milliseconds");
    watermarkCheckpoint = opts.get("watermarkCheckpoint");
    String late = opts.get("lateWindow");
    lateWindow = late != null ? EventTimeWindow.parseOption(late) : null;
    maxTasks = opts.whole("maxTasks", 1, "");
    maxEventTimeDriftMs = opts.whole("maxEventTimeDriftMs", 0, "milliseconds");
    minRowsPerTrigger = opts.whole("minOffsetsPerTrigger", 1, "");
    if (minRowsPerTrigger != null
        && maxRowsPerTrigger != null
        && minRowsPerTrigger > maxRowsPerTrigger) {
      // Spark's KafkaSourceProvider.validateGeneralOptions, in streaming and batch queries.
      String max =
          opts.get("maxRowsPerTrigger") != null ? "maxRowsPerTrigger" : "maxOffsetsPerTrigger";
      throw refuse(
          "minOffsetsPerTrigger = "
              + minRowsPerTrigger
              + " is higher than "
              + max
              + " = "
              + maxRowsPerTrigger
              + "; allowed: at most "
              + max
              + " (Spark's Kafka source refuses it too: \"The value of minOffsetPerTrigger("
              + minRowsPerTrigger
              + ") is higher than the maxOffsetsPerTrigger("
              + maxRowsPerTrigger
              + ").\")");
    }
    String delay = opts.get("maxTriggerDelay");
    maxTriggerDelayMs =
        TimeStrings.toMillis(
            "maxTriggerDelay", delay != null ? delay : SourceOptions.DEFAULT_MAX_TRIGGER_DELAY);
    includeHeaders = opts.flag("includeHeaders", false);
    encoding = opts.choice("encoding", List.of("single-object", "confluent"), "single-object");
    schemaRegistry = Collections.unmodifiableMap(opts.prefixed("schemaregistry."));
    keyEncoding = opts.choice("keyEncoding", List.of("raw", "confluent"), "raw");
    keyFields = opts.names("keyFields");
    if (keyEncoding.equals("confluent")) {
      List<String> needs = new ArrayList<>();
      for (String key : List.of("schema", "keyFields", "schemaRegistry.url")) {
        if (opts.get(key) == null) {
          needs.add(key);
        }
      }
      if (!needs.isEmpty()) {
        throw refuse(
            "keyEncoding = 'confluent' needs options "
                + pyList(needs)
                + " (the key is an Avro record of keyFields of the stream's schema, its ids from"
                + " the Schema Registry); allowed: keyEncoding 'raw', or give them");
      }
    }
    fields = opts.names("fields");
    if (fields != null && schemaName == null) {
      throw refuse(
          "option 'fields' needs option 'schema': it names fields of the stream's schema, and"
              + " without one the source reads raw Kafka columns");
    }
  }
}

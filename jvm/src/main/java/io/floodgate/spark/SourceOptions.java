package io.floodgate.spark;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.SortedMap;
import java.util.TreeMap;
import org.apache.kafka.clients.consumer.ConsumerConfig;

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
 * <p>Every refusal is an {@link IllegalArgumentException} whose message starts with {@code
 * floodgate_kafka:} and names the option, the value given and what is allowed.
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

  /**
   * Spark's Kafka options the source refuses, and why: the bounds of a batch query, which {@link
   * BatchBounds#take} takes out of its options before they are parsed here; a streaming query
   * refuses them with {@link BatchBounds#streamingRefusal}.
   */
  static final Map<String, String> REFUSED_OPTIONS = new LinkedHashMap<>();

  /** {@code kafka.<property>} options the source refuses, and why. */
  static final Map<String, String> REFUSED_CLIENT_PROPERTIES = new LinkedHashMap<>();

  static {
    REFUSED_OPTIONS.put(
        "endingOffsets",
        "it bounds a batch query (spark.read), which takes it apart from these options, and a"
            + " streaming query refuses it, as Spark's Kafka source does");
    REFUSED_OPTIONS.put(
        BatchBounds.ENDING_TIMESTAMP,
        "it bounds a batch query (spark.read), which takes it apart from these options, and a"
            + " streaming query refuses it, where Spark's Kafka source ignores it");
    REFUSED_OPTIONS.put(
        BatchBounds.ENDING_OFFSETS_BY_TIMESTAMP,
        "it bounds a batch query (spark.read), which takes it apart from these options, and a"
            + " streaming query refuses it, as Spark's Kafka source does");
    REFUSED_CLIENT_PROPERTIES.put(
        "auto.offset.reset",
        "the source decides where to start (startingOffsets) and what a lost offset does"
            + " (failOnDataLoss)");
    REFUSED_CLIENT_PROPERTIES.put(
        ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG,
        "the source commits the offsets of a micro-batch itself (commitOffsets)");
    REFUSED_CLIENT_PROPERTIES.put(
        "enable.auto.offset.store", "the source commits the offsets of a micro-batch itself");
    REFUSED_CLIENT_PROPERTIES.put(
        "key.deserializer", "a Java client property: keys are read as bytes");
    REFUSED_CLIENT_PROPERTIES.put(
        "value.deserializer",
        "a Java client property: values are read as bytes (decoded with schema)");
    REFUSED_CLIENT_PROPERTIES.put(
        "interceptor.classes",
        "an interceptor can change the records the source reads (Spark's Kafka source refuses"
            + " it too, for that reason)");
  }

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

  private SourceOptions(OptionMap opts) {
    for (Map.Entry<String, String> refused : REFUSED_OPTIONS.entrySet()) {
      if (opts.get(refused.getKey()) != null) {
        throw refuse("option '" + refused.getKey() + "' is not supported: " + refused.getValue());
      }
    }
    opts.exclusive("bootstrap.servers", "kafka.bootstrap.servers");
    opts.exclusive("group.id", "kafka.group.id");
    opts.exclusive("maxRowsPerTrigger", "maxOffsetsPerTrigger");
    Named named = opts.topics();
    topics = named.topics;
    topicPattern = named.pattern;
    assigned = named.assigned;
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
    for (Map.Entry<String, String> refused : REFUSED_CLIENT_PROPERTIES.entrySet()) {
      if (clientProps.containsKey(refused.getKey())) {
        throw refuse(
            "option 'kafka." + refused.getKey() + "' is not supported: " + refused.getValue());
      }
    }
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
    Object[] starting =
        byTime
            ? new Object[] {"timestamp", new TreeMap<String, SortedMap<Integer, Long>>()}
            : opts.startingOffsets(named, namedGroup ? "committed" : "latest");
    @SuppressWarnings("unchecked")
    SortedMap<String, SortedMap<Integer, Long>> partitionOffsets =
        (SortedMap<String, SortedMap<Integer, Long>>) starting[1];
    startingPartitionOffsets = partitionOffsets;
    startingTimestampStrategy =
        opts.choiceIgnoringCase(
            "startingOffsetsByTimestampStrategy", List.of("error", "latest"), "error");
    startingTimestamp = opts.timestamp("startingTimestamp");
    startingPartitionTimestamps =
        startingTimestamp != null
            ? new TreeMap<>()
            : opts.partitionTimestamps("startingOffsetsByTimestamp", named);
    startingOffsets =
        startingTimestamp != null || !startingPartitionTimestamps.isEmpty()
            ? "timestamp"
            : (String) starting[0];
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
        TimeStrings.toMillis("maxTriggerDelay", delay != null ? delay : DEFAULT_MAX_TRIGGER_DELAY);
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

  /**
   * Parse Spark's option map (keys in any case).
   *
   * @throws IllegalArgumentException a required option is missing, two keys that say the same thing
   *     are both given, an option is refused (with the reason), or a value is not allowed
   */
  public static SourceOptions parse(Map<String, String> options) {
    return new SourceOptions(new OptionMap(options));
  }

  /** What the source reads, for logs and names: the topics joined by {@code ,}, or the pattern. */
  public String describe() {
    return topics != null ? String.join(",", topics) : topicPattern;
  }

  /** Whether tuples are decoded with a schema (option {@code schema} given). */
  public boolean decoded() {
    return schemaName != null;
  }

  static IllegalArgumentException refuse(String what) {
    return new IllegalArgumentException(SOURCE_NAME + ": " + what);
  }

  private static String emptyAsNull(String value) {
    return value == null || value.isEmpty() ? null : value;
  }

  /**
   * {@code text} quoted for a refusal's message, as Python's {@code repr} writes a string (the
   * refusals of {@code tests/golden/options/cases.json} quote values so): in single quotes, or
   * double ones when it holds a single quote and no double one; backslash, the quote and what is
   * not {@link #printable} escaped.
   */
  static String repr(String text) {
    char quote = text.indexOf('\'') >= 0 && text.indexOf('"') < 0 ? '"' : '\'';
    StringBuilder out = new StringBuilder(text.length() + 2).append(quote);
    text.codePoints()
        .forEach(
            cp -> {
              if (cp == quote || cp == '\\') {
                out.append('\\').appendCodePoint(cp);
              } else if (cp == '\n') {
                out.append("\\n");
              } else if (cp == '\r') {
                out.append("\\r");
              } else if (cp == '\t') {
                out.append("\\t");
              } else if (printable(cp)) {
                out.appendCodePoint(cp);
              } else if (cp <= 0xff) {
                out.append(String.format("\\x%02x", cp));
              } else if (cp <= 0xffff) {
                out.append(String.format("\\u%04x", cp));
              } else {
                out.append(String.format("\\U%08x", cp));
              }
            });
    return out.append(quote).toString();
  }

  /**
   * Whether a code point is written as it is in a quoted value (Python's {@code str.isprintable}):
   * the space, and none of Unicode's control, format, surrogate, private-use, unassigned or
   * separator code points.
   */
  private static boolean printable(int cp) {
    if (cp == ' ') {
      return true;
    }
    switch (Character.getType(cp)) {
      case Character.CONTROL,
      Character.FORMAT,
      Character.SURROGATE,
      Character.PRIVATE_USE,
      Character.UNASSIGNED,
      Character.LINE_SEPARATOR,
      Character.PARAGRAPH_SEPARATOR,
      Character.SPACE_SEPARATOR:
        return false;
      default:
        return true;
    }
  }

  /** A list of names in refusals, each quoted as {@link #repr} does: {@code ['a', 'b']}. */
  static String pyList(List<String> names) {
    List<String> quoted = new ArrayList<>();
    names.forEach(n -> quoted.add(repr(n)));
    return "[" + String.join(", ", quoted) + "]";
  }

  /** The options that name the topics read, exactly one of which is given. */
  static final List<String> TOPIC_OPTIONS =
      List.of("topic", "subscribe", "subscribePattern", "assign");

  /**
   * What the topic options name.
   *
   * @param key the option given
   * @param topics the topics ({@code null}: a pattern)
   * @param pattern the pattern ({@code null}: topics)
   * @param assigned {@code assign}'s partitions ({@code null}: not given)
   */
  record Named(
      String key, List<String> topics, String pattern, SortedMap<String, List<Integer>> assigned) {
    /** The default of option {@code stream}: the one topic, else the topics joined, the pattern. */
    String stream() {
      if (topics == null) {
        return pattern;
      }
      return String.join(",", topics);
    }
  }

  /** The option map, read by kind; keys are case-insensitive, as Spark's. */
  static final class OptionMap {
    private final Map<String, String> values = new LinkedHashMap<>();

    OptionMap(Map<String, String> options) {
      options.forEach((k, v) -> values.put(k.toLowerCase(Locale.ROOT), v));
    }

    String get(String key) {
      String value = values.get(key.toLowerCase(Locale.ROOT));
      return value == null || value.isEmpty() ? null : value;
    }

    String required(String key) {
      String value = get(key);
      if (value == null) {
        throw refuse("option '" + key + "' is required");
      }
      return value;
    }

    /** {@link #choice} of a value in any case, returned in lower case (as Spark's enumerations). */
    String choiceIgnoringCase(String key, List<String> allowed, String fallback) {
      String value = values.getOrDefault(key.toLowerCase(Locale.ROOT), fallback);
      if (!allowed.contains(value.strip().toLowerCase(Locale.ROOT))) {
        throw refuse(key + " = " + repr(value) + "; allowed: " + String.join(", ", allowed));
      }
      return value.strip().toLowerCase(Locale.ROOT);
    }

    String choice(String key, List<String> allowed, String fallback) {
      String value = values.getOrDefault(key.toLowerCase(Locale.ROOT), fallback);
      if (!allowed.contains(value)) {
        throw refuse(key + " = " + repr(value) + "; allowed: " + String.join(", ", allowed));
      }
      return value;
    }

    /**
     * A timestamp option, as Spark's {@code getKafkaOffsetRangeLimit} reads one: the value trimmed,
     * a whole number of milliseconds since the epoch ({@code null}: not given).
     *
     * @throws IllegalArgumentException not a whole number, or below 0 (Kafka's {@code
     *     offsetsForTimes} takes none)
     */
    Long timestamp(String key) {
      String text = get(key);
      if (text == null) {
        return null;
      }
      String trimmed = text.strip();
      Long value =
          !trimmed.isEmpty() && trimmed.chars().allMatch(Character::isDigit)
              ? parseLong(trimmed)
              : null;
      if (value == null) {
        throw refuse(
            key
                + " = "
                + repr(text)
                + ": Expected a single long value, got "
                + trimmed
                + " (as Spark's Kafka source); allowed: milliseconds since the epoch, >= 0");
      }
      return value;
    }

    /**
     * {@code startingOffsetsByTimestamp}'s JSON {@code {"<topic>": {"<partition>": <epoch ms>}}}
     * (Spark's {@code JsonUtils.partitionTimestamps}); empty when not given. Its topics must be
     * topics read, as {@code startingOffsets}' are; that it names every topic-partition read is
     * checked when the query starts.
     */
    SortedMap<String, SortedMap<Integer, Long>> partitionTimestamps(String key, Named named) {
      String text = get(key);
      if (text == null) {
        return new TreeMap<>();
      }
      String allowed =
          "; allowed: JSON {\"<topic>\": {\"<partition>\": <epoch ms>}, ...}, timestamps >= 0,"
              + " as Spark's Kafka source";
      SortedMap<String, SortedMap<Integer, Long>> timestamps;
      try {
        timestamps = Assignment.allOffsets(text.strip());
      } catch (IllegalArgumentException e) {
        throw refuse(key + " = " + repr(text) + allowed);
      }
      boolean bad = timestamps.isEmpty();
      for (SortedMap<Integer, Long> perTopic : timestamps.values()) {
        bad |= perTopic.isEmpty() || perTopic.firstKey() < 0;
        for (long t : perTopic.values()) {
          bad |= t < 0;
        }
      }
      if (bad) {
        throw refuse(key + " = " + repr(text) + allowed);
      }
      if (named.topics != null) {
        for (String t : timestamps.keySet()) {
          if (!named.topics.contains(t)) {
            throw refuse(
                key
                    + " names topic "
                    + repr(t)
                    + ", which "
                    + named.key
                    + " does not; allowed: the topics read "
                    + pyList(named.topics));
          }
        }
      }
      return timestamps;
    }

    boolean flag(String key, boolean fallback) {
      String value =
          values
              .getOrDefault(key.toLowerCase(Locale.ROOT), String.valueOf(fallback))
              .toLowerCase(Locale.ROOT);
      if (!value.equals("true") && !value.equals("false")) {
        throw refuse(key + " = " + repr(value) + "; allowed: true, false");
      }
      return value.equals("true");
    }

    Long whole(String key, long minimum, String unit) {
      String text = get(key);
      if (text == null) {
        return null;
      }
      Long value = text.chars().allMatch(Character::isDigit) ? parseLong(text) : null;
      if (value == null || value < minimum) {
        String what = unit.isEmpty() ? "a whole number" : "a whole number of " + unit;
        throw refuse(key + " = " + repr(text) + "; allowed: " + what + " >= " + minimum);
      }
      return value;
    }

    private static Long parseLong(String text) {
      try {
        return Long.parseLong(text);
      } catch (NumberFormatException e) {
        return null;
      }
    }

    SortedMap<String, SortedMap<Integer, Long>> offsets(String key) {
      String text = get(key);
      if (text == null) {
        return new TreeMap<>();
      }
      try {
        return Assignment.allOffsets(text);
      } catch (IllegalArgumentException e) {
        throw refuse(
            key
                + " = "
                + repr(text)
                + "; allowed: offsets as {\"<topic>\": {\"<partition>\": <offset>}}");
      }
    }

    /**
     * A comma-separated list of names, each stripped, empty ones left out; {@code null} when
     * missing.
     *
     * @throws IllegalArgumentException no name in it
     */
    List<String> names(String key) {
      String text = get(key);
      if (text == null) {
        return null;
      }
      List<String> names = new ArrayList<>();
      for (String name : text.split(",")) {
        if (!name.strip().isEmpty()) {
          names.add(name.strip());
        }
      }
      if (names.isEmpty()) {
        throw refuse(key + " = " + repr(text) + "; allowed: names separated by commas");
      }
      return List.copyOf(names);
    }

    void exclusive(String first, String second) {
      if (get(first) != null && get(second) != null) {
        throw refuse(
            "options '" + first + "' and '" + second + "' say the same thing; give one of them");
      }
    }

    Map<String, String> prefixed(String prefix) {
      Map<String, String> out = new LinkedHashMap<>();
      values.forEach(
          (k, v) -> {
            if (k.startsWith(prefix)) {
              out.put(k.substring(prefix.length()), v);
            }
          });
      return out;
    }

    /**
     * The topics read: exactly one of {@code topic}, {@code subscribe}, {@code subscribePattern},
     * {@code assign} (Spark's {@code KafkaSourceProvider} takes one of its three).
     *
     * @throws IllegalArgumentException none or two of them, {@code topic} naming several, {@code
     *     subscribe} naming none, a pattern that does not compile, or {@code assign} of another
     *     shape
     */
    Named topics() {
      List<String> given = new ArrayList<>();
      for (String k : TOPIC_OPTIONS) {
        if (get(k) != null) {
          given.add(k);
        }
      }
      if (given.size() > 1) {
        throw refuse(
            "options '"
                + String.join("' and '", given)
                + "' each name what to read; give one of them");
      }
      if (given.isEmpty()) {
        throw refuse(
            "option 'subscribe' (or 'subscribePattern', 'topic', or 'assign') is required");
      }
      String key = given.get(0);
      String text = required(key);
      switch (key) {
        case "assign" -> {
          SortedMap<String, List<Integer>> assigned = Assignment.parse(text);
          return new Named(key, List.copyOf(assigned.keySet()), null, assigned);
        }
        case "subscribePattern" -> {
          String pattern = text.strip();
          String refusal =
              "subscribePattern = "
                  + repr(text)
                  + "; allowed: a regular expression matched against topic names";
          if (pattern.isEmpty()) {
            throw refuse(refusal);
          }
          try {
            java.util.regex.Pattern.compile(pattern);
          } catch (java.util.regex.PatternSyntaxException e) {
            throw refuse(
                refusal
                    + " ("
                    + e.getDescription()
                    + " at position "
                    + e.getIndex()
                    + "; Java's java.util.regex)");
          }
          return new Named(key, null, pattern, null);
        }
        default -> {
          List<String> topics = new ArrayList<>();
          for (String t : text.split(",")) {
            String name = t.strip();
            if (!name.isEmpty() && !topics.contains(name)) {
              topics.add(name);
            }
          }
          if (topics.isEmpty()) {
            throw refuse(key + " = " + repr(text) + "; allowed: topic names separated by commas");
          }
          if (key.equals("topic") && topics.size() != 1) {
            throw refuse(
                "topic = " + repr(text) + "; allowed: one topic (name several with subscribe)");
          }
          return new Named(key, List.copyOf(topics), null, null);
        }
      }
    }

    /**
     * {@code [kind, offsets per topic]}: a word, or Spark's JSON {@code {"<topic>": {"<partition>":
     * <offset>}}} with -2 earliest and -1 latest. Every topic it names must be read: one {@code
     * subscribe}/{@code topic} names ({@code subscribePattern}: any, checked against the matched
     * topics at the start), and with {@code assign} exactly the assigned topic-partitions.
     */
    Object[] startingOffsets(Named named, String fallback) {
      String text = get("startingOffsets");
      List<String> words = List.of("committed", "earliest", "latest");
      if (text == null) {
        return new Object[] {fallback, new TreeMap<String, SortedMap<Integer, Long>>()};
      }
      String word = text.strip().toLowerCase(Locale.ROOT);
      if (words.contains(word)) {
        return new Object[] {word, new TreeMap<String, SortedMap<Integer, Long>>()};
      }
      String allowed =
          "allowed: "
              + String.join(", ", words)
              + ", or JSON {\"<topic>\": {\"<partition>\": <offset>}, ...} with -2 for earliest"
              + " and -1 for latest, as Spark's Kafka source";
      SortedMap<String, SortedMap<Integer, Long>> offsets;
      try {
        offsets = Assignment.allOffsets(text);
      } catch (IllegalArgumentException e) {
        throw refuse("startingOffsets = " + repr(text) + "; " + allowed);
      }
      boolean bad = offsets.isEmpty();
      for (SortedMap<Integer, Long> perTopic : offsets.values()) {
        bad |= perTopic.isEmpty() || perTopic.firstKey() < 0;
        for (long o : perTopic.values()) {
          bad |= o < EARLIEST;
        }
      }
      if (bad) {
        throw refuse("startingOffsets = " + repr(text) + "; " + allowed);
      }
      if (named.topics != null) {
        for (String t : offsets.keySet()) { // in name order: the first one not read is named
          if (!named.topics.contains(t)) {
            List<String> quoted = new ArrayList<>();
            named.topics.forEach(n -> quoted.add(repr(n)));
            throw refuse(
                "startingOffsets names topic "
                    + repr(t)
                    + ", which "
                    + named.key
                    + " does not; allowed: the topics read ("
                    + String.join(", ", quoted)
                    + ")");
          }
        }
      }
      if (named.assigned != null) {
        java.util.SortedSet<String> topics = new java.util.TreeSet<>(offsets.keySet());
        topics.addAll(named.assigned.keySet());
        for (String t : topics) {
          List<Integer> given = new ArrayList<>(offsets.getOrDefault(t, new TreeMap<>()).keySet());
          List<Integer> assigned = named.assigned.getOrDefault(t, List.of());
          if (!given.equals(assigned)) {
            throw refuse(
                "startingOffsets names partitions "
                    + given
                    + " of "
                    + repr(t)
                    + " and assign "
                    + assigned
                    + ": name the same partitions (as Spark)");
          }
        }
      }
      return new Object[] {"specific", offsets};
    }
  }
}

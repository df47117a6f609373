package io.floodgate.spark.options;

import static io.floodgate.spark.options.OptionText.refuse;

import java.util.LinkedHashMap;
import java.util.Map;
import org.apache.kafka.clients.consumer.ConsumerConfig;

/**
 * The options the source refuses, and why: Spark's Kafka options that bound a batch query, and
 * {@code kafka.<property>} client properties that would take from the source what it decides itself
 * (where to start, what to commit, how records are read). Spark's Kafka source refuses the same
 * client properties ({@code KafkaSourceProvider.validateGeneralOptions}).
 *
 * <p>Each check throws {@link OptionText#refuse}'s {@link IllegalArgumentException}, naming the
 * option and the reason.
 */
final class RefusedOptions {
  /**
   * Spark's Kafka options the source refuses, and why: the bounds of a batch query, which {@link
   * BatchBounds#take} takes out of its options before they are parsed; a streaming query refuses
   * them with {@link BatchBounds#streamingRefusal}.
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

  private RefusedOptions() {}

  /**
   * Refuse the first of {@link #REFUSED_OPTIONS} given.
   *
   * @throws IllegalArgumentException one is given
   */
  static void checkOptions(OptionMap opts) {
    for (Map.Entry<String, String> refused : REFUSED_OPTIONS.entrySet()) {
      if (opts.get(refused.getKey()) != null) {
        throw refuse("option '" + refused.getKey() + "' is not supported: " + refused.getValue());
      }
    }
  }

  /**
   * Refuse the first of {@link #REFUSED_CLIENT_PROPERTIES} given.
   *
   * @param client the {@code kafka.*} options without the prefix, in lower case
   * @throws IllegalArgumentException one is given
   */
  static void checkClient(Map<String, String> client) {
    for (Map.Entry<String, String> refused : REFUSED_CLIENT_PROPERTIES.entrySet()) {
      if (client.containsKey(refused.getKey())) {
        throw refuse(
            "option 'kafka." + refused.getKey() + "' is not supported: " + refused.getValue());
      }
    }
  }
}

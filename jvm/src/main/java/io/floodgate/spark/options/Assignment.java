package io.floodgate.spark.options;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.SortedMap;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.regex.Pattern;

/**
 * Spark's Kafka JSON options, {@code assign}, {@code startingOffsets}, {@code endingOffsets} and
 * {@code discardBefore}, over any number of topics, read strictly ({@link #offsets}); a query group
 * writes {@code startingOffsets} and {@code discardBefore} with {@code
 * pipeline.offsets.topic_offsets_to_json}.
 */
final class Assignment {
  /** One JSON value, nothing after it (trailing text refused). */
  private static final ObjectMapper JSON =
      new ObjectMapper().enable(DeserializationFeature.FAIL_ON_TRAILING_TOKENS);

  /** A partition's key in offsets JSON: a decimal number, as Spark writes it. */
  private static final Pattern PARTITION = Pattern.compile("-?[0-9]+");

  private Assignment() {}

  /**
   * {@code assign}: {@code {"<topic>": [<partition>, ...], ...}}, one or more topics, each a
   * non-empty list of partitions, JSON whole numbers from 0 to {@code Integer.MAX_VALUE} (Spark's
   * {@code AssignStrategy} reads the same JSON).
   *
   * @return topic to its sorted distinct partitions, topics in name order
   * @throws IllegalArgumentException another shape (the message names the option and its value)
   */
  static SortedMap<String, List<Integer>> parse(String text) {
    String refusal =
        "assign = "
            + OptionText.repr(text)
            + "; allowed: {\"<topic>\": [<partition>, ...], ...}: one or more topics, each with"
            + " one or more partitions 0..2147483647";
    JsonNode value;
    try {
      value = readJson(text);
    } catch (IllegalArgumentException e) {
      throw OptionText.refuse(refusal);
    }
    if (!value.isObject() || value.isEmpty()) {
      throw OptionText.refuse(refusal);
    }
    SortedMap<String, List<Integer>> assigned = new TreeMap<>();
    Iterator<Map.Entry<String, JsonNode>> topics = value.fields();
    while (topics.hasNext()) {
      Map.Entry<String, JsonNode> topic = topics.next();
      JsonNode list = topic.getValue();
      if (topic.getKey().isEmpty() || !list.isArray() || list.isEmpty()) {
        throw OptionText.refuse(refusal);
      }
      TreeSet<Integer> partitions = new TreeSet<>();
      for (JsonNode p : list) {
        if (!p.isIntegralNumber() || !p.canConvertToInt() || p.asInt() < 0) {
          throw OptionText.refuse(refusal);
        }
        partitions.add(p.asInt());
      }
      assigned.put(topic.getKey(), List.copyOf(new ArrayList<>(partitions)));
    }
    return assigned;
  }

  /**
   * One JSON value (text after it refused).
   *
   * @throws IllegalArgumentException not JSON
   */
  static JsonNode readJson(String text) {
    try {
      JsonNode value = JSON.readTree(text);
      if (value == null || value.isMissingNode()) {
        throw new IllegalArgumentException("no JSON value");
      }
      return value;
    } catch (JsonProcessingException e) {
      throw new IllegalArgumentException("not JSON: " + e.getOriginalMessage(), e);
    }
  }

  /**
   * Option text in Spark's Kafka JSON {@code {"<topic>": {"<partition>": <offset>}, ...}} ({@code
   * startingOffsets}, {@code endingOffsets}, {@code discardBefore}): the offsets of every topic it
   * names, each as {@link #offsets}.
   *
   * @return topic to its offsets, topics in name order
   * @throws IllegalArgumentException not JSON, or another shape
   */
  static SortedMap<String, SortedMap<Integer, Long>> allOffsets(String text) {
    JsonNode value = readJson(text);
    if (!value.isObject()) {
      throw new IllegalArgumentException("not a JSON object");
    }
    SortedMap<String, SortedMap<Integer, Long>> out = new TreeMap<>();
    Iterator<String> topics = value.fieldNames();
    while (topics.hasNext()) {
      String topic = topics.next();
      out.put(topic, offsets(topic, value));
    }
    return out;
  }

  /**
   * The offsets of {@code topic} in Spark's Kafka JSON {@code {"<topic>": {"<partition>":
   * <offset>}}}, strictly: partitions decimal texts of an {@code int}, offsets JSON whole numbers
   * of a {@code long}; a missing topic is an empty map.
   *
   * @throws IllegalArgumentException another shape
   */
  static SortedMap<Integer, Long> offsets(String topic, JsonNode value) {
    if (!value.isObject()) {
      throw new IllegalArgumentException("not a JSON object");
    }
    SortedMap<Integer, Long> offsets = new TreeMap<>();
    JsonNode perPartition = value.get(topic);
    if (perPartition == null) {
      return offsets;
    }
    if (!perPartition.isObject()) {
      throw new IllegalArgumentException("offsets of topic " + topic + " are not an object");
    }
    Iterator<Map.Entry<String, JsonNode>> fields = perPartition.fields();
    while (fields.hasNext()) {
      Map.Entry<String, JsonNode> field = fields.next();
      JsonNode offset = field.getValue();
      if (!PARTITION.matcher(field.getKey()).matches()
          || !offset.isIntegralNumber()
          || !offset.canConvertToLong()) {
        throw new IllegalArgumentException("partition " + field.getKey() + ": offset " + offset);
      }
      try {
        offsets.put(Integer.parseInt(field.getKey()), offset.asLong());
      } catch (NumberFormatException e) {
        throw new IllegalArgumentException("partition " + field.getKey() + " is not an int", e);
      }
    }
    return offsets;
  }
}

package io.floodgate.spark.offsets;

import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.util.Iterator;
import java.util.Map;
import java.util.SortedMap;
import java.util.TreeMap;
import org.apache.kafka.common.TopicPartition;

/**
 * Offsets per topic-partition, the <em>next</em> offset to read of each, in the JSON the source
 * writes to Spark's offset log: {@code {"flights": {"0": 1200, "1": 1187}, "runways": {"0": 7}}}
 * (topics in name order; one entry per topic read).
 *
 * <p>The text is specified byte for byte by the golden files in {@code tests/golden/offsets}
 * (docs/formats.md, "Offsets"): partitions in numeric order, {@code ": "} and {@code ", "}
 * separators, no other white space. It is the text the removed Python source wrote, so a checkpoint
 * it wrote resumes under this source ({@code tests/golden/checkpoints/python_source/}, {@code
 * test_python_source_checkpoint.py}): Spark compares offsets by their text, and a logged offset
 * that differed from the same offsets written now would look like new data. Spark's own Kafka
 * source writes the same shape without the spaces; {@link #fromJson} reads either, as do the Python
 * readers of the offset log ({@code pipeline.offsets}).
 */
public final class PartitionOffsets {
  /** One JSON value, nothing after it (trailing text refused). */
  private static final ObjectMapper JSON =
      new ObjectMapper().enable(DeserializationFeature.FAIL_ON_TRAILING_TOKENS);

  private PartitionOffsets() {}

  /**
   * The offset log's text of {@code offsets} over any number of topics: {@code {"<topic>": {"<p>":
   * <offset>, ...}, ...}}, topics in name order, partitions in numeric order, as {@link
   * #toJson(String, Map)} writes each; {@code {}} when there is none (a pattern that matches no
   * topic yet).
   */
  public static String toJson(Map<TopicPartition, Long> offsets) {
    StringBuilder out = new StringBuilder(32 + 16 * offsets.size()).append('{');
    String topicSeparator = "";
    for (Map.Entry<String, SortedMap<Integer, Long>> topic :
        TopicPartitions.perTopic(offsets).entrySet()) {
      out.append(topicSeparator).append('"').append(topic.getKey()).append("\": {");
      String separator = "";
      for (Map.Entry<Integer, Long> e : topic.getValue().entrySet()) {
        out.append(separator).append('"').append(e.getKey()).append("\": ").append(e.getValue());
        separator = ", ";
      }
      out.append('}');
      topicSeparator = ", ";
    }
    return out.append('}').toString();
  }

  /**
   * The offsets of every topic of an offset log's text, with or without spaces.
   *
   * @param json one source's line of the offset log, {@code {"<topic>": {"<p>": <offset>}}}
   * @return topic-partition to next offset, in {@link TopicPartitions#ORDER}
   * @throws IllegalArgumentException the text is not JSON of that shape (the message quotes it)
   */
  public static SortedMap<TopicPartition, Long> fromJson(String json) {
    JsonNode root = parse(json);
    SortedMap<TopicPartition, Long> out = TopicPartitions.empty();
    Iterator<String> topics = root.fieldNames();
    while (topics.hasNext()) {
      String topic = topics.next();
      perPartition(topic, root, json).forEach((p, o) -> out.put(new TopicPartition(topic, p), o));
    }
    return out;
  }

  /**
   * The offset log's text of one topic's {@code offsets}.
   *
   * @param topic the topic (a Kafka topic name: {@code [a-zA-Z0-9._-]}, nothing to escape)
   * @param offsets partition to next offset
   * @return {@code {"<topic>": {"<p>": <offset>, ...}}}
   */
  public static String toJson(String topic, Map<Integer, Long> offsets) {
    StringBuilder out = new StringBuilder(32 + 16 * offsets.size());
    out.append("{\"").append(topic).append("\": {");
    String separator = "";
    for (Map.Entry<Integer, Long> e : new TreeMap<>(offsets).entrySet()) {
      out.append(separator).append('"').append(e.getKey()).append("\": ").append(e.getValue());
      separator = ", ";
    }
    return out.append("}}").toString();
  }

  /**
   * The offsets of {@code topic} in an offset log's text, with or without spaces; an absent topic
   * is an empty map (as {@code pipeline.offsets.offsets_from_json} reads it).
   *
   * @param topic the topic
   * @param json one source's line of the offset log
   * @return partition to next offset, in partition order
   * @throws IllegalArgumentException the text is not JSON of that shape (the message quotes it)
   */
  public static SortedMap<Integer, Long> fromJson(String topic, String json) {
    return perPartition(topic, parse(json), json);
  }

  private static JsonNode parse(String json) {
    JsonNode root;
    try {
      root = JSON.readTree(json);
    } catch (IOException e) {
      throw new IllegalArgumentException("offsets are not JSON: " + json, e);
    }
    if (root == null || !root.isObject()) {
      throw new IllegalArgumentException("offsets are not a JSON object: " + json);
    }
    return root;
  }

  private static SortedMap<Integer, Long> perPartition(String topic, JsonNode root, String json) {
    SortedMap<Integer, Long> offsets = new TreeMap<>();
    JsonNode perPartition = root.get(topic);
    if (perPartition == null) {
      return offsets;
    }
    if (!perPartition.isObject()) {
      throw new IllegalArgumentException(
          "offset for topic '" + topic + "' is not an object: " + json);
    }
    Iterator<Map.Entry<String, JsonNode>> fields = perPartition.fields();
    while (fields.hasNext()) {
      Map.Entry<String, JsonNode> field = fields.next();
      try {
        offsets.put(Integer.parseInt(field.getKey()), field.getValue().asLong());
      } catch (NumberFormatException e) {
        throw new IllegalArgumentException(
            "offset partition '" + field.getKey() + "' is not a number: " + json, e);
      }
      if (!field.getValue().canConvertToLong()) {
        throw new IllegalArgumentException(
            "offset of partition " + field.getKey() + " is not a whole number: " + json);
      }
    }
    return offsets;
  }
}

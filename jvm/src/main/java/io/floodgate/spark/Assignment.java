package io.floodgate.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.floodgate.spark.offsets.PartitionOffsets;
import java.io.IOException;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.SortedMap;
import java.util.TreeSet;

/** Spark's Kafka JSON options: {@code assign} and {@code startingOffsets}. */
final class Assignment {
  private static final ObjectMapper JSON = new ObjectMapper();

  private Assignment() {}

  /**
   * {@code assign}: {@code {"<topic>": [<partition>, ...]}} of one topic.
   *
   * @return {@code [topic, sorted distinct partitions]}
   * @throws IllegalArgumentException another shape
   */
  static Object[] parse(String text) {
    String allowed = "allowed: {\"<topic>\": [<partition>, ...]} for one topic";
    JsonNode value;
    try {
      value = JSON.readTree(text);
    } catch (IOException e) {
      throw SourceOptions.refuse("assign = '" + text + "'; " + allowed);
    }
    if (value == null || !value.isObject() || value.size() != 1) {
      throw SourceOptions.refuse("assign = '" + text + "'; " + allowed);
    }
    String topic = value.fieldNames().next();
    JsonNode list = value.get(topic);
    if (!list.isArray() || list.isEmpty()) {
      throw SourceOptions.refuse("assign = '" + text + "'; " + allowed);
    }
    TreeSet<Integer> partitions = new TreeSet<>();
    for (JsonNode p : list) {
      if (!p.isIntegralNumber() || p.asLong() < 0 || p.asLong() > Integer.MAX_VALUE) {
        throw SourceOptions.refuse("assign = '" + text + "'; " + allowed);
      }
      partitions.add(p.asInt());
    }
    return new Object[] {topic, List.copyOf(new ArrayList<>(partitions))};
  }

  /**
   * {@code startingOffsets} JSON naming {@code topic} and only it.
   *
   * @throws IllegalArgumentException another shape or topic
   */
  static SortedMap<Integer, Long> startingOffsets(String topic, String text) {
    JsonNode value;
    try {
      value = JSON.readTree(text);
    } catch (IOException e) {
      throw new IllegalArgumentException("not JSON", e);
    }
    if (value == null || !value.isObject() || value.size() != 1 || !value.has(topic)) {
      throw new IllegalArgumentException("not of topic " + topic);
    }
    Iterator<JsonNode> offsets = value.get(topic).elements();
    while (offsets.hasNext()) {
      if (!offsets.next().isIntegralNumber()) {
        throw new IllegalArgumentException("not whole numbers");
      }
    }
    return PartitionOffsets.fromJson(topic, text);
  }
}

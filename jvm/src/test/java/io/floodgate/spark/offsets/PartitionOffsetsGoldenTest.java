package io.floodgate.spark.offsets;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import com.fasterxml.jackson.databind.JsonNode;
import io.floodgate.spark.Golden;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

/**
 * {@link PartitionOffsets} against {@code tests/golden/offsets/}: the texts of the source's offsets
 * in Spark's offset log, the specification edited by hand in review (tests/golden/README.md; the
 * removed Python source wrote the same, so its checkpoints resume here). The source must write them
 * byte for byte and read them, and the form Spark's own Kafka source writes, back to the same
 * offsets.
 */
class PartitionOffsetsGoldenTest {
  private static final JsonNode INDEX = Golden.read("offsets/index.json");

  @TestFactory
  Stream<DynamicTest> toJsonWritesTheGoldenTextByteForByte() {
    List<DynamicTest> tests = new ArrayList<>();
    for (JsonNode c : INDEX) {
      tests.add(
          DynamicTest.dynamicTest(
              c.get("file").asText(),
              () -> {
                byte[] golden =
                    Files.readAllBytes(Golden.path("offsets/" + c.get("file").asText()));
                String written = PartitionOffsets.toJson(c.get("topic").asText(), offsets(c));
                assertArrayEquals(golden, written.getBytes(StandardCharsets.UTF_8), written);
                if (!offsets(c).isEmpty()) { // no topic-partition at all is {}
                  SourceOffset offset =
                      new SourceOffset(
                          TopicPartitions.flatten(Map.of(c.get("topic").asText(), offsets(c))));
                  assertArrayEquals(golden, offset.json().getBytes(StandardCharsets.UTF_8));
                }
              }));
    }
    return tests.stream();
  }

  @TestFactory
  Stream<DynamicTest> fromJsonReadsTheGoldenTextAndSparksForm() {
    List<DynamicTest> tests = new ArrayList<>();
    for (JsonNode c : INDEX) {
      tests.add(
          DynamicTest.dynamicTest(
              c.get("file").asText(),
              () -> {
                String topic = c.get("topic").asText();
                String golden = read(c.get("file").asText());
                assertEquals(offsets(c), PartitionOffsets.fromJson(topic, golden));
                assertEquals(offsets(c), PartitionOffsets.fromJson(topic, c.get("spark").asText()));
                assertEquals(
                    TopicPartitions.flatten(Map.of(topic, offsets(c))),
                    SourceOffset.parse(golden).offsets());
              }));
    }
    return tests.stream();
  }

  @Test
  void offsetsOverSeveralTopicsAreWrittenTopicsInOrderAndReadBack() {
    Map<String, Map<Integer, Long>> perTopic =
        Map.of("runways", Map.of(0, 7L), "flights", Map.of(10, 5L, 2, 4L));
    String written = PartitionOffsets.toJson(TopicPartitions.flatten(perTopic));
    assertEquals("{\"flights\": {\"2\": 4, \"10\": 5}, \"runways\": {\"0\": 7}}", written);
    assertEquals(TopicPartitions.flatten(perTopic), PartitionOffsets.fromJson(written));
    assertEquals(
        TopicPartitions.flatten(perTopic),
        PartitionOffsets.fromJson("{\"runways\":{\"0\":7},\"flights\":{\"2\":4,\"10\":5}}"));
    assertEquals("{}", PartitionOffsets.toJson(Map.of()));
  }

  @Test
  void anotherTopicIsNoOffsetsAndOtherShapesAreRefused() throws IOException {
    assertEquals(Map.of(), PartitionOffsets.fromJson("other", read("partitions_0_to_2.json")));
    for (String bad :
        List.of(
            "[1]",
            "{\"flights\": 5}",
            "{\"flights\": {\"a\": 5}}",
            "{\"flights\": {\"0\": \"x\"}}",
            "{\"flights\": {\"0\": 5}} {}",
            "not json")) {
      assertThrows(
          IllegalArgumentException.class, () -> PartitionOffsets.fromJson("flights", bad), bad);
    }
  }

  /** The case's offsets, in the order given (not sorted). */
  private static Map<Integer, Long> offsets(JsonNode c) {
    Map<Integer, Long> offsets = new LinkedHashMap<>();
    for (JsonNode po : c.get("offsets")) {
      offsets.put(po.get(0).asInt(), po.get(1).asLong());
    }
    return offsets;
  }

  private static String read(String file) throws IOException {
    return Files.readString(Golden.path("offsets/" + file), StandardCharsets.UTF_8);
  }
}

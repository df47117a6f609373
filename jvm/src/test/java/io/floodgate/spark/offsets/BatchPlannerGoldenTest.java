package io.floodgate.spark.offsets;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import io.floodgate.spark.Golden;
import io.floodgate.spark.read.KafkaRange;
import io.floodgate.spark.read.KafkaTask;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.TestFactory;

/**
 * {@link BatchPlanner#planBatchEnd} and {@link KafkaTask#group} against {@code
 * tests/golden/planning/plan_batch_end.json}: the planned ends and task groups of hand-written and
 * seeded random cases, the specification edited by hand in review (tests/golden/README.md).
 */
class BatchPlannerGoldenTest {
  private static final JsonNode CASES = Golden.read("planning/plan_batch_end.json");

  @TestFactory
  Stream<DynamicTest> planBatchEndAsTheGoldenCasesSay() {
    List<DynamicTest> tests = new ArrayList<>();
    for (JsonNode c : CASES.get("plan_batch_end")) {
      tests.add(DynamicTest.dynamicTest(c.get("name").asText(), () -> checkPlan(c)));
    }
    return tests.stream();
  }

  private static void checkPlan(JsonNode c) {
    // In the order the case gives them: the planner must not depend on it.
    Map<Integer, Long> start = pairs(c.get("start"));
    Map<Integer, Long> latest = pairs(c.get("latest"));
    Long maxRows = c.get("max_rows").isNull() ? null : c.get("max_rows").asLong();
    if (c.has("error")) {
      IllegalArgumentException refused =
          assertThrows(
              IllegalArgumentException.class,
              () -> BatchPlanner.planBatchEnd(start, latest, maxRows));
      // The golden text names the limit as the cases do (max_rows, None); the planner's message
      // names maxRows and null.
      assertTrue(refused.getMessage().startsWith("maxRows must be positive"));
      return;
    }
    Map<Integer, Long> expected = pairs(c.get("end"));
    Map<Integer, Long> end = BatchPlanner.planBatchEnd(start, latest, maxRows);
    assertEquals(expected, end);
    assertEquals(new ArrayList<>(expected.keySet()), new ArrayList<>(end.keySet()));
  }

  @TestFactory
  Stream<DynamicTest> groupAsTheGoldenCasesSay() {
    List<DynamicTest> tests = new ArrayList<>();
    for (JsonNode c : CASES.get("group_ranges")) {
      tests.add(
          DynamicTest.dynamicTest(
              c.get("name").asText(),
              () -> {
                List<KafkaRange> ranges = new ArrayList<>();
                for (JsonNode r : c.get("ranges")) {
                  ranges.add(
                      new KafkaRange(
                          "flights",
                          r.get(0).asInt(),
                          r.get(1).asLong(),
                          r.get(2).asLong(),
                          null,
                          null));
                }
                Long maxTasks = c.get("max_tasks").isNull() ? null : c.get("max_tasks").asLong();
                List<List<Integer>> tasks = new ArrayList<>();
                for (KafkaRange[] task : KafkaTask.group(ranges, maxTasks)) {
                  List<Integer> partitions = new ArrayList<>();
                  for (KafkaRange r : task) {
                    partitions.add(r.partition());
                  }
                  tasks.add(partitions);
                }
                List<List<Integer>> expected = new ArrayList<>();
                for (JsonNode t : c.get("tasks")) {
                  List<Integer> partitions = new ArrayList<>();
                  t.forEach(p -> partitions.add(p.asInt()));
                  expected.add(partitions);
                }
                assertEquals(expected, tasks);
              }));
    }
    return tests.stream();
  }

  private static Map<Integer, Long> pairs(JsonNode list) {
    Map<Integer, Long> out = new LinkedHashMap<>();
    for (JsonNode po : list) {
      out.put(po.get(0).asInt(), po.get(1).asLong());
    }
    return out;
  }
}

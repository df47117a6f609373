package io.floodgate.spark.offsets;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.floodgate.spark.read.KafkaRange;
import io.floodgate.spark.read.KafkaTask;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.SortedMap;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Test;

/**
 * Planning over several topics: {@link BatchPlanner#planBatchEnd(Map, Map, Long,
 * java.util.Comparator)} with topic-partition keys is the rule of the golden cases over the keys in
 * (topic, partition) order, one budget for all; {@link KafkaTask#group} deals ranges of several
 * topics out in that order. Seeded random cases, so that a failure repeats.
 */
class TopicPartitionPlanningTest {
  private static final List<String> TOPICS = List.of("arrivals", "flights", "runways");

  @Test
  void oneBudgetOverEveryTopicPartitionNeverExceededAndEachTupleOnce() {
    Random random = new Random(40);
    for (int round = 0; round < 2_000; round++) {
      Map<TopicPartition, Long> start = new HashMap<>();
      Map<TopicPartition, Long> latest = new HashMap<>();
      for (String topic : TOPICS.subList(0, 1 + random.nextInt(TOPICS.size()))) {
        for (int p = 0, n = 1 + random.nextInt(4); p < n; p++) {
          long s = random.nextInt(1_000);
          start.put(new TopicPartition(topic, p), s);
          latest.put(
              new TopicPartition(topic, p), s + (random.nextBoolean() ? 0 : random.nextInt(500)));
        }
      }
      Long maxRows = random.nextInt(4) == 0 ? null : 1L + random.nextInt(600);
      SortedMap<TopicPartition, Long> end =
          BatchPlanner.planBatchEnd(start, latest, maxRows, TopicPartitions.ORDER);
      long backlog = 0;
      long planned = 0;
      for (TopicPartition tp : start.keySet()) {
        long s = start.get(tp);
        assertTrue(s <= end.get(tp) && end.get(tp) <= latest.get(tp), tp + " in bounds");
        backlog += latest.get(tp) - s;
        planned += end.get(tp) - s;
      }
      assertEquals(maxRows == null ? backlog : Math.min(backlog, maxRows), planned);
      // The same rule as over partition numbers, numbered in (topic, partition) order.
      List<TopicPartition> order = new ArrayList<>(end.keySet());
      Map<Integer, Long> startByRank = new HashMap<>();
      Map<Integer, Long> latestByRank = new HashMap<>();
      for (int i = 0; i < order.size(); i++) {
        startByRank.put(i, start.get(order.get(i)));
        latestByRank.put(i, latest.get(order.get(i)));
      }
      SortedMap<Integer, Long> byRank =
          BatchPlanner.planBatchEnd(startByRank, latestByRank, maxRows);
      for (int i = 0; i < order.size(); i++) {
        assertEquals(byRank.get(i), end.get(order.get(i)), order.get(i).toString());
      }
      // And a next batch from this end plans only what is left: every tuple is planned once.
      SortedMap<TopicPartition, Long> rest =
          BatchPlanner.planBatchEnd(end, latest, null, TopicPartitions.ORDER);
      assertEquals(TopicPartitions.sorted(latest), rest);
    }
  }

  @Test
  void rowsFewerThanTopicPartitionsGoRoundRobinInTopicThenPartitionOrder() {
    Map<TopicPartition, Long> start = new HashMap<>();
    Map<TopicPartition, Long> latest = new HashMap<>();
    for (String topic : List.of("b", "a")) {
      for (int p = 0; p < 2; p++) {
        start.put(new TopicPartition(topic, p), 0L);
        latest.put(new TopicPartition(topic, p), 10L);
      }
    }
    // sum(start) / maxRows % 4 == 0: the first two in order, a-0 and a-1.
    SortedMap<TopicPartition, Long> end =
        BatchPlanner.planBatchEnd(start, latest, 2L, TopicPartitions.ORDER);
    assertEquals(
        TopicPartitions.flatten(Map.of("a", Map.of(0, 1L, 1, 1L), "b", Map.of(0, 0L, 1, 0L))), end);
  }

  @Test
  void tasksOfSeveralTopicsAreDealtLargestFirstTiesToTheLowerTopicPartition() {
    List<KafkaRange> ranges =
        List.of(
            new KafkaRange("runways", 0, 0, 10, null, null),
            new KafkaRange("flights", 1, 0, 10, null, null),
            new KafkaRange("flights", 0, 0, 30, null, null),
            new KafkaRange("arrivals", 3, 0, 5, null, null));
    List<String> tasks = new ArrayList<>();
    for (KafkaRange[] task : KafkaTask.group(ranges, 2L)) {
      List<String> names = new ArrayList<>();
      for (KafkaRange r : task) {
        names.add(r.topic() + "-" + r.partition());
      }
      tasks.add(String.join(" ", names));
    }
    // flights-0 (30) to task 1; flights-1 (10, before runways-0) to task 2, runways-0 too,
    // arrivals-3 to task 2 (20 < 30); each task in (topic, partition) order, tasks by their first.
    assertEquals(List.of("arrivals-3 flights-1 runways-0", "flights-0"), tasks);
  }
}

package io.floodgate.spark.read;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.List;
import org.apache.spark.sql.connector.read.InputPartition;

/**
 * One Spark task of a micro-batch: Kafka topic-partition ranges read one after the other, in
 * (topic, partition) order.
 *
 * <p>A JVM task costs Spark milliseconds, so by default every Kafka partition is a task of its own,
 * as in Spark's Kafka source; option {@code maxTasks} deals the ranges out to fewer tasks ({@link
 * #group}).
 */
public record KafkaTask(KafkaRange[] ranges, String[] preferredExecutors)
    implements InputPartition {

  @Override
  public String[] preferredLocations() {
    return preferredExecutors;
  }

  /**
   * The input partitions of a scan of {@code ranges} (a micro-batch's, or a batch query's): the
   * tasks of {@link #group}, with no preferred executor.
   */
  public static InputPartition[] partitions(List<KafkaRange> ranges, Long maxTasks) {
    return partitions(ranges, maxTasks, List.of());
  }

  /**
   * The input partitions of a scan of {@code ranges}: the tasks of {@link #group}; a task that
   * reads a topic-partition's whole range prefers the executor {@link ExecutorLocations#of} names,
   * as Spark's Kafka source does, so that executor's pooled consumer reads on. A task of several
   * ranges ({@code maxTasks}) or of part of a split range prefers none, as Spark's split ranges.
   *
   * @param executors the executors' locations, sorted ({@link ExecutorLocations#current})
   */
  public static InputPartition[] partitions(
      List<KafkaRange> ranges, Long maxTasks, List<String> executors) {
    java.util.Map<String, Integer> perPartition = new java.util.HashMap<>();
    ranges.forEach(r -> perPartition.merge(r.topic() + "-" + r.partition(), 1, Integer::sum));
    List<InputPartition> tasks = new ArrayList<>();
    for (KafkaRange[] task : group(ranges, maxTasks)) {
      boolean whole =
          task.length == 1 && perPartition.get(task[0].topic() + "-" + task[0].partition()) == 1;
      tasks.add(
          new KafkaTask(
              task,
              whole
                  ? ExecutorLocations.of(task[0].topic(), task[0].partition(), executors)
                  : new String[0]));
    }
    return tasks.toArray(new InputPartition[0]);
  }

  /**
   * Deal {@code ranges} out to at most {@code maxTasks} tasks ({@code null}: one range a task),
   * largest range first to the task with the fewest offsets so far (LPT scheduling), as the cases
   * {@code group_ranges} of tests/golden/planning/plan_batch_end.json specify ({@code
   * BatchPlannerGoldenTest}).
   *
   * @param ranges the micro-batch's ranges, one per topic-partition
   * @param maxTasks most tasks ({@code >= 1}), or {@code null}
   * @return the tasks, in the (topic, partition) order of their first range; ties of size go to the
   *     lower (topic, partition), by topic name, then partition number; none empty
   */
  public static List<KafkaRange[]> group(List<KafkaRange> ranges, Long maxTasks) {
    Comparator<KafkaRange> byPartition =
        Comparator.comparing(KafkaRange::topic).thenComparingInt(KafkaRange::partition);
    List<KafkaRange[]> out = new ArrayList<>();
    if (maxTasks == null || maxTasks >= ranges.size()) {
      ranges.forEach(r -> out.add(new KafkaRange[] {r}));
      return out;
    }
    int count = maxTasks.intValue(); // below ranges.size()
    List<List<KafkaRange>> tasks = new ArrayList<>();
    long[] sizes = new long[count];
    for (int i = 0; i < count; i++) {
      tasks.add(new ArrayList<>());
    }
    List<KafkaRange> bySize = new ArrayList<>(ranges);
    bySize.sort(Comparator.comparingLong((KafkaRange r) -> -r.size()).thenComparing(byPartition));
    for (KafkaRange r : bySize) {
      int least = 0;
      for (int i = 1; i < count; i++) {
        if (sizes[i] < sizes[least]) {
          least = i;
        }
      }
      tasks.get(least).add(r);
      sizes[least] += r.size();
    }
    for (List<KafkaRange> task : tasks) {
      if (!task.isEmpty()) {
        task.sort(byPartition);
        out.add(task.toArray(new KafkaRange[0]));
      }
    }
    out.sort((a, b) -> byPartition.compare(a[0], b[0]));
    return out;
  }

  @Override
  public String toString() {
    return "KafkaTask" + Arrays.toString(ranges);
  }
}

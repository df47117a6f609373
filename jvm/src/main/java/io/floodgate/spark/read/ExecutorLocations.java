package io.floodgate.spark.read;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import org.apache.kafka.common.TopicPartition;
import org.apache.spark.SparkEnv;
import org.apache.spark.storage.BlockManagerId;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Where a task reading one topic-partition's range prefers to run, so that the executor that read
 * the partition last, and keeps its consumer in its pool ({@link ConsumerPool}), reads it again:
 * Spark's {@code KafkaOffsetReaderAdmin.getSortedExecutorList} and {@code
 * KafkaOffsetRangeCalculator.getLocation}. The executors (the block manager's peers of the driver)
 * are sorted by host, then executor id, both descending, and a topic-partition goes to the one at
 * {@code floorMod(tp.hashCode(), executors)}; a location is Spark's {@code
 * ExecutorCacheTaskLocation} string {@code executor_<host>_<executorId>}. In local mode there are
 * no peers and no preference, as in Spark.
 */
public final class ExecutorLocations {
  private ExecutorLocations() {}

  /** An executor: its host and id. */
  public record Executor(String host, String executorId) {
    /** Spark's {@code ExecutorCacheTaskLocation.toString}. */
    String location() {
      return "executor_" + host + "_" + executorId;
    }
  }

  /** The executors of the running application, sorted as {@link #sorted}; none without Spark. */
  public static List<String> current() {
    SparkEnv env = SparkEnv.get();
    if (env == null || env.blockManager() == null) {
      return List.of();
    }
    List<Executor> executors = new ArrayList<>();
    for (BlockManagerId id :
        CollectionConverters.asJava(
            env.blockManager().master().getPeers(env.blockManager().blockManagerId()))) {
      executors.add(new Executor(id.host(), id.executorId()));
    }
    return sorted(executors);
  }

  /** The executors' locations, by host then executor id, both descending (Spark's order). */
  public static List<String> sorted(List<Executor> executors) {
    List<Executor> out = new ArrayList<>(executors);
    out.sort(Comparator.comparing(Executor::host).thenComparing(Executor::executorId).reversed());
    List<String> locations = new ArrayList<>();
    out.forEach(e -> locations.add(e.location()));
    return locations;
  }

  /**
   * The location of the task reading {@code tp}: {@code executors[floorMod(tp.hashCode(), n)]};
   * none when there are no executors.
   */
  public static String[] of(String topic, int partition, List<String> executors) {
    if (executors.isEmpty()) {
      return new String[0];
    }
    int hash = new TopicPartition(topic, partition).hashCode();
    return new String[] {executors.get(Math.floorMod(hash, executors.size()))};
  }
}

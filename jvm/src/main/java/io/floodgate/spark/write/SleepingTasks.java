package io.floodgate.spark.write;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The write tasks of this JVM that sleep on a full output stream queue now, for the query group
 * that runs them to show it (state SLEEPING) while they sleep. With a local master the executors
 * are the driver's JVM, which the query group reads every second; on a cluster an executor's sleeps
 * reach the driver only with the micro-batch's progress ({@link SinkMetrics}).
 */
public final class SleepingTasks {
  private static final Map<String, Integer> SLEEPING = new ConcurrentHashMap<>();

  private SleepingTasks() {}

  /** A task of {@code query} of {@code queryGroup} starts sleeping on output {@code stream}. */
  static void enter(String queryGroup, String query, String stream) {
    SLEEPING.merge(key(queryGroup, query, stream), 1, Integer::sum);
  }

  /** It woke up (found room, or gave up). */
  static void exit(String queryGroup, String query, String stream) {
    SLEEPING.computeIfPresent(key(queryGroup, query, stream), (k, n) -> n > 1 ? n - 1 : null);
  }

  /**
   * The queries of {@code queryGroup} with a task asleep now, one a line, each as {@code query +
   * "\t" + stream}; {@code ""} for none.
   *
   * <p>One string, not a list: the query group reads it through Py4J twice a second, and Python
   * iterating a Java list ends on the iterator's {@code NoSuchElementException}, which PySpark's
   * error handler converts at the cost of a dozen class lookups in the JVM.
   */
  public static String of(String queryGroup) {
    List<String> out = new ArrayList<>();
    String prefix = queryGroup + "\t";
    for (String k : SLEEPING.keySet()) {
      if (k.startsWith(prefix)) {
        out.add(k.substring(prefix.length()));
      }
    }
    return String.join("\n", out);
  }

  private static String key(String queryGroup, String query, String stream) {
    return queryGroup + "\t" + query + "\t" + stream;
  }
}

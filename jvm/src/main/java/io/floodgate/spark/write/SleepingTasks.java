package io.floodgate.spark.write;

import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The write tasks of this JVM that sleep on a full output stream queue, for the query group that
 * runs them to show it (state SLEEPING). With a local master the executors are the driver's JVM,
 * which the query group reads a few times a second; on a cluster an executor's sleeps reach the
 * driver only with the micro-batch's progress ({@link SinkMetrics}).
 *
 * <p>A sleep is shown to the next read even when it ended before it: a task that slept 200 ms
 * between two reads, or slept its retries out and gave up, was asleep, and a sampled state that
 * skipped it would say the group never slept.
 */
public final class SleepingTasks {
  private static final Map<String, Integer> SLEEPING = new ConcurrentHashMap<>();
  private static final Set<String> SLEPT = ConcurrentHashMap.newKeySet();

  private SleepingTasks() {}

  /** A task of {@code query} of {@code queryGroup} starts sleeping on output {@code stream}. */
  static void enter(String queryGroup, String query, String stream) {
    String key = key(queryGroup, query, stream);
    SLEEPING.merge(key, 1, Integer::sum);
    SLEPT.add(key);
  }

  /** It woke up (found room, or gave up). */
  static void exit(String queryGroup, String query, String stream) {
    SLEEPING.computeIfPresent(key(queryGroup, query, stream), (k, n) -> n > 1 ? n - 1 : null);
  }

  /**
   * The queries of {@code queryGroup} with a task asleep now or since the last call for this group,
   * one a line in order, each as {@code query + "\t" + stream}; {@code ""} for none.
   *
   * <p>One string, not a list: the query group reads it through Py4J a few times a second, and
   * Python iterating a Java list ends on the iterator's {@code NoSuchElementException}, which
   * PySpark's error handler converts at the cost of a dozen class lookups in the JVM.
   */
  public static String of(String queryGroup) {
    String prefix = queryGroup + "\t";
    Set<String> found = new TreeSet<>();
    for (String k : SLEPT) {
      if (k.startsWith(prefix) && SLEPT.remove(k)) {
        found.add(k.substring(prefix.length()));
      }
    }
    for (String k : SLEEPING.keySet()) {
      if (k.startsWith(prefix)) {
        found.add(k.substring(prefix.length()));
      }
    }
    return String.join("\n", found);
  }

  private static String key(String queryGroup, String query, String stream) {
    return queryGroup + "\t" + query + "\t" + stream;
  }
}

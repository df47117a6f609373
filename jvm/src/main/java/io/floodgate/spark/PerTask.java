package io.floodgate.spark;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.spark.TaskContext;

/**
 * A value per running task attempt ({@code TaskContext.taskAttemptId}), set, read and removed from
 * the task's own thread: how the source and the sink of one real-time task, which Spark builds
 * apart, reach each other. Outside a task (no {@code TaskContext}) nothing is kept and nothing is
 * found.
 *
 * @param <V> the value kept per task
 */
final class PerTask<V> {
  private final Map<Long, V> values = new ConcurrentHashMap<>();

  /** Keep {@code value} for the running task. */
  void put(V value) {
    TaskContext task = TaskContext.get();
    if (task != null) {
      values.put(task.taskAttemptId(), value);
    }
  }

  /** The running task's value, {@code null} for none. */
  V get() {
    TaskContext task = TaskContext.get();
    return task == null ? null : values.get(task.taskAttemptId());
  }

  /** Remove the running task's value; the value removed, {@code null} for none. */
  V remove() {
    TaskContext task = TaskContext.get();
    return task == null ? null : values.remove(task.taskAttemptId());
  }
}

package io.floodgate.spark.write;

import java.util.HashMap;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;

/**
 * The room in an output stream queue that the write tasks of one real-time batch running in this
 * JVM share ({@link KafkaDataWriter} in Spark's Real-Time Mode).
 *
 * <p>Each task {@code p} of {@code n} is owed {@link FreeSpaceShare#of}{@code (F, n, p)} of the
 * free space {@code F} the driver read when the batch began, and the same share of what the queue's
 * readers consumed since ({@code c}, their positions summed, read again when the room runs out):
 * all tasks together write at most {@code F + c}, so the queue never holds more than its max (see
 * {@link FreeSpaceShare}). A real-time task is long-running and its input comes unevenly: a task
 * whose partition is idle would leave its share unused while another starves, and past the sleeps
 * hold the group on a queue that has room. So the tasks of a batch in one JVM pool what they are
 * owed, and any of them may send while the pool's tuples fit. Pools of tasks on different executors
 * do not mix; each stays within what its members are owed, so the sum does too.
 *
 * <p>A pool is one run of a batch: the driver names it when it plans the batch's writers, so a
 * batch run again after a restart or a release starts afresh from the driver's new reading. It
 * lives until the query's next batch joins one in this JVM: a retried task finds what the failed
 * attempt sent still counted.
 */
final class RealTimeShares {
  private static final Map<String, RealTimeShares> POOLS = new HashMap<>();

  private final String queryId;
  private final String run;
  private final long free;
  private final int tasks;
  private final Set<Integer> members = new HashSet<>();
  private long written;
  private long consumed;

  private RealTimeShares(String queryId, String run, long free, int tasks) {
    this.queryId = queryId;
    this.run = run;
    this.free = free;
    this.tasks = tasks;
  }

  /**
   * The pool of run {@code run} of a real-time batch of query {@code queryId} in this JVM, with
   * task {@code partition} in it; the pools of the query's other runs are dropped.
   *
   * @param run the batch's run, as the driver named it
   * @param free the queue's free space when the batch began, offsets
   * @param tasks the batch's write tasks
   */
  static RealTimeShares join(String queryId, String run, long free, int tasks, int partition) {
    synchronized (POOLS) {
      POOLS.values().removeIf(p -> p.queryId.equals(queryId) && !p.run.equals(run));
      RealTimeShares pool =
          POOLS.computeIfAbsent(run, k -> new RealTimeShares(queryId, run, free, tasks));
      synchronized (pool) {
        pool.members.add(partition);
      }
      return pool;
    }
  }

  /** Take room for one tuple; whether there was any. */
  synchronized boolean take() {
    if (written + 1 > room()) {
      return false;
    }
    written++;
    return true;
  }

  /**
   * What the queue's readers consumed since the batch began, as a task read it now (readings only
   * grow the pool: an earlier, smaller one read by another task is never taken back).
   */
  synchronized void consumed(long sinceStart) {
    consumed = Math.max(consumed, sinceStart);
  }

  /**
   * Whether every task of the pool still has room for the row it may hold now: each task reads its
   * next row before it asks for room, so a task that ends its part of the batch leaves a tuple of
   * room for each other member, which ends at its own next tuple.
   */
  synchronized boolean roomForEveryMember() {
    return room() - written >= members.size();
  }

  /** The tuples the pool's tasks may write in all: what its members are owed. */
  synchronized long room() {
    long room = 0;
    for (int p : members) {
      room += FreeSpaceShare.of(free, tasks, p) + FreeSpaceShare.of(consumed, tasks, p);
    }
    return room;
  }

  /** The tuples the pool's tasks wrote. */
  synchronized long written() {
    return written;
  }
}

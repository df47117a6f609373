package io.floodgate.spark.write;

/**
 * How the write tasks of one micro-batch share an output stream queue's free space, so that
 * together they never fill it past its {@code max_queue_size}.
 *
 * <p>The driver reads the free space {@code F} once, when Spark asks it for the batch's writer
 * factory ({@code PhysicalWriteInfo.numPartitions()} tells it the number of tasks {@code n}). Task
 * {@code p} may then commit at most {@link #of} offsets: {@code F / n}, the first {@code F % n}
 * tasks one more. A task that needs more reads the queue again ({@link #reread}) and may take
 * {@code F' / n} of what it finds then.
 *
 * <p>Why the sum stays within the bound, whatever the interleaving: let {@code U(t)} be the queue's
 * length at time {@code t}, {@code c(t)} what its readers consumed since the batch started and
 * {@code M} its max. Every read of the free space counts every committed write before it, so a task
 * that read {@code F(t) = M - U(t)} at {@code t} has {@code U(t) >= U(0) - c(t)}, and takes at most
 * {@code (M - U(0) + c) / n}. The {@code n} tasks together add at most {@code M - U(0) + c}, so the
 * length at the end, {@code U(0) + written - c}, is at most {@code M}. A read that overstates the
 * length (records of open or aborted transactions, tuples swept out of the broker that are still
 * counted) only makes the share smaller. ({@code FreeSpaceShareTest} checks this over random task
 * outputs and interleavings.)
 *
 * <p>A real-time batch's tasks last the whole batch and write far more than the free space at its
 * start, as the readers consume. Task {@code p} may write {@code of(F, n, p) + of(c(t), n, p)},
 * where {@code c(t)} is what the readers consumed (their positions moved) between the driver's read
 * and the task's last read at {@code t}. The tasks together write at most {@code F + c}, so the
 * length stays {@code U(0) + written - c <= M}, whatever each task read and when. No write of the
 * tasks is read back, so no in-flight record can be missed.
 */
public final class FreeSpaceShare {
  private FreeSpaceShare() {}

  /**
   * Task {@code partition}'s share of {@code free} offsets among {@code tasks} tasks.
   *
   * @param free the free space read, offsets (>= 0)
   * @param tasks the batch's write tasks (>= 1)
   * @param partition the task's partition, {@code 0 <= partition < tasks}
   * @return {@code free / tasks}, plus one for the first {@code free % tasks} partitions
   * @throws IllegalArgumentException an argument out of range
   */
  public static long of(long free, int tasks, int partition) {
    if (free < 0 || tasks < 1 || partition < 0 || partition >= tasks) {
      throw new IllegalArgumentException(
          "free " + free + ", tasks " + tasks + ", partition " + partition + " out of range");
    }
    return free / tasks + (partition < free % tasks ? 1 : 0);
  }

  /**
   * A task's share from a second read of the queue, {@code length} tuples then, while its own
   * {@code ownUncommitted} records sit in its open transaction (counted in that length, as the read
   * goes up to the high watermark).
   *
   * @param max the queue's max, tuples
   * @param length the queue's length read, tuples (it counts this task's open records)
   * @param ownUncommitted this task's records in its open transaction
   * @param tasks the batch's write tasks
   * @param partition the task's partition
   * @return the share of {@code max - (length - ownUncommitted)}, 0 when that is negative
   */
  public static long reread(long max, long length, long ownUncommitted, int tasks, int partition) {
    long free = Math.max(0, max - Math.max(0, length - ownUncommitted));
    return of(free, tasks, partition);
  }

  /**
   * The offsets a task's commit takes in the queue: its tuples, plus the transaction's commit
   * marker in each partition it wrote to (queue length is read from offsets).
   *
   * @param tuples the task's output tuples
   * @param partitionsWritten the output topic's partitions it wrote to
   */
  public static long required(long tuples, int partitionsWritten) {
    return tuples <= 0 ? 0 : tuples + partitionsWritten;
  }
}

package io.floodgate.spark;

import org.apache.kafka.common.TopicPartition;

/**
 * Where the source reader of each running real-time task stands, for the sink of the same task.
 *
 * <p>In a query with no shuffle, Spark's Real-Time Mode reads and writes a batch in one task
 * thread: the write task's rows come from its reader one by one, each before the reader reads
 * another record. So the sink can tell which input offset a row came from, and commit, with its
 * output, the position its input was read to, as Kafka's read-process-write pattern commits input
 * offsets in the producer's transaction ({@code sendOffsetsToTransaction}). After a shuffle the
 * write task has no reader of its own, and {@link #current} is {@code null}.
 */
public final class RealTimeReads {
  /** Where a real-time task's reader stands in its one input partition. */
  public interface Position {
    /** The input topic-partition the task reads. */
    TopicPartition inputPartition();

    /** The offset of the record the last row handed on came from; -1 before the first. */
    long lastRowOffset();

    /** The next offset to read: where the task's part of the batch ends if it ends now. */
    long nextOffset();
  }

  private static final PerTask<Position> READING = new PerTask<>();

  private static final PerTask<Boolean> WRITING = new PerTask<>();

  private RealTimeReads() {}

  /** The running task's reader stands at {@code position} (called from the task's thread). */
  public static void register(Position position) {
    READING.put(position);
  }

  /** The running task's reader has closed. */
  public static void unregister() {
    READING.remove();
  }

  /** The running task's reader, {@code null} when the task reads none (after a shuffle). */
  public static Position current() {
    return READING.get();
  }

  /**
   * The running task writes a real-time batch's output (called from the task's thread when its
   * sink's writer is made, before the task reads a row).
   */
  public static void writerStarts() {
    WRITING.put(Boolean.TRUE);
  }

  /** The running task's writer has closed. */
  public static void writerEnds() {
    WRITING.remove();
  }

  /**
   * Whether the running task writes the output itself: a query with no shuffle, whose write task
   * commits the input position of its rows; else the task's reader feeds a shuffle.
   */
  public static boolean writerInTask() {
    return WRITING.get() != null;
  }
}

package io.floodgate.spark.write;

/**
 * {@code FG-QG-002}, in the form a query group parses ({@code pipeline.spark.sink.held_from}): a
 * write task's output did not fit in its share of the output stream queue after every sleep; its
 * transaction was aborted, so nothing of it is visible. The query fails and the query group holds;
 * on release the batch is replayed, and its tasks that committed skip their rows ({@link
 * BatchMarker}). In a real-time batch ({@code realTime}) the task's tuples went out as they came,
 * at least once: what it sent before it gave up stays, and the replay sends it again.
 */
public final class OutputQueueFullException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  /** The stable code a query group recognises in the query's failure. */
  public static final String CODE = "FG-QG-002";

  public OutputQueueFullException(
      String where,
      String stream,
      long batch,
      int partition,
      int tasks,
      long required,
      long share,
      long max,
      int sleeps,
      boolean realTime) {
    super(
        CODE
            + " "
            + where
            + ": output stream "
            + stream
            + " is full: micro-batch "
            + batch
            + " task "
            + partition
            + " of "
            + tasks
            + " needs "
            + required
            + " offsets, its share of the free space is "
            + share
            + " (max_queue_size "
            + max
            + ") after "
            + sleeps
            + " sleep(s); "
            + (realTime
                ? "what it sent stays, and the replay after the release sends it again"
                : "nothing of it was written")
            + ", the query group holds");
  }
}

package io.floodgate.spark.write;

/**
 * {@code FG-QG-005}, in the form a query group parses ({@code pipeline.spark.sink.oversized_from}):
 * a write task's output needs more than its share of the whole output stream queue, so it can never
 * fit, and the query fails at once rather than sleeping and holding for ever. Nothing of it was
 * written.
 */
public final class OversizedOutputException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  /** The stable code a query group recognises in the query's failure. */
  public static final String CODE = "FG-QG-005";

  public OversizedOutputException(
      String where, String stream, long batch, int partition, int tasks, long required, long max) {
    super(
        CODE
            + " "
            + where
            + ": micro-batch "
            + batch
            + " task "
            + partition
            + " of "
            + tasks
            + " writes "
            + required
            + " offsets to output stream "
            + stream
            + ", more than its share of the whole queue (max_queue_size = "
            + max
            + " among "
            + tasks
            + " write tasks): raise output_streams."
            + stream
            + ".max_queue_size, or lower max_tuples_per_trigger of the query's input streams so"
            + " each micro-batch writes less");
  }
}

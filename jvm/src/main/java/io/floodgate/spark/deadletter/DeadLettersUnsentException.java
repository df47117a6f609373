package io.floodgate.spark.deadletter;

/**
 * {@code FG-SOURCE-007}: a Spark task's dead letters were not all acknowledged by the dead-letter
 * topic in time. Thrown from the task's end so the task fails and Spark retries it: the retry reads
 * the same offsets, refuses the same tuples and sends them again (a dead letter's key makes the
 * repeats droppable), so no refused tuple is lost without a failure saying so.
 */
public final class DeadLettersUnsentException extends IllegalStateException {
  private final String topic;
  private final int unsent;
  private final int total;

  DeadLettersUnsentException(
      String topic,
      int unsent,
      int total,
      String stream,
      Long batchId,
      long timeoutMs,
      Throwable cause) {
    super(
        "FG-SOURCE-007 dead-letter topic '"
            + topic
            + "': "
            + unsent
            + " of "
            + total
            + " dead letter"
            + (total == 1 ? "" : "s")
            + " of stream '"
            + stream
            + "' (micro-batch "
            + batchId
            + ") not acknowledged within "
            + timeoutMs
            + " ms; the task fails so that Spark retries it and sends them again"
            + (cause == null ? "" : ": " + cause),
        cause);
    this.topic = topic;
    this.unsent = unsent;
    this.total = total;
  }

  /** The dead-letter topic. */
  public String topic() {
    return topic;
  }

  /** Dead letters of the task not acknowledged (sent or not). */
  public int unsent() {
    return unsent;
  }

  /** Dead letters of the task. */
  public int total() {
    return total;
  }
}

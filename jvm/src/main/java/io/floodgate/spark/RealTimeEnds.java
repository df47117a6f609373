package io.floodgate.spark;

/**
 * Real-time tasks whose sink asked their source to end the task's part of the batch now, before the
 * batch's deadline: the output stream queue has no room for more, so the task stops reading there,
 * and the batch commits what it wrote (Spark's Real-Time Mode ends a task whose reader returns no
 * row, at the offset it reports). The next batch then waits on the queue with nothing written yet,
 * instead of a hold replaying all the batch wrote.
 *
 * <p>The source reads and the sink writes in the same task only when no shuffle lies between them
 * (a stateless query); after a shuffle no reader asks, and the sink sleeps and holds as it does in
 * micro-batches.
 */
public final class RealTimeEnds {
  private static final PerTask<Boolean> REQUESTED = new PerTask<>();

  private RealTimeEnds() {}

  /** Ask the source of the running task to end its part of the batch before its next row. */
  public static void request() {
    REQUESTED.put(Boolean.TRUE);
  }

  /** Whether the running task's sink asked to end it; the request is consumed. */
  public static boolean take() {
    return REQUESTED.remove() != null;
  }

  /** Forget the running task's request, if any (its reader closes). */
  public static void clear() {
    take();
  }
}

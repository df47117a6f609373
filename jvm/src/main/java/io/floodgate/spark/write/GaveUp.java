package io.floodgate.spark.write;

import java.util.LinkedHashMap;
import java.util.Map;

/**
 * The write tasks of this JVM that gave up on a full output stream queue, so that Spark's retry of
 * one gives up at once (the query group holds, or fails on an oversized batch, as soon as the first
 * attempt failed) instead of computing its rows and sleeping again. A retry on another executor
 * does not know it, and gives up after computing its rows, without sleeping.
 */
final class GaveUp {
  private static final int KEPT = 1_000;

  private static final Map<String, RuntimeException> GIVEN_UP =
      new LinkedHashMap<>() {
        @Override
        protected boolean removeEldestEntry(Map.Entry<String, RuntimeException> eldest) {
          return size() > KEPT;
        }
      };

  private GaveUp() {}

  /** Keep {@code error} as the outcome of the task; returns it, to be thrown. */
  static RuntimeException remember(
      String queryId, long batch, int partition, RuntimeException error) {
    synchronized (GIVEN_UP) {
      GIVEN_UP.put(key(queryId, batch, partition), error);
    }
    return error;
  }

  /**
   * Throw again what an earlier attempt of this task gave up with.
   *
   * @throws RuntimeException the earlier attempt's {@link OutputQueueFullException} or {@link
   *     OversizedOutputException}, when {@code attempt > 0} and this JVM ran it
   */
  static void again(String queryId, long batch, int partition, int attempt) {
    if (attempt == 0) {
      return;
    }
    RuntimeException earlier;
    synchronized (GIVEN_UP) {
      earlier = GIVEN_UP.get(key(queryId, batch, partition));
    }
    if (earlier != null) {
      throw earlier;
    }
  }

  private static String key(String queryId, long batch, int partition) {
    return queryId + "/" + batch + "/" + partition;
  }
}

package io.floodgate.spark.write;

import java.util.LinkedHashMap;
import java.util.Map;

/**
 * The sink's counts, reported in each micro-batch's progress ({@code
 * StreamingQueryProgress.sink.metrics}, Spark's {@code ReportsSinkMetrics}), where a query group
 * reads them for its Prometheus metrics. Totals since the query started, as strings.
 *
 * <ul>
 *   <li>{@code tuplesWritten}: tuples committed;
 *   <li>{@code tuplesSkipped}: tuples of replayed batches skipped as committed before;
 *   <li>{@code sleeps}: times the query slept on a full output stream queue (per micro-batch, the
 *       most any of its tasks slept: they sleep side by side);
 *   <li>{@code batches}: micro-batches committed;
 *   <li>{@code lastBatch}: the last of them;
 *   <li>{@code offsetCommitsFailed}: micro-batches written whose input offsets the driver could not
 *       commit to the query's consumer group (it stays behind until a later commit);
 *   <li>{@code freeQueueSize}: the output stream queue's free space at the last batch's start, and
 *       {@code queueCheckMs}, how long the batch's start waited to read it (a real-time batch's is
 *       read ahead, when the one before committed; both absent when unbounded).
 * </ul>
 */
public final class SinkMetrics {
  private long tuplesWritten;
  private long tuplesSkipped;
  private long sleeps;
  private long batches;
  private long lastBatch = -1;
  private long offsetCommitsFailed;
  private long freeQueueSize = -1;
  private double queueCheckMs = -1;

  synchronized void batch(long batch, long written, long skipped, int slept) {
    tuplesWritten += written;
    tuplesSkipped += skipped;
    sleeps += slept;
    batches++;
    lastBatch = batch;
  }

  synchronized void offsetCommitFailed() {
    offsetCommitsFailed++;
  }

  synchronized void queueChecked(long free, double checkMs) {
    freeQueueSize = free;
    queueCheckMs = checkMs;
  }

  /** The counts, by name. */
  public synchronized Map<String, String> asMap() {
    Map<String, String> out = new LinkedHashMap<>();
    out.put("tuplesWritten", Long.toString(tuplesWritten));
    out.put("tuplesSkipped", Long.toString(tuplesSkipped));
    out.put("sleeps", Long.toString(sleeps));
    out.put("batches", Long.toString(batches));
    out.put("lastBatch", Long.toString(lastBatch));
    out.put("offsetCommitsFailed", Long.toString(offsetCommitsFailed));
    if (freeQueueSize >= 0) {
      out.put("freeQueueSize", Long.toString(freeQueueSize));
      out.put("queueCheckMs", String.format(java.util.Locale.ROOT, "%.3f", queueCheckMs));
    }
    return out;
  }
}

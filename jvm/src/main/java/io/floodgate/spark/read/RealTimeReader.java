package io.floodgate.spark.read;

import io.floodgate.spark.RealTimeEnds;
import io.floodgate.spark.RealTimeReads;
import io.floodgate.spark.offsets.KafkaPartitionOffset;
import io.floodgate.spark.options.SourceOptions;
import org.apache.kafka.common.TopicPartition;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.metric.CustomTaskMetric;
import org.apache.spark.sql.connector.read.streaming.SupportsRealTimeRead;

/**
 * A task's {@link RangeReader} as Spark's Real-Time Mode reads it ({@code SupportsRealTimeRead}):
 * rows until the batch's deadline ({@link #nextWithTimeout}), then where the task stopped ({@link
 * #getOffset}), which Spark merges into the batch's end. A micro-batch task reads through it as
 * through the range reader ({@link #next}, {@link #get}).
 *
 * <p>While the task runs, the sink of the same task (a query with no shuffle) can ask where it
 * stands ({@link RealTimeReads}), and ask it to end early ({@link RealTimeEnds}). With {@code
 * realTimeEndsGroup}, where it stopped is logged before Spark learns it ({@link RealTimeEndLog}).
 */
public final class RealTimeReader
    implements SupportsRealTimeRead<InternalRow>, RealTimeReads.Position {
  private final RangeReader reader;
  private final SourceOptions options;

  /** Where the task logs where it stopped; {@code null}: its own, if any. */
  private final RealTimeEndLog endLog;

  /** Whether the task told its sink where it stands ({@link RealTimeReads}). */
  private boolean registered;

  /** Whether Spark asked where the task stopped (and the end was logged). */
  private boolean endLogged;

  /**
   * @param endLog where the task logs where it stopped; {@code null}: {@link
   *     RealTimeEndLog#forTask}, if {@code realTimeEndsGroup} is set
   */
  RealTimeReader(RangeReader reader, SourceOptions options, RealTimeEndLog endLog) {
    this.reader = reader;
    this.options = options;
    this.endLog = endLog;
  }

  @Override
  public boolean next() {
    return reader.next();
  }

  @Override
  public InternalRow get() {
    return reader.get();
  }

  /**
   * The next row of a real-time batch, waiting for one at most {@code timeoutMs} (the time left
   * until the batch's deadline, which Spark's {@code LowLatencyReaderWrap} computes from {@code
   * startTimeMs}); no row: the deadline passed, the range's end was reached (a batch run again), or
   * the sink asked to end here, and the task ends. Overridden in this form, which Spark 4.2
   * declares abstract and 4.3 calls.
   */
  @Override
  public RecordStatus nextWithTimeout(Long startTimeMs, Long timeoutMs) {
    if (RealTimeEnds.take()) {
      // The sink has no room for more: the task ends here, at the next offset to read.
      reader.stopAsAtDeadline();
      return RecordStatus.newStatusWithoutArrivalTime(false);
    }
    if (!registered) {
      registered = true;
      RealTimeReads.register(this);
    }
    reader.readUntil(System.currentTimeMillis() + Math.max(0, timeoutMs));
    return RecordStatus.newStatusWithoutArrivalTime(reader.next());
  }

  /**
   * Where the task's part of a real-time batch ended ({@link RangeReader#position}). Spark asks
   * once, when the reader returned no row or the batch's deadline passed, before the task ends.
   * With {@code realTimeEndsGroup} the end is logged first: before the task's shuffle output is
   * done, so before any write task after the shuffle can commit.
   */
  @Override
  public KafkaPartitionOffset getOffset() {
    KafkaPartitionOffset at = reader.position();
    long end = reader.rangeEnd();
    if (end != Long.MAX_VALUE && at.offset() < end && !RealTimeReads.writerInTask()) {
      // A batch run again that stops short of where its first run stopped feeds a shuffle whose
      // write tasks skip the batch by their markers: the records in between, whose output was
      // committed in the first run, would be read again by the next batch and written twice.
      // Failing here, before this task's part of the shuffle is done, fails the batch before any
      // of its output commits. (A task that writes its own output commits its input position,
      // which is exact whatever the end.)
      throw new IllegalStateException(
          "source "
              + options.stream
              + ": a real-time batch run again after a restart must read "
              + at.topic()
              + "-"
              + at.partition()
              + " to offset "
              + end
              + ", where its first run stopped, and its deadline passed at offset "
              + at.offset()
              + ": the batch fails before its output commits, so nothing is written twice; start"
              + " the query again (a longer real_time_checkpoint_interval gives a batch run again"
              + " more time)");
    }
    if (!endLogged) {
      endLogged = true;
      RealTimeEndLog log = endLog != null ? endLog : RealTimeEndLog.forTask(options);
      if (log != null) {
        log.record(new TopicPartition(at.topic(), at.partition()), at.offset());
      }
    }
    return at;
  }

  @Override
  public TopicPartition inputPartition() {
    KafkaPartitionOffset at = reader.position();
    return new TopicPartition(at.topic(), at.partition());
  }

  @Override
  public long lastRowOffset() {
    return reader.lastRowOffset();
  }

  @Override
  public long nextOffset() {
    return reader.position().offset();
  }

  @Override
  public CustomTaskMetric[] currentMetricsValues() {
    return reader.currentMetricsValues();
  }

  @Override
  public void close() {
    RealTimeEnds.clear();
    if (registered) {
      RealTimeReads.unregister();
    }
    reader.close();
  }
}

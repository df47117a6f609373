package io.floodgate.spark.read;

import java.io.Serializable;
import org.apache.spark.SparkContext;
import org.apache.spark.util.LongAccumulator;

/**
 * What the tasks of a stream count, summed on the driver for the source's metrics ({@code
 * ReportsSourceMetrics}): Spark merges a task's accumulator updates into the driver's when the task
 * ends.
 *
 * @param rowsRead rows the tasks passed on
 * @param deadLettered tuples sent to the dead-letter topic
 * @param sweptRead tuples read back from swept BLOBs
 * @param offsetOutOfRange offsets found lost and skipped ({@code failOnDataLoss = false}): by the
 *     tasks, and on the driver those of a partition whose offsets went back, as far as it knows
 *     them (Spark's Kafka source counts the tasks' in its {@code offsetOutOfRange} task metric)
 * @param dataLoss times data loss was met and skipped, by the tasks and the driver (Spark's {@code
 *     dataLoss} task metric)
 */
public record SourceAccumulators(
    LongAccumulator rowsRead,
    LongAccumulator deadLettered,
    LongAccumulator sweptRead,
    LongAccumulator offsetOutOfRange,
    LongAccumulator dataLoss)
    implements Serializable {

  /** Accumulators registered with the driver's SparkContext, named after the stream. */
  public static SourceAccumulators register(SparkContext context, String stream) {
    return new SourceAccumulators(
        context.longAccumulator("floodgate_kafka." + stream + ".rowsRead"),
        context.longAccumulator("floodgate_kafka." + stream + ".deadLettered"),
        context.longAccumulator("floodgate_kafka." + stream + ".sweptRead"),
        context.longAccumulator("floodgate_kafka." + stream + ".offsetOutOfRange"),
        context.longAccumulator("floodgate_kafka." + stream + ".dataLoss"));
  }

  /** Accumulators of no SparkContext (tests): they count where they are added to. */
  public static SourceAccumulators unregistered() {
    return new SourceAccumulators(
        new LongAccumulator(),
        new LongAccumulator(),
        new LongAccumulator(),
        new LongAccumulator(),
        new LongAccumulator());
  }
}

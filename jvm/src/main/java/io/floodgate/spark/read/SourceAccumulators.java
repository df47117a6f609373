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
 */
public record SourceAccumulators(
    LongAccumulator rowsRead, LongAccumulator deadLettered, LongAccumulator sweptRead)
    implements Serializable {

  /** Accumulators registered with the driver's SparkContext, named after the stream. */
  public static SourceAccumulators register(SparkContext context, String stream) {
    return new SourceAccumulators(
        context.longAccumulator("floodgate_kafka." + stream + ".rowsRead"),
        context.longAccumulator("floodgate_kafka." + stream + ".deadLettered"),
        context.longAccumulator("floodgate_kafka." + stream + ".sweptRead"));
  }
}

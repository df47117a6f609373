package io.floodgate.spark.read;

import org.apache.spark.sql.connector.metric.CustomMetric;
import org.apache.spark.sql.connector.metric.CustomSumMetric;
import org.apache.spark.sql.connector.metric.CustomTaskMetric;

/**
 * What the tasks of a scan count, as Spark's custom task metrics: each {@link RangeReader} reports
 * its task's counts ({@code PartitionReader.currentMetricsValues}) and Spark sums them into the
 * scan node's SQL metrics ({@code MicroBatchScanExec}, {@code BatchScanExec}; the SQL tab of the
 * UI), per micro-batch or batch query. Spark's SQL tab keeps one value per task of a stage attempt
 * ({@code SQLAppStatusListener}): a task run again, or speculatively, is counted once, where an
 * accumulator the tasks add to counts each successful run of a shuffle-map task. Spark's Kafka
 * source reports {@code offsetOutOfRange} and {@code dataLoss} so ({@code
 * KafkaBatchPartitionReader}, {@code OffsetOutOfRangeMetric}, {@code DataLossMetric}).
 *
 * <p>Spark makes each metric on the driver from its class name, by the class's no-argument
 * constructor ({@code SQLAppStatusListener}): one public class per metric.
 */
public final class TaskMetrics {
  /** Rows the task passed on to Spark. */
  public static final String ROWS_READ = "rowsRead";

  /** Tuples the task sent to the dead-letter topic (sent when the task ends). */
  public static final String DEAD_LETTERED = "deadLettered";

  /** Tuples the task read back from swept BLOBs ({@code sweepCatalog}). */
  public static final String SWEPT_READ = "sweptRead";

  /** Offsets the task found lost and skipped ({@code failOnDataLoss = false}); Spark's name. */
  public static final String OFFSET_OUT_OF_RANGE = "offsetOutOfRange";

  /** Times the task met data loss and went on ({@code failOnDataLoss = false}); Spark's name. */
  public static final String DATA_LOSS = "dataLoss";

  private TaskMetrics() {}

  /** The metrics a scan declares ({@code Scan.supportedCustomMetrics}), one per name above. */
  public static CustomMetric[] supported() {
    return new CustomMetric[] {
      new RowsRead(), new DeadLettered(), new SweptRead(), new OffsetOutOfRange(), new DataLoss()
    };
  }

  /** A task's value of the metric {@code name}: a count since the task started. */
  static CustomTaskMetric value(String name, long value) {
    return new Value(name, value);
  }

  private record Value(String name, long value) implements CustomTaskMetric {}

  /** {@link #ROWS_READ}, summed over the tasks. */
  public static final class RowsRead extends CustomSumMetric {
    @Override
    public String name() {
      return ROWS_READ;
    }

    @Override
    public String description() {
      return "rows read";
    }
  }

  /** {@link #DEAD_LETTERED}, summed over the tasks. */
  public static final class DeadLettered extends CustomSumMetric {
    @Override
    public String name() {
      return DEAD_LETTERED;
    }

    @Override
    public String description() {
      return "tuples sent to the dead-letter topic";
    }
  }

  /** {@link #SWEPT_READ}, summed over the tasks. */
  public static final class SweptRead extends CustomSumMetric {
    @Override
    public String name() {
      return SWEPT_READ;
    }

    @Override
    public String description() {
      return "tuples read back from swept BLOBs";
    }
  }

  /** {@link #OFFSET_OUT_OF_RANGE}, summed over the tasks; Spark's description. */
  public static final class OffsetOutOfRange extends CustomSumMetric {
    @Override
    public String name() {
      return OFFSET_OUT_OF_RANGE;
    }

    @Override
    public String description() {
      return "estimated number of fetched offsets out of range";
    }
  }

  /** {@link #DATA_LOSS}, summed over the tasks; Spark's description. */
  public static final class DataLoss extends CustomSumMetric {
    @Override
    public String name() {
      return DATA_LOSS;
    }

    @Override
    public String description() {
      return "number of data loss error";
    }
  }
}

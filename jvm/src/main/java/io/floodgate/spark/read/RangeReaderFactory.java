package io.floodgate.spark.read;

import io.floodgate.spark.options.SourceOptions;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.util.SerializableConfiguration;

/**
 * Makes the {@link RangeReader} of each task on the executors. A static top-level class: Spark
 * serializes it to every task, and an inner class would drag the stream (and its driver-side
 * consumers) along.
 */
public final class RangeReaderFactory implements PartitionReaderFactory {
  private static final long serialVersionUID = 1L;

  private final SourceOptions options;
  private final StructType schema;
  private final RowLayout layout;
  private final SerializableConfiguration hadoopConf;

  /**
   * @param hadoopConf what swept BLOBs on object storage are read with ({@link #hadoopConf}), or
   *     {@code null} (no {@code sweepCatalog})
   */
  public RangeReaderFactory(
      SourceOptions options,
      StructType schema,
      RowLayout layout,
      SerializableConfiguration hadoopConf) {
    this.options = options;
    this.schema = schema;
    this.layout = layout;
    this.hadoopConf = hadoopConf;
  }

  /**
   * On the driver, the Hadoop configuration the tasks read swept BLOBs on object storage with
   * ({@code s3a://}, {@code spark.hadoop.fs.s3a.*}): the active session's, as Spark's file sources
   * take theirs ({@code FileScan.createReaderFactory}: {@code sessionState.newHadoopConf}, the
   * SparkContext's {@code hadoopConfiguration} with the session's SQL conf on top). Wrapped in
   * Spark's {@link SerializableConfiguration}, it travels in the factory, inside the stage's task
   * binary that Spark broadcasts once per stage.
   *
   * @return {@code null} without {@code sweepCatalog}: nothing is read from BLOBs
   */
  public static SerializableConfiguration hadoopConf(SourceOptions options) {
    if (options.sweepCatalog == null) {
      return null;
    }
    return new SerializableConfiguration(SparkSession.active().sessionState().newHadoopConf());
  }

  @Override
  public PartitionReader<InternalRow> createReader(InputPartition partition) {
    RangeReader ranges =
        new RangeReader(
            options,
            schema,
            layout,
            ((KafkaTask) partition).ranges(),
            hadoopConf == null ? null : hadoopConf.value());
    // A real-time task (Spark's Real-Time Mode asks for SupportsRealTimeRead) and a micro-batch
    // task read alike through it.
    return new RealTimeReader(ranges, options, null);
  }
}

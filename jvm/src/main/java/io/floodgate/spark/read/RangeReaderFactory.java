package io.floodgate.spark.read;

import io.floodgate.spark.SourceOptions;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.types.StructType;

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
  private final SourceAccumulators metrics;

  public RangeReaderFactory(
      SourceOptions options, StructType schema, RowLayout layout, SourceAccumulators metrics) {
    this.options = options;
    this.schema = schema;
    this.layout = layout;
    this.metrics = metrics;
  }

  @Override
  public PartitionReader<InternalRow> createReader(InputPartition partition) {
    return new RangeReader(options, schema, layout, ((KafkaTask) partition).ranges(), metrics);
  }
}
